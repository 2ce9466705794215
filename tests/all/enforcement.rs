//! Enforced capabilities and effects: a hostile guest tries every way around
//! the rules; each test asserts the exact denial the guest saw and that the
//! host then serves a normal call.

use crate::support::{TestRoot, TestServer};

fn serves_a_normal_call(root: &TestRoot) {
    let before = root.call("hostile", "count", "{}")["marks"].as_i64().unwrap();
    root.call("hostile", "mark", "{}");
    assert_eq!(root.call("hostile", "count", "{}")["marks"].as_i64().unwrap(), before + 1);
}

fn input(key: &str, value: &str) -> String {
    serde_json::json!({ key: value }).to_string()
}

// ---- network ------------------------------------------------------------------

#[test]
fn a_granted_origin_is_reached() {
    let server = TestServer::start();
    let root = TestRoot::new();
    root.install_hostile_with(&format!("network = [\"http://127.0.0.1:{}\"]", server.port));
    let got = root.call("hostile", "http.get", &input("url", &server.url("/hello")));
    assert_eq!(got["status"], 200, "{got}");
    assert_eq!(got["body"], "hello from the test server");
}

#[test]
fn a_host_that_was_not_granted_is_denied_before_any_connection() {
    let server = TestServer::start();
    let other = TestServer::start();
    let root = TestRoot::new();
    root.install_hostile_with(&format!("network = [\"http://127.0.0.1:{}\"]", server.port));
    let got = root.call("hostile", "http.get", &input("url", &other.url("/hello")));
    assert_eq!(got["error"], "ErrorCode::HttpRequestDenied", "{got}");
    let got = root.call("hostile", "http.get", &input("url", &format!("https://127.0.0.1:{}/hello", server.port)));
    assert_eq!(got["error"], "ErrorCode::HttpRequestDenied", "another scheme is another origin: {got}");
    assert_eq!(other.hits() + server.hits(), 0, "no connection was made");
    serves_a_normal_call(&root);
}

#[test]
fn a_revoked_origin_is_denied_from_the_next_call_on() {
    let server = TestServer::start();
    let root = TestRoot::new();
    let origin = format!("http://127.0.0.1:{}", server.port);
    root.install_hostile_with(&format!("network = [\"{origin}\"]"));
    assert_eq!(root.call("hostile", "http.get", &input("url", &server.url("/hello")))["status"], 200);
    root.ok(&["revoke", "hostile", &format!("network:{origin}")]);
    let got = root.call("hostile", "http.get", &input("url", &server.url("/hello")));
    assert_eq!(got["error"], "ErrorCode::HttpRequestDenied", "{got}");
    assert_eq!(server.hits(), 1);
}

#[test]
fn a_granted_name_that_resolves_to_loopback_is_prohibited() {
    let server = TestServer::start();
    let root = TestRoot::new();
    root.install_hostile_with(&format!("network = [\"http://localhost:{}\"]", server.port));
    let got = root.call("hostile", "http.get", &input("url", &format!("http://localhost:{}/hello", server.port)));
    assert_eq!(got["error"], "ErrorCode::DestinationIpProhibited", "{got}");
    assert_eq!(server.hits(), 0, "no connection was made");
    serves_a_normal_call(&root);
}

#[test]
fn a_loopback_address_in_another_spelling_is_not_the_granted_origin() {
    let server = TestServer::start();
    let root = TestRoot::new();
    root.install_hostile_with(&format!("network = [\"http://127.0.0.1:{}\"]", server.port));
    for url in [
        format!("http://[::ffff:127.0.0.1]:{}/hello", server.port),
        format!("http://127.1:{}/hello", server.port),
        format!("http://2130706433:{}/hello", server.port),
    ] {
        let got = root.call("hostile", "http.get", &input("url", &url));
        let e = got["error"].as_str().unwrap_or_default().to_string();
        assert!(
            e == "ErrorCode::HttpRequestDenied" || e.starts_with("ErrorCode::HttpRequestUriInvalid"),
            "{url}: {got}"
        );
    }
    assert_eq!(server.hits(), 0);
}

#[test]
fn a_redirect_is_returned_to_the_guest_and_never_followed() {
    let server = TestServer::start();
    let root = TestRoot::new();
    root.install_hostile_with(&format!("network = [\"http://127.0.0.1:{}\"]", server.port));
    let got = root.call("hostile", "http.get", &input("url", &server.url("/redirect")));
    assert_eq!(got["status"], 302, "{got}");
    assert_eq!(server.hits(), 1, "the redirect's target was not fetched");
}

#[test]
fn the_network_from_a_write_or_read_route_is_denied() {
    let server = TestServer::start();
    let root = TestRoot::new();
    root.install_hostile_with(&format!("network = [\"http://127.0.0.1:{}\"]", server.port));
    for route in ["http.get-in-write", "http.get-in-read"] {
        let got = root.call("hostile", route, &input("url", &server.url("/hello")));
        assert_eq!(got["error"], "ErrorCode::HttpRequestDenied", "{route}: {got}");
    }
    assert_eq!(server.hits(), 0);
}

#[test]
fn a_raw_socket_is_denied_even_in_an_external_route() {
    let server = TestServer::start();
    let root = TestRoot::new();
    root.install_hostile_with(&format!("network = [\"http://127.0.0.1:{}\"]", server.port));
    let addr = format!("127.0.0.1:{}", server.port);
    for route in ["socket.connect", "socket.connect-external"] {
        let got = root.call("hostile", route, &input("addr", &addr));
        assert!(
            got["error"].as_str().is_some_and(|e| e.contains("denied") || e.contains("Permission")),
            "{route}: {got}"
        );
    }
    assert_eq!(server.hits(), 0);
}

#[test]
fn an_oversized_response_is_cut_off_with_an_error() {
    let server = TestServer::start();
    let root = TestRoot::with_config("http_response_max_kib = 256\n");
    root.install_hostile_with(&format!("network = [\"http://127.0.0.1:{}\"]", server.port));
    let got = root.call("hostile", "http.get", &input("url", &server.url("/big")));
    let e = got["error"].as_str().unwrap_or_default();
    assert!(e.contains("body size exceeds limit"), "{got}");
    assert!(
        !e.contains(".rs:") && !e.contains("/root/") && !e.contains("backtrace"),
        "no host internals reach the guest: {e}"
    );
    serves_a_normal_call(&root);
}

// ---- files --------------------------------------------------------------------

fn folder_with_secret_beside_it() -> (tempfile::TempDir, std::path::PathBuf) {
    let top = tempfile::tempdir().unwrap();
    let inbox = top.path().join("inbox");
    std::fs::create_dir(&inbox).unwrap();
    std::fs::write(inbox.join("note.txt"), "inside the grant").unwrap();
    std::fs::write(top.path().join("secret.txt"), "outside the grant").unwrap();
    std::os::unix::fs::symlink(top.path().join("secret.txt"), inbox.join("escape")).unwrap();
    std::os::unix::fs::symlink(top.path(), inbox.join("up")).unwrap();
    (top, inbox)
}

#[test]
fn a_granted_folder_is_seen_at_files_name_and_nothing_else_is() {
    let (_top, inbox) = folder_with_secret_beside_it();
    let root = TestRoot::new();
    root.install_hostile_with(&format!(
        "files = [{{ name = \"inbox\", path = \"{}\", access = \"read\" }}]",
        inbox.display()
    ));
    let got = root.call("hostile", "files.read", &input("path", "/files/inbox"));
    assert_eq!(got["entries"], serde_json::json!(["escape", "note.txt", "up"]), "{got}");
    assert_eq!(root.call("hostile", "files.read", &input("path", "/files/inbox/note.txt"))["text"], "inside the grant");
    for path in [
        "/files/inbox/../secret.txt",
        "/files/inbox/escape",
        "/files/inbox/up/secret.txt",
        "/files/../etc/passwd",
        "/etc/passwd",
        inbox.join("note.txt").to_str().unwrap(),
    ] {
        let got = root.call("hostile", "files.read", &input("path", path));
        assert!(got.get("error").is_some(), "{path} must not be readable: {got}");
        assert_ne!(got["text"], "outside the grant");
    }
    serves_a_normal_call(&root);
}

#[test]
fn a_read_only_grant_cannot_be_written_and_a_write_grant_can() {
    let (_top, inbox) = folder_with_secret_beside_it();
    let root = TestRoot::new();
    root.install_hostile_with(&format!(
        "files = [{{ name = \"inbox\", path = \"{}\", access = \"read\" }}]",
        inbox.display()
    ));
    let got = root.call("hostile", "files.write", r#"{"path":"/files/inbox/new.txt","content":"x"}"#);
    assert!(got.get("error").is_some(), "{got}");
    assert!(!inbox.join("new.txt").exists());

    let (_top2, inbox2) = folder_with_secret_beside_it();
    let root2 = TestRoot::new();
    root2.install_hostile_with(&format!(
        "files = [{{ name = \"inbox\", path = \"{}\", access = \"write\" }}]",
        inbox2.display()
    ));
    let got = root2.call("hostile", "files.write", r#"{"path":"/files/inbox/new.txt","content":"written"}"#);
    assert_eq!(got["ok"], true, "{got}");
    assert_eq!(std::fs::read_to_string(inbox2.join("new.txt")).unwrap(), "written");
    let got = root2.call("hostile", "files.write", r#"{"path":"/files/inbox/up/secret.txt","content":"overwritten"}"#);
    assert!(got.get("error").is_some(), "a symlink out of the grant cannot be written through: {got}");
    assert_eq!(std::fs::read_to_string(_top2.path().join("secret.txt")).unwrap(), "outside the grant");
}

#[test]
fn a_read_route_sees_no_files_even_when_a_folder_is_granted() {
    let (_top, inbox) = folder_with_secret_beside_it();
    let root = TestRoot::new();
    root.install_hostile_with(&format!(
        "files = [{{ name = \"inbox\", path = \"{}\", access = \"read\" }}]",
        inbox.display()
    ));
    let got = root.call("hostile", "fs.read", &input("path", "/files/inbox/note.txt"));
    assert!(got.get("error").is_some(), "{got}");
}

// ---- programs -----------------------------------------------------------------

#[test]
fn a_granted_program_gets_its_arguments_as_they_are_never_through_a_shell() {
    let root = TestRoot::new();
    root.install_hostile_with("spawn = [{ program = \"echo\" }]");
    let marker = root.path().join("pwned");
    let args = serde_json::json!(["; touch", marker.to_str().unwrap(), "$(id)", "`id`", "&&", "|"]);
    let got = root.call("hostile", "spawn.run", &serde_json::json!({ "program": "echo", "args": args }).to_string());
    assert_eq!(got["status"], 0, "{got}");
    assert_eq!(got["stdout"], format!("; touch {} $(id) `id` && |\n", marker.display()));
    assert!(!marker.exists(), "no shell ran");
}

#[test]
fn a_program_that_was_not_granted_is_denied() {
    let root = TestRoot::new();
    root.install_hostile_with("spawn = [{ program = \"echo\" }]");
    for program in ["sh", "/bin/sh", "cat", "echo2"] {
        let got = root.call(
            "hostile",
            "spawn.run",
            &serde_json::json!({ "program": program, "args": ["-c", "id"] }).to_string(),
        );
        assert_eq!(got["error"], format!("denied: the program `{program}` is not granted to this app"), "{got}");
    }
    serves_a_normal_call(&root);
}

#[test]
fn a_program_cannot_run_from_a_read_route() {
    let root = TestRoot::new();
    root.install_hostile_with("spawn = [{ program = \"echo\" }]");
    let got = root.call("hostile", "spawn.in-read", r#"{"program":"echo","args":["hi"]}"#);
    assert_eq!(got["error"], "denied: programs can only run in a route whose effect is external", "{got}");
}

#[test]
fn a_program_gets_an_empty_environment_and_a_scratch_folder() {
    let root = TestRoot::new();
    root.install_hostile_with("spawn = [{ program = \"env\" }, { program = \"pwd\" }]");
    let got = root.call("hostile", "spawn.run", r#"{"program":"env"}"#);
    let mut vars: Vec<&str> = got["stdout"].as_str().unwrap().lines().map(|l| l.split('=').next().unwrap()).collect();
    vars.sort();
    assert_eq!(vars, ["HOME", "LANG", "PATH", "TMPDIR"], "{got}");
    let got = root.call("hostile", "spawn.run", r#"{"program":"pwd"}"#);
    let cwd = got["stdout"].as_str().unwrap().trim().to_string();
    assert!(cwd.starts_with(root.path().join("cache/scratch").to_str().unwrap()), "{cwd}");
    assert!(!std::path::Path::new(&cwd).exists(), "the scratch folder is removed after the call");
}

#[test]
fn activation_refuses_a_capability_nobody_granted_and_names_it() {
    let root = TestRoot::new();
    let ws = tempfile::tempdir().unwrap();
    let src = crate::support::repo().join("guests/hostile");
    std::fs::create_dir(ws.path().join("migrations")).unwrap();
    std::fs::copy(src.join("migrations/0001_init.sql"), ws.path().join("migrations/0001_init.sql")).unwrap();
    std::fs::copy(src.join("autoapp.toml"), ws.path().join("autoapp.toml")).unwrap();
    root.ok(&["create", "hostile", "--at", ws.path().to_str().unwrap()]);
    let comp = crate::support::hostile_component();
    let id = {
        let out = root.ok(&["build", "hostile", "--component", comp.to_str().unwrap(), "--json"]);
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["release"].as_str().unwrap().to_string()
    };
    let e = root.refused(&["activate", "hostile", &id]);
    assert!(e.contains("asks for network:https://example.com, files:inbox, spawn:echo, which nobody granted"), "{e}");
    root.ok(&["grant", "hostile", "network:https://example.com"]);
    let e = root.refused(&["activate", "hostile", &id]);
    assert!(e.contains("asks for files:inbox, spawn:echo,"), "{e}");
    let e = root.refused(&["grant", "hostile", "network:https://evil.example.net"]);
    assert!(e.contains("does not ask for network https://evil.example.net"), "{e}");
}

// ---- the environment, limits ----------------------------------------------------

#[test]
fn the_guest_sees_no_environment_and_no_arguments() {
    let root = TestRoot::new();
    root.install("hostile");
    let got = root.call("hostile", "env.read", "{}");
    assert_eq!(got, serde_json::json!({ "vars": [], "args": [] }));
}

#[test]
fn a_guest_sees_none_of_the_hosts_files() {
    let root = TestRoot::new();
    root.install("hostile");
    for path in ["/", "/etc/passwd", "/tmp", root.path().to_str().unwrap()] {
        let got = root.call("hostile", "fs.read", &input("path", path));
        assert!(got.get("error").is_some(), "{path}: {got}");
    }
}

#[test]
fn an_infinite_loop_is_stopped_at_the_deadline() {
    let root = TestRoot::with_config("call_deadline_ms = 1500\n");
    root.install("hostile");
    let e = root.refused(&["call", "hostile", "spin"]);
    assert!(e.contains("hostile was stopped in route `spin`: it ran past its deadline of 1500 ms"), "{e}");
    serves_a_normal_call(&root);
}

#[test]
fn a_memory_bomb_ends_that_call_only() {
    let root = TestRoot::with_config("memory_max_mib = 64\n");
    root.install("hostile");
    let e = root.refused(&["call", "hostile", "memory.bomb"]);
    assert!(e.contains("hostile was stopped in route `memory.bomb`: it trapped"), "{e}");
    assert!(e.contains("memory allocation"), "the guest's own words say why: {e}");
    serves_a_normal_call(&root);
}

/// An answer is weighed before it is parsed: held parsed, each of its
/// values takes 32 bytes or more, so a million zeros (2 MB of text) would
/// be held at 32 MB and more, by the worker and again by its launcher. At
/// most a million values (the list and its zeros), and 32 MiB: over either
/// the call is refused naming the bound (fails before: both answered).
#[test]
fn an_answer_heavier_than_an_answer_may_be_is_refused_before_it_is_parsed() {
    let root = TestRoot::new();
    root.install("hostile");
    let got = root.call("hostile", "answer.heavy", r#"{"values":999999}"#);
    assert_eq!(got.as_array().map(Vec::len), Some(999_999), "a list of a million values in all is answered");
    let e = root.refused(&["call", "hostile", "answer.heavy", r#"{"values":1000000}"#]);
    assert!(e.contains("hostile answered route `answer.heavy` with more than the 1000000 JSON values"), "{e}");
    assert!(e.ends_with("nothing it wrote was kept"), "{e}");
    let e = root.refused(&["call", "hostile", "answer.heavy", r#"{"bytes":41943040}"#]);
    assert!(e.contains("with 40 MiB of JSON, more than the 32 MiB an answer may be"), "{e}");
    serves_a_normal_call(&root);
}

/// An app's error is cut where it is taken in: the first 16 Ki characters
/// of an error of 100 MiB reach the caller (fails before: the whole error
/// was scanned for secrets and written on the worker's channel, over the
/// most its reader takes, and the caller heard only that the worker ended
/// without an answer).
#[test]
fn an_apps_long_error_is_cut_short_where_it_is_taken_in() {
    let root = TestRoot::new();
    root.install("hostile");
    let e = root.refused(&["call", "hostile", "answer.heavy", r#"{"error":104857600}"#]);
    assert!(e.starts_with("autoapp: xxxxxxxx"), "{}", &e[..e.len().min(200)]);
    let letters = e.chars().filter(|c| *c == 'x').count();
    assert!((16 * 1024 - 16..=16 * 1024).contains(&letters), "{letters} letters of the error reached the caller");
}

#[test]
fn a_stack_overflow_ends_that_call_only() {
    let root = TestRoot::new();
    root.install("hostile");
    let e = root.refused(&["call", "hostile", "stack.overflow"]);
    assert!(e.contains("hostile was stopped in route `stack.overflow`: it"), "{e}");
    serves_a_normal_call(&root);
}

#[test]
fn a_flood_of_log_lines_and_stderr_does_not_break_the_call() {
    let root = TestRoot::new();
    root.install("hostile");
    assert_eq!(root.call("hostile", "log.flood", "{}")["ok"], true);
}

#[test]
fn sql_that_would_reach_outside_the_store_is_denied() {
    let root = TestRoot::new();
    root.install("hostile");
    let outside = root.path().join("stolen.sqlite");
    for (sql, want) in [
        (format!("ATTACH DATABASE '{}' AS x", outside.display()), "denied: ATTACH and DETACH are not available"),
        ("PRAGMA journal_mode = DELETE".into(), "denied: PRAGMA statements are not available"),
        ("COMMIT".into(), "denied: transaction control is not available"),
        (format!("VACUUM INTO '{}'", outside.display()), "denied: VACUUM is not available"),
        ("SELECT load_extension('/tmp/x.so')".into(), "denied: the function load_extension is not available"),
        ("DELETE FROM _autoapp_migrations".into(), "denied: the table _autoapp_migrations belongs to the host"),
    ] {
        let got = root.call("hostile", "sql", &input("sql", &sql));
        assert!(got["error"].as_str().unwrap_or_default().starts_with(want), "{sql}: {got}");
    }
    assert!(!outside.exists());
    let got = root.call("hostile", "sql.read", &input("sql", "INSERT INTO marks (note) VALUES ('x')"));
    assert!(got["error"].as_str().unwrap().starts_with("denied: this route's effect is read"), "{got}");
    let got = root.call("hostile", "write.in-read", "{}");
    assert!(got["error"].as_str().unwrap().starts_with("denied: this route's effect is read"), "{got}");
    serves_a_normal_call(&root);
}

// ---- memory between calls ------------------------------------------------------

#[test]
fn nothing_a_call_leaves_in_memory_reaches_the_next_call() {
    use autoapp::apps::Apps;
    use autoapp::config::Config;
    use autoapp::gate::Caller;
    use autoapp::manifest::AppId;
    use autoapp::root::Root;

    let root = TestRoot::new();
    root.install("hostile");
    // One instance slot: every call reuses the memory the previous one wrote
    // (a static, and 6 MiB of heap: past what is reset in place, so both the
    // in-place reset and the kernel's are crossed). Then the default slots:
    // each call takes an instance made ahead of it, on the instance thread,
    // while the one before is freed there.
    for max_instances in [1, Config::default().max_instances] {
        let config = Config { max_instances, ..Config::default() };
        let apps = Apps::new(Root::open(root.path()).unwrap(), &config).unwrap();
        let (me, hostile) = (Caller::command_line(), AppId::parse("hostile").unwrap());
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            for i in 0..12 {
                let a = apps.call(&me, &hostile, "memory.leftover", "{}").await.expect("memory.leftover answers");
                let clean = serde_json::json!({ "static": 0, "heap_dirty_at": null });
                assert_eq!(a.output, clean, "call {i} with {max_instances} slots");
                // Other routes of the same slot in between.
                if i % 3 == 0 {
                    apps.call(&me, &hostile, "count", "{}").await.expect("count answers");
                }
                if i % 4 == 1 {
                    // Time for the next instance to be made ahead.
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
            }
        });
    }
}

#[test]
fn an_instance_made_ahead_of_a_call_never_keeps_another_call_from_a_slot() {
    use autoapp::apps::Apps;
    use autoapp::apps::ErrorKind;
    use autoapp::config::Config;
    use autoapp::gate::Caller;
    use autoapp::manifest::AppId;
    use autoapp::root::Root;

    let root = TestRoot::new();
    root.install("hostile");
    root.install("notes");
    let config = Config { max_instances: 2, call_deadline_ms: 1500, ..Config::default() };
    let apps = Apps::new(Root::open(root.path()).unwrap(), &config).unwrap();
    let me = Caller::command_line();
    let (hostile, notes) = (AppId::parse("hostile").unwrap(), AppId::parse("notes").unwrap());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        // A call of notes: the next instance of notes is made ahead and holds
        // one of the two slots.
        apps.call(&me, &notes, "notes.list", "{}").await.expect("notes.list answers");
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        // A call that holds the other slot until its deadline, and a call
        // that needs a slot meanwhile: it takes the one the spare gives up,
        // and answers at once, instead of waiting for the first to end.
        let spin = apps.call(&me, &hostile, "spin", "{}");
        let count = async {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            let asked = std::time::Instant::now();
            (apps.call(&me, &hostile, "count", "{}").await, asked.elapsed())
        };
        let (spun, (counted, took)) = tokio::join!(spin, count);
        let e = spun.expect_err("spin runs until its deadline");
        assert_eq!(e.kind, ErrorKind::Trap, "stopped at its deadline: {}", e.message);
        let counted = counted.map_err(|e| e.message).expect("count answers while spin holds the other slot");
        assert!(took < std::time::Duration::from_millis(1000), "count waited {took:?} for a slot: {counted:?}");
        // And notes still answers (its instance made now).
        apps.call(&me, &notes, "notes.list", "{}").await.expect("notes.list answers");
    });
}

// ---- secrets ------------------------------------------------------------------

#[test]
fn a_key_an_app_logs_prints_or_fails_with_appears_nowhere_on_disk_or_in_output() {
    let root = TestRoot::new();
    root.install("hostile");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_autoapp"))
        .args(["--root", root.path().to_str().unwrap(), "call", "hostile", "log.secret"])
        .env("AUTOAPP_LOG", "debug")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let shown = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(shown.contains("the feed refused the key [redacted]"), "{shown}");
    assert!(shown.contains("Authorization: [redacted]"), "the log line is there, without its token: {shown}");
    let keys: [&[u8]; 2] = [b"FAKE0123456789abcdef", b"ghp_FAKE"];
    for k in keys {
        assert!(!shown.as_bytes().windows(k.len()).any(|w| w == k), "a key reached the output: {shown}");
    }
    // Nor any file of the root (record, data, journal), but for the app's own
    // code: its release and its compiled copy hold the key as a literal.
    fn files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.ends_with("releases") || p.ends_with("compiled") {
                continue;
            }
            if p.is_dir() { files(&p, out) } else { out.push(p) }
        }
    }
    let mut all = Vec::new();
    files(root.path(), &mut all);
    for f in all {
        let bytes = std::fs::read(&f).unwrap_or_default();
        for k in keys {
            assert!(!bytes.windows(k.len()).any(|w| w == k), "a key reached {}", f.display());
        }
    }
}
