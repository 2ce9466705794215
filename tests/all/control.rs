//! The control connection of a running launcher (`autoapp open`): every
//! refusal leaves the launcher serving; `launcher.json` is private and goes
//! away with the launcher.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt as _;
use std::process::{Child, Command, Stdio};

use crate::support::TestRoot;

struct Running {
    root: TestRoot,
    child: Child,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    fn start() -> Running {
        let root = TestRoot::with_config("opener = \"none\"\n");
        root.install("notes");
        Running::start_on(root)
    }

    /// A launcher (`autoapp open`) on `root`.
    fn start_on(root: TestRoot) -> Running {
        let mut child = Command::new(env!("CARGO_BIN_EXE_autoapp"))
            .args(["--root", root.path().to_str().unwrap(), "open"])
            .env("AUTOAPP_LOG", "warn")
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
        // Keep draining stdout so the launcher never blocks on it.
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        Running { root, child }
    }

    fn file(&self) -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(self.root.path().join("launcher.json")).unwrap()).unwrap()
    }

    fn connect(&self) -> (TcpStream, BufReader<TcpStream>) {
        let port = self.file()["port"].as_u64().unwrap();
        let s = TcpStream::connect(("127.0.0.1", port as u16)).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
        let r = BufReader::new(s.try_clone().unwrap());
        (s, r)
    }

    fn authed(&self) -> (TcpStream, BufReader<TcpStream>) {
        let (mut s, mut r) = self.connect();
        let secret = self.file()["secret"].as_str().unwrap().to_string();
        send(&mut s, &serde_json::json!({ "type": "auth", "secret": secret }));
        assert_eq!(read(&mut r)["ok"], true);
        (s, r)
    }

    /// The launcher still answers a status request.
    fn still_serving(&self) {
        let status = self.root.ok(&["status", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&status).unwrap();
        assert_eq!(v["serving"], serde_json::json!(["notes"]));
    }
}

fn send(s: &mut TcpStream, v: &serde_json::Value) {
    let mut line = serde_json::to_vec(v).unwrap();
    line.push(b'\n');
    s.write_all(&line).unwrap();
}

fn read(r: &mut BufReader<TcpStream>) -> serde_json::Value {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap_or(serde_json::Value::Null)
}

/// True when the server closed the connection (after any last line).
fn closed(r: &mut BufReader<TcpStream>) -> bool {
    let mut rest = Vec::new();
    // A read timeout (set in `connect`) makes a connection left open fail here.
    r.read_to_end(&mut rest).is_ok()
}

#[test]
fn launcher_json_is_private_and_holds_no_address_but_loopback() {
    let l = Running::start();
    let meta = std::fs::metadata(l.root.path().join("launcher.json")).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let f = l.file();
    assert_eq!(f["secret"].as_str().unwrap().len(), 64);
    assert_eq!(f["pid"], l.child.id());
    let leftovers: Vec<_> = std::fs::read_dir(l.root.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "written atomically, no temporary file left");
}

#[test]
fn a_wrong_secret_is_refused_and_the_launcher_goes_on() {
    let l = Running::start();
    let (mut s, mut r) = l.connect();
    send(&mut s, &serde_json::json!({ "type": "auth", "secret": "0".repeat(64) }));
    let answer = read(&mut r);
    assert_eq!(answer["ok"], false);
    assert!(!answer.to_string().contains(l.file()["secret"].as_str().unwrap()), "the secret is never returned");
    assert!(closed(&mut r));
    l.still_serving();
}

#[test]
fn a_request_before_auth_is_refused() {
    let l = Running::start();
    let (mut s, mut r) = l.connect();
    send(&mut s, &serde_json::json!({ "type": "status" }));
    assert_eq!(read(&mut r)["ok"], false);
    assert!(closed(&mut r));
    l.still_serving();
}

#[test]
fn a_connection_that_does_not_authenticate_within_two_seconds_is_closed() {
    let l = Running::start();
    let (_s, mut r) = l.connect();
    let started = std::time::Instant::now();
    assert_eq!(read(&mut r)["ok"], false, "the refusal arrives when the deadline passes");
    assert!(closed(&mut r));
    assert!(started.elapsed() >= std::time::Duration::from_millis(1900));
    l.still_serving();
}

#[test]
fn a_line_over_one_mebibyte_closes_the_connection() {
    let l = Running::start();
    let (mut s, mut r) = l.authed();
    let big = format!("{{\"type\":\"status\",\"pad\":\"{}\"}}\n", "x".repeat(1 << 20));
    let _ = s.write_all(big.as_bytes());
    let answer = read(&mut r);
    assert_eq!(answer["ok"], false);
    assert!(answer["error"]["message"].as_str().unwrap().contains("1 MiB"), "{answer}");
    l.still_serving();
}

#[test]
fn malformed_and_unknown_requests_are_refused_and_the_connection_goes_on() {
    let l = Running::start();
    let (mut s, mut r) = l.authed();
    s.write_all(b"this is not json\n").unwrap();
    assert!(read(&mut r)["error"]["message"].as_str().unwrap().contains("one JSON object"));
    send(&mut s, &serde_json::json!({ "type": "format-disk" }));
    assert!(read(&mut r)["error"]["message"].as_str().unwrap().contains("unknown request `format-disk`"));
    send(&mut s, &serde_json::json!({ "type": "status" }));
    let status = read(&mut r);
    assert_eq!(status["ok"], true);
    assert_eq!(status["serving"], serde_json::json!(["notes"]));
    assert!(status.get("port").is_none() && !status.to_string().contains("127.0.0.1"), "status gives no address");
}

#[test]
fn invoke_arrives_on_channel_mcp_reads_run_and_writes_need_somebody_to_ask() {
    let l = Running::start();
    let (mut s, mut r) = l.authed();
    send(
        &mut s,
        &serde_json::json!({ "type": "invoke", "app": "notes", "route": "notes.list", "input": {}, "client": "user" }),
    );
    let read_answer = read(&mut r);
    assert_eq!(read_answer["ok"], true, "{read_answer}");
    send(
        &mut s,
        &serde_json::json!({ "type": "invoke", "app": "notes", "route": "notes.add", "input": { "title": "x" }, "client": "user" }),
    );
    let write = read(&mut r);
    assert_eq!(write["ok"], false);
    assert!(write["error"]["message"].as_str().unwrap().contains("nobody could be asked"), "{write}");
    // The client that called itself "user" was recorded on channel mcp.
    let mut l = l;
    l.root.ok(&["stop"]);
    assert!(l.child.wait().unwrap().success());
    let runs: Vec<serde_json::Value> = serde_json::from_str(&l.root.ok(&["runs", "notes", "--json"])).unwrap();
    let calls: Vec<&serde_json::Value> = runs.iter().filter(|r| r["effect"] != "lifecycle").collect();
    assert!(calls.iter().all(|r| r["channel"] == "mcp" && r["caller"] == "user"), "{runs:?}");
    assert!(
        runs.iter().any(|r| r["decision"] == "refused" && r["route"] == "notes.add"),
        "the record was flushed at stop"
    );
}

#[test]
fn stop_stops_the_launcher_and_removes_launcher_json() {
    let mut l = Running::start();
    l.root.ok(&["stop"]);
    let status = l.child.wait().unwrap();
    assert!(status.success());
    assert!(!l.root.path().join("launcher.json").exists());
    let e = l.root.refused(&["status"]);
    assert!(e.contains("no launcher is running"), "{e}");
}

#[test]
fn a_stale_launcher_json_is_removed() {
    let root = TestRoot::new();
    let dead = serde_json::json!({ "port": 9, "pid": 999_999_999u64, "secret": "0".repeat(64), "started_at": "x" });
    std::fs::write(root.path().join("launcher.json"), dead.to_string()).unwrap();
    let e = root.refused(&["status"]);
    assert!(e.contains("no launcher is running"), "{e}");
    assert!(!root.path().join("launcher.json").exists());
}

#[test]
fn open_against_a_running_launcher_asks_it_for_the_panel() {
    let l = Running::start();
    let out = l.root.ok(&["open"]);
    assert!(out.contains("Autoapp is already running; open the panel: http://127.0.0.1:"), "{out}");
    let e = l.root.refused(&["open"]);
    assert!(e.contains("less than 2 seconds ago"), "at most one panel address per 2 seconds: {e}");
}

/// The launcher keeps each app's active release in memory, watching the
/// pointer's way with inotify and taking the queued events on every call
/// (`pointer`): an activation by another process (the command line, while
/// the launcher runs) is served from the next call.
#[test]
fn a_release_activated_from_the_command_line_is_served_from_the_launchers_next_call() {
    let root = TestRoot::with_config("opener = \"none\"\n");
    let ws = tempfile::Builder::new().prefix("ws-").tempdir().unwrap();
    let src = crate::support::repo().join("guests/notes");
    let manifest = std::fs::read_to_string(src.join("autoapp.toml")).unwrap();
    std::fs::write(ws.path().join("autoapp.toml"), &manifest).unwrap();
    std::fs::create_dir_all(ws.path().join("migrations")).unwrap();
    for m in std::fs::read_dir(src.join("migrations")).unwrap() {
        let m = m.unwrap();
        std::fs::copy(m.path(), ws.path().join("migrations").join(m.file_name())).unwrap();
    }
    root.ok(&["create", "notes", "--at", ws.path().to_str().unwrap()]);
    let wasm = crate::support::guest_component("notes");
    let build = |root: &TestRoot| -> String {
        let out = root.ok(&["build", "notes", "--component", wasm.to_str().unwrap(), "--json"]);
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["release"].as_str().unwrap().to_string()
    };
    let first = build(&root);
    root.ok(&["activate", "notes", &first]);
    let l = Running::start_on(root);
    let (mut s, mut r) = l.authed();
    let invoke = serde_json::json!({ "type": "invoke", "app": "notes", "route": "notes.count", "input": {} });
    send(&mut s, &invoke);
    let a = read(&mut r);
    assert!(a["error"]["message"].as_str().unwrap().contains("has no route `notes.count`"), "{a}");

    // A second release declares the route (the guest itself does not know it,
    // so now the guest answers), activated from the command line.
    let declared = "[[route]]\nname = \"notes.count\"\neffect = \"read\"\nsummary = \"Not in the guest\"\n\n[data]";
    std::fs::write(ws.path().join("autoapp.toml"), manifest.replace("[data]", declared)).unwrap();
    let second = build(&l.root);
    assert_ne!(first, second);
    l.root.ok(&["activate", "notes", &second]);
    send(&mut s, &invoke);
    let a = read(&mut r);
    assert_eq!(a["error"]["message"], "no route notes.count", "the guest answered: {a}");
    l.still_serving();
}

/// `autoapp --root <root> <args>`, its output piped.
fn spawn(root: &TestRoot, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_autoapp"))
        .arg("--root")
        .arg(root.path())
        .args(args)
        .env_remove("AUTOAPP_ROOT")
        .env("AUTOAPP_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The child's exit code once it exits within `secs`, else `None` (it still runs).
fn exits_within(child: &mut Child, secs: u64) -> Option<i32> {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < until {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status.code().unwrap_or(-1));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    None
}

fn stderr_of(child: &mut Child) -> String {
    let mut e = String::new();
    child.stderr.take().unwrap().read_to_string(&mut e).unwrap();
    e
}

#[test]
fn two_launchers_started_together_on_one_root_one_serves_and_the_other_exits_naming_it() {
    let root = TestRoot::with_config("opener = \"none\"\n");
    root.install("notes");
    let mut both = [spawn(&root, &["serve", "notes"]), spawn(&root, &["serve", "notes"])];
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let loser = loop {
        if let Some(i) = (0..2).find(|&i| both[i].try_wait().unwrap().is_some()) {
            break i;
        }
        assert!(std::time::Instant::now() < until, "fails before: both launchers serve the root");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let winner = 1 - loser;
    let code = both[loser].wait().unwrap().code();
    let said = stderr_of(&mut both[loser]);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains(&format!("pid {}", both[winner].id())), "the refusal names the launcher: {said}");
    // The other serves, alone.
    assert_eq!(exits_within(&mut both[winner], 1), None, "the winner still runs");
    let status: serde_json::Value = serde_json::from_str(&root.ok(&["status", "--json"])).unwrap();
    assert_eq!(
        (status["pid"].as_u64(), &status["serving"]),
        (Some(both[winner].id() as u64), &serde_json::json!(["notes"]))
    );
    for mut c in both {
        let _ = c.kill();
        let _ = c.wait();
    }
}

#[test]
fn status_from_another_pid_namespace_leaves_a_live_launchers_files_alone() {
    let runs = Command::new("unshare").args(["--pid", "--fork", "--mount-proc", "true"]).status();
    if !runs.is_ok_and(|s| s.success()) {
        println!("skipped: unshare --pid --fork --mount-proc does not run here (it needs root or user namespaces)");
        return;
    }
    let l = Running::start();
    let out = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", env!("CARGO_BIN_EXE_autoapp"), "--root"])
        .arg(l.root.path())
        .arg("status")
        .env_remove("AUTOAPP_ROOT")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        l.root.path().join("launcher.json").exists(),
        "fails before: launcher.json removed as stale from another PID namespace ({said})"
    );
    assert!(out.status.success(), "the launcher answered across namespaces: {said}");
    l.still_serving();
}

#[test]
fn open_refuses_a_root_whose_launcher_lock_another_process_holds() {
    let root = TestRoot::with_config("opener = \"none\"\n");
    let lock = std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(root.path().join("launcher.lock"))
        .unwrap();
    lock.try_lock().unwrap();
    let mut open = spawn(&root, &["open"]);
    let code = exits_within(&mut open, 30);
    if code.is_none() {
        let _ = open.kill();
        let _ = open.wait();
        panic!("fails before: open served a root whose lock another process holds");
    }
    let said = stderr_of(&mut open);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("holds this root") && said.contains("one root, one launcher"), "{said}");
    assert!(!root.path().join("launcher.json").exists(), "nothing written");
    drop(lock);
    // Free again: a launcher starts.
    let l = Running::start_on(root);
    assert!(l.root.ok(&["status"]).contains("Autoapp is running"));
}

#[test]
fn activate_beside_a_running_launcher_has_it_load_the_release_before_the_switch() {
    let root = TestRoot::with_config("opener = \"none\"\n");
    let ws = crate::packages::notes_workspace();
    root.ok(&["create", "notes", "--at", ws.path().to_str().unwrap()]);
    let built = crate::packages::build_notes;
    let first = built(&root);
    root.ok(&["activate", "notes", &first]);
    let l = Running::start_on(root);
    let loaded = |l: &Running| -> Vec<String> {
        let v: serde_json::Value = serde_json::from_str(&l.root.ok(&["status", "--json"])).unwrap();
        serde_json::from_value(v["releasesLoaded"].clone()).unwrap()
    };
    let manifest = std::fs::read_to_string(ws.path().join("autoapp.toml")).unwrap();
    std::fs::write(ws.path().join("autoapp.toml"), format!("{manifest}\n# the second release\n")).unwrap();
    let second = built(&l.root);
    assert!(!loaded(&l).contains(&second), "a candidate is not loaded by being built");
    l.root.ok(&["activate", "notes", &second]);
    assert!(loaded(&l).contains(&second), "loaded before any call: {:?}", loaded(&l));
    let listed = l.root.ok(&["call", "notes", "notes.list"]);
    assert!(listed.contains("notes"), "{listed}");
    // Only a release of that app, by its whole id.
    let (mut s, mut r) = l.authed();
    send(&mut s, &serde_json::json!({ "type": "prepare", "app": "notes", "release": &second[..12] }));
    assert_eq!(read(&mut r)["error"]["kind"], "invalid-input");
    send(&mut s, &serde_json::json!({ "type": "prepare", "app": "notes", "release": "../../etc" }));
    assert_eq!(read(&mut r)["ok"], false);
    send(&mut s, &serde_json::json!({ "type": "prepare", "app": "nobody", "release": &second }));
    assert_eq!(read(&mut r)["ok"], false);
    l.still_serving();
}
