//! Tests that must run alone on the machine, in a test binary of their own
//! (cargo runs test binaries one after another, never beside `all`).
//!
//! A fork bomb run as root is bounded only by the call's deadline: RLIMIT_NPROC
//! does not bind root, so until the deadline it fills the machine's process
//! table, and a test beside it could not start a thread (seen in CI: "cannot
//! start the record's writer: Resource temporarily unavailable").

#[allow(dead_code)]
#[path = "../all/support.rs"]
mod support;

use support::TestRoot;

#[test]
fn a_fork_bomb_and_its_grandchildren_end_at_the_deadline() {
    // A short deadline keeps the bomb's few thousand processes few.
    let root = TestRoot::with_config("call_deadline_ms = 700\n");
    root.install_hostile_with("spawn = [{ program = \"sh\" }]");
    let marker = format!("autoapp-bomb-{}", std::process::id());
    // A grandchild that would outlive the call, then a fork bomb (bounded only
    // by the deadline: tests run as root, where RLIMIT_NPROC does not bind),
    // and the program itself waiting on: the deadline ends it all.
    let script = format!("sh -c 'sleep 300' {marker}-grandchild & b() {{ b | b & }}; b; sleep 30");
    let e = root.refused(&[
        "call",
        "hostile",
        "spawn.run",
        &serde_json::json!({ "program": "sh", "args": ["-c", script, marker] }).to_string(),
    ]);
    assert!(e.contains("deadline"), "{e}");
    // The supervisor killed the program's group and every other descendant
    // when the call ended; give the kernel a moment to tear a few thousand
    // processes down, then none may be left.
    let gone = |_: ()| std::process::Command::new("pgrep").args(["-f", &marker]).output().unwrap().stdout.is_empty();
    let started = std::time::Instant::now();
    while !gone(()) && started.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let left = std::process::Command::new("pgrep").args(["-f", &marker]).output().unwrap();
    assert!(left.stdout.is_empty(), "processes of the call outlived it: {}", String::from_utf8_lossy(&left.stdout));
}
