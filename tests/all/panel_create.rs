//! Creating an app from the panel: the operating system's folder window (a
//! stand-in `zenity` on PATH here), the location rules, the new app's tab.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::{Served, TestRoot};

/// A stand-in `zenity` in a folder of its own: it writes its arguments, one
/// per line, to `args`, writes its pid to `pid`, waits while `hold` exists,
/// then prints the folder in `$STANDIN_ANSWER`.
struct Standin {
    dir: tempfile::TempDir,
}

impl Standin {
    fn new() -> Standin {
        let dir = tempfile::Builder::new().prefix("standin-").tempdir().unwrap();
        let script = format!(
            "#!/bin/sh\necho $$ > '{d}/pid'\nfor a in \"$@\"; do printf '%s\\n--\\n' \"$a\"; done > '{d}/args'\nwhile [ -e '{d}/hold' ]; do sleep 0.05; done\nprintf '%s\\n' \"$STANDIN_ANSWER\"\n",
            d = dir.path().display()
        );
        let zenity = dir.path().join("zenity");
        std::fs::write(&zenity, script).unwrap();
        let mut perms = std::fs::metadata(&zenity).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&zenity, perms).unwrap();
        Standin { dir }
    }

    fn env(&self, answer: &Path) -> Vec<(&'static str, OsString)> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut p = OsString::from(self.dir.path());
        p.push(":");
        p.push(path);
        vec![("PATH", p), ("STANDIN_ANSWER", answer.as_os_str().to_owned()), ("HOME", self.dir.path().into())]
    }

    /// The arguments it was given, as it received them.
    fn args(&self) -> Vec<String> {
        let text = std::fs::read_to_string(self.dir.path().join("args")).unwrap();
        text.split("\n--\n").filter(|a| !a.is_empty()).map(str::to_string).collect()
    }

    fn wait_until_open(&self) {
        let give_up = Instant::now() + Duration::from_secs(20);
        while !self.dir.path().join("args").exists() {
            assert!(Instant::now() < give_up, "the folder window never opened");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn quiet_root() -> TestRoot {
    TestRoot::with_config("opener = \"none\"\n")
}

#[test]
fn the_folder_window_gets_a_hostile_title_as_one_argument_and_its_answer_creates_the_app_and_opens_its_tab() {
    let t = quiet_root();
    let standin = Standin::new();
    let places = tempfile::tempdir().unwrap();
    let chosen = places.path().join("made-ws");
    let launcher = Served::start_with_env(&t, &["open"], &standin.env(&chosen));
    let mut panel = launcher.tab("the Autoapp panel");

    let marker = places.path().join("pwned");
    let title = format!("x\" --filename=/etc; touch {} $(touch {}) `id`", marker.display(), marker.display());
    let start = places.path().to_str().unwrap().to_string();
    let body = serde_json::json!({ "title": title, "start": start }).to_string();
    let r = panel.request("POST", "/api/choose-folder", Some(&body)).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let answer: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(answer["folder"], chosen.to_str().unwrap());
    let real_start = std::fs::canonicalize(places.path()).unwrap();
    assert_eq!(
        standin.args(),
        [
            "--file-selection".to_string(),
            "--directory".into(),
            format!("--title=Autoapp: {title}"),
            format!("--filename={}/", real_start.display())
        ],
        "the title and the start are one argument each, exactly as sent"
    );
    assert!(!marker.exists(), "nothing in the title ran");

    let body = serde_json::json!({ "app": "made", "location": chosen }).to_string();
    let r = panel.request("POST", "/api/create", Some(&body)).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(chosen.join("autoapp.toml").is_file(), "the starter is in the chosen folder");
    // Its tab opens the way Open does: an address only the opener (here the
    // terminal) sees; the panel's answer carries none.
    assert!(!String::from_utf8_lossy(&r.body).contains("token"), "{}", String::from_utf8_lossy(&r.body));
    let mut tab = launcher.tab("made");
    let info: serde_json::Value = serde_json::from_slice(&tab.request("GET", "/api/info", None).unwrap().body).unwrap();
    assert_eq!((&info["app"], &info["release"]), (&"made".into(), &serde_json::Value::Null));
    launcher.stop();
    let runs: Vec<serde_json::Value> = serde_json::from_str(&t.ok(&["runs", "made", "--json"])).unwrap();
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!((&runs[0]["route"], &runs[0]["caller"]), (&"create".into(), &"panel".into()));
}

#[test]
fn one_folder_window_at_a_time_and_the_launcher_closes_it_when_it_stops() {
    let t = quiet_root();
    let standin = Standin::new();
    std::fs::write(standin.dir.path().join("hold"), "").unwrap();
    let mut launcher = Served::start_with_env(&t, &["open"], &standin.env(Path::new("/tmp")));
    let panel = launcher.tab("the Autoapp panel");
    let mut first = crate::support::beside(&panel);
    let waiting = std::thread::spawn(move || first.request("POST", "/api/choose-folder", Some("{}")).unwrap());
    standin.wait_until_open();
    let mut second = crate::support::beside(&panel);
    let r = second.request("POST", "/api/choose-folder", Some("{}")).unwrap();
    assert_eq!(r.status, 409, "{}", String::from_utf8_lossy(&r.body));
    assert!(String::from_utf8_lossy(&r.body).contains("a folder window is open already"));
    // The window is still open when the person quits: it is closed, the
    // question answered with no folder, and the launcher stops.
    let pid: i32 = std::fs::read_to_string(standin.dir.path().join("pid")).unwrap().trim().parse().unwrap();
    let r = second.request("POST", "/api/quit", Some("{}")).unwrap();
    assert_eq!(r.status, 200);
    let answered = waiting.join().unwrap();
    assert_eq!(answered.status, 200);
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&answered.body).unwrap()["folder"], serde_json::Value::Null);
    let give_up = Instant::now() + Duration::from_secs(20);
    while !launcher.exited() || Path::new(&format!("/proc/{pid}")).exists() {
        assert!(Instant::now() < give_up, "the launcher or its folder window outlived the stop");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn create_from_the_panel_keeps_the_location_rules() {
    let t = quiet_root();
    let other = tempfile::tempdir().unwrap();
    t.ok(&["create", "first", "--at", other.path().join("first").to_str().unwrap()]);
    let launcher = Served::start(&t, &["open"]);
    let mut panel = launcher.tab("the Autoapp panel");
    let mut create = |app: &str, location: &str| {
        let body = serde_json::json!({ "app": app, "location": location }).to_string();
        let r = panel.request("POST", "/api/create", Some(&body)).unwrap();
        (r.status, String::from_utf8_lossy(&r.body).into_owned())
    };
    let inside_root: PathBuf = t.path().join("mine");
    let (status, body) = create("mine", inside_root.to_str().unwrap());
    assert_eq!(status, 409);
    assert!(body.contains("inside the launcher's root"), "{body}");
    let (status, body) = create("mine", other.path().join("first/sub").to_str().unwrap());
    assert!(status == 409 && body.contains("inside the workspace of first"), "{body}");
    let (status, body) = create("mine", other.path().to_str().unwrap());
    assert!(status == 409 && body.contains("contains the workspace of first"), "{body}");
    let (status, body) = create("mine", "relative/folder");
    assert!(status == 400 && body.contains("not a whole path"), "{body}");
    let (status, body) = create("Not An Id", "/tmp/x");
    assert_eq!(status, 400, "{body}");
    assert!(!t.path().join("apps/mine").exists(), "nothing was made for a refused creation");
    launcher.stop();
}
