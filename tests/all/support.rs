//! What every end-to-end test needs: a temporary root, the binary, and the
//! example guests built once (cargo shares one target folder between tests).

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The keep-alive HTTP client a tab would be (shared with the benchmarks).
#[path = "../common/http.rs"]
pub mod http;

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("host has a parent").to_path_buf()
}

/// One cargo target folder for every guest built by every test, kept apart
/// from the host's so guest builds never invalidate it.
pub fn guest_target() -> PathBuf {
    repo().join("target").join("guests")
}

/// A root of its own, removed when the test ends.
pub struct TestRoot {
    dir: tempfile::TempDir,
}

/// The configuration every test root starts with: the example guests read
/// the checkout's WIT folder (`../../wit`), which a person's build may read
/// only when the configuration names it.
pub fn base_config() -> String {
    // Keys the tests set go to a file of the test's configuration folder,
    // never into the keyring of whoever runs the tests.
    format!("build_read = [{:?}]\nsecrets_kept_in = \"file\"\n", repo().join("wit").display().to_string())
}

impl TestRoot {
    pub fn new() -> TestRoot {
        TestRoot::with_config("")
    }

    /// A root whose config.toml holds `config` (after [`base_config`]).
    pub fn with_config(config: &str) -> TestRoot {
        let r = TestRoot { dir: tempfile::Builder::new().prefix("autoapp-test-").tempdir().expect("a temp folder") };
        std::fs::write(r.path().join("config.toml"), format!("{}{config}", base_config())).expect("write config");
        r
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `autoapp --root <root>`, ready for arguments. Its configuration folder
    /// (publisher keys, the keys apps use) and its registry logins are the
    /// test's too, never the person's: `<root>/xdg-config`,
    /// `<root>/docker/config.json`, `<root>/containers-auth.json`.
    pub fn command(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_autoapp"));
        c.arg("--root")
            .arg(self.path())
            .env("XDG_CONFIG_HOME", self.path().join("xdg-config"))
            .env("DOCKER_CONFIG", self.path().join("docker"))
            .env("REGISTRY_AUTH_FILE", self.path().join("containers-auth.json"))
            .env("CARGO_TARGET_DIR", guest_target())
            .env_remove("AUTOAPP_ROOT")
            .env("AUTOAPP_LOG", "warn");
        c
    }

    /// `autoapp --root <root> args…`, started and paused at `point` (debug
    /// builds: `AUTOAPP_PAUSE`) until the file `hold` is gone.
    pub fn paused(&self, args: &[&str], point: &str, hold: &Path) -> Child {
        self.command()
            .args(args)
            .env("AUTOAPP_PAUSE", point)
            .env("AUTOAPP_PAUSE_FILE", hold)
            .env("AUTOAPP_LOG", "off")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the autoapp binary starts")
    }

    /// Runs `autoapp --root <root> args...`.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command().args(args).output().expect("the autoapp binary runs")
    }

    /// Runs and expects success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        self.check_ok(args, self.run(args))
    }

    /// [`TestRoot::ok`] in the folder `cwd`.
    pub fn ok_at(&self, cwd: &Path, args: &[&str]) -> String {
        self.check_ok(args, self.command().args(args).current_dir(cwd).output().expect("the autoapp binary runs"))
    }

    fn check_ok(&self, args: &[&str], out: Output) -> String {
        assert!(
            out.status.success(),
            "autoapp {args:?} failed with {:?}\nstdout: {}\nstderr: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8 stdout")
    }

    /// Runs and expects exit code `code`; returns stderr.
    pub fn fails_with(&self, code: i32, args: &[&str]) -> String {
        let out = self.run(args);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(
            out.status.code(),
            Some(code),
            "autoapp {args:?} should exit {code}\nstdout: {}\nstderr: {stderr}",
            String::from_utf8_lossy(&out.stdout)
        );
        stderr
    }

    /// Runs and expects a refusal (exit 1) whose message is one line on stderr.
    pub fn refused(&self, args: &[&str]) -> String {
        let stderr = self.fails_with(1, args);
        let line = stderr
            .lines()
            .rev()
            .find(|l| l.starts_with("autoapp: "))
            .unwrap_or_else(|| panic!("autoapp {args:?}: no `autoapp: ` line on stderr:\n{stderr}"));
        line.to_string()
    }

    /// The last lines of `app`'s log once they say `says` (written a little
    /// after what caused them), or as they are after 20 s.
    pub fn log_saying(&self, app: &str, says: &str) -> String {
        let started = std::time::Instant::now();
        loop {
            let log = self.ok(&["logs", app, "--lines", "100"]);
            if log.contains(says) || started.elapsed() > Duration::from_secs(20) {
                return log;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Calls a route and parses its JSON answer.
    pub fn call(&self, app: &str, route: &str, input: &str) -> serde_json::Value {
        let out = self.ok(&["call", app, route, input]);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{route} answered non-JSON ({e}): {out}"))
    }

    /// Every file under the root, by its path inside it, with its bytes; and
    /// every folder (bytes empty, path ending in `/`): what "the root as it
    /// was, byte for byte" compares.
    pub fn files(&self) -> std::collections::BTreeMap<String, Vec<u8>> {
        fn walk(root: &Path, dir: &Path, out: &mut std::collections::BTreeMap<String, Vec<u8>>) {
            for e in std::fs::read_dir(dir).expect("read the root") {
                let path = e.expect("an entry").path();
                let name = path.strip_prefix(root).expect("inside").to_string_lossy().into_owned();
                let meta = std::fs::symlink_metadata(&path).expect("metadata");
                if meta.is_dir() {
                    out.insert(format!("{name}/"), Vec::new());
                    walk(root, &path, out);
                } else {
                    out.insert(name, std::fs::read(&path).unwrap_or_default());
                }
            }
        }
        let mut out = std::collections::BTreeMap::new();
        walk(self.path(), self.path(), &mut out);
        out
    }

    /// Grants every capability the newest release of `name` asks for, each
    /// named (as the person does after reading `explain`): `--all-asked`
    /// never grants a marked folder, and a test's folders under the system's
    /// temporary folder hold the test's root, which marks them.
    pub fn grant_all(&self, name: &str) {
        let explained: serde_json::Value =
            serde_json::from_str(&self.ok(&["explain", name, "--json"])).expect("explain --json");
        let asked: Vec<String> = explained["capabilities"]
            .as_array()
            .expect("capabilities")
            .iter()
            .map(|c| c.as_str().expect("a capability's name").to_string())
            // A key is set (`autoapp secret set`), not granted.
            .filter(|c| !c.starts_with("secret:"))
            .collect();
        if !asked.is_empty() {
            let mut args = vec!["grant", name];
            args.extend(asked.iter().map(String::as_str));
            self.ok(&args);
        }
    }

    /// Registers `guests/<name>` as app `name`, builds it and returns the release id.
    pub fn build_guest(&self, name: &str) -> String {
        let ws = repo().join("guests").join(name);
        self.ok(&["create", name, "--at", ws.to_str().expect("utf-8 path")]);
        self.build(name)
    }

    /// Builds app `name` and returns the release id.
    pub fn build(&self, name: &str) -> String {
        let out = self.ok(&["build", name, "--json"]);
        let v: serde_json::Value = serde_json::from_str(&out).expect("build --json prints JSON");
        v["release"].as_str().expect("a release id").to_string()
    }

    /// Builds and activates `guests/<name>`; returns the release id.
    /// Grants whatever the repository's copy asks for (see its autoapp.toml).
    pub fn install(&self, name: &str) -> String {
        let id = self.build_guest(name);
        let explained: serde_json::Value =
            serde_json::from_str(&self.ok(&["explain", name, "--json"])).expect("explain --json");
        if !explained["capabilities"].as_array().expect("capabilities").is_empty() {
            self.grant_all(name);
        }
        self.ok(&["activate", name, &id]);
        id
    }
}

/// The component of `guests/<name>`, built by cargo once per test process
/// (cargo's own lock serializes builds; a fresh build is a no-op).
pub fn guest_component(name: &str) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if !built.iter().any(|b| b == name) {
        let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "--release", "--target", "wasm32-wasip2"])
            .current_dir(repo().join("guests").join(name))
            .env("CARGO_TARGET_DIR", guest_target())
            .status()
            .expect("cargo runs");
        assert!(status.success(), "guests/{name} builds");
        built.push(name.to_string());
    }
    guest_target().join(format!("wasm32-wasip2/release/{name}.wasm"))
}

/// The hostile guest's component.
pub fn hostile_component() -> PathBuf {
    guest_component("hostile")
}

impl TestRoot {
    /// Installs `guests/<name>` with `capabilities` (the body of a
    /// [capabilities] table) instead of the repository's, grants everything it
    /// asks, and activates it. Returns its workspace folder.
    pub fn install_with(&self, name: &str, capabilities: &str) -> tempfile::TempDir {
        let ws = tempfile::Builder::new().prefix("ws-").tempdir().expect("temp workspace");
        let src = repo().join("guests").join(name);
        let manifest = std::fs::read_to_string(src.join("autoapp.toml")).expect("manifest");
        let start = manifest.find("\n[capabilities]\n").expect("a [capabilities] table") + 1;
        let end = manifest[start..].find("\n[data]\n").map(|i| start + i + 1).unwrap_or(manifest.len());
        let manifest = format!("{}[capabilities]\n{capabilities}\n\n{}", &manifest[..start], &manifest[end..]);
        std::fs::write(ws.path().join("autoapp.toml"), manifest).expect("write manifest");
        if src.join("migrations").is_dir() {
            std::fs::create_dir_all(ws.path().join("migrations")).expect("migrations folder");
            for m in std::fs::read_dir(src.join("migrations")).expect("migrations") {
                let m = m.expect("entry");
                std::fs::copy(m.path(), ws.path().join("migrations").join(m.file_name())).expect("copy migration");
            }
        }
        let component = guest_component(name);
        self.ok(&["create", name, "--at", ws.path().to_str().expect("utf-8")]);
        let out = self.ok(&["build", name, "--component", component.to_str().expect("utf-8"), "--json"]);
        let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
        let id = v["release"].as_str().expect("release").to_string();
        self.grant_all(name);
        self.ok(&["activate", name, &id]);
        ws
    }

    /// `install_with` for the hostile guest.
    pub fn install_hostile_with(&self, capabilities: &str) -> tempfile::TempDir {
        self.install_with("hostile", capabilities)
    }
}

/// A small HTTP server on 127.0.0.1 standing in for the internet. It counts
/// the requests it receives, so a test can prove a denied request never left.
pub struct TestServer {
    pub port: u16,
    hits: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl TestServer {
    pub fn start() -> TestServer {
        use std::io::{BufRead as _, Write as _};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = listener.local_addr().expect("addr").port();
        let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = hits.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                std::thread::spawn(move || {
                    let mut reader = std::io::BufReader::new(stream.try_clone().expect("clone"));
                    let mut line = String::new();
                    if reader.read_line(&mut line).is_err() {
                        return;
                    }
                    let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
                    loop {
                        let mut h = String::new();
                        if reader.read_line(&mut h).map(|n| n == 0).unwrap_or(true) || h == "\r\n" {
                            break;
                        }
                    }
                    let reply = |stream: &mut std::net::TcpStream, status: &str, headers: &str, body: &[u8]| {
                        let head = format!(
                            "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n{headers}\r\n",
                            body.len()
                        );
                        let _ = stream.write_all(head.as_bytes());
                        let _ = stream.write_all(body);
                    };
                    match path.as_str() {
                        "/hello" => reply(
                            &mut stream,
                            "200 OK",
                            "Content-Type: text/plain\r\n",
                            b"hello from the test server",
                        ),
                        "/front.json" => reply(
                            &mut stream,
                            "200 OK",
                            "Content-Type: application/json\r\n",
                            br#"{"hits":[{"objectID":"1","title":"Components everywhere","url":"https://example.com/a","points":120},{"objectID":"2","title":"SQLite tips","url":"https://example.com/b","points":80},{"objectID":"3","title":null}]}"#,
                        ),
                        "/redirect" => reply(
                            &mut stream,
                            "302 Found",
                            &format!("Location: http://127.0.0.1:{port}/hello\r\n"),
                            b"",
                        ),
                        "/big" => {
                            // No Content-Length: the cap must hold while streaming.
                            let _ =
                                stream.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
                            let chunk = vec![b'x'; 64 * 1024];
                            for _ in 0..64 {
                                if stream.write_all(&chunk).is_err() {
                                    break;
                                }
                            }
                        }
                        _ => reply(&mut stream, "404 Not Found", "", b"no such page"),
                    }
                });
            }
        });
        TestServer { port, hits }
    }

    pub fn hits(&self) -> usize {
        self.hits.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

/// `autoapp serve APP` or `autoapp open` on a root, its launch addresses read
/// from its output.
pub struct Served {
    child: Child,
    lines: mpsc::Receiver<String>,
}

/// `command`, run with the file `held` open as its descriptor `fd` and not
/// closed on exec, as a shell's `9<file` leaves it: what whoever starts
/// `autoapp` may leave open. The shell execs the program (same process).
pub fn holding(command: &Command, fd: u8, held: &Path) -> Command {
    assert!((3..=9).contains(&fd), "a descriptor a POSIX shell can name");
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(format!("exec \"$0\" \"$@\" {fd}<\"$AUTOAPP_TEST_HELD\""))
        .arg(command.get_program())
        .args(command.get_args())
        .env("AUTOAPP_TEST_HELD", held);
    for (k, v) in command.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    if let Some(dir) = command.get_current_dir() {
        c.current_dir(dir);
    }
    c
}

impl Served {
    pub fn start(root: &TestRoot, args: &[&str]) -> Served {
        Served::start_with_env(root, args, &[])
    }

    /// As [`Served::start`], with these variables added to its environment.
    pub fn start_with_env(root: &TestRoot, args: &[&str], env: &[(&str, std::ffi::OsString)]) -> Served {
        Served::spawn(Served::command(root, args, env))
    }

    /// As [`Served::start`], holding the file `held` open as its descriptor
    /// `fd` (see [`holding`]).
    pub fn start_holding(root: &TestRoot, args: &[&str], fd: u8, held: &Path) -> Served {
        Served::spawn(holding(&Served::command(root, args, &[]), fd, held))
    }

    /// As [`Served::start`], its standard error written to the file `told`.
    pub fn start_telling(root: &TestRoot, args: &[&str], told: &Path) -> Served {
        let file = std::fs::File::create(told).expect("a file for its standard error");
        Served::spawn_telling(Served::command(root, args, &[]), file.into())
    }

    fn command(root: &TestRoot, args: &[&str], env: &[(&str, std::ffi::OsString)]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_autoapp"));
        command
            .arg("--root")
            .arg(root.path())
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env_remove("AUTOAPP_ROOT")
            .env("AUTOAPP_LOG", "warn");
        command
    }

    fn spawn(command: Command) -> Served {
        Served::spawn_telling(command, Stdio::null())
    }

    fn spawn_telling(mut command: Command, stderr: Stdio) -> Served {
        let mut child =
            command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(stderr).spawn().expect("autoapp starts");
        let out = child.stdout.take().expect("piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Served { child, lines }
    }

    /// A tab of `what` (an app, or `the Autoapp panel`): its launch address,
    /// exchanged for a session.
    pub fn tab(&self, what: &str) -> http::Http {
        http::Http::launch(&self.address(what)).expect("the launch address gives a session")
    }

    /// The launch address of `what` the launcher printed once it served it
    /// (not redeemed).
    pub fn address(&self, what: &str) -> String {
        let prefix = format!("Open {what}: ");
        loop {
            let line = self.lines.recv_timeout(Duration::from_secs(60)).expect("a launch address");
            if let Some(url) = line.strip_prefix(&prefix) {
                return url.trim().to_string();
            }
        }
    }

    /// A tab of `app`, opened as the person does from the `panel`'s tab
    /// (Open), which must succeed.
    pub fn opened(&self, panel: &mut http::Http, app: &str) -> http::Http {
        let r = panel.request("POST", "/api/open", Some(&format!(r#"{{"app":"{app}"}}"#))).unwrap();
        assert_eq!(r.status, 200, "the panel opens {app}");
        self.tab(app)
    }

    /// The launcher's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the launcher has exited.
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// A stop as Ctrl+C would do it; the launcher must exit cleanly.
    pub fn stop(mut self) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).expect("a pid");
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
        let status = self.child.wait().expect("wait");
        assert!(status.success(), "the launcher stopped with {status}");
    }

    /// A crash: SIGKILL, nothing cleaned up.
    pub fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("wait");
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Another connection of the same tab (same session).
pub fn beside(tab: &http::Http) -> http::Http {
    let mut h = http::Http::new(tab.port());
    h.cookie = tab.cookie.clone();
    h
}

/// The event stream (`/api/events`) of a tab (an app's or the panel's),
/// read past its headers: the launcher has counted the page as open by
/// then, so a question asked next finds somebody to ask.
pub fn event_stream(tab: &http::Http) -> BufReader<std::net::TcpStream> {
    use std::io::Write as _;
    let mut events = std::net::TcpStream::connect(("127.0.0.1", tab.port())).expect("the tab's server");
    events.set_read_timeout(Some(Duration::from_secs(60))).expect("a timeout");
    write!(
        events,
        "GET /api/events HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nSec-Fetch-Site: same-origin\r\nCookie: {}\r\n\r\n",
        tab.port(),
        tab.cookie.clone().expect("a session")
    )
    .expect("the request");
    let mut lines = BufReader::new(events);
    let mut header = String::new();
    while lines.read_line(&mut header).is_ok_and(|n| n > 0) && header.trim() != "" {
        header.clear();
    }
    lines
}
