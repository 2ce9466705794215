//! An app's worker (`host/src/worker`): a call from the command line runs in
//! a process of its own, confined to its app before the guest runs. A runtime
//! escape is played by the debug build's probe, an import of the escape
//! guest (`autoapp:escape/probe`, linked in debug builds only): raw system
//! calls made from the guest's own call, in its worker, as native code would
//! make them. Each fails there; the same attempts from a process that is not
//! confined (`autoapp __escape-probe`) succeed, which shows the test can fail.

use std::path::Path;

use crate::support::{Served, TestRoot, TestServer};

/// What became of each attempt: (what it tried, done).
fn outcomes(value: &serde_json::Value) -> Vec<(String, bool)> {
    value
        .as_array()
        .expect("a list of outcomes")
        .iter()
        .map(|o| (o["attempt"].to_string(), o["done"].as_bool().expect("done")))
        .collect()
}

fn attempt(kind: &str, key: &str, value: impl Into<serde_json::Value>) -> serde_json::Value {
    serde_json::json!({ "try": kind, key: value.into() })
}

fn path(p: &Path) -> String {
    p.to_str().expect("a UTF-8 path").to_string()
}

#[test]
fn an_escape_in_a_calls_worker_reaches_nothing_its_app_was_not_given() {
    let root = TestRoot::new();
    root.install("notes");
    root.install("escape");
    root.call("notes", "notes.add", r#"{"title":"mine"}"#);
    root.call("escape", "mark", "{}");
    // The person's own things: a key in their home, a publisher key, the
    // control secret of a launcher, the root's configuration.
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join(".ssh")).unwrap();
    let ssh_key = home.path().join(".ssh/id_ed25519");
    std::fs::write(&ssh_key, "PRIVATE KEY").unwrap();
    root.ok(&["key", "new", "--name", "Test"]);
    let publisher_key = walk_files(&root.path().join("xdg-config"))
        .into_iter()
        .find(|f| f.extension().is_none_or(|e| e != "pub") && !f.to_string_lossy().ends_with(".json"))
        .expect("a publisher key file");
    let control = root.path().join("launcher.json");
    std::fs::write(&control, r#"{"port":1,"secret":"0123"}"#).unwrap();
    let other_db = root.path().join("apps/notes/data/app.sqlite");
    // Another app's compiled code (its own folder of the cache).
    let compiled_file = |app: &str| {
        let dir = root.path().join("cache/compiled").join(app);
        let file = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == "cwasm"));
        file.unwrap_or_else(|| panic!("{app}'s compiled code in {}", dir.display()))
    };
    let other_code = compiled_file("notes");
    let own_code = compiled_file("escape");
    let own_data = root.path().join("apps/escape/data");
    let own_logs = root.path().join("apps/escape/logs");
    let own_db = root.path().join("apps/escape/data/app.sqlite");
    assert!(other_db.is_file() && own_db.is_file());
    // A listener on loopback and a UNIX socket (a session bus, an agent).
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let sockets = tempfile::tempdir().unwrap();
    let bus = sockets.path().join("bus");
    let _bus = std::os::unix::net::UnixListener::bind(&bus).unwrap();
    // A sibling process of the person's.
    let mut sibling = std::process::Command::new("sleep").arg("60").spawn().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();

    let attempts = serde_json::json!([
        attempt("read", "path", path(&ssh_key)),
        attempt("read", "path", path(&publisher_key)),
        attempt("read", "path", path(&control)),
        attempt("read", "path", path(&root.path().join("config.toml"))),
        attempt("read", "path", path(&other_db)),
        attempt("write", "path", path(&other_db)),
        attempt("list", "path", path(root.path())),
        attempt("list", "path", path(&root.path().join("apps/notes"))),
        attempt("read", "path", path(&other_code)),
        attempt("list", "path", path(&root.path().join("cache/compiled"))),
        attempt("write", "path", path(&own_code)),
        attempt("create", "path", path(&elsewhere.path().join("planted"))),
        attempt("create", "path", path(&root.path().join("apps/escape/grants.json.new"))),
        attempt(
            "write",
            "path",
            path(
                &root
                    .path()
                    .join("apps/escape/releases")
                    .read_dir()
                    .unwrap()
                    .next()
                    .unwrap()
                    .unwrap()
                    .path()
                    .join("component.wasm")
            )
        ),
        attempt("connect", "address", listener.local_addr().unwrap().to_string()),
        attempt("connect-unix", "path", path(&bus)),
        attempt("exec", "path", "/bin/true"),
        attempt("read", "path", format!("/proc/{}/environ", std::process::id())),
        attempt("attach", "pid", sibling.id()),
        // Its app's lock (activation, rollback, backup, removal): held by a
        // worker, the person could change nothing of the app while it lived.
        attempt("lock", "path", path(&root.path().join("apps/.escape.lock"))),
        // Planted where the host opens files later (a preview's copy, a
        // backup, the log writer): a link to the person's key, a hard link
        // of it, a FIFO to block on.
        serde_json::json!({ "try": "symlink", "path": path(&own_data.join("planted.sqlite")), "target": path(&ssh_key) }),
        serde_json::json!({ "try": "symlink", "path": path(&own_logs.join("app.log.1")), "target": path(&ssh_key) }),
        serde_json::json!({ "try": "link", "path": path(&own_data.join("linked")), "target": path(&ssh_key) }),
        serde_json::json!({ "try": "fifo", "path": path(&own_data.join("runs.sqlite-journal")) }),
    ]);
    let asked = attempts.to_string();

    let mut confined = probed(&root, "escape", "escape", &attempts);
    // From a write route too (its worker writes its app's data, nothing more).
    confined.extend(probed(&root, "escape", "escape.write", &attempts));
    let o =
        std::process::Command::new(env!("CARGO_BIN_EXE_autoapp")).args(["__escape-probe", &asked]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let unconfined: serde_json::Value = serde_json::from_slice(&o.stdout).expect("the outcomes");
    let _ = sibling.kill();
    let _ = sibling.wait();
    // What the unconfined probe planted in the app's folders (a FIFO there
    // would hold the app's next call: that is why a worker may not make one).
    for planted in ["planted.sqlite", "linked", "runs.sqlite-journal"] {
        let _ = std::fs::remove_file(own_data.join(planted));
    }
    let _ = std::fs::remove_file(own_logs.join("app.log.1"));

    let done_inside: Vec<&String> = confined.iter().filter(|(_, d)| *d).map(|(a, _)| a).collect();
    assert!(done_inside.is_empty(), "the worker did what an escape tried: {done_inside:#?}");
    let refused_outside: Vec<String> = outcomes(&unconfined).into_iter().filter(|(_, d)| !*d).map(|(a, _)| a).collect();
    assert!(refused_outside.is_empty(), "the same attempts outside a worker must succeed: {refused_outside:#?}");

    // And the worker still does its own work: its app's data, read and
    // written (its times set too, as WASI's `set-times` does, which the
    // worker's allow-list must let through), and its own compiled code read.
    let own = serde_json::json!([
        attempt("read", "path", path(&own_db)),
        attempt("write", "path", path(&own_db)),
        attempt("touch", "path", path(&own_db)),
        attempt("read", "path", path(&own_code)),
    ]);
    let own = probed(&root, "escape", "escape", &own);
    assert!(own.iter().all(|(_, d)| *d), "{own:#?}");
    assert_eq!(root.call("notes", "notes.list", "{}")["notes"][0]["title"], "mine");
    assert_eq!(root.call("escape", "count", "{}")["marks"], 1);
}

#[test]
fn a_descriptor_left_open_by_whoever_started_autoapp_reaches_no_worker() {
    let root = TestRoot::with_config(crate::many_callers::QUIET);
    root.install("escape");
    // The person's key, held open by what started `autoapp` (a shell's
    // `9<file`, a parent's descriptor without close-on-exec).
    let home = tempfile::tempdir().unwrap();
    let key = home.path().join("id_ed25519");
    std::fs::write(&key, "PRIVATE KEY of the person").unwrap();
    let attempts = serde_json::json!([{ "try": "read-fd", "fd": 9, "starts": "PRIVATE KEY" }]);
    let asked = serde_json::json!({ "attempts": attempts }).to_string();

    // `autoapp call`: its worker.
    let mut call = root.command();
    call.args(["call", "escape", "escape", &asked]);
    let o = crate::support::holding(&call, 9, &key).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut inside = outcomes(&serde_json::from_slice(&o.stdout).expect("the worker's outcomes"));
    // A launcher: the worker that serves the app's page, and the outer
    // worker of its external route.
    let served = Served::start_holding(&root, &["serve", "escape"], 9, &key);
    let mut tab = served.tab("escape");
    for route in ["escape", "escape.external"] {
        let r = tab.request("POST", &format!("/api/call/{route}"), Some(&asked)).unwrap();
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        inside.extend(outcomes(&serde_json::from_slice(&r.body).expect("the worker's outcomes")));
    }
    assert_eq!(launchers_workers(root.path()).len(), 2, "both ran in the launcher's workers");
    served.stop();
    // The same attempt in a process that is not a worker, started the same
    // way: the descriptor is there to read.
    let mut probe = std::process::Command::new(env!("CARGO_BIN_EXE_autoapp"));
    probe.args(["__escape-probe", &attempts.to_string()]);
    let o = crate::support::holding(&probe, 9, &key).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let outside = outcomes(&serde_json::from_slice(&o.stdout).expect("the outcomes"));

    assert_eq!(inside.len(), 3);
    let read: Vec<&String> = inside.iter().filter(|(_, d)| *d).map(|(a, _)| a).collect();
    assert!(read.is_empty(), "a worker read the descriptor it was left: {read:#?}");
    assert!(outside.iter().all(|(_, d)| *d), "outside a worker the descriptor is read: {outside:#?}");
}

/// Runs `autoapp call app route` of an escape route of the escape guest:
/// the probe's `attempts`, made from the guest's own call in its worker.
fn probed(root: &TestRoot, app: &str, route: &str, attempts: &serde_json::Value) -> Vec<(String, bool)> {
    probed_with(root, app, route, attempts, None).0
}

/// [`probed`] under the debug fault `fault`, with what the call said on
/// its standard error.
fn probed_with(
    root: &TestRoot,
    app: &str,
    route: &str,
    attempts: &serde_json::Value,
    fault: Option<&str>,
) -> (Vec<(String, bool)>, String) {
    let input = serde_json::json!({ "attempts": attempts }).to_string();
    let mut command = root.command();
    command.args(["call", app, route, &input]);
    if let Some(fault) = fault {
        command.env("AUTOAPP_FAULT", fault);
    }
    let o = command.output().expect("the autoapp binary runs");
    let said = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{said}");
    (outcomes(&serde_json::from_slice(&o.stdout).expect("the worker's outcomes")), said)
}

/// `autoapp call notes notes.add` of a note titled `title` under the debug
/// fault `fault`: its exit status and what it said.
fn add_under_fault(root: &TestRoot, title: &str, fault: &str) -> (Option<i32>, String) {
    let input = serde_json::json!({ "title": title }).to_string();
    let o = root.command().args(["call", "notes", "notes.add", &input]).env("AUTOAPP_FAULT", fault).output().unwrap();
    (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
}

#[test]
fn an_external_routes_worker_reaches_what_was_granted_and_nothing_beside_it() {
    let server = TestServer::start();
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let granted = tempfile::tempdir().unwrap();
    std::fs::write(granted.path().join("note.txt"), "granted").unwrap();
    let beside = tempfile::tempdir().unwrap();
    std::fs::write(beside.path().join("secret.txt"), "not granted").unwrap();
    let root = TestRoot::new();
    root.install_with(
        "escape",
        &format!(
            "network = [\"http://127.0.0.1:{}\"]\nfiles = [{{ name = \"inbox\", path = \"{}\", access = \"read\" }}]",
            server.port,
            granted.path().display()
        ),
    );
    let attempts = serde_json::json!([
        attempt("connect", "address", format!("127.0.0.1:{}", server.port)),
        attempt("read", "path", path(&granted.path().join("note.txt"))),
        attempt("connect", "address", other.local_addr().unwrap().to_string()),
        attempt("create", "path", path(&granted.path().join("planted"))),
        attempt("read", "path", path(&beside.path().join("secret.txt"))),
        attempt("read", "path", path(&root.path().join("apps/escape/grants.json"))),
        attempt("write", "path", path(&root.path().join("apps/escape/grants.json"))),
        attempt("udp", "address", other.local_addr().unwrap().to_string()),
    ]);
    let got = probed(&root, "escape", "escape.external", &attempts);
    let done: Vec<bool> = got.iter().map(|(_, d)| *d).collect();
    // The granted folder (read); no socket at all, not even to the granted
    // origin's port — its launcher sends its requests (issue 72, rule 1;
    // fails before: the worker connected to the granted port itself, and
    // sent UDP anywhere) —, not a write to a folder granted for reading, not
    // the folder beside it; its own grants it may read (a call reads them)
    // and never write.
    assert_eq!(done, [false, true, false, false, false, true, false, false], "{got:#?}");
    // A read route of the same app is given none of it.
    let got = probed(&root, "escape", "escape", &attempts);
    assert_eq!(got.iter().filter(|(_, d)| *d).count(), 1, "only its grants file is read: {got:#?}");
}

#[test]
fn nothing_a_worker_starts_outlives_its_call() {
    // With a program granted, the worker may run the system's programs; one
    // it leaves running ends with the call (its process group, which
    // nothing in it may leave).
    let root = TestRoot::new();
    root.install_with("escape", "spawn = [{ program = \"sh\" }]");
    let marker = format!("{}.{}", 40 + std::process::id() % 50, std::process::id() % 1000);
    let left = serde_json::json!([{ "try": "leave", "path": "/bin/sleep", "args": [marker] }]);
    let got = probed(&root, "escape", "escape.external", &left);
    assert!(got[0].1, "it could start it: {got:?}");
    let running = || {
        std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).split('\0').any(|a| a == marker))
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while running() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!running(), "`sleep {marker}` outlived the call that started it");
}

#[test]
fn a_call_where_landlock_is_off_says_so_and_still_runs_in_a_worker_of_its_own() {
    // A worker confines itself with Landlock wherever the kernel has it; one
    // that cannot (a test's fault), where the person turned Landlock off,
    // runs with its filter alone, and says so.
    let root = TestRoot::with_config("landlock = \"off\"\n");
    root.install("notes");
    let o = root
        .command()
        .args(["call", "notes", "notes.add", r#"{"title":"x"}"#])
        .env("AUTOAPP_FAULT", "worker-unconfinable")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(said.contains("notes's worker runs without Landlock: Landlock is off in the configuration"), "{said}");
    assert_eq!(root.call("notes", "notes.list", "{}")["notes"][0]["title"], "x");
}

/// Where Landlock is off (or the kernel has none), a worker's system-call
/// filter is all that holds it: a worker that runs no program is allowed
/// only the calls it needs, so it starts no program and signals nobody.
/// (Before the allow-list, the filter refused a list of calls, and neither
/// `execve` nor `kill` was on it; with it, `tgkill` to another process's
/// thread was let through until it was held to the worker's own threads.)
#[test]
fn where_landlock_is_off_a_workers_filter_still_refuses_what_it_never_needs() {
    let root = TestRoot::with_config(&format!("{}landlock = \"off\"\n", crate::many_callers::QUIET));
    root.install("escape");
    let mut sibling = std::process::Command::new("sleep").arg("60").spawn().unwrap();
    let attempts = serde_json::json!([
        attempt("exec", "path", "/bin/true"),
        serde_json::json!({ "try": "leave", "path": "/bin/sleep", "args": ["1"] }),
        attempt("signal", "pid", sibling.id()),
        attempt("signal-thread", "pid", sibling.id()),
        attempt("limits", "pid", sibling.id()),
        attempt("owner", "pid", sibling.id()),
        serde_json::json!({ "try": "fork" }),
    ]);
    // (A worker that cannot confine itself with Landlock, where it is off.)
    let (mut inside, said) = probed_with(&root, "escape", "escape", &attempts, Some("worker-unconfinable"));
    assert!(said.contains("without Landlock: Landlock is off in the configuration"), "{said}");
    // The launcher's workers too (they confine themselves with Landlock
    // wherever the kernel has it, whatever the configuration says).
    let served = Served::start(&root, &["serve", "escape"]);
    let mut tab = served.tab("escape");
    let asked = serde_json::json!({ "attempts": attempts }).to_string();
    let r = tab.request("POST", "/api/call/escape", Some(&asked)).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    inside.extend(outcomes(&serde_json::from_slice(&r.body).expect("the worker's outcomes")));
    served.stop();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_autoapp"))
        .args(["__escape-probe", &attempts.to_string()])
        .output()
        .unwrap();
    let outside = outcomes(&serde_json::from_slice(&o.stdout).expect("the outcomes"));
    let _ = sibling.kill();
    let _ = sibling.wait();
    let done: Vec<&String> = inside.iter().filter(|(_, d)| *d).map(|(a, _)| a).collect();
    assert!(done.is_empty(), "a worker without Landlock did: {done:#?}");
    assert!(outside.iter().all(|(_, d)| *d), "outside a worker each succeeds: {outside:#?}");
}

#[test]
fn a_worker_runs_without_landlock_only_where_the_kernel_says_it_has_none() {
    // The worker could not confine itself: its parent asks the kernel (the
    // probe), which here says it cannot filter system calls either, and only
    // then runs it with what is left, saying so.
    let root = TestRoot::new();
    root.install("notes");
    let (status, said) = add_under_fault(&root, "y", "no-seccomp");
    assert_eq!(status, Some(0), "{said}");
    assert!(said.contains("notes's worker runs without Landlock: this kernel cannot filter"), "{said}");
    assert_eq!(root.call("notes", "notes.list", "{}")["notes"][0]["title"], "y");
    // A worker that fails to confine itself on a kernel that can: refused,
    // never run unconfined.
    let (status, said) = add_under_fault(&root, "z", "worker-unconfinable");
    assert_eq!(status, Some(1), "{said}");
    assert!(said.contains("the call was not run: notes's worker could not be confined"), "{said}");
    assert_eq!(root.call("notes", "notes.list", "{}")["notes"][0]["title"], "y", "nothing was written");
    // The same where Landlock has its file rules and not its TCP rules
    // (Linux 5.13 to 6.6): the probe says so, which is not a kernel without
    // Landlock. (Before, its answer there was "cannot confine", taken for
    // none: the worker ran with the filter alone, its files not held.)
    let (status, said) = add_under_fault(&root, "w", "landlock-without-tcp,worker-unconfinable");
    assert_eq!(status, Some(1), "{said}");
    assert!(said.contains("the call was not run: notes's worker could not be confined"), "{said}");
    let titles = root.call("notes", "notes.list", "{}")["notes"].as_array().unwrap().len();
    assert_eq!(titles, 1, "nothing was written");
}

#[test]
fn where_landlock_has_no_tcp_rules_a_worker_still_has_its_file_rules_and_says_what_it_lacks() {
    // Linux 5.13 to 6.6 (Debian 12, RHEL 9, Ubuntu 22.04) have Landlock's
    // file rules, not its TCP rules: played here with a debug fault.
    let server = TestServer::start();
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let beside = tempfile::tempdir().unwrap();
    std::fs::write(beside.path().join("secret.txt"), "not granted").unwrap();
    let root = TestRoot::new();
    let attempts = serde_json::json!([
        attempt("read", "path", path(&beside.path().join("secret.txt"))),
        attempt("read", "path", path(&root.path().join("config.toml"))),
        attempt("create", "path", path(&beside.path().join("planted"))),
        serde_json::json!({ "try": "symlink", "path": path(&root.path().join("apps/escape/data/k")), "target": path(&beside.path().join("secret.txt")) }),
        attempt("connect", "address", other.local_addr().unwrap().to_string()),
    ]);
    // (A granted program: the only worker that holds a socket.)
    root.install_with(
        "escape",
        &format!("network = [\"http://127.0.0.1:{}\"]\nspawn = [{{ program = \"sh\" }}]", server.port),
    );
    let run = |route: &str| probed_with(&root, "escape", route, &attempts, Some("landlock-without-tcp"));
    // A read route: files held by Landlock, every socket by the filter.
    let (got, said) = run("escape");
    assert!(got.iter().all(|(_, done)| !done), "{got:#?}");
    assert!(!said.contains("no TCP rules"), "nothing to say where no socket is allowed: {said}");
    // An external route whose app was granted a program: the files still
    // held; another port is not (its programs' sockets), and it says so.
    let (got, said) = run("escape.external");
    let done: Vec<bool> = got.iter().map(|(_, d)| *d).collect();
    assert_eq!(done, [false, false, false, false, true], "{got:#?}");
    assert!(said.contains("this kernel's Landlock has no TCP rules"), "{said}");
}

#[test]
fn a_release_activated_while_a_call_starts_does_not_run_under_the_others_rules() {
    // The call was passed for one release and its worker started; another
    // is activated before the call is sent to it: a write is refused, never
    // run (a read would be passed again, for the release now active).
    let root = TestRoot::new();
    let ws = root.install_hostile_with("network = [\"http://127.0.0.1:9\"]");
    let hold = root.path().join("hold");
    std::fs::write(&hold, "").unwrap();
    let call = root
        .command()
        .args(["call", "hostile", "mark"])
        .env("AUTOAPP_PAUSE", "worker:call")
        .env("AUTOAPP_PAUSE_FILE", &hold)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Its worker is started: its policy is made.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while workers_of(root.path()).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(!workers_of(root.path()).is_empty(), "the worker started");
    // A second release (another manifest), activated meanwhile.
    let manifest = ws.path().join("autoapp.toml");
    std::fs::write(&manifest, format!("{}\n# the second release\n", std::fs::read_to_string(&manifest).unwrap()))
        .unwrap();
    let component = crate::support::guest_component("hostile");
    let built: serde_json::Value =
        serde_json::from_str(&root.ok(&["build", "hostile", "--component", component.to_str().unwrap(), "--json"]))
            .unwrap();
    root.ok(&["activate", "hostile", built["release"].as_str().unwrap()]);
    std::fs::remove_file(&hold).unwrap();
    let o = call.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{said}");
    assert!(said.contains("changed while this call waited") && said.contains("nothing ran"), "{said}");
    assert!(said.contains("call it again"), "{said}");
    // Nothing was written; the next call runs the new one.
    assert_eq!(root.call("hostile", "count", "{}")["marks"], 0);
}

/// The pids of the workers running for `root` (their policy names it).
fn workers_of(root: &Path) -> Vec<i32> {
    workers_where(root, "")
}

/// The pids of the workers running for `app` of `root` (their policy names
/// its folder).
fn workers_of_app(root: &Path, app: &str) -> Vec<i32> {
    workers_where(root, &format!("/apps/{app}/"))
}

fn workers_where(root: &Path, beneath: &str) -> Vec<i32> {
    let within = format!("{}{beneath}", root.to_string_lossy());
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let args: Vec<String> = cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        if args.get(1).is_some_and(|a| a == "__worker") && args.get(2).is_some_and(|p| p.contains(&within)) {
            pids.push(pid);
        }
    }
    pids
}

#[test]
fn workers_killed_under_32_writers_lose_no_acknowledged_write_and_other_apps_go_on() {
    let root = std::sync::Arc::new(TestRoot::new());
    root.install("notes");
    root.install("hostile");
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let killer = {
        let (root, done) = (root.clone(), done.clone());
        std::thread::spawn(move || {
            let mut killed = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                // Only the writers' app's workers: the other app's must not notice.
                for pid in workers_of_app(root.path(), "notes").into_iter().step_by(3) {
                    let Some(pid) = rustix::process::Pid::from_raw(pid) else { continue };
                    if rustix::process::kill_process(pid, rustix::process::Signal::KILL).is_ok() {
                        killed += 1;
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(30));
            }
            killed
        })
    };
    let reader = {
        let (root, done) = (root.clone(), done.clone());
        std::thread::spawn(move || {
            let mut reads = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                // The other app's calls: none fails while the writers' app's
                // workers are killed.
                let o = root.run(&["call", "hostile", "count"]);
                assert!(o.status.success(), "the other app's call failed: {}", String::from_utf8_lossy(&o.stderr));
                reads += 1;
            }
            reads
        })
    };
    let writers: Vec<_> = (0..32)
        .map(|w| {
            let root = root.clone();
            std::thread::spawn(move || {
                let mut acknowledged = Vec::new();
                let mut refused = 0;
                for i in 0..4 {
                    let title = format!("w{w}-{i}");
                    let o =
                        root.run(&["call", "notes", "notes.add", &serde_json::json!({ "title": title }).to_string()]);
                    if o.status.success() {
                        acknowledged.push(title);
                    } else {
                        let said = String::from_utf8_lossy(&o.stderr);
                        // Killed, or told to try again (the app busy under 32 writers).
                        assert!(
                            said.contains("worker was killed")
                                || said.contains("worker ended")
                                || said.contains("try again"),
                            "{said}"
                        );
                        refused += 1;
                    }
                }
                (acknowledged, refused)
            })
        })
        .collect();
    let mut acknowledged = Vec::new();
    let mut refused = 0;
    for w in writers {
        let (a, r) = w.join().unwrap();
        acknowledged.extend(a);
        refused += r;
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let killed = killer.join().unwrap();
    let reads = reader.join().unwrap();
    assert!(
        killed > 0 && refused > 0,
        "the test killed workers under the writers ({killed} killed, {refused} refused)"
    );
    assert!(reads > 0, "the other app answered throughout");
    let all = root.call("notes", "notes.list", r#"{"limit":500}"#);
    let kept: std::collections::BTreeSet<String> =
        all["notes"].as_array().unwrap().iter().map(|n| n["title"].as_str().unwrap().to_string()).collect();
    let lost: Vec<&String> = acknowledged.iter().filter(|t| !kept.contains(*t)).collect();
    assert!(
        lost.is_empty(),
        "acknowledged writes lost: {lost:?} ({} acknowledged, {killed} workers killed)",
        acknowledged.len()
    );
    // Each kept write has its row, answered or not: a write's row is
    // committed before the write. (Before 2026-12-06 the row went in with
    // the write, in one COMMIT that SQLite appends to the store's log and
    // then to the record's, or after it when the record was busy: a worker
    // killed in between kept a write without its row, about once in a
    // hundred kept writes here.)
    // Matched by the arguments' hash: each title is written once.
    let runs: serde_json::Value =
        serde_json::from_str(&root.ok(&["runs", "notes", "--limit", "1000", "--json"])).expect("runs --json");
    let rows: std::collections::BTreeSet<&str> = runs
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["route"] == "notes.add" && r["outcome"] == "ok")
        .map(|r| r["arguments_hash"].as_str().unwrap())
        .collect();
    let without: Vec<&String> = kept
        .iter()
        .filter(|t| !rows.contains(autoapp::gate::arguments_hash(&serde_json::json!({ "title": t })).as_str()))
        .collect();
    assert!(
        without.is_empty(),
        "kept writes without their rows: {without:?} ({} kept, {} acknowledged)",
        kept.len(),
        acknowledged.len()
    );
}

fn walk_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = entry.path();
        if p.is_dir() { out.extend(walk_files(&p)) } else { out.push(p) }
    }
    out
}

#[test]
fn a_program_granted_to_an_app_still_runs_the_systems_programs_from_its_worker() {
    // The worker's rules hold the programs it starts too (Landlock only
    // narrows): a granted shell runs what its own policy lets it, no less.
    let root = TestRoot::new();
    root.install_hostile_with("spawn = [{ program = \"sh\" }]");
    let got = root.call(
        "hostile",
        "spawn.run",
        r#"{"program":"sh","args":["-c","/bin/echo ran; test -n \"$(cat /etc/passwd)\" && echo read"]}"#,
    );
    assert_eq!(got["stdout"], "ran\nread\n", "{got}");
    // And no more than that: the root stays out of its reach.
    let config = root.path().join("config.toml");
    let got = root.call(
        "hostile",
        "spawn.run",
        &serde_json::json!({ "program": "sh", "args": ["-c", format!("cat {}", config.display())] }).to_string(),
    );
    assert!(got["stderr"].as_str().unwrap().contains("Permission denied"), "{got}");
    // Issue 71, rule 4: of /etc, what programs read, not the machine's keys
    // (the suite runs as root, as the red team's machine did).
    for file in ["/etc/shadow", "/etc/sudoers", "/etc/ssh/ssh_host_ed25519_key", "/etc/machine-id"] {
        // (What this process cannot read itself proves nothing.)
        if std::fs::read(file).is_err() {
            continue;
        }
        let got = root.call(
            "hostile",
            "spawn.run",
            &serde_json::json!({ "program": "sh", "args": ["-c", format!("cat {file} || echo refused")] }).to_string(),
        );
        assert!(got["stdout"].as_str().unwrap().ends_with("refused\n"), "{file}: {got}");
    }
}

/// The pids of the launcher's workers of `root` (started with `serve`).
/// Waits (up to 20 s) until the launcher's idle workers have ended.
fn idle_workers_end(root: &Path) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !launchers_workers(root).is_empty() {
        assert!(std::time::Instant::now() < until, "the idle worker did not end");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

fn launchers_workers(root: &Path) -> Vec<i32> {
    let mut pids = Vec::new();
    for pid in workers_of(root) {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if cmdline.split(|b| *b == 0).any(|a| a == b"serve") {
            pids.push(pid);
        }
    }
    pids
}

#[test]
fn the_launchers_calls_run_in_a_worker_of_their_app_that_reaches_nothing_else() {
    let root = TestRoot::with_config(crate::many_callers::QUIET);
    root.install("notes");
    root.install("escape");
    root.call("escape", "mark", "{}");
    root.call("notes", "notes.add", r#"{"title":"theirs"}"#);
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join(".ssh")).unwrap();
    let ssh_key = home.path().join(".ssh/id_ed25519");
    std::fs::write(&ssh_key, "PRIVATE KEY").unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut sibling = std::process::Command::new("sleep").arg("60").spawn().unwrap();
    let other_db = root.path().join("apps/notes/data/app.sqlite");
    let own_db = root.path().join("apps/escape/data/app.sqlite");
    // The launcher's own secret, written when it starts.
    let control = root.path().join("launcher.json");
    let attempts = |launcher: u32| {
        serde_json::json!([
            attempt("read", "path", path(&ssh_key)),
            attempt("read", "path", path(&control)),
            attempt("read", "path", path(&root.path().join("config.toml"))),
            attempt("read", "path", path(&other_db)),
            attempt("write", "path", path(&other_db)),
            attempt("list", "path", path(root.path())),
            attempt("connect", "address", listener.local_addr().unwrap().to_string()),
            attempt("exec", "path", "/bin/true"),
            attempt("read", "path", format!("/proc/{launcher}/environ")),
            attempt("attach", "pid", sibling.id()),
            attempt("read", "path", path(&own_db)),
            attempt("write", "path", path(&own_db)),
        ])
    };
    let served = Served::start(&root, &["serve", "escape"]);
    let launcher_pid = served.pid();
    // From the app's page: the worker that serves it runs the call.
    let mut tab = served.tab("escape");
    let asked = serde_json::json!({ "attempts": attempts(launcher_pid) }).to_string();
    let r = tab.request("POST", "/api/call/escape", Some(&asked)).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let inside = outcomes(&serde_json::from_slice(&r.body).expect("the worker's outcomes"));
    // The call ran in a worker, not in the launcher: a process of the
    // launcher's, confined, that `autoapp status` shows.
    let workers = launchers_workers(root.path());
    assert_eq!(workers.len(), 1, "one worker for escape: {workers:?}");
    let parent = std::fs::read_to_string(format!("/proc/{}/stat", workers[0])).unwrap();
    let ppid: u32 = parent.rsplit(')').next().unwrap().split_whitespace().nth(1).unwrap().parse().unwrap();
    assert_eq!(ppid, launcher_pid, "the worker is the launcher's");
    let status = root.ok(&["status"]);
    assert!(status.contains("escape (reads, writes, pages; serves its page on port"), "{status}");
    assert!(status.contains(&format!("): pid {}", workers[0])), "{status}");
    assert!(status.contains("landlock"), "{status}");
    // The same from its external route, in its other worker (the
    // launcher's gate and the outer worker run it: nothing is granted).
    let r = tab.request("POST", "/api/call/escape.external", Some(&asked)).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let outer = outcomes(&serde_json::from_slice(&r.body).expect("the outer worker's outcomes"));
    assert_eq!(launchers_workers(root.path()).len(), 2, "the external route ran in a worker of its own");
    served.stop();
    assert!(launchers_workers(root.path()).is_empty(), "the launcher's workers end with it");

    // The same attempts, naming the launcher's process as the one to read,
    // from a process that is not confined: each succeeds.
    let asked = attempts(std::process::id()).to_string();
    std::fs::write(&control, r#"{"port":1,"secret":"0123"}"#).unwrap();
    let o =
        std::process::Command::new(env!("CARGO_BIN_EXE_autoapp")).args(["__escape-probe", &asked]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let outside = outcomes(&serde_json::from_slice(&o.stdout).expect("the outcomes"));
    let _ = sibling.kill();
    let _ = sibling.wait();

    let done: Vec<bool> = inside.iter().map(|(_, d)| *d).collect();
    let mut expected = vec![false; 10];
    // Its own data, read and written.
    expected.extend([true, true]);
    assert_eq!(done, expected, "inside the launcher's worker: {inside:#?}");
    // The outer worker holds what the person granted (nothing here) and its
    // own data: the same.
    let done: Vec<bool> = outer.iter().map(|(_, d)| *d).collect();
    assert_eq!(done, expected, "inside the launcher's outer worker: {outer:#?}");
    let refused_outside: Vec<&String> = outside.iter().filter(|(_, d)| !*d).map(|(a, _)| a).collect();
    assert!(refused_outside.is_empty(), "the same attempts outside a worker must succeed: {refused_outside:#?}");
}

#[test]
fn a_launchers_worker_killed_under_32_writers_loses_no_acknowledged_write_and_the_next_call_starts_another() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let root = TestRoot::with_config(crate::many_callers::QUIET);
    root.install("bench");
    root.install("notes");
    let launcher = Served::start(&root, &["open"]);
    let mut panel = launcher.tab("the Autoapp panel");
    let mut tab = |app: &str| launcher.opened(&mut panel, app);
    let bench = tab("bench");
    let mut notes = tab("notes");
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    // (Its worker serves its page: a writer whose connection a kill ended
    // goes on with a new one.)
    let handles = crate::many_callers::writers_through(&bench, 32, "k", &stop, true);
    // Another app's calls go on throughout.
    let mut others = 0;
    let mut killed = Vec::new();
    // At least 4 s, and until three of its workers were killed (a loaded
    // machine starts them slower), at most 60 s.
    let started = std::time::Instant::now();
    while started.elapsed() < std::time::Duration::from_secs(4)
        || (killed.len() < 3 && started.elapsed() < std::time::Duration::from_secs(60))
    {
        let r = notes.request("POST", "/api/call/notes.list", Some("{}")).unwrap();
        assert_eq!(r.status, 200, "the other app answers: {}", String::from_utf8_lossy(&r.body));
        others += 1;
        // bench's worker, killed now and then (the first is notes' or bench's:
        // each worker's policy names its app's folder).
        let bench_dir = root.path().join("apps/bench");
        for pid in launchers_workers(root.path()) {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&*bench_dir.to_string_lossy())
                && !killed.contains(&pid)
                && killed.len() < 3
            {
                let _ = rustix::process::kill_process(
                    rustix::process::Pid::from_raw(pid).unwrap(),
                    rustix::process::Signal::KILL,
                );
                killed.push(pid);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    stop.store(true, Ordering::Relaxed);
    let seen = crate::many_callers::gather(handles);
    assert!(killed.len() >= 2, "the test killed bench's worker while its writers wrote: {killed:?}");
    assert!(others > 5, "the other app answered {others} times");
    // A call that its killed worker had is told so (a page's call: its
    // connection ends with the worker that served it); no other failure.
    // (A client sends a request again once when its kept connection closed
    // unanswered, as browsers do: a write the killed worker had kept is
    // then refused as the duplicate it is.)
    let ended_with_it = ["worker ended", "closed the connection", "Connection reset", "UNIQUE constraint failed"];
    let odd: Vec<&String> = seen.failures.iter().filter(|f| !ended_with_it.iter().any(|w| f.contains(w))).collect();
    assert!(odd.is_empty(), "only the calls a killed worker had fail: {odd:?}");
    // The next call starts another worker and is answered.
    let mut after = crate::support::beside(&bench);
    let r = after.request("POST", "/api/call/count", Some("{}")).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    launcher.stop();
    assert!(seen.acknowledged.len() >= 32, "{} acknowledged", seen.acknowledged.len());
    crate::many_callers::assert_kept(&root, "bench", &seen.acknowledged);
    // Its log says what happened to its workers.
    let log = root.ok(&["logs", "bench", "--lines", "1000"]);
    assert!(log.contains("worker ended on its own"), "{log}");
}

#[test]
fn a_grant_while_16_writers_run_holds_from_the_next_call_keeps_the_worker_and_loses_nothing() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let server = TestServer::start();
    let second = TestServer::start();
    let root = TestRoot::with_config(crate::many_callers::QUIET);
    root.install_hostile_with(&format!(
        "network = [\"http://127.0.0.1:{}\", \"http://127.0.0.1:{}\"]",
        server.port, second.port
    ));
    let served = Served::start(&root, &["serve", "hostile"]);
    let tab = served.tab("hostile");
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let acknowledged = std::sync::Arc::new(AtomicUsize::new(0));
    let url = format!("http://127.0.0.1:{}/", server.port);
    let writers: Vec<_> = (0..16)
        .map(|_| {
            let (mut h, stop, acknowledged, url) =
                (crate::support::beside(&tab), stop.clone(), acknowledged.clone(), url.clone());
            std::thread::spawn(move || {
                let mut failures = Vec::new();
                let input = serde_json::json!({ "url": url, "then": "store" }).to_string();
                while !stop.load(Ordering::Relaxed) {
                    let r = h.request("POST", "/api/call/http.send", Some(&input)).unwrap();
                    match r.status {
                        200 => {
                            acknowledged.fetch_add(1, Ordering::SeqCst);
                        }
                        _ => failures.push(String::from_utf8_lossy(&r.body).into_owned()),
                    }
                }
                failures
            })
        })
        .collect();
    // What its external routes may reach changes while they run: the
    // launcher sends their requests (issue 72, rule 1), so each change holds
    // from the next call, and their worker, which reaches no network, is
    // kept (before, each change started another worker).
    let origin = format!("network:http://127.0.0.1:{}", second.port);
    let mut pids = std::collections::BTreeSet::new();
    for i in 0..6 {
        std::thread::sleep(std::time::Duration::from_millis(400));
        pids.extend(launchers_workers(root.path()));
        match i % 2 {
            0 => root.ok(&["revoke", "hostile", &origin]),
            _ => root.ok(&["grant", "hostile", &origin]),
        };
    }
    std::thread::sleep(std::time::Duration::from_millis(400));
    pids.extend(launchers_workers(root.path()));
    stop.store(true, Ordering::Relaxed);
    let failures: Vec<String> = writers.into_iter().flat_map(|w| w.join().unwrap()).collect();
    let count = root.call("hostile", "count", "{}");
    served.stop();
    assert!(failures.is_empty(), "{} calls failed across the grants, e.g. {:?}", failures.len(), failures.first());
    let acknowledged = acknowledged.load(Ordering::SeqCst) as u64;
    assert!(acknowledged >= 16, "{acknowledged} acknowledged");
    // Nothing acknowledged is lost: each kept its mark.
    assert!(count["marks"].as_u64().unwrap() >= acknowledged, "{count} for {acknowledged} acknowledged");
    // A grant of an origin does not change what a worker reaches: its two
    // workers (reads and writes, external calls) were kept.
    assert!(pids.len() <= 2, "workers seen across the grants: {pids:?}");
    // A revoke holds from the next call: its launcher sends nothing there.
    root.ok(&["revoke", "hostile", &origin]);
    let served = Served::start(&root, &["serve", "hostile"]);
    let mut tab = served.tab("hostile");
    let to_second = serde_json::json!({ "url": format!("http://127.0.0.1:{}/", second.port) }).to_string();
    let r = tab.request("POST", "/api/call/http.send", Some(&to_second)).unwrap();
    served.stop();
    let got: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(got["error"], "ErrorCode::HttpRequestDenied", "{got}");
}

#[test]
fn an_idle_worker_ends_after_worker_idle_secs_and_the_next_call_starts_it_again() {
    let root = TestRoot::with_config(&format!("{}worker_idle_secs = 1\n", crate::many_callers::QUIET));
    root.install("notes");
    let served = Served::start(&root, &["serve", "notes"]);
    let mut tab = served.tab("notes");
    let r = tab.request("POST", "/api/call/notes.add", Some(r#"{"title":"before"}"#)).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let first = launchers_workers(root.path());
    assert_eq!(first.len(), 1, "{first:?}");
    idle_workers_end(root.path());
    assert!(root.ok(&["status"]).contains("apps' workers (each app's calls run confined in processes of its own): 0"));
    // The next call starts another, and finds what the first one wrote.
    let r = tab.request("POST", "/api/call/notes.list", Some("{}")).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let listed: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(listed["notes"][0]["title"], "before");
    let second = launchers_workers(root.path());
    assert!(second.len() == 1 && second != first, "{first:?} then {second:?}");
    served.stop();
    let log = root.ok(&["logs", "notes", "--lines", "100"]);
    assert!(log.contains("reads and writes worker started") && log.contains("reads and writes worker ended"), "{log}");
    assert!(!log.contains("ended on its own"), "a worker retired is not a crash: {log}");
}

#[test]
fn a_worker_that_finds_its_apps_compiled_code_gone_has_its_launcher_compile_it() {
    let root = TestRoot::with_config(&format!("{}worker_idle_secs = 1\n", crate::many_callers::QUIET));
    root.install("notes");
    let compiled = root.path().join("cache/compiled");
    let code = || walk_files(&compiled).into_iter().filter(|f| f.extension().is_some_and(|e| e == "cwasm")).count();
    // `autoapp call`: its worker finds nothing, the command compiles the
    // release and starts another.
    std::fs::remove_dir_all(&compiled).unwrap();
    root.call("notes", "notes.add", r#"{"title":"before"}"#);
    assert_eq!(code(), 1, "`autoapp call` compiled the release again");
    let served = Served::start(&root, &["serve", "notes"]);
    let mut tab = served.tab("notes");
    // A call the launcher's gate passes: the launcher holds the release
    // loaded from now on (it compiles nothing more by itself).
    let said = control_request(
        root.path(),
        serde_json::json!({ "type": "invoke", "app": "notes", "route": "notes.list", "input": {}, "client": "agent" }),
    );
    assert_eq!(said["ok"], true, "{said}");
    // The person empties the cache while the launcher runs; the worker,
    // which may only read it, ends idle, and the next one finds nothing.
    for asked in ["a page", "the launcher"] {
        std::fs::remove_dir_all(&compiled).unwrap();
        idle_workers_end(root.path());
        let listed = match asked {
            // A call of the app's page, which its worker runs itself.
            "a page" => {
                let r = tab.request("POST", "/api/call/notes.list", Some("{}")).unwrap();
                assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
                serde_json::from_slice(&r.body).unwrap()
            }
            // A call the launcher's gate passed (the control connection).
            _ => {
                let said = control_request(
                    root.path(),
                    serde_json::json!({ "type": "invoke", "app": "notes", "route": "notes.list", "input": {}, "client": "agent" }),
                );
                assert_eq!(said["ok"], true, "{said}");
                said["output"].clone()
            }
        };
        assert_eq!(listed["notes"][0]["title"], "before", "asked from {asked}: {listed}");
        assert_eq!(code(), 1, "asked from {asked}: the launcher compiled the release again, into the app's folder");
        assert!(compiled.join("notes").is_dir());
    }
    // Code that cannot be compiled again (the release's component damaged
    // meanwhile): the call fails saying why, and has its row.
    let active = std::fs::read_to_string(root.path().join("apps/notes/active")).unwrap();
    let component = root.path().join("apps/notes/releases").join(active.trim()).join("component.wasm");
    std::fs::write(&component, b"\0asm damaged").unwrap();
    std::fs::remove_dir_all(&compiled).unwrap();
    idle_workers_end(root.path());
    let said = control_request(
        root.path(),
        serde_json::json!({ "type": "invoke", "app": "notes", "route": "notes.list", "input": {}, "client": "agent" }),
    );
    assert_eq!(said["ok"], false, "{said}");
    let message = said["error"]["message"].as_str().unwrap();
    assert!(message.contains("cannot compile the release") && message.contains("not valid"), "{said}");
    served.stop();
    let runs: serde_json::Value = serde_json::from_str(&root.ok(&["runs", "notes", "--json"])).unwrap();
    let asked: Vec<&serde_json::Value> =
        runs.as_array().unwrap().iter().filter(|r| r["route"] == "notes.list" && r["channel"] == "mcp").collect();
    assert_eq!(asked.len(), 3, "a row for each call the gate passed: {runs:#}");
    assert!(asked[2]["outcome"] == "error" && asked[2]["decision"] == "allowed", "{runs:#}");
}

/// An app's error that says the host's own words for missing compiled code
/// (here, echoing what a server answered) is the app's: `autoapp call` does
/// not take it for its worker's report, compile and run the call again.
#[test]
fn an_apps_error_that_echoes_the_hosts_words_for_missing_code_runs_its_call_once() {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = hits.clone();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut head = [0u8; 4096];
            let _ = stream.read(&mut head);
            let body = "its compiled code is not in the cache, and this process may not compile it";
            let _ =
                write!(stream, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
        }
    });
    let root = TestRoot::new();
    let _ws = root.install_hostile_with(&format!("network = [\"http://127.0.0.1:{port}\"]"));
    let input = serde_json::json!({ "url": format!("http://127.0.0.1:{port}/"), "then": "error" }).to_string();
    let o = root.run(&["call", "hostile", "http.send", &input]);
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && said.contains("came back: its compiled code is not in the cache"), "{said}");
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1, "the call ran once: {said}");
}

/// Hostile installed, then a second release of it activated: the
/// activation keeps a snapshot of the data, which a rollback puts back.
fn hostile_in_a_second_release(root: &TestRoot) {
    let second = hostile_with_a_second_release(root);
    root.ok(&["activate", "hostile", &second]);
}

/// Hostile installed and a second release of it built (another port asked
/// for, granted), not activated: its id.
fn hostile_with_a_second_release(root: &TestRoot) -> String {
    let ws = root.install_hostile_with("network = [\"http://127.0.0.1:9\"]");
    let manifest = std::fs::read_to_string(ws.path().join("autoapp.toml")).unwrap();
    std::fs::write(ws.path().join("autoapp.toml"), manifest.replace("127.0.0.1:9", "127.0.0.1:10")).unwrap();
    let component = crate::support::hostile_component();
    let built: serde_json::Value =
        serde_json::from_str(&root.ok(&["build", "hostile", "--component", component.to_str().unwrap(), "--json"]))
            .unwrap();
    root.grant_all("hostile");
    built["release"].as_str().unwrap().to_string()
}

#[test]
fn after_a_rollback_that_puts_the_data_back_the_next_write_goes_to_the_data_put_back() {
    let root = TestRoot::with_config(crate::many_callers::QUIET);
    hostile_in_a_second_release(&root);
    let launcher = Served::start(&root, &["open"]);
    let mut panel = launcher.tab("the Autoapp panel");
    let mut tab = launcher.opened(&mut panel, "hostile");
    let r = tab.request("POST", "/api/call/mark", Some("{}")).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    // Back to the first release and the data as it was then: the folder the
    // worker wrote is set aside, another is put in its place.
    let r = panel.request("POST", "/api/rollback", Some(r#"{"app":"hostile","how":"restore","yes":true}"#)).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let r = tab.request("POST", "/api/call/mark", Some("{}")).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let r = tab.request("POST", "/api/call/count", Some("{}")).unwrap();
    let seen: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    launcher.stop();
    // The write after the rollback is in the data put back, and only it.
    assert_eq!(root.call("hostile", "count", "{}")["marks"], 1);
    assert_eq!(seen["marks"], 1, "the launcher's worker reads the data put back");
}

#[test]
fn a_launchers_worker_runs_without_landlock_only_where_the_kernel_says_it_has_none() {
    let root = TestRoot::with_config(crate::many_callers::QUIET);
    root.install("notes");
    // A worker that fails to confine itself on a kernel that can: the call
    // is refused, never run unconfined, and nothing is written.
    let served = Served::start_with_env(&root, &["serve", "notes"], &[("AUTOAPP_FAULT", "worker-unconfinable".into())]);
    let mut tab = served.tab("notes");
    let r = tab.request("POST", "/api/call/notes.add", Some(r#"{"title":"z"}"#)).unwrap();
    let said = String::from_utf8_lossy(&r.body).into_owned();
    assert_eq!(r.status, 500, "{said}");
    assert!(said.contains("the call was not run: notes's worker could not be confined"), "{said}");
    assert!(launchers_workers(root.path()).is_empty(), "no worker runs");
    served.stop();
    assert_eq!(root.call("notes", "notes.list", "{}")["notes"].as_array().unwrap().len(), 0, "nothing was written");
    // Where the kernel's own answer is that it cannot confine (the probe
    // played by the same fault as the command line's test), the worker runs
    // with what is left, and `status` says how it is held.
    let served = Served::start_with_env(&root, &["serve", "notes"], &[("AUTOAPP_FAULT", "no-seccomp".into())]);
    let mut tab = served.tab("notes");
    let r = tab.request("POST", "/api/call/notes.add", Some(r#"{"title":"y"}"#)).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let status = root.ok(&["status"]);
    assert!(status.contains("filter only"), "{status}");
    served.stop();
    assert_eq!(root.call("notes", "notes.list", "{}")["notes"][0]["title"], "y");
}

/// The inodes of the TCP sockets on `port` of 127.0.0.1 in state `state`
/// (`0A` listening, `01` established), from `/proc/net/tcp`.
fn sockets_on(port: u16, state: &str) -> Vec<u64> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let local = format!("0100007F:{port:04X}");
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(1) == Some(&local.as_str()) && f.get(3) == Some(&state)).then(|| f.get(9)?.parse().ok()).flatten()
        })
        .collect()
}

/// The socket inodes process `pid` holds.
fn sockets_held(pid: u32) -> Vec<u64> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .filter_map(|l| l.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn an_apps_page_is_served_by_its_worker_on_the_launchers_socket_whose_port_stays_when_the_worker_restarts() {
    let root = TestRoot::with_config(&format!("{}worker_idle_secs = 1\n", crate::many_callers::QUIET));
    root.install("notes");
    let served = Served::start(&root, &["serve", "notes"]);
    let mut tab = served.tab("notes");
    let port = tab.port();
    let r = tab.request("POST", "/api/call/notes.add", Some(r#"{"title":"first"}"#)).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let worker = launchers_workers(root.path());
    assert_eq!(worker.len(), 1, "{worker:?}");
    let (launcher, worker) = (served.pid(), worker[0] as u32);
    // The tab's connection is the worker's: the launcher holds the
    // listening socket (its port) and no connection of the app's server.
    let listening = sockets_on(port, "0A");
    let connections = sockets_on(port, "01");
    assert_eq!(listening.len(), 1, "one socket listens on the app's port");
    assert!(!connections.is_empty(), "the tab's connection is open");
    let (in_launcher, in_worker) = (sockets_held(launcher), sockets_held(worker));
    assert!(in_launcher.contains(&listening[0]), "the launcher keeps the app's socket");
    assert!(in_worker.contains(&listening[0]), "the worker was given the app's socket");
    assert!(connections.iter().all(|c| !in_launcher.contains(c)), "no connection of the app's page in the launcher");
    assert!(connections.iter().any(|c| in_worker.contains(c)), "the tab's connection is the worker's");
    let status = root.ok(&["status"]);
    assert!(status.contains(&format!("serves its page on port {port}")), "{status}");
    // It opened its page map before it was confined (its rules do not name
    // `/proc`): freed instances are reset in place, as in the launcher, on
    // a kernel with PAGEMAP_SCAN (Linux 6.7).
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let version: Vec<u32> = release.split(['.', '-']).take(2).filter_map(|v| v.parse().ok()).collect();
    if version >= vec![6, 7] && std::fs::File::open("/proc/self/pagemap").is_ok() {
        assert!(status.contains("instances reset in place"), "{status}");
    }
    // Killed: the next request (on a new connection, with the same session)
    // reaches a new worker on the same port.
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(worker as i32).unwrap(),
        rustix::process::Signal::KILL,
    );
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let r = loop {
        match tab.request("POST", "/api/call/notes.list", Some("{}")) {
            Ok(r) => break r,
            Err(e) => assert!(std::time::Instant::now() < until, "the page did not answer again: {e:#}"),
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let listed: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(listed["notes"][0]["title"], "first");
    assert_eq!(tab.port(), port);
    let second = launchers_workers(root.path());
    assert!(second.len() == 1 && second[0] as u32 != worker, "a new worker: {second:?}");
    // Idle, it ends; the next connection starts another, on the same port.
    idle_workers_end(root.path());
    assert_eq!(sockets_on(port, "0A"), listening, "the launcher still listens on the app's port");
    let mut fresh = crate::support::beside(&tab);
    let r = fresh.request("GET", "/api/view/index?query=%7B%7D", None).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let third = launchers_workers(root.path());
    assert!(third.len() == 1 && !second.contains(&third[0]), "{second:?} then {third:?}");
    // What the launcher answers (the app's information) is sent on by the worker.
    let r = fresh.request("GET", "/api/info", None).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let info: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(info["app"], "notes");
    // A request without the session is refused by the worker's fence.
    let mut stranger = crate::support::http::Http::new(port);
    let r = stranger.request("GET", "/api/view/index?query=%7B%7D", None).unwrap();
    assert_eq!(r.status, 403);
    served.stop();
}

/// A launcher (`open`) that holds each worker it starts before it puts it
/// in place (debug builds: `AUTOAPP_PAUSE`) while the file `hold` exists.
fn holding_launcher(root: &TestRoot, hold: &Path) -> Served {
    let env = [("AUTOAPP_PAUSE", "workers:started".into()), ("AUTOAPP_PAUSE_FILE", hold.as_os_str().to_owned())];
    Served::start_with_env(root, &["open"], &env)
}

/// Kills the app's page worker and sends `request` on a new connection of
/// `tab`, whose answer waits for the next worker, which the launcher starts
/// and holds (`hold` made first): the request's thread, and that worker.
fn held_start(
    root: &TestRoot,
    tab: &crate::support::http::Http,
    hold: &Path,
    request: (&'static str, &'static str, Option<&'static str>),
) -> (std::thread::JoinHandle<anyhow::Result<u16>>, i32) {
    let first = launchers_workers(root.path());
    assert_eq!(first.len(), 1, "{first:?}");
    std::fs::write(hold, "").unwrap();
    let _ =
        rustix::process::kill_process(rustix::process::Pid::from_raw(first[0]).unwrap(), rustix::process::Signal::KILL);
    let mut waiting = crate::support::beside(tab);
    let (method, path, body) = request;
    let answer = std::thread::spawn(move || waiting.request(method, path, body).map(|r| r.status));
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let now = launchers_workers(root.path());
        if let [next] = now[..]
            && next != first[0]
        {
            return (answer, next);
        }
        assert!(std::time::Instant::now() < until, "no worker started for the waiting request: {now:?}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn a_worker_that_started_while_its_app_was_removed_never_serves_the_apps_page() {
    let root = TestRoot::with_config(&format!("{}worker_idle_secs = 120\n", crate::many_callers::QUIET));
    root.install("notes");
    let hold = root.path().join("hold");
    let served = holding_launcher(&root, &hold);
    let mut panel = served.tab("the Autoapp panel");
    let tab = served.opened(&mut panel, "notes");
    let port = tab.port();
    // A request waits for the page's next worker, which is held before it
    // is put in place; meanwhile the person removes the app.
    let (answer, _held) = held_start(&root, &tab, &hold, ("GET", "/", None));
    let r = panel.request("POST", "/api/remove", Some(r#"{"app":"notes","confirm":"notes"}"#)).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    std::fs::remove_file(&hold).unwrap();
    // Let go, it is retired as it is put in place, having taken no
    // connection: the waiting request is not answered by the removed app,
    // no worker is left, and nothing listens on the removed app's port.
    let answered = answer.join().unwrap();
    assert!(answered.is_err(), "fails before: the removed app's page answered ({answered:?})");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !(launchers_workers(root.path()).is_empty() && sockets_on(port, "0A").is_empty()) {
        assert!(
            std::time::Instant::now() < until,
            "the worker that started while the app was removed is still there ({:?} listening on {port})",
            launchers_workers(root.path())
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    served.stop();
}

#[test]
fn a_worker_that_started_while_its_apps_data_was_put_back_writes_only_to_the_data_put_back() {
    let root = TestRoot::with_config(&format!("{}worker_idle_secs = 120\n", crate::many_callers::QUIET));
    hostile_in_a_second_release(&root);
    let hold = root.path().join("hold");
    let launcher = holding_launcher(&root, &hold);
    let mut panel = launcher.tab("the Autoapp panel");
    let mut tab = launcher.opened(&mut panel, "hostile");
    let r = tab.request("POST", "/api/call/mark", Some("{}")).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    // A write waits for the page's next worker, confined to the data as it
    // is and held before it is put in place; meanwhile the person rolls
    // back to the first release and the data as it was then.
    let (answer, _held) = held_start(&root, &tab, &hold, ("POST", "/api/call/mark", Some("{}")));
    let r = panel.request("POST", "/api/rollback", Some(r#"{"app":"hostile","how":"restore","yes":true}"#)).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    std::fs::remove_file(&hold).unwrap();
    // Let go, it is retired as it is put in place; the next worker, of the
    // data put back, answers the waiting write (fails before: the held
    // worker, its rules on the folder set aside, answered it).
    let answered = answer.join().unwrap();
    assert!(matches!(answered, Ok(200)), "the waiting write: {answered:?}");
    let r = tab.request("POST", "/api/call/mark", Some("{}")).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    launcher.stop();
    // Both writes after the rollback are in the data put back, and only they.
    assert_eq!(root.call("hostile", "count", "{}")["marks"], 2);
}

/// Sends `request` on an authenticated control connection of the launcher
/// serving `root` and reads its answer.
fn control_request(root: &Path, request: serde_json::Value) -> serde_json::Value {
    use std::io::{BufRead, Write};
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("launcher.json")).unwrap()).unwrap();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", file["port"].as_u64().unwrap() as u16)).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(60))).unwrap();
    let mut r = std::io::BufReader::new(s.try_clone().unwrap());
    let mut said = |v: serde_json::Value| {
        s.write_all(format!("{v}\n").as_bytes()).unwrap();
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        serde_json::from_str::<serde_json::Value>(&line).unwrap_or(serde_json::Value::Null)
    };
    let authed = said(serde_json::json!({ "type": "auth", "secret": file["secret"] }));
    assert_eq!(authed["ok"], true, "{authed}");
    said(request)
}

#[test]
fn a_call_whose_worker_started_while_its_app_was_activated_is_answered_not_told_to_try_again() {
    let root = TestRoot::with_config(&format!("{}worker_idle_secs = 120\n", crate::many_callers::QUIET));
    // A second release, built, not activated.
    let second = hostile_with_a_second_release(&root);
    root.call("hostile", "mark", "{}");
    let hold = root.path().join("hold");
    let launcher = holding_launcher(&root, &hold);
    let mut panel = launcher.tab("the Autoapp panel");
    assert!(launchers_workers(root.path()).is_empty(), "no worker yet");
    // An agent's read (the control connection's `invoke`, channel mcp): its
    // worker starts and is held before it is put in place; meanwhile the
    // person activates the second release (its snapshot retires the app's
    // workers, those starting too).
    std::fs::write(&hold, "").unwrap();
    let at = root.path().to_path_buf();
    let answer = std::thread::spawn(move || {
        control_request(
            &at,
            serde_json::json!({ "type": "invoke", "app": "hostile", "route": "count", "input": {}, "client": "agent" }),
        )
    });
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while launchers_workers(root.path()).is_empty() {
        assert!(std::time::Instant::now() < until, "no worker started for the agent's call");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let body = serde_json::json!({ "app": "hostile", "release": second }).to_string();
    let r = panel.request("POST", "/api/activate", Some(&body)).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    std::fs::remove_file(&hold).unwrap();
    // The held worker is retired as it is put in place; the call, which
    // never reached it, goes to the next one (fails before: "hostile
    // changed while its worker started; try again").
    let answered = answer.join().unwrap();
    assert_eq!(answered["ok"], true, "{answered}");
    assert_eq!(answered["output"]["marks"], 1, "{answered}");
    launcher.stop();
}

#[test]
fn a_call_that_comes_while_a_rollback_moves_the_data_waits_for_the_data_put_back() {
    let root = TestRoot::with_config(crate::many_callers::QUIET);
    hostile_in_a_second_release(&root);
    root.call("hostile", "mark", "{}");
    let hold = root.path().join("hold");
    std::fs::write(&hold, "").unwrap();
    let env = [("AUTOAPP_PAUSE", "rollback:moved-aside".into()), ("AUTOAPP_PAUSE_FILE", hold.as_os_str().to_owned())];
    let launcher = Served::start_with_env(&root, &["open"], &env);
    let mut panel = launcher.tab("the Autoapp panel");
    // The person restores the data as it was before the activation; the
    // rollback is held once the data is moved aside, before the snapshot
    // is put in its place.
    let rollback = std::thread::spawn(move || {
        panel
            .request("POST", "/api/rollback", Some(r#"{"app":"hostile","how":"restore","yes":true}"#))
            .map(|r| r.status)
    });
    let data = root.path().join("apps/hostile/data");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while data.exists() {
        assert!(std::time::Instant::now() < until, "the rollback never moved the data aside");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Meanwhile an agent reads.
    let at = root.path().to_path_buf();
    let answer = std::thread::spawn(move || {
        control_request(
            &at,
            serde_json::json!({ "type": "invoke", "app": "hostile", "route": "count", "input": {}, "client": "agent" }),
        )
    });
    std::thread::sleep(std::time::Duration::from_millis(1500));
    // No worker started for it: none made the data folder again, where the
    // snapshot is to go (fails before: its worker made it and opened the
    // store there, and the rollback could not put the snapshot back).
    assert!(!data.exists(), "a worker made the data folder again while it was moved aside");
    assert!(launchers_workers(root.path()).is_empty(), "{:?}", launchers_workers(root.path()));
    std::fs::remove_file(&hold).unwrap();
    assert!(matches!(rollback.join().unwrap(), Ok(200)), "the rollback is done");
    // The read waited; passed for the release rolled back from, it did not
    // run on the data put back (another release's): it was passed again,
    // for the release put back, and answered from the data put back.
    let answered = answer.join().unwrap();
    assert_eq!(answered["ok"], true, "{answered}");
    assert_eq!(answered["output"]["marks"], 0, "{answered}");
    launcher.stop();
    // The record says so: the first pass did not run.
    let runs: Vec<serde_json::Value> = serde_json::from_str(&root.ok(&["runs", "hostile", "--json"])).unwrap();
    let counts: Vec<&serde_json::Value> = runs.iter().filter(|r| r["route"] == "count").collect();
    assert_eq!(counts.len(), 2, "the first pass and the second: {counts:?}");
    assert!(counts.iter().any(|r| r["outcome"] != "ok"), "{counts:?}");
    // The one that ran ran the release put back (fails without the check:
    // the release rolled back from ran on the data put back).
    let put_back = runs.iter().find(|r| r["route"] == "rollback").expect("the rollback's row")["release"].clone();
    let ran: Vec<&serde_json::Value> = counts.iter().filter(|r| r["outcome"] == "ok").map(|r| &r["release"]).collect();
    assert_eq!(ran, vec![&put_back], "{counts:?}");
}

#[test]
fn a_rollback_whose_process_ended_half_way_behind_a_launcher_is_finished_at_the_apps_next_call() {
    let root = TestRoot::with_config(crate::many_callers::QUIET);
    let second = hostile_with_a_second_release(&root);
    root.ok(&["activate", "hostile", &second]);
    root.call("hostile", "mark", "{}");
    // A rollback from the command line, begun before the launcher starts,
    // is held once it has moved the data aside (the launcher's recovery at
    // its start leaves it: it holds the app's lock)...
    let hold = root.path().join("hold");
    let mut rollback = restore_held_after_moving_the_data_aside(&root, &hold);
    let app = root.path().join("apps/hostile");
    let launcher = Served::start(&root, &["open"]);
    let _panel = launcher.tab("the Autoapp panel");
    // ...and its process ends there, while the launcher runs.
    rollback.kill().unwrap();
    rollback.wait().unwrap();
    assert!(app.join("journal.json").exists() && !app.join("data").exists());
    // An agent reads: the launcher finishes the rollback before the app's
    // worker starts, and the read is answered by the release put back from
    // the data put back (fails before: "hostile's data is not in place",
    // until some command ran recovery).
    let count =
        serde_json::json!({ "type": "invoke", "app": "hostile", "route": "count", "input": {}, "client": "agent" });
    let answered = control_request(root.path(), count);
    assert_eq!(answered["ok"], true, "{answered}");
    assert_eq!(answered["output"]["marks"], 0, "{answered}");
    assert!(!app.join("journal.json").exists(), "the rollback was finished");
    // As the rollback would have left it: the release put back is active by
    // no activation of its own (its writes are not taken for the undone
    // activation's first).
    let activation = hostile_activation(&root);
    assert_ne!(activation["release"], second.as_str(), "{activation}");
    assert!(activation["previous"].is_null(), "{activation}");
    launcher.stop();
    let history = std::fs::read_to_string(app.join("history.jsonl")).unwrap();
    assert!(history.lines().last().is_some_and(|l| l.contains("finished by recovery")), "{history}");
}

#[test]
fn a_rollback_that_ended_half_way_without_its_snapshot_is_undone_by_recovery() {
    let root = TestRoot::with_config(crate::many_callers::QUIET);
    hostile_in_a_second_release(&root);
    root.call("hostile", "mark", "{}");
    let hold = root.path().join("hold");
    let mut rollback = restore_held_after_moving_the_data_aside(&root, &hold);
    let app = root.path().join("apps/hostile");
    // Its snapshot goes, and its process ends before it can undo itself.
    let activation = take_the_snapshot_away(&root);
    rollback.kill().unwrap();
    rollback.wait().unwrap();
    // The next command's recovery puts the data moved aside back, with its
    // write, and the release that ran on it stays active (fails before:
    // recovery "finished" the rollback on no data, and the app's data was
    // not in place).
    assert_eq!(root.call("hostile", "count", "{}")["marks"], 1);
    assert!(!app.join("journal.json").exists());
    let history = std::fs::read_to_string(app.join("history.jsonl")).unwrap();
    assert!(history.lines().last().is_some_and(|l| l.contains("undone by recovery")), "{history}");
    assert_eq!(hostile_activation(&root), activation, "the activation rolled back from stays");
}

/// `autoapp activate hostile <release>` from a terminal, held once its
/// snapshot is taken (before its migrations and the switch) until `hold` is
/// removed.
fn activation_held_after_its_snapshot(root: &TestRoot, release: &str, hold: &std::path::Path) -> std::process::Child {
    std::fs::write(hold, "").unwrap();
    let activate = root.paused(&["activate", "hostile", release], "activate:snapshotted", hold);
    let journal = root.path().join("apps/hostile/journal.json");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !std::fs::read_to_string(&journal).is_ok_and(|j| j.contains("\"snapshotted\"")) {
        assert!(std::time::Instant::now() < until, "the activation never took its snapshot");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    activate
}

/// hostile's activation file.
fn hostile_activation(root: &TestRoot) -> serde_json::Value {
    let text = std::fs::read_to_string(root.path().join("apps/hostile/activation.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Whether hostile's activation of `release` has its first write noted,
/// waited for up to 10 s (a launcher notes it from a thread of its own).
fn first_write_noted(root: &TestRoot, release: &str) -> bool {
    let noted = || {
        let a = hostile_activation(root);
        a["release"] == release && !a["first_write_at"].is_null()
    };
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !noted() && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    noted()
}

/// A plain rollback of hostile is refused, naming `--restore --yes`, and
/// the data holds `marks` marks.
fn a_plain_rollback_asks(root: &TestRoot, marks: u64) {
    let e = root.fails_with(1, &["rollback", "hostile"]);
    assert!(e.contains("--restore --yes"), "{e}");
    assert_eq!(root.call("hostile", "count", "{}")["marks"], marks);
}

/// hostile with a second release built, the first active and written once
/// (its first write noted long ago), a launcher with the person's tab of it,
/// and the second activated from a terminal, held once its snapshot is
/// taken, before its migrations and the switch (remove `hold` to go on).
struct DuringAnActivation {
    root: TestRoot,
    second: String,
    launcher: Served,
    _panel: crate::support::http::Http,
    tab: crate::support::http::Http,
    hold: std::path::PathBuf,
    activate: std::process::Child,
}

fn during_an_activation() -> DuringAnActivation {
    let root = TestRoot::with_config(crate::many_callers::QUIET);
    let second = hostile_with_a_second_release(&root);
    root.call("hostile", "mark", "{}");
    let launcher = Served::start(&root, &["open"]);
    let mut panel = launcher.tab("the Autoapp panel");
    let tab = launcher.opened(&mut panel, "hostile");
    let hold = root.path().join("hold");
    let activate = activation_held_after_its_snapshot(&root, &second, &hold);
    DuringAnActivation { root, second, launcher, _panel: panel, tab, hold, activate }
}

#[test]
fn a_write_of_the_release_replaced_after_an_activations_snapshot_makes_a_plain_rollback_ask() {
    let DuringAnActivation { root, second, launcher, mut tab, hold, mut activate, .. } = during_an_activation();
    // Meanwhile the person's tab, still on the first release, writes: the
    // write is in the data, not in the snapshot.
    let r = tab.request("POST", "/api/call/mark", Some("{}")).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    std::fs::remove_file(&hold).unwrap();
    assert!(activate.wait().unwrap().success(), "the activation is done");
    // The write counts as the activation's first: a plain rollback, which
    // would put back the snapshot without it, asks what to do with it
    // (fails before: it was noted nowhere, and the rollback set it aside
    // without asking).
    let noted = first_write_noted(&root, &second);
    launcher.stop();
    assert!(noted, "the activation's first write is noted");
    a_plain_rollback_asks(&root, 2);
}

#[test]
fn an_activation_notes_a_write_its_snapshot_lacks_from_the_record_itself() {
    let DuringAnActivation { root, second, launcher, mut tab, hold, mut activate, .. } = during_an_activation();
    let r = tab.request("POST", "/api/call/mark", Some("{}")).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    // The launcher that would note the write is gone before the activation
    // ends: only the activation can tell, from the record, that a write
    // came after its snapshot (fails without its check: the activation
    // ended with no first write, and the plain rollback went through).
    launcher.kill();
    std::fs::remove_file(&hold).unwrap();
    assert!(activate.wait().unwrap().success(), "the activation is done");
    let a = hostile_activation(&root);
    assert_eq!(a["release"], second.as_str(), "{a}");
    assert!(!a["first_write_at"].is_null(), "{a}");
    a_plain_rollback_asks(&root, 2);
}

#[test]
fn a_write_during_an_activation_whose_process_ended_is_noted_once_recovery_finishes_it() {
    let DuringAnActivation { root, second, launcher, mut tab, mut activate, .. } = during_an_activation();
    // The activation's process ends after its snapshot; the tab, on the
    // first release, writes while its journal is open and nobody holds it.
    activate.kill().unwrap();
    activate.wait().unwrap();
    let r = tab.request("POST", "/api/call/mark", Some("{}")).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    // The next command's recovery finishes the activation (it has no
    // migrations to apply); the write is then noted as its first (fails
    // before: the write was dropped while the journal was open, and a
    // plain rollback set it aside without asking).
    root.ok(&["status"]);
    let noted = first_write_noted(&root, &second);
    launcher.stop();
    assert!(noted, "the write is the activation's first");
    a_plain_rollback_asks(&root, 2);
}

#[test]
fn a_read_of_the_release_replaced_during_an_activation_leaves_a_plain_rollback_free() {
    let DuringAnActivation { root, launcher, mut tab, hold, mut activate, .. } = during_an_activation();
    // The tab only reads meanwhile: nothing for a rollback to set aside.
    let r = tab.request("POST", "/api/call/count", Some("{}")).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    std::fs::remove_file(&hold).unwrap();
    assert!(activate.wait().unwrap().success(), "the activation is done");
    std::thread::sleep(std::time::Duration::from_millis(500));
    launcher.stop();
    root.ok(&["rollback", "hostile"]);
    assert_eq!(root.call("hostile", "count", "{}")["marks"], 1);
}

#[test]
fn a_worker_never_makes_its_apps_data_folder_again() {
    let root = TestRoot::with_config(crate::many_callers::QUIET);
    root.install("notes");
    root.call("notes", "notes.add", r#"{"title":"kept"}"#);
    let launcher = Served::start(&root, &["open"]);
    let _panel = launcher.tab("the Autoapp panel");
    // The data folder is not where it belongs, and its app's journal is
    // open: as a rollback that stopped half way leaves them until recovery.
    let data = root.path().join("apps/notes/data");
    let aside = root.path().join("apps/notes/data-elsewhere");
    let journal = root.path().join("apps/notes/journal.json");
    std::fs::rename(&data, &aside).unwrap();
    std::fs::write(&journal, "{}").unwrap();
    let list =
        serde_json::json!({ "type": "invoke", "app": "notes", "route": "notes.list", "input": {}, "client": "agent" });
    let answered = control_request(root.path(), list.clone());
    assert_eq!(answered["ok"], false, "fails before: a worker made the folder again and ran on nothing: {answered}");
    assert!(answered["error"]["message"].as_str().unwrap().contains("is not in place"), "{answered}");
    assert!(launchers_workers(root.path()).is_empty());
    // Nor does the row of the refused call make it (the record's writer
    // writes within 50 ms).
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(!data.exists(), "the data folder was made again");
    // Put back, the next call runs on it.
    std::fs::remove_file(&journal).unwrap();
    std::fs::rename(&aside, &data).unwrap();
    let answered = control_request(root.path(), list);
    assert_eq!(answered["ok"], true, "{answered}");
    assert_eq!(answered["output"]["notes"].as_array().map(Vec::len), Some(1), "{answered}");
    launcher.stop();
}

/// `autoapp rollback hostile --restore --yes` from a terminal, held once it
/// has moved the data aside (before the snapshot is put in its place) until
/// `hold` is removed.
fn restore_held_after_moving_the_data_aside(root: &TestRoot, hold: &std::path::Path) -> std::process::Child {
    std::fs::write(hold, "").unwrap();
    let rollback = root.paused(&["rollback", "hostile", "--restore", "--yes"], "rollback:moved-aside", hold);
    let data = root.path().join("apps/hostile/data");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while data.exists() {
        assert!(std::time::Instant::now() < until, "the rollback never moved the data aside");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    rollback
}

/// Takes hostile's snapshot away (as a disk that fails, or another process,
/// could): its activation file, which names it.
fn take_the_snapshot_away(root: &TestRoot) -> serde_json::Value {
    let activation = hostile_activation(root);
    let snapshot =
        root.path().join("apps/hostile").join(activation["snapshot"].as_str().expect("the activation's snapshot"));
    std::fs::rename(&snapshot, root.path().join("snapshot-elsewhere")).unwrap();
    activation
}

#[test]
fn a_rollback_that_cannot_put_its_snapshot_in_place_puts_the_data_back_where_it_was() {
    let root = TestRoot::with_config(crate::many_callers::QUIET);
    hostile_in_a_second_release(&root);
    root.call("hostile", "mark", "{}");
    // The rollback is held once the data is moved aside; meanwhile its
    // snapshot goes (as a disk that fails, or another process, could make it).
    let hold = root.path().join("hold");
    let mut rollback = restore_held_after_moving_the_data_aside(&root, &hold);
    let app = root.path().join("apps/hostile");
    take_the_snapshot_away(&root);
    std::fs::remove_file(&hold).unwrap();
    assert!(!rollback.wait().unwrap().success(), "the rollback failed");
    // The data is back where it was, with its write, and nothing is left
    // for recovery to "finish" (fails before: the folder stayed missing and
    // the next command's recovery made the release active on no data).
    assert!(app.join("data").is_dir(), "the data was put back");
    assert!(!app.join("journal.json").exists(), "the rollback was undone, not left open");
    assert_eq!(root.call("hostile", "count", "{}")["marks"], 1);
}

/// The probe's attempt to say `line` on the worker's channel to its
/// launcher, `times` times (what a worker taken by an escape may do).
fn say(line: &serde_json::Value, times: u32) -> serde_json::Value {
    serde_json::json!({ "try": "say", "line": line.to_string(), "times": times })
}

/// The escape guest's `escape` route called over the launcher's control
/// connection (as an agent), trying `attempts`: the launcher's answer.
fn invoke_escape(root: &Path, attempts: serde_json::Value) -> serde_json::Value {
    control_request(
        root,
        serde_json::json!({ "type": "invoke", "app": "escape", "route": "escape",
                            "input": { "attempts": attempts }, "client": "agent" }),
    )
}

/// The headers `tab` sends with a request (its host, same-origin, its
/// session), as a worker that forges its tabs' requests says them.
fn tab_headers(tab: &crate::support::http::Http) -> serde_json::Value {
    serde_json::json!([
        ["host", format!("127.0.0.1:{}", tab.port())],
        ["origin", format!("http://127.0.0.1:{}", tab.port())],
        ["sec-fetch-site", "same-origin"],
        ["cookie", tab.cookie.clone().unwrap()],
        ["content-type", "application/json"],
    ])
}

/// How many times `tab`'s event stream has heard that its app changed,
/// counted from now on.
fn changes_heard(tab: &crate::support::http::Http) -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
    use std::io::BufRead as _;
    let heard = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (counting, lines) = (heard.clone(), crate::support::event_stream(tab));
    std::thread::spawn(move || {
        for line in lines.lines().map_while(Result::ok) {
            if line.starts_with("event: changed") {
                counting.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
    });
    heard
}

/// Short times for the launcher alone (the install compiled with the usual
/// budget): a call's own second, and two seconds a compile.
fn short_times(root: &TestRoot) {
    let config = root.path().join("config.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("call_deadline_ms = 1000\ncompile_deadline_secs = 2\n");
    std::fs::write(&config, text).unwrap();
}

/// The page's call of the escape guest's `escape` route (a read, run in
/// the worker that serves the page), trying `attempts`: every one done.
fn said_from_the_page(tab: &mut crate::support::http::Http, attempts: Vec<serde_json::Value>) {
    let asked = serde_json::json!({ "attempts": attempts }).to_string();
    let r = tab.request("POST", "/api/call/escape", Some(&asked)).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let done = outcomes(&serde_json::from_slice(&r.body).expect("the worker's outcomes"));
    assert!(done.iter().all(|(_, d)| *d), "{done:#?}");
}

/// The threads of process `pid` whose name begins with `name`.
fn threads_named(pid: u32, name: &str) -> usize {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    tasks
        .flatten()
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with(name)))
        .count()
}

/// Issue 54: a worker's notes of a first write each name a release. While
/// the app's lock is held (a backup, an activation), each name the
/// launcher had not heard waited on a thread of its own for ten minutes —
/// a worker taken by an escape, saying a few thousand names, would leave
/// the launcher unable to start a thread. A note naming no release of the
/// app is not heard now (before: 60 threads waited here).
#[test]
fn a_workers_notes_of_releases_that_are_not_there_start_nothing_in_its_launcher() {
    let root = TestRoot::with_config(crate::many_callers::QUIET);
    root.install("escape");
    let served = Served::start(&root, &["serve", "escape"]);
    let mut tab = served.tab("escape");
    // The app's lock, held as a backup holds it.
    let lock = std::fs::OpenOptions::new().write(true).open(root.path().join("apps/.escape.lock")).unwrap();
    lock.lock_shared().unwrap();
    let names = (0..30).map(|i| format!("{i:064x}")).chain((0..30).map(|i| format!("not a release {i}")));
    let notes = names
        .enumerate()
        .map(|(i, name)| say(&serde_json::json!({ "id": 1_000_000 + i, "said": { "note": name } }), 1))
        .collect();
    said_from_the_page(&mut tab, notes);
    // (Heard in order, after the call's own answer at the latest.)
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(threads_named(served.pid(), "autoapp-first-w"), 0, "a thread waits for each name");
    drop(lock);
    assert_eq!(tab.request("POST", "/api/call/count", Some("{}")).unwrap().status, 200, "the worker serves on");
    served.stop();
}

/// A worker's note of a first write names a release of its app. Two that
/// are not the active one, named in turn, were each judged again under the
/// app's lock, which the person's activate, rollback and prune (which try
/// it once) then found taken. Each is judged once while the activation file
/// is unchanged (fails before: the person's tries found the lock taken).
#[test]
fn a_workers_notes_naming_two_releases_in_turn_leave_the_apps_lock_to_the_person() {
    let root = TestRoot::with_config(crate::many_callers::QUIET);
    let ws = root.install_with("escape", r#"network = ["http://127.0.0.1:9"]"#);
    let component = crate::support::guest_component("escape");
    let others: Vec<String> = (0..2)
        .map(|n| {
            let mut manifest = std::fs::read_to_string(ws.path().join("autoapp.toml")).unwrap();
            manifest.push_str(&format!("\n# another release, {n}\n"));
            std::fs::write(ws.path().join("autoapp.toml"), manifest).unwrap();
            let built = root.ok(&["build", "escape", "--component", component.to_str().unwrap(), "--json"]);
            serde_json::from_str::<serde_json::Value>(&built).unwrap()["release"].as_str().unwrap().to_string()
        })
        .collect();
    let served = Served::start(&root, &["serve", "escape"]);
    let mut tab = served.tab("escape");
    // (Said as `heavy` lines: those wait for room on the channel.)
    let note = |i: usize| {
        let line = serde_json::json!({ "id": 1_000_000 + i, "said": { "note": others[i % 2] } }).to_string();
        serde_json::json!({ "try": "heavy", "before": line, "piece": "", "times": 0, "after": "\n" })
    };
    // Each judged once, with the lock free.
    said_from_the_page(&mut tab, (0..2).map(note).collect());
    std::thread::sleep(std::time::Duration::from_millis(500));
    // The person's tries at the app's lock, while the worker names the two
    // in turn.
    let trying = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let person = {
        let (trying, lock) = (trying.clone(), root.path().join("apps/.escape.lock"));
        std::thread::spawn(move || {
            let (mut tries, mut refused) = (0, 0);
            while trying.load(std::sync::atomic::Ordering::SeqCst) {
                let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&lock).unwrap();
                tries += 1;
                if file.try_lock().is_err() {
                    refused += 1;
                }
            }
            (tries, refused)
        })
    };
    said_from_the_page(&mut tab, (2..2002).map(note).collect());
    std::thread::sleep(std::time::Duration::from_millis(500));
    trying.store(false, std::sync::atomic::Ordering::SeqCst);
    let (tries, refused) = person.join().unwrap();
    assert!(tries > 100, "{tries} tries");
    assert_eq!(refused, 0, "{refused} of the person's {tries} tries found the app's lock taken");
    served.stop();
}

/// Issue 54: a worker's word that its app's data changed makes every open
/// panel and tab of the app read the launcher's state again. A worker
/// taken by an escape saying it two thousand times a second had every
/// panel do that much; now the launcher passes on at most one each quarter
/// of a second, and the last one still comes.
#[test]
fn a_worker_that_says_its_data_changed_again_and_again_is_heard_a_few_times() {
    let root = TestRoot::with_config(crate::many_callers::QUIET);
    root.install("escape");
    let served = Served::start(&root, &["serve", "escape"]);
    let mut tab = served.tab("escape");
    // The tab's event stream, counting what it hears.
    let heard = changes_heard(&tab);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let started = std::time::Instant::now();
    said_from_the_page(&mut tab, vec![say(&serde_json::json!({ "id": 0, "said": "changed" }), 2000)]);
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let heard = heard.load(std::sync::atomic::Ordering::SeqCst);
    let most = 2 + (started.elapsed().as_millis() / 250) as usize;
    assert!((1..=most).contains(&heard), "{heard} changes heard (at most {most})");
    served.stop();
}

/// The same through its writes: each write call of an app's page that
/// its launcher answers (one its worker sends on) tells every panel and tab
/// of the app that its data changed. A worker taken by an escape sending on
/// two hundred writes at once had each heard (each has every panel read the
/// launcher's whole state again); now at most one each quarter of a second.
#[test]
fn a_workers_writes_sent_on_again_and_again_are_heard_a_few_times() {
    let root = TestRoot::with_config(crate::many_callers::QUIET);
    root.install("escape");
    let served = Served::start(&root, &["serve", "escape"]);
    let tab = served.tab("escape");
    let heard = changes_heard(&tab);
    let headers = tab_headers(&tab);
    let line = format!(
        r#"{{"id":9000000{{line}},"said":{{"forward":{{"method":"POST","uri":"/api/call/mark","headers":{headers},"body":"e30="}}}}}}"#
    );
    let writes =
        serde_json::json!({ "try": "heavy", "before": line, "piece": "", "times": 0, "after": "\n", "lines": 200 });
    std::thread::sleep(std::time::Duration::from_millis(300));
    let started = std::time::Instant::now();
    let said = invoke_escape(root.path(), serde_json::json!([writes]));
    assert_eq!(said["ok"], true, "{said}");
    // Every write done, then a second for the last word to come.
    let begun = std::time::Instant::now();
    while root.call("escape", "count", "{}")["marks"] != 200 && begun.elapsed() < std::time::Duration::from_secs(30) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(root.call("escape", "count", "{}")["marks"], 200, "every write sent on ran");
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let heard = heard.load(std::sync::atomic::Ordering::SeqCst);
    let most = 2 + (started.elapsed().as_millis() / 250) as usize;
    assert!((1..=most).contains(&heard), "{heard} changes heard (at most {most})");
    served.stop();
}

/// Issue 54: a worker's answer to a call its launcher sent it is passed
/// on; a worker taken by an escape may answer with an error of 64 MiB, or
/// one that carries a key. The caller hears it cut short and cleaned, as an
/// app's own error is.
#[test]
fn a_workers_error_is_heard_cut_short_and_with_no_key_in_it() {
    let root = TestRoot::with_config(crate::many_callers::QUIET);
    root.install("escape");
    let served = Served::start(&root, &["serve", "escape"]);
    let _tab = served.tab("escape");
    let key = "sk-live-4eC39HqLyjWDarjtT1zdp7dc";
    let message = "x".repeat(40_000);
    // The launcher's ids of the calls it sends its worker are small: a
    // forged answer reaches the call this one is. (The request's line is
    // at most 1 MiB.)
    let forged = (1..20)
        .map(|id| {
            let err = serde_json::json!({ "kind": "internal", "message": format!("{key} {message}") });
            say(&serde_json::json!({ "id": id, "said": { "answer": { "Err": err } } }), 1)
        })
        .collect::<Vec<_>>();
    let said = invoke_escape(root.path(), serde_json::json!(forged));
    assert_eq!(said["ok"], false, "the forged error answered the call");
    let heard = said["error"]["message"].as_str().unwrap();
    assert!(heard.chars().count() <= 16 * 1024 + 64, "{} characters heard", heard.chars().count());
    assert!(!heard.contains(key), "the key was passed on");
    served.stop();
}

/// A stranger's app answering a launcher's call with 30 million zeros (60
/// MB of text; parsed, 30 million values of 32 bytes and more) is refused in
/// its worker before the answer is parsed (by its size), and its launcher never holds it
/// (fails before: the worker parsed it, wrote it on its channel, and the
/// launcher parsed it again, holding over a GiB for the one call).
#[test]
fn an_apps_heavy_answer_is_refused_in_its_worker_and_never_held_by_its_launcher() {
    let root = TestRoot::with_config(crate::many_callers::QUIET);
    root.install("hostile");
    let served = Served::start(&root, &["serve", "hostile"]);
    let _tab = served.tab("hostile");
    let said = control_request(
        root.path(),
        serde_json::json!({ "type": "invoke", "app": "hostile", "route": "answer.heavy",
                            "input": { "values": 30_000_000 }, "client": "agent" }),
    );
    let peak = peak_memory_mib(served.pid());
    assert!(peak < 512, "the launcher's memory peaked at {peak} MiB (answered: {})", said["ok"]);
    assert_eq!(said["ok"], false, "the heavy answer was answered");
    let message = said["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("57 MiB of JSON, more than the 32 MiB an answer may be"), "{message}");
    served.stop();
}

/// A worker taken by an escape says, as one line, an answer of two million
/// zeros (4 MB): its launcher counts the values before it parses the line,
/// ends the worker, and says so in the app's log; the call fails, and the
/// next one runs in a new worker (fails before: the launcher parsed the
/// line, and the call was answered).
#[test]
fn a_workers_line_heavier_than_an_answer_may_be_ends_it_unparsed() {
    let root = TestRoot::with_config(crate::many_callers::QUIET);
    root.install("escape");
    // No tab: its server's word that it is used would fall inside the
    // heavy line, which is written in many pieces.
    let served = Served::start(&root, &["serve", "escape"]);
    served.address("escape");
    let heavy = serde_json::json!({ "try": "heavy", "before": r#"{"id":1,"said":{"answer":{"Ok":[0"#,
                                    "piece": ",0", "times": 1_999_999, "after": "]}}}\n" });
    ended_because(&root, heavy, "line holds more than 1004096 values");
    served.stop();
}

/// The escape route's call that tries `attempt` fails, its worker ended by
/// its launcher for `why` (the app's log says so), and the next call runs
/// in a new worker.
fn ended_because(root: &TestRoot, attempt: serde_json::Value, why: &str) {
    let said = invoke_escape(root.path(), serde_json::json!([attempt]));
    assert_eq!(said["ok"], false, "its worker was kept (its answer: {} bytes)", said.to_string().len());
    let message = said["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("worker ended before it answered"), "{message}");
    let log = root.log_saying("escape", why);
    assert!(log.contains("worker was ended") && log.contains(why), "{log}");
    assert_eq!(invoke_escape(root.path(), serde_json::json!([]))["ok"], true, "the next call runs in a new worker");
}

/// A worker taken by an escape answers a call it was never sent (or, the
/// same to its launcher, one it has answered), which its launcher would
/// parse for nothing each time, up to 64 MiB a line; or says a word of its
/// own (a token to redeem) longer than any request it sends on. It is ended
/// at the first such line, its app's log says why, and the next call runs
/// in a new worker (fails before: both were parsed and dropped, the worker
/// kept, and the call that said them answered as if nothing happened).
#[test]
fn a_worker_that_answers_a_call_it_was_not_sent_or_says_a_long_word_is_ended() {
    let root = TestRoot::with_config(crate::many_callers::QUIET);
    root.install("escape");
    let served = Served::start(&root, &["serve", "escape"]);
    served.address("escape");
    let unasked = r#"{"id":900000000,"said":{"answer":{"Ok":0}}}"#;
    ended_because(
        &root,
        serde_json::json!({ "try": "say", "line": unasked, "times": 1 }),
        "it answered a call it was not sent, or one it had answered (id 900000000)",
    );
    let word = serde_json::json!({ "try": "heavy", "before": r#"{"id":5,"said":{"redeem":""#,
                                   "piece": "a", "times": 4_000_000, "after": "\"}}\n" });
    ended_because(&root, word, "it said 4000030 bytes in a line of its own");
    served.stop();
}

/// A worker taken by an escape (or one in a crash loop) says 1.2 MB on its
/// standard error and ends, three times: its launcher says at most its
/// share (1 MiB, filled again by the hour) across its starts, and once that
/// it said no more (fails before: each new worker had a share of its own,
/// and the launcher's standard error took 3 MiB); the app's other worker
/// still has its own (fails with one share for the app).
#[test]
fn an_apps_workers_say_their_share_on_standard_error_however_often_they_start() {
    let root = TestRoot::with_config(crate::many_callers::QUIET);
    root.install("escape");
    let told = root.path().join("launcher-stderr");
    let served = Served::start_telling(&root, &["serve", "escape"], &told);
    let address = served.address("escape");
    let words = serde_json::json!({ "try": "heavy", "before": "", "piece": format!("{}\n", "w".repeat(999)),
                                    "times": 1200, "after": "", "to": 2 });
    for _ in 0..3 {
        let said = invoke_escape(root.path(), serde_json::json!([words, { "try": "exit" }]));
        assert_eq!(said["ok"], false, "{said}");
    }
    assert_eq!(invoke_escape(root.path(), serde_json::json!([]))["ok"], true);
    // Its other worker (its external route's) has a share of its own: the
    // first's, spent, does not silence it.
    let mut tab = crate::support::http::Http::launch(&address).unwrap();
    // (Longer than what the first's share has left: under 1 KB.)
    let outer = format!("outer word {}\n", "o".repeat(2000));
    let word = serde_json::json!({ "attempts": [{ "try": "heavy", "before": "", "piece": outer,
                                                  "times": 1, "after": "", "to": 2 }] });
    let r = tab.request("POST", "/api/call/escape.external", Some(&word.to_string())).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    std::thread::sleep(std::time::Duration::from_millis(500));
    served.stop();
    let told = std::fs::read_to_string(&told).unwrap();
    let said: usize =
        told.lines().filter(|l| l.starts_with("autoapp: escape's ") && l.contains(" worker: w")).map(|l| l.len()).sum();
    assert!(
        (900_000..1_200_000).contains(&said),
        "its workers' words took {said} bytes of the launcher's standard error"
    );
    let ends = told.matches("said more on standard error than their share").count();
    assert_eq!(ends, 1, "said {ends} times that no more is said");
    assert!(told.contains("autoapp: escape's external calls' worker: outer word"), "the other worker was silenced");
}

/// A worker taken by an escape sends on a hundred calls of its app as its
/// tabs may, each with an input of 1.5 MB, which its app then holds for
/// eight seconds (past the time its sending on takes: its answers would
/// fall inside the lines): its launcher takes at most six inputs of the most a request may
/// send on at once (the others are answered 503 at once), and does not keep
/// what it parsed of an input while the call runs (fails before: it held
/// every one).
#[test]
fn a_workers_requests_sent_on_hold_a_bounded_share_of_its_launcher() {
    use base64::Engine as _;
    let b64 = &base64::engine::general_purpose::STANDARD;
    let root = TestRoot::with_config(crate::many_callers::QUIET);
    root.install("escape");
    let served = Served::start(&root, &["serve", "escape"]);
    let tab = served.tab("escape");
    let headers = tab_headers(&tab);
    // The input, as base64: its start (a whole number of three bytes, so
    // that the pad's own base64 follows it), "AAA" 500,000 times, its end.
    let mut start = r#"{"attempts":[{"try":"sleep","ms":8000}],"pad":""#.to_string();
    while !start.len().is_multiple_of(3) {
        start.insert(1, ' ');
    }
    let before = format!(
        r#"{{"id":9000000{{line}},"said":{{"forward":{{"method":"POST","uri":"/api/call/escape","headers":{headers},"body":"{}"#,
        b64.encode(&start)
    );
    let after = format!("{}\"}}}}}}\n", b64.encode("\"}"));
    let heavy = serde_json::json!({ "try": "heavy", "before": before, "piece": "QUFB", "times": 500_000, "after": after, "lines": 100 });
    let said = invoke_escape(root.path(), serde_json::json!([heavy]));
    assert_eq!(said["ok"], true, "{said}\n{}", root.ok(&["logs", "escape", "--lines", "20"]));
    let done = outcomes(&said["output"]);
    assert!(done.iter().all(|(_, d)| *d), "{said}");
    let peak = peak_memory_mib(served.pid());
    assert!(peak < 400, "the launcher's memory peaked at {peak} MiB");
    served.kill();
}

/// The same in the worker of `autoapp call`: its answer of two million
/// zeros, then its end, is not parsed by the command (fails before: the
/// command printed the zeros as the call's answer).
#[test]
fn a_call_workers_answer_heavier_than_an_answer_may_be_is_not_read() {
    let root = TestRoot::new();
    root.install("escape");
    let before = r#"{"id":1,"said":{"answer":{"Ok":"#;
    let attempts = serde_json::json!({ "attempts": [
        { "try": "heavy", "before": format!("{before}[0"), "piece": ",0", "times": 1_999_999, "after": "]}}}\n" },
        { "try": "exit" },
    ] });
    let e = root.refused(&["call", "escape", "escape", &attempts.to_string()]);
    assert!(e.contains("escape's worker ended before it answered"), "{e}");
    assert!(!e.contains("0,0,0"), "{e}");
    let log = root.ok(&["logs", "escape", "--lines", "20"]);
    assert!(log.contains("line holds more than 1004096 values"), "{log}");
}

/// The most resident memory process `pid` has had, in MiB.
fn peak_memory_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() / 1024
}

/// Issue 54: a retired worker ends once its calls are done. One taken by
/// an escape that does not (here its page's call holds its thread in native
/// code for a minute, which no deadline interrupts) is stopped once none of
/// its calls can still be running — their time, the margin to answer and
/// two compiles: 1 + 15 + 2 × 2 s here —, and the app's log says so (fails
/// before: it lived on until its thread let go, a minute later; one that
/// never let go lived as long as its launcher, with its channel and socket).
#[test]
fn a_retired_worker_that_does_not_end_is_stopped_once_none_of_its_calls_can_run() {
    let root = TestRoot::with_config(&format!("{}worker_idle_secs = 1\n", crate::many_callers::QUIET));
    root.install("escape");
    short_times(&root);
    let served = Served::start(&root, &["serve", "escape"]);
    let mut tab = served.tab("escape");
    let inside = root.path().join("apps/escape/data/in-the-call");
    let attempts = serde_json::json!([{ "try": "create", "path": inside }, { "try": "sleep", "ms": 60_000 }]);
    let asked = serde_json::json!({ "attempts": attempts }).to_string();
    let calling = std::thread::spawn(move || tab.request("POST", "/api/call/escape", Some(&asked)).map(|r| r.status));
    let started = std::time::Instant::now();
    while !inside.exists() {
        assert!(started.elapsed() < std::time::Duration::from_secs(30), "the page's call began");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let held = workers_of_app(root.path(), "escape");
    assert_eq!(held.len(), 1, "{held:?}");
    // Idle for its launcher (a page's call is its own), it is retired
    // within a second or two, and stopped 20 s after.
    let began = std::time::Instant::now();
    while workers_of_app(root.path(), "escape").contains(&held[0])
        && began.elapsed() < std::time::Duration::from_secs(58)
    {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let lived = began.elapsed();
    assert!(lived < std::time::Duration::from_secs(40), "the retired worker lived {lived:?} after its call began");
    assert!(lived >= std::time::Duration::from_secs(19), "stopped after {lived:?}, before its calls' time was out");
    let log = root.ok(&["logs", "escape", "--lines", "50"]);
    assert!(log.contains("had not ended 20 s after it was retired, and was stopped"), "{log}");
    assert!(calling.join().unwrap().is_err(), "the held call's connection ended with its worker");
    served.kill();
}

/// A worker's ask that its launcher compile its release's code costs the
/// launcher a look at the compiled file once it knows where it is: a
/// worker taken by an escape asking twenty times had it read and hash the
/// whole component each time (a hostile app may make its component as
/// large as a build takes, 256 MiB).
#[test]
fn a_workers_asks_to_compile_its_code_again_and_again_read_its_component_once() {
    let root = TestRoot::with_config(crate::many_callers::QUIET);
    root.install("escape");
    let served = Served::start(&root, &["serve", "escape"]);
    served.address("escape");
    let release = std::fs::read_to_string(root.path().join("apps/escape/active")).unwrap().trim().to_string();
    let size = std::fs::metadata(root.path().join("apps/escape/releases").join(&release).join("component.wasm"))
        .unwrap()
        .len();
    // The worker started, and the launcher's reads counted from here.
    let ran = control_request(
        root.path(),
        serde_json::json!({ "type": "invoke", "app": "escape", "route": "count", "input": {}, "client": "agent" }),
    );
    assert_eq!(ran["ok"], true, "{ran}");
    let before = read_bytes(served.pid());
    let asks: Vec<serde_json::Value> = (0..20)
        .flat_map(|i| {
            let ask = serde_json::json!({ "id": 9_000_000 + i, "said": { "compile": release } });
            [say(&ask, 1), serde_json::json!({ "try": "sleep", "ms": 100 })]
        })
        .collect();
    let said = invoke_escape(root.path(), serde_json::json!(asks));
    assert_eq!(said["ok"], true, "{said}");
    let read = read_bytes(served.pid()) - before;
    assert!(read < 3 * size, "the launcher read {read} bytes for 20 asks (the component is {size})");
    served.stop();
}

/// The bytes process `pid` has read (`rchar`: every read, from a file or not).
fn read_bytes(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap();
    let line = io.lines().find(|l| l.starts_with("rchar:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Issue 54: a worker waiting for its launcher to compile its code is not
/// one that stopped answering, so the launcher waits past the call's time
/// while that compile runs. A worker taken by an escape could ask for a
/// compile and then never answer: however long the compile takes (here held
/// by the test), the call fails after its time and two compile budgets, and
/// the worker is stopped.
#[test]
fn a_worker_that_asks_for_a_compile_and_never_answers_fails_its_call_in_time() {
    let root = TestRoot::with_config(crate::many_callers::QUIET);
    root.install("escape");
    short_times(&root);
    let hold = root.path().join("hold-the-compile");
    std::fs::write(&hold, "").unwrap();
    let served = Served::start_with_env(
        &root,
        &["serve", "escape"],
        &[("AUTOAPP_PAUSE", "compile:for-worker".into()), ("AUTOAPP_PAUSE_FILE", hold.clone().into())],
    );
    let _tab = served.tab("escape");
    let release = std::fs::read_to_string(root.path().join("apps/escape/active")).unwrap().trim().to_string();
    let ask = serde_json::json!({ "id": 7, "said": { "compile": release } });
    let started = std::time::Instant::now();
    let said = invoke_escape(root.path(), serde_json::json!([say(&ask, 1), { "try": "sleep", "ms": 120_000 }]));
    let took = started.elapsed();
    let _ = std::fs::remove_file(&hold);
    assert_eq!(said["ok"], false, "{said}");
    let message = said["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("did not answer"), "{message}");
    // Its time (1 s and the launcher's 15 s margin), then two budgets of 2 s:
    // 20 s (before: 32 s, a whole second wait of 16 s begun at 16 s; with
    // no bound, as long as the compile was held).
    assert!(took >= std::time::Duration::from_secs(16), "failed after {took:?}, before its time");
    assert!(took < std::time::Duration::from_secs(28), "failed after {took:?}: waited for the compile");
    served.stop();
}

/// Issue 54: the lock of an app's log rotation lies in the log folder its
/// workers write, so a worker taken by an escape can hold it for as long
/// as it lives. Whoever reads the log (`autoapp logs`, the launcher) or
/// rotates it waits for it a second at most, then goes on without it
/// (before: `autoapp logs` waited for ever).
#[test]
fn an_apps_log_is_read_while_something_else_holds_its_rotation_lock() {
    let root = TestRoot::with_config(crate::many_callers::QUIET);
    root.install("escape");
    root.call("escape", "mark", "{}");
    let logs = root.path().join("apps/escape/logs");
    std::fs::create_dir_all(&logs).unwrap();
    let held =
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(logs.join(".rotate.lock")).unwrap();
    held.lock().unwrap();
    let started = std::time::Instant::now();
    let mut reading = root.command().args(["logs", "escape"]).stdout(std::process::Stdio::null()).spawn().unwrap();
    let status = loop {
        if let Some(status) = reading.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > std::time::Duration::from_secs(20) {
            let _ = reading.kill();
            let _ = reading.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(status.is_some_and(|s| s.success()), "`autoapp logs` read the log ({status:?})");
    drop(held);
}

/// Issue 54: an app's server is its worker's, so a worker taken by an
/// escape may ask the launcher to open the panel as the app's page does —
/// every 2 s, and the person's browser opened a tab each time. An app's
/// page opens it once each 30 s now; that does not keep another app's page
/// from opening it (beyond the launcher's one address each 2 s).
#[test]
fn an_apps_page_opens_the_panel_once_each_half_minute() {
    let root = TestRoot::with_config(crate::many_callers::QUIET);
    root.install("notes");
    root.install("escape");
    let launcher = Served::start(&root, &["open"]);
    let mut panel = launcher.tab("the Autoapp panel");
    let mut tab = launcher.opened(&mut panel, "notes");
    let mut other = launcher.opened(&mut panel, "escape");
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let r = tab.request("POST", "/api/panel", Some("{}")).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    for _ in 0..3 {
        std::thread::sleep(std::time::Duration::from_millis(2100));
        let r = tab.request("POST", "/api/panel", Some("{}")).unwrap();
        assert_eq!(r.status, 409, "{}", String::from_utf8_lossy(&r.body));
        assert!(String::from_utf8_lossy(&r.body).contains("less than 30 seconds ago"));
    }
    let r = other.request("POST", "/api/panel", Some("{}")).unwrap();
    assert_eq!(r.status, 200, "another app's page: {}", String::from_utf8_lossy(&r.body));
    launcher.stop();
}

/// Found by the kill test: a write's row is committed before the write, so
/// a worker killed between the two commits leaves a row whose write was not
/// kept (its call was never answered), never a kept write without its row.
/// Played by the debug fault `rows-first`, which ends the worker there.
#[test]
fn a_worker_killed_between_a_writes_row_and_the_write_leaves_the_row_not_the_write() {
    let root = TestRoot::new();
    root.install("notes");
    let (status, said) = add_under_fault(&root, "between", "rows-first");
    assert_ne!(status, Some(0), "the call was not answered as done: {said}");
    assert!(said.contains("fault injected between"), "{said}");
    let all = root.call("notes", "notes.list", r#"{"limit":500}"#);
    assert_eq!(all["notes"].as_array().unwrap().len(), 0, "the write was not kept: {all}");
    let runs: serde_json::Value = serde_json::from_str(&root.ok(&["runs", "notes", "--json"])).unwrap();
    let adds: Vec<&serde_json::Value> = runs.as_array().unwrap().iter().filter(|r| r["route"] == "notes.add").collect();
    assert!(adds.iter().any(|r| r["outcome"] == "ok"), "the row went in first: {runs:#}");
}
