//! Granted programs contained by the kernel: Landlock, argument patterns,
//! the process group at the deadline, and failing closed without Landlock.

use crate::support::{TestRoot, TestServer};

const PROGRAMS: &str = "spawn = [{ program = \"sh\" }, { program = \"bash\" }, { program = \"cat\", args = [\"*\"] }]";

fn run(root: &TestRoot, program: &str, args: &[&str]) -> serde_json::Value {
    root.call("hostile", "spawn.run", &serde_json::json!({ "program": program, "args": args }).to_string())
}

fn sh(root: &TestRoot, script: &str) -> serde_json::Value {
    run(root, "sh", &["-c", script])
}

#[test]
fn a_granted_shell_cannot_write_outside_its_scratch_folder() {
    let root = TestRoot::new();
    root.install_hostile_with(PROGRAMS);
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("written");
    let got = sh(&root, &format!("echo x > {} ; echo status $?", target.display()));
    assert!(
        got["stdout"].as_str().unwrap().contains("status 2") || got["stderr"].as_str().unwrap().contains("ermission"),
        "{got}"
    );
    assert!(!target.exists(), "nothing was written outside the scratch folder");
    let home = std::path::Path::new("/root/autoapp-containment-probe");
    sh(&root, &format!("echo x > {}", home.display()));
    assert!(!home.exists());
    // Its own scratch folder it may use.
    let got = sh(&root, "echo kept > note && cat note");
    assert_eq!(got["stdout"], "kept\n", "{got}");
}

#[test]
fn a_granted_shell_cannot_read_the_persons_files_or_a_path_not_granted() {
    let root = TestRoot::new();
    root.install_hostile_with(PROGRAMS);
    let private = tempfile::tempdir().unwrap();
    std::fs::write(private.path().join("secret.txt"), "the person's secret").unwrap();
    let got = run(&root, "cat", &[private.path().join("secret.txt").to_str().unwrap()]);
    assert_ne!(got["status"], 0, "{got}");
    assert!(!got["stdout"].as_str().unwrap().contains("secret"), "{got}");
    assert!(got["stderr"].as_str().unwrap().contains("Permission denied"), "{got}");
    // The root's own files (grants, records) are not readable either.
    let got = sh(&root, &format!("cat {}/apps/hostile/grants.json", root.path().display()));
    assert!(got["stderr"].as_str().unwrap().contains("Permission denied"), "{got}");
}

#[test]
fn a_granted_shell_cannot_open_a_tcp_connection_without_a_network_grant() {
    let server = TestServer::start();
    let root = TestRoot::new();
    root.install_hostile_with(PROGRAMS);
    let got = run(&root, "bash", &["-c", &format!("exec 3<>/dev/tcp/127.0.0.1/{} && echo connected", server.port)]);
    assert!(!got["stdout"].as_str().unwrap().contains("connected"), "{got}");
    assert!(got["stderr"].as_str().unwrap().contains("Permission denied"), "{got}");
    assert_eq!(server.hits(), 0, "no connection reached the server");
}

#[test]
fn with_a_network_grant_only_the_granted_port_is_reachable() {
    let server = TestServer::start();
    let other = TestServer::start();
    let root = TestRoot::new();
    root.install_hostile_with(&format!("network = [\"http://127.0.0.1:{}\"]\n{PROGRAMS}", server.port));
    let got = run(&root, "bash", &["-c", &format!("exec 3<>/dev/tcp/127.0.0.1/{} && echo connected", server.port)]);
    assert!(got["stdout"].as_str().unwrap().contains("connected"), "{got}");
    let got = run(&root, "bash", &["-c", &format!("exec 3<>/dev/tcp/127.0.0.1/{} && echo connected", other.port)]);
    assert!(!got["stdout"].as_str().unwrap().contains("connected"), "{got}");
    assert_eq!(other.hits(), 0);
}

#[test]
fn arguments_that_do_not_fit_the_grants_pattern_are_denied() {
    let root = TestRoot::new();
    root.install_hostile_with(PROGRAMS);
    let got = run(&root, "cat", &["--version"]);
    assert!(got["error"].as_str().unwrap().contains("do not fit what was granted for `cat`: [\"*\"]"), "{got}");
    let got = run(&root, "cat", &["a", "b"]);
    assert!(got["error"].as_str().unwrap().starts_with("denied: these arguments do not fit"), "{got}");
}

#[test]
fn without_landlock_spawn_fails_closed_and_says_why() {
    let root = TestRoot::with_config("landlock = \"off\"\n");
    root.install_hostile_with(PROGRAMS);
    let got = sh(&root, "echo should not run");
    let e = got["error"].as_str().unwrap();
    assert!(e.contains("programs cannot run here: Landlock is off"), "{e}");
    assert!(e.contains("spawn_unconfined = true"), "{e}");
    // Knowingly unconfined, it runs.
    let unconfined = TestRoot::with_config("landlock = \"off\"\nspawn_unconfined = true\n");
    unconfined.install_hostile_with(PROGRAMS);
    assert_eq!(sh(&unconfined, "echo ran")["stdout"], "ran\n");
}

#[test]
fn explain_gives_the_same_containment_answer_as_the_runtime() {
    let root = TestRoot::with_config("landlock = \"off\"\n");
    root.install_hostile_with(PROGRAMS);
    let text = root.ok(&["explain", "hostile"]);
    assert!(text.contains("spawned programs: refused: Landlock is off in the configuration"), "{text}");
    let confined = TestRoot::new();
    confined.install_hostile_with(PROGRAMS);
    let text = confined.ok(&["explain", "hostile"]);
    assert!(text.contains("spawned programs: confined with Landlock"), "{text}");
}

#[test]
fn the_hosts_environment_never_reaches_the_program() {
    let root = TestRoot::new();
    root.install_hostile_with(PROGRAMS);
    let got = sh(&root, "env");
    let out = got["stdout"].as_str().unwrap();
    assert!(!out.contains("CARGO") && !out.contains("AUTOAPP") && !out.contains("RUST_"), "{out}");
}

#[test]
fn a_program_granted_tcp_to_one_port_opens_no_unix_socket_and_sends_no_udp() {
    use std::os::unix::net::UnixListener;
    let server = TestServer::start();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.sock");
    let unix = UnixListener::bind(&path).unwrap();
    unix.set_nonblocking(true).unwrap();
    let root = TestRoot::new();
    root.install_hostile_with(&format!(
        "network = [\"http://127.0.0.1:{}\"]\nspawn = [{{ program = \"bash\" }}, {{ program = \"/usr/bin/perl\" }}]",
        server.port
    ));
    // The granted port is reachable: the program runs, with its network.
    let got = run(&root, "bash", &["-c", &format!("exec 3<>/dev/tcp/127.0.0.1/{} && echo connected", server.port)]);
    assert!(got["stdout"].as_str().unwrap().contains("connected"), "{got}");
    // UDP, to any port: refused by the filter.
    let port = udp.local_addr().unwrap().port();
    let got = run(&root, "bash", &["-c", &format!("echo leak > /dev/udp/127.0.0.1/{port} && echo sent")]);
    assert!(!got["stdout"].as_str().unwrap().contains("sent"), "{got}");
    assert!(got["stderr"].as_str().unwrap().contains("Permission denied"), "{got}");
    // A UNIX socket named by a path, and an abstract one.
    let perl = |peer: &str| {
        let script = format!(
            "use IO::Socket::UNIX; my $s = IO::Socket::UNIX->new(Peer => \"{peer}\"); if ($s) {{ print $s \"leak\"; print \"connected\\n\" }} else {{ print \"refused: $!\\n\" }}"
        );
        run(&root, "/usr/bin/perl", &["-e", &script])
    };
    let got = perl(path.to_str().unwrap());
    assert!(got["stdout"].as_str().unwrap().contains("refused: Permission denied"), "{got}");
    let got = perl("\\0autoapp-abstract-test");
    assert!(!got["stdout"].as_str().unwrap().contains("connected"), "{got}");
    let mut buf = [0u8; 16];
    assert!(udp.recv_from(&mut buf).is_err(), "no datagram arrived");
    assert!(unix.accept().is_err(), "no UNIX connection arrived");
}
