//! Keys that apps use and never hold (issue 52): the person sets a key, the
//! release binds it to one origin and one place, the host adds it on the way
//! out and takes it out of everything that comes back.

use std::io::{BufRead as _, Read as _, Write as _};
use std::sync::{Arc, Mutex};

use crate::support::TestRoot;

/// The key the person sets in these tests.
const KEY: &str = "sk-test/7Hq2Zr9+vXw4Lm8Pn";

/// A key-protected service on 127.0.0.1: it answers only a request whose
/// `Authorization` is `Bearer <KEY>`, and echoes the key back wherever the
/// path says — in the body (split across two chunks), a header, a redirect's
/// `Location`, the status text, percent-encoded. It keeps every request head
/// it received, so a test can see where a key went.
struct Service {
    port: u16,
    heads: Arc<Mutex<Vec<String>>>,
}

impl Service {
    fn start(ip: &str) -> Service {
        let listener = std::net::TcpListener::bind((ip, 0)).expect("bind a loopback port");
        let port = listener.local_addr().expect("addr").port();
        let heads: Arc<Mutex<Vec<String>>> = Arc::default();
        let kept = heads.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let kept = kept.clone();
                std::thread::spawn(move || serve(stream, &kept));
            }
        });
        Service { port, heads }
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

fn serve(mut stream: std::net::TcpStream, kept: &Mutex<Vec<String>>) {
    let mut reader = std::io::BufReader::new(stream.try_clone().expect("clone"));
    let mut head = String::new();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).map(|n| n == 0).unwrap_or(true) {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        head.push_str(&line);
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; length];
    let _ = reader.read_exact(&mut body);
    kept.lock().unwrap().push(format!("{head}{}", String::from_utf8_lossy(&body)));
    let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
    let bearer = format!("authorization: bearer {}", KEY.to_ascii_lowercase());
    let authorized = head.lines().any(|l| l.to_ascii_lowercase() == bearer);
    let mut reply = |status: &str, headers: &str, chunks: &[&[u8]]| {
        let _ = stream.write_all(
            format!("HTTP/1.1 {status}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n{headers}\r\n").as_bytes(),
        );
        for c in chunks {
            let _ = stream.write_all(format!("{:x}\r\n", c.len()).as_bytes());
            let _ = stream.write_all(c);
            let _ = stream.write_all(b"\r\n");
            let _ = stream.flush();
            std::thread::sleep(std::time::Duration::from_millis(30));
        }
        let _ = stream.write_all(b"0\r\n\r\n");
    };
    // Anyone's echo (no key needed): what the query said, as it came.
    if let Some(q) = path.strip_prefix("/echo?") {
        return reply("200 OK", "", &[q.as_bytes()]);
    }
    if !authorized {
        return reply("401 Unauthorized", "", &[b"who are you?"]);
    }
    let (a, b) = KEY.as_bytes().split_at(7);
    match path.split('?').next().unwrap_or("") {
        "/body" => reply("200 OK", "", &[b"your key is ", a, b, b" - keep it safe"]),
        "/header" => reply("200 OK", &format!("X-Echo: Bearer {KEY}\r\n"), &[b"ok"]),
        "/location" => reply("302 Found", &format!("Location: https://elsewhere.example/?k={KEY}\r\n"), &[b""]),
        "/status" => reply(&format!("200 {KEY}"), "", &[b"ok"]),
        "/encoded" => reply("200 OK", "", &[KEY.replace('/', "%2F").replace('+', "%2B").as_bytes()]),
        // Encoded whatever was asked (the bytes stand for a gzip of the key).
        "/gzip" => reply("200 OK", "Content-Encoding: gzip\r\n", &[KEY.as_bytes()]),
        // The slice a Range asks for, else the whole echo.
        "/range" if head.to_ascii_lowercase().contains("\nrange:") => reply("206 Partial Content", "", &[a]),
        "/range" => reply("200 OK", "", &[b"your key is ", a, b]),
        // A part whatever was asked.
        "/part" => reply("206 Partial Content", "", &[&b[..4]]),
        _ => reply("200 OK", "", &[b"hello, key holder"]),
    }
}

/// The hostile guest with `service`'s origin (and the others given) declared,
/// its key `weather` bound to the service in `Authorization: Bearer {}`.
fn hostile_with_key(root: &TestRoot, service: &Service, also: &[String]) -> tempfile::TempDir {
    let origin = format!("http://127.0.0.1:{}", service.port);
    let mut network = vec![format!("{origin:?}")];
    network.extend(also.iter().map(|o| format!("{o:?}")));
    root.install_hostile_with(&format!(
        "network = [{}]\n\n[[capabilities.secret]]\nname = \"weather\"\norigin = {origin:?}\nheader = \"Authorization\"\nformat = \"Bearer {{}}\"\nsummary = \"Your key for the weather service\"\n",
        network.join(", ")
    ))
}

/// `autoapp secret set` with the value on standard input.
fn set_key(root: &TestRoot, args: &[&str], value: &str) -> std::process::Output {
    let mut child = root
        .command()
        .args(["secret", "set"])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("autoapp starts");
    child.stdin.take().expect("stdin").write_all(format!("{value}\n").as_bytes()).expect("write the key");
    child.wait_with_output().expect("autoapp ends")
}

fn send(root: &TestRoot, input: serde_json::Value) -> serde_json::Value {
    root.call("hostile", "http.send", &input.to_string())
}

/// Every file under the root, the test's configuration folder (the person's,
/// in a real setup: never under a root) left out.
fn root_bytes(root: &TestRoot) -> Vec<(String, Vec<u8>)> {
    root.files().into_iter().filter(|(name, _)| !name.starts_with("xdg-config/")).collect()
}

#[test]
fn a_key_the_person_set_goes_to_its_origin_only_and_never_comes_back_to_the_app() {
    let root = TestRoot::new();
    let service = Service::start("127.0.0.1");
    let other_port = Service::start("127.0.0.1");
    let other_host = Service::start("127.0.0.2");
    let also = [
        format!("http://127.0.0.1:{}", other_port.port),
        format!("http://127.0.0.2:{}", other_host.port),
        format!("https://127.0.0.1:{}", service.port),
    ];
    let _ws = hostile_with_key(&root, &service, &also);
    let url = |path: &str| format!("http://127.0.0.1:{}{path}", service.port);

    // Not set yet: listed as such, and the request goes without it.
    let listed = root.ok(&["secret", "list", "hostile"]);
    assert!(listed.contains("weather") && listed.contains("not set"), "{listed}");
    assert_eq!(send(&root, serde_json::json!({ "url": url("/") }))["status"], 401);

    // There is no way to give the value as an argument.
    let argv = root.fails_with(2, &["secret", "set", "hostile", "weather", KEY]);
    assert!(argv.contains("unexpected argument"), "{argv}");
    // A value that is no key is refused, nothing kept.
    let short = set_key(&root, &["hostile", "weather"], "short");
    assert!(!short.status.success() && String::from_utf8_lossy(&short.stderr).contains("at least 8"));
    let out = set_key(&root, &["hostile", "weather"], KEY);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(said.contains(&format!("sent only to http://127.0.0.1:{} (header Authorization", service.port)), "{said}");
    assert!(!said.contains(KEY));
    let listed = root.ok(&["secret", "list", "hostile", "--json"]);
    assert!(listed.contains("\"set\"") && !listed.contains(KEY), "{listed}");

    // The service answers: the key went, in its place.
    let answer = send(&root, serde_json::json!({ "url": url("/") }));
    assert_eq!(answer["status"], 200, "{answer}");
    assert_eq!(answer["body"], "hello, key holder");

    // The app's own Authorization is replaced, and the record says so.
    let own = send(
        &root,
        serde_json::json!({ "url": url("/"), "headers": [["Authorization", "Bearer forged"]], "read_back": true }),
    );
    assert_eq!(own["status"], 200, "{own}");
    // Read back after sending, the request's own headers are what the app
    // put there: the host's key went into the copy that left, not into them.
    assert!(own["sent_after"].to_string().contains("Bearer forged") && !own.to_string().contains(KEY), "{own}");
    let last = service.heads().pop().expect("a request");
    let lower = last.to_ascii_lowercase();
    assert!(
        lower.contains(&format!("authorization: bearer {}", KEY.to_ascii_lowercase())) && !lower.contains("forged"),
        "{last}"
    );
    assert_eq!(lower.matches("authorization:").count(), 1, "{last}");
    let runs = root.ok(&["runs", "hostile", "--json"]);
    assert!(
        runs.contains("the host put the key weather in header Authorization, replacing what the app put there"),
        "{runs}"
    );

    // Echoed back anywhere: the app reads `[secret weather]`, never a byte of it.
    for (path, then) in [
        ("/body", "answer"),
        ("/header", "log"),
        ("/location", "store"),
        ("/status", "answer"),
        ("/encoded", "error"),
        ("/body", "log"),
        ("/body", "store"),
    ] {
        let out = root.run(&[
            "call",
            "hostile",
            "http.send",
            &serde_json::json!({ "url": url(path), "then": then }).to_string(),
        ]);
        let seen = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(!seen.contains(KEY) && !seen.contains("sk-test%2F"), "{path}: {seen}");
        if path != "/status" {
            assert!(seen.contains("[secret weather]"), "{path} then {then}: {seen}");
        }
    }

    // To another port, another host, another scheme of the same host: never.
    for (to, heads) in [
        (format!("http://127.0.0.1:{}/", other_port.port), Some(&other_port)),
        (format!("http://127.0.0.2:{}/", other_host.port), Some(&other_host)),
        (format!("https://127.0.0.1:{}/", service.port), None),
    ] {
        let answer = send(&root, serde_json::json!({ "url": to }));
        assert_ne!(answer["status"], 200, "{to}: {answer}");
        if let Some(s) = heads {
            let seen = s.heads().join("\n");
            assert!(!seen.to_ascii_lowercase().contains("authorization") && !seen.contains(KEY), "{to}: {seen}");
        }
    }
    // What reached the service with the key was a plain request to its origin.
    for head in service.heads().iter().filter(|h| h.contains(KEY)) {
        assert!(
            head.starts_with("GET ")
                && head.to_ascii_lowercase().contains(&format!("host: 127.0.0.1:{}", service.port)),
            "{head}"
        );
    }

    // Not one byte of it in the root: store, log, record, grants, releases.
    for (name, bytes) in root_bytes(&root) {
        assert!(!String::from_utf8_lossy(&bytes).contains(KEY), "{name} holds the key");
    }
    // Nor in a backup or a package.
    let backup = root.path().join("hostile.backup");
    root.ok(&["backup", "hostile", "--to", backup.to_str().unwrap()]);
    let package = root.path().join("hostile.wasm");
    root.ok(&["pack", "hostile", "--to", package.to_str().unwrap()]);
    for file in [&backup, &package] {
        let bytes = std::fs::read(file).expect("written");
        assert!(!bytes.windows(KEY.len()).any(|w| w == KEY.as_bytes()), "{}", file.display());
    }
}

#[test]
fn a_key_is_not_given_to_a_preview_nor_to_a_release_that_moves_it() {
    let root = TestRoot::new();
    let service = Service::start("127.0.0.1");
    let elsewhere = Service::start("127.0.0.1");
    let ws = hostile_with_key(&root, &service, &[format!("http://127.0.0.1:{}", elsewhere.port)]);
    assert!(set_key(&root, &["hostile", "weather"], KEY).status.success());
    let url = |s: &Service| format!("http://127.0.0.1:{}/", s.port);
    assert_eq!(send(&root, serde_json::json!({ "url": url(&service) }))["status"], 200);

    // A candidate (an agent's edit, a package's update) that moves the key
    // to another origin: marked, not activated, and its calls go without it.
    let manifest = std::fs::read_to_string(ws.path().join("autoapp.toml")).unwrap();
    let moved = manifest.replace(
        &format!("origin = \"http://127.0.0.1:{}\"", service.port),
        &format!("origin = \"http://127.0.0.1:{}\"", elsewhere.port),
    );
    assert_ne!(moved, manifest);
    std::fs::write(ws.path().join("autoapp.toml"), moved).unwrap();
    let component = crate::support::hostile_component();
    let built: serde_json::Value =
        serde_json::from_str(&root.ok(&["build", "hostile", "--component", component.to_str().unwrap(), "--json"]))
            .unwrap();
    let candidate = built["release"].as_str().unwrap().to_string();
    let explained = root.ok(&["explain", "hostile", &candidate[..12]]);
    assert!(
        explained.contains(&format!("would send your key `weather` to http://127.0.0.1:{}", elsewhere.port)),
        "{explained}"
    );
    let refused = root.refused(&["activate", "hostile", &candidate[..12]]);
    assert!(refused.contains("set it again for this one with `autoapp secret set hostile weather"), "{refused}");

    // A preview runs no external route at all (a copy of the data, not of
    // the world): nothing reaches either service from it.
    root.ok(&["preview", "hostile", &candidate[..12]]);
    let (before, before_elsewhere) = (service.heads().len(), elsewhere.heads().len());
    let refused = root.refused(&[
        "call",
        "hostile",
        "http.send",
        &serde_json::json!({ "url": url(&elsewhere) }).to_string(),
        "--preview",
    ]);
    assert!(refused.contains("external routes are refused"), "{refused}");
    assert_eq!((service.heads().len(), elsewhere.heads().len()), (before, before_elsewhere));
    root.ok(&["preview-stop", "hostile"]);

    // The person sets it again for the new place: now it goes there.
    assert!(set_key(&root, &["hostile", "weather", "--release", &candidate[..12]], KEY).status.success());
    root.ok(&["activate", "hostile", &candidate[..12]]);
    assert_eq!(send(&root, serde_json::json!({ "url": url(&elsewhere) }))["status"], 200);
    // And the old place no longer gets it.
    assert_eq!(send(&root, serde_json::json!({ "url": url(&service) }))["status"], 401);

    // Removed: the requests go without it from the next call on.
    root.ok(&["secret", "remove", "hostile", "weather"]);
    assert_eq!(send(&root, serde_json::json!({ "url": url(&elsewhere) }))["status"], 401);
    let runs = root.ok(&["runs", "hostile", "--json"]);
    assert!(runs.contains("secret set") && runs.contains("secret remove") && !runs.contains(KEY), "{runs}");
}

/// A key set where a Secret Service answers (Debian's gnome-keyring, in a
/// D-Bus session of its own) is kept there — not in a file — and used from
/// there; the file fallback is every other test of this file.
#[test]
fn a_key_set_where_a_keyring_answers_is_kept_in_it_and_used_from_it() {
    let root = TestRoot::new();
    let config = crate::support::base_config().replace("secrets_kept_in = \"file\"", "secrets_kept_in = \"keyring\"");
    std::fs::write(root.path().join("config.toml"), config).expect("write config");
    let service = Service::start("127.0.0.1");
    let _ws = hostile_with_key(&root, &service, &[]);
    let home = tempfile::tempdir().expect("a home for the keyring");
    let input = serde_json::json!({ "url": format!("http://127.0.0.1:{}/", service.port) }).to_string();
    let script = r#"set -e
printf %s "$PASSWORD" | gnome-keyring-daemon --unlock --components=secrets >/dev/null
printf '%s\n' "$KEY" | "$AUTOAPP" --root "$ROOT" secret set hostile weather
"$AUTOAPP" --root "$ROOT" secret list hostile
"$AUTOAPP" --root "$ROOT" call hostile http.send "$INPUT"
find "$XDG_CONFIG_HOME" -name '*.value' | sed 's/^/value file: /'
"$AUTOAPP" --root "$ROOT" secret remove hostile weather
"$AUTOAPP" --root "$ROOT" call hostile http.send "$INPUT"
"#;
    let out = std::process::Command::new("dbus-run-session")
        .args(["--", "sh", "-c", script])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", root.path().join("xdg-config"))
        .env("XDG_DATA_HOME", home.path().join("data"))
        .env("PASSWORD", "the keyring's password")
        .env("KEY", KEY)
        .env("AUTOAPP", env!("CARGO_BIN_EXE_autoapp"))
        .env("ROOT", root.path())
        .env("INPUT", &input)
        .env("AUTOAPP_LOG", "warn")
        .output()
        .expect("dbus-run-session runs (scripts/test installs gnome-keyring and dbus)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("kept in the system's keyring"), "{stdout}");
    assert!(!stdout.contains("value file:"), "kept in the keyring, not a file: {stdout}");
    let answers: Vec<&str> = stdout.lines().filter(|l| l.contains("\"status\"")).collect();
    assert_eq!(answers.len(), 2, "{stdout}");
    assert!(answers[0].contains("200"), "the key from the keyring went: {stdout}");
    assert!(answers[1].contains("401"), "removed, it goes no more: {stdout}");
    assert!(!stdout.contains(KEY) && !stderr.contains(KEY));
}

/// Issue 72, rules 2 and 3: a request that carries a key asks for the plain
/// answer — the app's `Accept-Encoding: gzip` and `Range` do not go — and an
/// encoded answer or a part from the key's origin is refused; what another
/// origin sends back reaches the app unchanged by the key's value, so an
/// echo of a guess cannot tell it the guess was right.
#[test]
fn a_key_s_origin_gives_the_plain_answer_and_no_other_origin_is_an_oracle() {
    let root = TestRoot::new();
    let service = Service::start("127.0.0.1");
    let other = Service::start("127.0.0.1");
    let _ws = hostile_with_key(&root, &service, &[format!("http://127.0.0.1:{}", other.port)]);
    let out = set_key(&root, &["hostile", "weather"], KEY);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let url = |s: &Service, path: &str| format!("http://127.0.0.1:{}{path}", s.port);
    let last_head = || service.heads().pop().expect("a request").to_ascii_lowercase();

    // Compressed: the host asks for identity; an encoded answer is refused.
    let gzip = send(
        &root,
        serde_json::json!({ "url": url(&service, "/gzip"), "headers": [["Accept-Encoding", "gzip, deflate"]] }),
    );
    assert!(
        gzip["error"].as_str().unwrap_or("").contains("ContentCoding") && !gzip.to_string().contains("sk-"),
        "{gzip}"
    );
    let head = last_head();
    assert!(head.contains("accept-encoding: identity") && !head.contains("deflate"), "{head}");
    assert_eq!(head.matches("accept-encoding:").count(), 1, "{head}");
    // Ranges: the app's go nowhere; the whole answer comes, the key out of it.
    let range = send(
        &root,
        serde_json::json!({ "url": url(&service, "/range"), "headers": [["Range", "bytes=0-6"], ["If-Range", "x"]] }),
    );
    assert_eq!(range["status"], 200, "{range}");
    assert_eq!(range["body_len"], "your key is [secret weather]".len(), "{range}");
    let head = last_head();
    assert!(!head.contains("\nrange:") && !head.contains("if-range"), "{head}");
    // A part the origin sends anyway: refused.
    let part = send(&root, serde_json::json!({ "url": url(&service, "/part") }));
    assert!(part["error"].as_str().unwrap_or("").contains("HttpProtocolError"), "{part}");
    // Another origin's echo of a guess (here the very key): as it came.
    let echo = send(&root, serde_json::json!({ "url": format!("{}?{KEY}", url(&other, "/echo")) }));
    assert_eq!(echo["status"], 200, "{echo}");
    assert_eq!(echo["body_len"], KEY.len(), "the echo reached the app unchanged: {echo}");
    // The key went to its own origin only.
    assert!(other.heads().iter().all(|h| !h.to_ascii_lowercase().contains("authorization")));
}

/// Issue 72, rule 5: a guest that came to hold a key (through a hole the
/// other rules close) wrote it into its store, spelled so that no literal
/// search finds it; a backup carried it off the computer. A backup is checked
/// as it is written, for every form of the app's keys: refused, naming the
/// part and the key, never the value, and nothing written.
#[test]
fn a_backup_that_would_carry_the_app_s_key_is_refused_naming_the_part() {
    let root = TestRoot::new();
    let service = Service::start("127.0.0.1");
    let _ws = hostile_with_key(&root, &service, &[]);
    let out = set_key(&root, &["hostile", "weather"], KEY);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let clean = tempfile::tempdir().unwrap();
    root.ok(&["backup", "hostile", "--to", clean.path().to_str().unwrap()]);
    let spelled = KEY.replace('/', "\\/").replace('+', "\\u002b");
    let sql = format!("INSERT INTO marks (note) VALUES ('{{\"k\":\"{spelled}\"}}')");
    root.call("hostile", "sql", &serde_json::json!({ "sql": sql }).to_string());
    let dir = tempfile::tempdir().unwrap();
    let e = root.refused(&["backup", "hostile", "--to", dir.path().to_str().unwrap()]);
    assert!(e.contains("the backup's part data/app.sqlite holds the app's key `weather`"), "{e}");
    assert!(!e.contains(KEY) && !e.contains("7Hq2") && !e.contains("disk is full"), "{e}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing written");
}
