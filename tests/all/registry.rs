//! Packages through an OCI registry (issue 30): a real registry on loopback —
//! the CNCF distribution registry, Debian's `docker-registry` (`scripts/test`
//! installs it) — `skopeo`, and `oci-wasm`'s own client, the one `wkg oci
//! pull` uses. Nothing here is mocked except the registry that answers 401 to
//! everything.

use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::TestRoot;

/// A `docker-registry` serving a folder of its own on a free loopback port,
/// stopped when dropped.
struct Registry {
    child: Child,
    dir: tempfile::TempDir,
    /// `127.0.0.1:<port>`.
    addr: String,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Registry {
    fn start() -> Registry {
        let program = std::env::var_os("AUTOAPP_TEST_REGISTRY").unwrap_or_else(|| "docker-registry".into());
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {addr}\n",
                dir.path().join("data").display()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("registry.log")).unwrap();
        let child = Command::new(&program)
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {program:?} ({e}): install Debian's docker-registry (scripts/test does)")
            });
        let r = Registry { child, dir, addr };
        let started = Instant::now();
        while get(&r.addr, "/v2/").is_none_or(|s| s != 200) {
            assert!(started.elapsed() < Duration::from_secs(30), "the registry did not start: {}", r.log());
            std::thread::sleep(Duration::from_millis(100));
        }
        r
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// Where the registry keeps the blob `digest` (`sha256:…`).
    fn blob(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap();
        self.dir.path().join("data/docker/registry/v2/blobs/sha256").join(&hex[..2]).join(hex).join("data")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The status of `GET path` on `addr`, if it answers.
fn get(addr: &str, path: &str) -> Option<u16> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").ok()?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

/// A root with notes active and a publisher key named `name`: (the root,
/// the key's fingerprint).
fn publisher(name: &str) -> (TestRoot, String) {
    let root = TestRoot::new();
    root.install("notes");
    let made: serde_json::Value = serde_json::from_str(&root.ok(&["key", "new", "--name", name, "--json"])).unwrap();
    (root, made["fingerprint"].as_str().unwrap().to_string())
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[test]
fn a_package_published_to_a_registry_installs_on_a_fresh_root_and_tools_get_the_packed_file() {
    let registry = Registry::start();
    let (publisher, fingerprint) = publisher("Ada's Apps");
    let reference = format!("{}/ada/notes:1.0", registry.addr);
    let published = json(&publisher.ok(&["publish", "notes", &reference, "--sign", "--json"]));
    let digest = published["digest"].as_str().unwrap().to_string();
    assert!(digest.starts_with("sha256:"), "{published}");
    // The packed file, byte for byte, is the one layer.
    let out = tempfile::tempdir().unwrap();
    let packed = json(&publisher.ok(&["pack", "notes", "--sign", "--to", out.path().to_str().unwrap(), "--json"]));
    let file = std::fs::read(packed["file"].as_str().unwrap()).unwrap();
    assert_eq!(published["layer"], sha256(&file), "the layer is the packed file");

    // A fresh root installs it from the registry: a candidate, the publisher
    // named, nothing active until the person activates it.
    let person = TestRoot::new();
    let said = person.ok(&["install", &reference]);
    assert!(said.contains(&format!("publisher: fingerprint {fingerprint} \"Ada's Apps\": the first time")), "{said}");
    assert!(said.contains("notes.add"), "{said}");
    let candidates = json(&person.ok(&["candidates", "notes", "--json"]));
    assert_eq!(candidates["active"]["id"], serde_json::Value::Null);
    assert_eq!(candidates["source"]["kind"], "package", "{candidates}");
    assert_eq!(candidates["source"]["publisher"]["fingerprint"], fingerprint.as_str());
    assert!(
        person.ok(&["candidates", "notes"]).contains(&format!("publisher: fingerprint {fingerprint} \"Ada's Apps\""))
    );
    let release = json(&publisher.ok(&["candidates", "notes", "--json"]))["active"]["id"].as_str().unwrap().to_string();
    person.ok(&["activate", "notes", &release]);
    for root in [&person, &publisher] {
        root.call("notes", "notes.add", r#"{"title": "through a registry"}"#);
    }
    assert_eq!(
        person.call("notes", "notes.list", "{}")["notes"][0]["title"],
        publisher.call("notes", "notes.list", "{}")["notes"][0]["title"]
    );
    // By digest: exactly those bytes, the same publisher, the same release.
    let by_digest = format!("{}/ada/notes@{digest}", registry.addr);
    let again = json(&person.ok(&["install", &by_digest, "--json"]));
    assert_eq!(again["standing"], "same", "{again}");
    assert_eq!(again["new_release"], false);
    assert!(again["origin"].as_str().unwrap().contains(&digest), "{again}");
    assert!(person.ok(&["runs", "notes"]).contains(&format!("{}/ada/notes", registry.addr)));
    // An installed app has no workspace: a build says where its source would go.
    let e = person.refused(&["build", "notes"]);
    assert!(e.contains("installed from a package and has no workspace"), "{e}");

    // skopeo copies the artifact to an OCI layout, digests preserved; its one
    // application/wasm layer is the packed file.
    let layout = tempfile::tempdir().unwrap();
    let copied = Command::new("skopeo")
        .args(["copy", "--src-tls-verify=false", "--preserve-digests"])
        .arg(format!("docker://{reference}"))
        .arg(format!("oci:{}:1.0", layout.path().display()))
        .output()
        .expect("skopeo runs (scripts/test installs it)");
    assert!(copied.status.success(), "skopeo: {}", String::from_utf8_lossy(&copied.stderr));
    let index = json(&std::fs::read_to_string(layout.path().join("index.json")).unwrap());
    assert_eq!(index["manifests"][0]["digest"], digest.as_str(), "{index}");
    let blob = |d: &str| std::fs::read(layout.path().join("blobs/sha256").join(d.strip_prefix("sha256:").unwrap()));
    let manifest: serde_json::Value = serde_json::from_slice(&blob(&digest).unwrap()).unwrap();
    assert_eq!(manifest["config"]["mediaType"], "application/vnd.wasm.config.v0+json");
    assert_eq!(manifest["layers"].as_array().unwrap().len(), 1, "{manifest}");
    assert_eq!(manifest["layers"][0]["mediaType"], "application/wasm");
    assert_eq!(manifest["annotations"]["org.opencontainers.image.version"], "0.1.0", "{manifest}");
    assert_eq!(blob(manifest["layers"][0]["digest"].as_str().unwrap()).unwrap(), file);
    let config: serde_json::Value =
        serde_json::from_slice(&blob(manifest["config"]["digest"].as_str().unwrap()).unwrap()).unwrap();
    assert_eq!(config["os"], "wasip2");
    let exports = config["component"]["exports"].to_string();
    assert!(exports.contains("autoapp:app/"), "the config names the component's exports: {config}");

    // oci-wasm's client (what `wkg oci pull` uses) pulls the same file.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let pulled = rt.block_on(async {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = oci_wasm::WasmClient::new(oci_client::Client::new(oci_client::client::ClientConfig {
            protocol: oci_client::client::ClientProtocol::Http,
            ..Default::default()
        }));
        client.pull(&reference.parse().unwrap(), &oci_client::secrets::RegistryAuth::Anonymous).await.unwrap()
    });
    assert_eq!(pulled.layers.len(), 1);
    assert_eq!(pulled.layers[0].data.as_ref(), file.as_slice());
}

#[test]
fn a_registry_answer_that_does_not_hold_is_refused_with_a_sentence_and_nothing_is_placed() {
    let registry = Registry::start();
    let person = TestRoot::new();
    let nothing_placed = || assert!(!person.path().join("apps/notes").exists(), "nothing is placed");
    // A tag the registry does not have.
    let e = person.refused(&["install", &format!("{}/ada/notes:9.9", registry.addr)]);
    assert!(e.contains(&format!("the registry {} has no", registry.addr)), "{e}");
    nothing_placed();
    // A registry nobody answers at.
    let closed = format!("127.0.0.1:{}", free_port());
    let e = person.refused(&["install", &format!("{closed}/ada/notes:1.0")]);
    assert!(e.contains(&format!("cannot reach the registry {closed}")), "{e}");
    // A name that is neither a file nor a reference.
    let e = person.fails_with(1, &["install", "notes.wasm"]);
    assert!(e.contains("neither a package file nor a registry reference"), "{e}");

    // An unsigned package: refused unless --unsigned.
    let (publisher, _) = publisher("Ada");
    let unsigned = format!("{}/ada/notes:unsigned", registry.addr);
    publisher.ok(&["publish", "notes", &unsigned]);
    assert!(person.refused(&["install", &unsigned]).contains("--unsigned"));
    nothing_placed();

    // A blob that lies: the registry serves bytes whose digest is not the
    // one its manifest names.
    let reference = format!("{}/ada/notes:1.0", registry.addr);
    let published = json(&publisher.ok(&["publish", "notes", &reference, "--sign", "--json"]));
    let blob = registry.blob(published["layer"].as_str().unwrap());
    let mut bytes = std::fs::read(&blob).unwrap();
    bytes[100] ^= 0x01;
    std::fs::write(&blob, &bytes).unwrap();
    let e = person.refused(&["install", &reference]);
    assert!(e.contains("whose digest") && e.contains("differs from the one its manifest names"), "{e}");
    nothing_placed();
    // The unsigned one is still whole: --unsigned takes it.
    assert!(person.ok(&["install", &unsigned, "--unsigned"]).contains("anyone could have made"));
}

/// A server on loopback that answers 401 to everything, as a registry does
/// to someone not logged in.
fn refusing_registry() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let body = r#"{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}"#;
            let _ = write!(
                s,
                "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    addr
}

/// Issue 51, rule 9: a registry sending one byte every 20 s held `install`
/// past 200 s. An install from a registry has one deadline
/// (`install_deadline_secs`) for the registry's whole answer.
#[test]
fn a_registry_that_sends_a_byte_now_and_then_is_given_up_at_the_install_s_deadline() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(4) {
            let Ok(mut s) = stream else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\nContent-Length: 100000\r\n\r\n"
                );
                // A byte a second, for at most a minute.
                for _ in 0..60 {
                    if s.write_all(b" ").is_err() {
                        return;
                    }
                    std::thread::sleep(std::time::Duration::from_secs(1));
                }
            });
        }
    });
    let person = TestRoot::with_config("install_deadline_secs = 2\n");
    let before = person.files();
    let started = std::time::Instant::now();
    let e = person.refused(&["install", &format!("{addr}/ada/notes:1.0")]);
    assert!(e.contains("took longer than 2 s") && e.contains("install_deadline_secs"), "{e}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(50),
        "given up at the deadline, not at the registry's end"
    );
    assert_eq!(person.files(), before);
}

/// A server on `ip` that answers each request with what `answer` makes of
/// its head (the request line and headers), and keeps every head it got.
fn hostile_server(
    ip: &str,
    answer: impl Fn(&str, &mut std::net::TcpStream) + Send + Sync + 'static,
) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let listener = std::net::TcpListener::bind((ip, 0)).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (kept, answer) = (heads.clone(), std::sync::Arc::new(answer));
    std::thread::spawn(move || {
        for stream in listener.incoming().take(20) {
            let Ok(mut s) = stream else { continue };
            let (kept, answer) = (kept.clone(), answer.clone());
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 16 << 10];
                // Every request the client sends on the connection: it keeps
                // it alive after an answer (a 401, then the same request
                // with its login), and one closed under it is reset.
                loop {
                    let n = s.read(&mut buf).unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                    kept.lock().unwrap().push(head.clone());
                    answer(&head, &mut s);
                }
            });
        }
    });
    (addr, heads)
}

/// `person`'s registry login for `registry`: ada, s3cret (in the file
/// `docker login` writes).
fn log_in(person: &TestRoot, registry: &str) {
    std::fs::create_dir_all(person.path().join("docker")).unwrap();
    let config = serde_json::json!({ "auths": { registry: { "auth": "YWRhOnMzY3JldA==" } } });
    std::fs::write(person.path().join("docker/config.json"), config.to_string()).unwrap();
}

/// Issue 51, rule 8: logged in to a loopback registry, a
/// `Bearer realm="http://127.0.0.2:…/token"` made `install` send
/// `Authorization: Basic …` in plain HTTP to another host, and redirects
/// of manifests to other hosts were followed. Credentials go only over
/// HTTPS, or to the very loopback registry the person named; a realm or a
/// redirect elsewhere in plain HTTP is refused, and nothing is sent there.
#[test]
fn the_person_s_registry_login_never_goes_where_the_registry_says_in_plain_http() {
    let (elsewhere, asked_elsewhere) = hostile_server("127.0.0.2", |_, s| {
        let _ = write!(s, "HTTP/1.1 200 OK\r\nContent-Length: 17\r\n\r\n{{\"token\": \"t\"}}  ");
    });
    let realm = format!("http://{elsewhere}/token");
    let (registry, _) = hostile_server("127.0.0.1", move |_, s| {
        let _ = write!(
            s,
            "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"{realm}\",service=\"registry\"\r\nContent-Length: 0\r\n\r\n"
        );
    });
    let person = TestRoot::new();
    log_in(&person, &registry);
    let before = person.files();
    let e = person.refused(&["install", &format!("{registry}/ada/notes:1.0")]);
    assert!(e.contains("you to log in at") && e.contains("over plain HTTP"), "{e}");
    assert!(asked_elsewhere.lock().unwrap().is_empty(), "nothing went to the realm elsewhere");
    assert_eq!(person.files(), before);

    // A manifest redirected to another host in plain HTTP: not followed.
    let target = format!("http://{elsewhere}/v2/ada/notes/manifests/1.0");
    let (redirecting, _) = hostile_server("127.0.0.1", move |_, s| {
        let _ = write!(s, "HTTP/1.1 307 Temporary Redirect\r\nLocation: {target}\r\nContent-Length: 0\r\n\r\n");
    });
    log_in(&person, &redirecting);
    let e = person.refused(&["install", &format!("{redirecting}/ada/notes:1.0")]);
    assert!(e.contains("a redirect to") && e.contains("over plain HTTP"), "{e}");
    assert!(asked_elsewhere.lock().unwrap().is_empty(), "nothing went to the redirect's host");

    // The registry the person named, itself, gets the login it asks for.
    let (basic, heads) = hostile_server("127.0.0.1", |head, s| {
        if head.to_ascii_lowercase().contains("authorization: basic") {
            let _ = write!(s, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
        } else {
            let _ = write!(
                s,
                "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"r\"\r\nContent-Length: 0\r\n\r\n"
            );
        }
    });
    log_in(&person, &basic);
    let e = person.refused(&["install", &format!("{basic}/ada/notes:1.0")]);
    assert!(e.contains("has no"), "{e}");
    assert!(
        heads.lock().unwrap().iter().any(|h| h.contains("YWRhOnMzY3JldA==")),
        "the login went to the registry named"
    );
}

/// Issue 51, rule 9: a 1 GB manifest body peaked at 2.1 GB. The manifest is
/// read by the host, at most 4 MiB, whether or not its length is declared.
#[test]
fn a_registry_s_endless_manifest_is_refused_at_its_bound_in_flat_memory() {
    let (registry, _) = hostile_server("127.0.0.1", |_, s| {
        // No length: the body ends when the connection does, after 1 GB.
        let _ = write!(
            s,
            "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\nConnection: close\r\n\r\n"
        );
        let chunk = vec![b' '; 1 << 20];
        for _ in 0..1024 {
            if s.write_all(&chunk).is_err() {
                return;
            }
        }
    });
    let person = TestRoot::new();
    let before = person.files();
    let out = Command::new("/usr/bin/time")
        .arg("-f")
        .arg("peak %M KiB")
        .arg(env!("CARGO_BIN_EXE_autoapp"))
        .args(["--root", person.path().to_str().unwrap(), "install", &format!("{registry}/ada/notes:1.0")])
        .env("DOCKER_CONFIG", person.path().join("docker"))
        .env("XDG_CONFIG_HOME", person.path().join("xdg-config"))
        .output()
        .expect("GNU time runs (scripts/test installs it)");
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("its manifest longer than 4194304 bytes"), "{said}");
    let peak: u64 = said.lines().find_map(|l| l.strip_prefix("peak ")?.strip_suffix(" KiB")?.parse().ok()).unwrap();
    assert!(peak < 200 << 10, "the install's memory stays flat: {peak} KiB");
    assert_eq!(person.files(), before);
}

#[test]
fn a_registry_that_wants_a_login_is_named_with_how_to_log_in() {
    let addr = refusing_registry();
    let person = TestRoot::new();
    let e = person.refused(&["install", &format!("{addr}/ada/notes:1.0")]);
    assert!(e.contains("refused you access") && e.contains(&format!("docker login {addr}")), "{e}");
    assert!(!person.path().join("apps").join("notes").exists());
    let (publisher, _) = publisher("Ada");
    let e = publisher.refused(&["publish", "notes", &format!("{addr}/ada/notes:1.0")]);
    assert!(e.contains("refused you access"), "{e}");
}

#[test]
fn publish_names_a_registry_or_says_how() {
    let (publisher, _) = publisher("Ada");
    for bad in ["notes:1.0", "ada/notes:1.0"] {
        let e = publisher.fails_with(2, &["publish", "notes", bad]);
        assert!(e.contains("registry"), "{e}");
    }
}
