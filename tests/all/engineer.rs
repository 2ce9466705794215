//! The engineer through the real launcher: its tools over the control
//! connection on channel `ai`, decided by the gate (nobody attached, or the
//! person's standing approval), recorded with who answered; builds confined.
//! The walk-through with a person answering in the page is the browser test
//! `tests/browser/engineer.test.mjs`.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

use crate::support::{TestRoot, TestServer};

pub(crate) struct Launcher {
    pub(crate) root: TestRoot,
    child: Child,
}

impl Drop for Launcher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Launcher {
    pub(crate) fn start(root: TestRoot) -> Launcher {
        Launcher::start_with(root, &[])
    }

    /// The launcher with `env` added to its environment.
    pub(crate) fn start_with(root: TestRoot, env: &[(&str, &str)]) -> Launcher {
        let mut child = Command::new(env!("CARGO_BIN_EXE_autoapp"))
            .args(["--root", root.path().to_str().unwrap(), "open"])
            .envs(env.iter().copied())
            .env("AUTOAPP_LOG", "warn")
            .env_remove("AUTOAPP_ROOT")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while !line.starts_with("Autoapp is running") {
            line.clear();
            assert!(out.read_line(&mut line).unwrap() > 0, "the launcher started");
        }
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        Launcher { root, child }
    }

    /// Calls one of the engineer's tools over the control connection, as
    /// `autoapp mcp --engineer` does; returns the answer and the progress lines.
    pub(crate) fn tool(&self, tool: &str, arguments: Value) -> (Value, Vec<String>) {
        tool_of(self.root.path(), tool, arguments)
    }

    pub(crate) fn ok(&self, tool: &str, arguments: Value) -> Value {
        let (a, _) = self.tool(tool, arguments.clone());
        assert_eq!(a["ok"], true, "{tool} {arguments}: {a}");
        a["output"].clone()
    }

    pub(crate) fn refused(&self, tool: &str, arguments: Value, kind: &str, words: &str) -> String {
        let (a, _) = self.tool(tool, arguments.clone());
        assert_eq!(a["ok"], false, "{tool} {arguments} should be refused: {a}");
        let message = a["error"]["message"].as_str().unwrap().to_string();
        assert_eq!(a["error"]["kind"], kind, "{message}");
        assert!(message.contains(words), "`{message}` should say `{words}`");
        message
    }
}

/// A root with the starter template created, built and activated as `app`
/// (each test its own id: the person's builds share one target folder).
/// Calls one of the engineer's tools over the control connection of the
/// launcher of `root`, as `autoapp mcp --engineer` does; returns the answer
/// and the progress lines.
pub(crate) fn tool_of(root: &std::path::Path, tool: &str, arguments: Value) -> (Value, Vec<String>) {
    let file: Value = serde_json::from_str(&std::fs::read_to_string(root.join("launcher.json")).unwrap()).unwrap();
    let mut s = TcpStream::connect(("127.0.0.1", file["port"].as_u64().unwrap() as u16)).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(300))).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    for request in [
        json!({ "type": "auth", "secret": file["secret"] }),
        json!({ "type": "engineer", "tool": tool, "arguments": arguments, "client": "test engineer" }),
    ] {
        let mut line = serde_json::to_vec(&request).unwrap();
        line.push(b'\n');
        s.write_all(&line).unwrap();
    }
    let mut progress = Vec::new();
    let mut answers = Vec::new();
    while answers.len() < 2 {
        let mut line = String::new();
        assert!(r.read_line(&mut line).unwrap() > 0, "the launcher answered");
        let v: Value = serde_json::from_str(&line).unwrap();
        match v.get("progress").and_then(Value::as_str) {
            Some(p) => progress.push(p.to_string()),
            None => answers.push(v),
        }
    }
    (answers.pop().unwrap(), progress)
}

fn template_root(app: &str, config: &str) -> (TestRoot, String) {
    let t = TestRoot::with_config(&format!("opener = \"none\"\n{config}"));
    t.ok(&["create", app]);
    let active = t.build(app);
    t.ok(&["activate", app, &active]);
    (t, active)
}

fn rows(t: &TestRoot, app: &str) -> Vec<Value> {
    serde_json::from_str(&t.ok(&["runs", app, "--json"])).unwrap()
}

const LIST_ARM: &str = r#""entries.list" => json!({ "entries": entries(input["limit"].as_i64().unwrap_or(20))? }),"#;
const EDITED_ARM: &str =
    r#""entries.list" => json!({ "entries": entries(input["limit"].as_i64().unwrap_or(20))?, "edited": true }),"#;

#[test]
fn the_engineer_changes_an_app_on_channel_ai_under_the_standing_approval_and_never_more() {
    let (t, active) = template_root("web", "");
    let ws = t.path().join("apps/web/workspace");
    let l = Launcher::start(t);

    // Reads answer at once, with no path outside the root.
    let list = l.ok("apps_list", json!({}));
    assert_eq!(list["apps"][0]["app"], "web");
    assert_eq!(list["apps"][0]["active"], active.as_str());
    assert!(!list.to_string().contains(l.root.path().to_str().unwrap()), "no path: {list}");
    let files = l.ok("source_list", json!({ "app": "web" }));
    assert!(files["files"].as_array().unwrap().iter().any(|f| f["path"] == "src/lib.rs"));
    let read = l.ok("source_read", json!({ "app": "web", "path": "src/lib.rs" }));
    assert!(read["text"].as_str().unwrap().contains(LIST_ARM));

    // Off, with nobody to ask: a change is refused at once and nothing changes.
    let before = std::fs::read_to_string(ws.join("src/lib.rs")).unwrap();
    let edit = json!({ "app": "web", "path": "src/lib.rs", "old": LIST_ARM, "new": EDITED_ARM });
    l.refused("source_edit", edit.clone(), "denied", "nobody could be asked");
    assert_eq!(std::fs::read_to_string(ws.join("src/lib.rs")).unwrap(), before);

    // The person turns the standing approval on (from the command line).
    assert!(l.root.ok(&["standing", "on"]).contains("standing approval is on"));
    let done = l.ok("source_edit", edit);
    assert_eq!(done["answeredBy"], "standing approval");
    assert!(done["diff"].as_str().unwrap().contains("+            \"entries.list\""), "{done}");
    assert!(std::fs::read_to_string(ws.join("src/lib.rs")).unwrap().contains(EDITED_ARM));

    // An edit that breaks the build: the compiler's messages are the answer,
    // and the candidates are as they were.
    let releases_before = l.root.ok(&["candidates", "web", "--json"]);
    let broken =
        json!({ "app": "web", "path": "src/lib.rs", "old": "\"edited\": true", "new": "\"edited\": not_a_thing" });
    l.ok("source_edit", broken);
    let (failed, progress) = l.tool("candidate_build", json!({ "app": "web" }));
    assert_eq!(failed["ok"], false);
    let said = failed["error"]["message"].as_str().unwrap();
    assert!(said.contains("the build failed; nothing changed") && said.contains("not_a_thing"), "{said}");
    assert!(said.contains("src/lib.rs:"), "file:line in {said}");
    assert!(progress.iter().any(|p| p.contains("confined")), "{progress:?}");
    assert_eq!(l.root.ok(&["candidates", "web", "--json"]), releases_before);

    // Fixed, it builds into a candidate; the preview shows the change while
    // the active release's data and answers are untouched.
    l.ok("source_edit", json!({ "app": "web", "path": "src/lib.rs", "old": "not_a_thing", "new": "true" }));
    let built = l.ok("candidate_build", json!({ "app": "web" }));
    let candidate = built["release"].as_str().unwrap().to_string();
    assert_ne!(candidate, active);
    let explained = l.ok("candidate_explain", json!({ "app": "web" }));
    assert_eq!(explained["release"], candidate.as_str());
    l.ok("candidate_preview", json!({ "app": "web" }));
    let added =
        l.ok("preview_call", json!({ "app": "web", "route": "entries.add", "input": { "text": "in the preview" } }));
    assert!(added["output"]["id"].is_number(), "a write in the preview, under the standing approval: {added}");
    let previewed = l.ok("preview_call", json!({ "app": "web", "route": "entries.list" }));
    assert_eq!(previewed["output"]["edited"], true);
    assert_eq!(previewed["output"]["entries"].as_array().unwrap().len(), 1);
    let live = l.root.call("web", "entries.list", "{}");
    assert!(live.get("edited").is_none() && live["entries"].as_array().unwrap().is_empty(), "{live}");
    l.ok("preview_stop", json!({ "app": "web" }));
    l.refused("preview_call", json!({ "app": "web", "route": "entries.list" }), "not-found", "no preview running");

    // Never asked of the standing approval: creating an app.
    l.refused("apps_create", json!({ "app": "other" }), "denied", "nobody could be asked");
    l.refused("apps_create", json!({ "app": "other", "location": "/tmp/x" }), "invalid-input", "the person's choice");
    assert!(!l.root.path().join("apps/other").exists());
    // No tool activates, grants, removes or sets the standing approval.
    for never in ["candidate_activate", "release_activate", "apps_remove", "grant", "standing_set", "standing"] {
        l.refused(never, json!({ "app": "web" }), "not-found", "is not a tool of the engineer");
    }
    let list = l.ok("apps_list", json!({}));
    assert_eq!(list["apps"][0]["active"], active.as_str(), "the active release is still the person's");

    // The record: every tool call, on channel ai, with who answered.
    let record = rows(&l.root, "web");
    let of = |route: &str| record.iter().filter(|r| r["route"] == route).collect::<Vec<_>>();
    let edits = of("source_edit");
    assert_eq!(edits[0]["decision"], "refused");
    assert_eq!(edits[0]["answered_by"], "nobody");
    assert!(edits[1..].iter().all(|r| r["answered_by"] == "standing approval" && r["channel"] == "ai"), "{edits:?}");
    assert!(of("candidate_build").iter().all(|r| r["answered_by"] == "standing approval"));
    assert_eq!(of("candidate_build").iter().filter(|r| r["outcome"] == "error").count(), 1);
    assert!(of("source_read").iter().all(|r| r["decision"] == "allowed" && r["answered_by"] == "nobody"));
    assert!(record.iter().any(|r| r["route"] == "standing-on" && r["channel"] == "user"));
    l.root.ok(&["standing", "off"]);
    assert!(!l.root.path().join("standing.json").exists());
}

#[test]
fn without_landlock_an_engineers_build_is_refused_and_the_persons_warns() {
    let (t, _) = template_root("plain", "landlock = \"off\"\n");
    let out = t.run(&["build", "plain"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("warning: this build is not confined"));
    t.ok(&["standing", "on"]);
    let l = Launcher::start(t);
    l.refused("candidate_build", json!({ "app": "plain" }), "invalid-input", "run confined by Landlock");
}

#[test]
fn where_the_kernel_cannot_filter_sockets_an_engineers_build_is_refused() {
    let (t, _) = template_root("nofilter", "");
    t.ok(&["standing", "on"]);
    // Debug builds only: the probe plays a kernel without seccomp.
    let l = Launcher::start_with(t, &[("AUTOAPP_FAULT", "no-seccomp")]);
    let said =
        l.refused("candidate_build", json!({ "app": "nofilter" }), "invalid-input", "cannot filter system calls");
    assert!(said.contains("The person can build it with `autoapp build`"), "{said}");
}

#[test]
fn a_build_script_cannot_write_outside_its_target_folder_nor_connect_anywhere() {
    let t = TestRoot::with_config("opener = \"none\"\n");
    t.ok(&["create", "escape"]);
    t.ok(&["create", "neighbour"]);
    let ws = t.path().join("apps/escape/workspace");
    let neighbour = t.path().join("apps/neighbour/workspace/src/planted.rs");
    let home = std::env::var("HOME").unwrap();
    let mark = format!("autoapp-escape-{}", std::process::id());
    let in_home = std::path::Path::new(&home).join(&mark);
    let cargo_home = std::env::var("CARGO_HOME").unwrap_or(format!("{home}/.cargo"));
    let in_registry = std::path::Path::new(&cargo_home).join("registry").join(&mark);
    // The test's registry login, where `TestRoot::command` points DOCKER_CONFIG.
    let docker = t.path().join("docker/config.json");
    std::fs::create_dir_all(docker.parent().unwrap()).unwrap();
    std::fs::write(&docker, r#"{"auths":{"127.0.0.1:5000":{"auth":"YWRhOnNlY3JldA=="}}}"#).unwrap();
    let server = TestServer::start();
    let url = server.url("/exfiltrate");
    let port: u16 = url.split(':').nth(2).unwrap().split('/').next().unwrap().parse().unwrap();
    let build_rs = format!(
        r#"use std::io::Write as _;
fn main() {{
    let mut escaped = Vec::new();
    for path in [{home:?}, {registry:?}, {neighbour:?}] {{
        match std::fs::write(path, "escaped") {{
            Ok(()) => escaped.push(format!("wrote {{path}}")),
            Err(e) => println!("cargo:warning=cannot write {{path}}: {{e}}"),
        }}
    }}
    // The person's registry login (issue 30): neither its file nor where it is.
    match std::fs::read_to_string({docker:?}) {{
        Ok(_) => escaped.push("read the registry login".to_string()),
        Err(e) => println!("cargo:warning=cannot read the login: {{e}}"),
    }}
    for var in ["DOCKER_CONFIG", "REGISTRY_AUTH_FILE"] {{
        if std::env::var_os(var).is_some() {{
            escaped.push(format!("saw {{var}}"));
        }}
    }}
    match std::net::TcpStream::connect(("127.0.0.1", {port})) {{
        Ok(mut s) => {{
            let _ = s.write_all(b"GET /exfiltrate HTTP/1.0\r\n\r\n");
            escaped.push("connected".to_string());
        }}
        Err(e) => println!("cargo:warning=cannot connect: {{e}}"),
    }}
    let scratch = std::env::temp_dir().join("scratch-ok");
    std::fs::write(&scratch, "fine").expect("the scratch folder is writable");
    if !escaped.is_empty() {{
        panic!("the build script escaped: {{escaped:?}}");
    }}
}}
"#,
        home = in_home.display().to_string(),
        registry = in_registry.display().to_string(),
        neighbour = neighbour.display().to_string(),
        docker = docker.display().to_string(),
    );
    std::fs::write(ws.join("build.rs"), build_rs).unwrap();
    let out = t.run(&["build", "escape"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the confined build still builds: {stderr}");
    for said in ["cannot write", "cannot connect", "cannot read the login"] {
        assert!(stderr.contains(said), "the build reports `{said}`: {stderr}");
    }
    assert_eq!(stderr.matches("cannot write").count(), 3, "{stderr}");
    assert!(!in_home.exists() && !in_registry.exists() && !neighbour.exists());
    assert_eq!(server.hits(), 0, "nothing reached the server");
}

/// An app's server is its worker's (issue 54): a worker taken by an escape
/// holds its tabs' sessions and may send the launcher any request a tab
/// could. "Allow, and stop asking" turns on the standing approval for the
/// engineer's work on every app, so it is answered in the panel alone: an
/// app's tab is not offered it and may not send it. Before: the tab's card
/// offered it, and the tab's answer turned the standing approval on.
#[test]
fn an_apps_tab_cannot_turn_the_standing_approval_on() {
    let (t, _) = template_root("web", "");
    let served = crate::support::Served::start(&t, &["serve", "web"]);
    let mut tab = served.tab("web");
    let asked = crate::plans::questions(&tab);
    let root = t.path().to_path_buf();
    let edit = json!({ "app": "web", "path": "src/lib.rs", "old": LIST_ARM, "new": EDITED_ARM });
    let engineer = std::thread::spawn(move || tool_of(&root, "source_edit", edit));
    let q = asked.recv_timeout(std::time::Duration::from_secs(60)).expect("the edit's question, in the app's tab");
    assert_eq!(q["route"], "source_edit", "{q}");
    assert_eq!(q["standingCovers"], false, "an app's tab is not offered the standing approval: {q}");
    let answer = |standing: bool| {
        json!({ "requestId": q["requestId"], "releaseId": q["releaseId"], "argumentsHash": q["argumentsHash"],
                "approve": true, "standing": standing })
        .to_string()
    };
    let r = tab.request("POST", "/api/answer", Some(&answer(true))).unwrap();
    assert_eq!(r.status, 403, "{}", String::from_utf8_lossy(&r.body));
    assert!(String::from_utf8_lossy(&r.body).contains("in the panel only"));
    let status: Value = serde_json::from_str(&t.ok(&["standing", "status", "--json"])).unwrap();
    assert_eq!(status["standing"], false, "the standing approval stays off");
    // The question itself is still the tab's to answer.
    let r = tab.request("POST", "/api/answer", Some(&answer(false))).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let (done, _) = engineer.join().unwrap();
    assert_eq!(done["ok"], true, "{done}");
    assert_eq!(done["output"]["answeredBy"], "person", "{done}");
    served.stop();
}
