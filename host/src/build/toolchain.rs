//! Which Rust toolchain builds a workspace, decided by the host without
//! running anything the workspace chose.
//!
//! rustup lets a `rust-toolchain` / `rust-toolchain.toml` file in the
//! workspace (or any folder above it) name a channel — or a `path`, a folder
//! whose `bin/rustc` then runs for every question asked of "rustc". A build
//! script can fill a folder, and a toolchain file can point at it; so the host
//! reads the file itself (it is TOML) and never lets rustup resolve it in the
//! workspace. The questions the host asks (`rustc --print sysroot`,
//! `rustup target add`) run from `/` with the toolchain named explicitly
//! (`RUSTUP_TOOLCHAIN`); a `path` toolchain is not asked anything: its folder
//! is its sysroot, and its programs run only inside the confined build. The
//! engineer's builds refuse a `path` toolchain altogether.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{BuildError, TARGET, refuse};

/// Where the toolchain choice came from, and what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// A channel or toolchain name (`1.95.0`, `stable`, a linked toolchain),
    /// and what named it.
    Named { name: String, by: String },
    /// A folder holding a toolchain (`[toolchain] path`), and the file that
    /// named it.
    Path { path: PathBuf, by: String },
    /// Nothing named one: rustup's default (or the `rustc` on `PATH`).
    Default,
}

/// The toolchain a build uses.
#[derive(Debug, Clone)]
pub struct Toolchain {
    /// Its name for rustup (`RUSTUP_TOOLCHAIN` in the build), when rustup
    /// manages it.
    pub name: Option<String>,
    /// Its sysroot: `bin/cargo`, `bin/rustc`, `lib/rustlib/<target>`.
    pub sysroot: PathBuf,
    /// The cargo that runs the build: the sysroot's own.
    pub cargo: PathBuf,
}

/// The toolchain files rustup reads, in the order it reads them in a folder.
pub const FILES: &[&str] = &["rust-toolchain", "rust-toolchain.toml"];

/// The longest toolchain name accepted.
const MAX_NAME: usize = 100;

/// What chooses the toolchain of a build in `ws`: the launcher's own
/// `RUSTUP_TOOLCHAIN` (the person's environment), else the nearest toolchain
/// file in `ws` or a folder above it, else the default.
pub fn choice(ws: &Path) -> Result<Choice, BuildError> {
    choice_with(ws, std::env::var_os("RUSTUP_TOOLCHAIN"))
}

/// [`choice`], given the launcher's `RUSTUP_TOOLCHAIN`.
fn choice_with(ws: &Path, from_env: Option<std::ffi::OsString>) -> Result<Choice, BuildError> {
    if let Some(v) = from_env.filter(|v| !v.is_empty()) {
        let v = v.to_string_lossy().into_owned();
        return Ok(if v.contains('/') {
            Choice::Path { path: PathBuf::from(v), by: "RUSTUP_TOOLCHAIN".into() }
        } else {
            Choice::Named { name: checked_name(&v, "RUSTUP_TOOLCHAIN")?, by: "RUSTUP_TOOLCHAIN".into() }
        });
    }
    for dir in ws.ancestors() {
        for file in FILES {
            let path = dir.join(file);
            let Ok(text) = std::fs::read_to_string(&path) else { continue };
            return parse(&text, &path);
        }
    }
    Ok(Choice::Default)
}

/// What a toolchain file says: TOML with `[toolchain] channel` or `path`, or
/// the legacy one line naming a channel.
pub fn parse(text: &str, file: &Path) -> Result<Choice, BuildError> {
    let shown = file.display().to_string();
    if let Ok(doc) = toml::from_str::<toml::Table>(text) {
        let Some(table) = doc.get("toolchain").and_then(toml::Value::as_table) else {
            return refuse(format!(
                "{shown} has no [toolchain] table; name a channel, like [toolchain] channel = \"stable\""
            ));
        };
        if let Some(path) = table.get("path") {
            let Some(p) = path.as_str() else {
                return refuse(format!("{shown}: [toolchain] path must be a string"));
            };
            let dir = file.parent().unwrap_or(Path::new("/"));
            return Ok(Choice::Path { path: dir.join(p), by: shown });
        }
        return match table.get("channel").and_then(toml::Value::as_str) {
            Some(c) => Ok(Choice::Named { name: checked_name(c, &shown)?, by: shown }),
            None => refuse(format!("{shown} names no channel; write [toolchain] channel = \"stable\" (or a version)")),
        };
    }
    let line = text.trim();
    if line.lines().count() != 1 {
        return refuse(format!(
            "{shown} is neither TOML nor one line naming a channel; write [toolchain] channel = \"stable\""
        ));
    }
    if line.contains('/') {
        let dir = file.parent().unwrap_or(Path::new("/"));
        return Ok(Choice::Path { path: dir.join(line), by: shown });
    }
    Ok(Choice::Named { name: checked_name(line, &shown)?, by: shown })
}

/// A toolchain name: letters, digits, `.`, `_`, `+` and `-`; never a path.
fn checked_name(name: &str, by: &str) -> Result<String, BuildError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '-'));
    if ok {
        Ok(name.to_string())
    } else {
        refuse(format!(
            "{by} names the toolchain `{}`, which is not a toolchain name (letters, digits, . _ + -); name a channel like \"stable\" or \"1.95.0\"",
            name.escape_debug()
        ))
    }
}

/// The toolchain `choice` names: asked of rustup from `/` (never from the
/// workspace), or, for a `path`, read from the folder without running it.
pub fn resolve(choice: &Choice) -> Result<Toolchain, BuildError> {
    match choice {
        Choice::Path { path, by } => {
            let sysroot = std::fs::canonicalize(path).map_err(|e| {
                BuildError::Refused(format!("{by} names the toolchain folder {} ({e}); make it exist", path.display()))
            })?;
            let cargo = sysroot.join("bin/cargo");
            if !cargo.is_file() || !sysroot.join("bin/rustc").is_file() {
                return refuse(format!(
                    "{by} names the toolchain folder {}, which has no bin/cargo and bin/rustc; name a channel instead",
                    sysroot.display()
                ));
            }
            Ok(Toolchain { name: None, sysroot, cargo })
        }
        Choice::Named { name, by } => {
            let sysroot = ask_sysroot(Some(name)).ok_or_else(|| {
                BuildError::Refused(format!(
                    "the toolchain `{name}` that {by} names is not installed; install it with `rustup toolchain install {name}` and build again"
                ))
            })?;
            Ok(with_cargo(Some(name.clone()), sysroot))
        }
        Choice::Default => {
            let sysroot = ask_sysroot(None).ok_or_else(|| {
                BuildError::Refused("cannot find a Rust toolchain (`rustc --print sysroot` failed); install Rust from https://rustup.rs and build again".into())
            })?;
            Ok(with_cargo(rustup_name(&sysroot), sysroot))
        }
    }
}

/// The name of the rustup toolchain at `sysroot`: rustup's toolchains live
/// in `<RUSTUP_HOME>/toolchains/<name>`.
fn rustup_name(sysroot: &Path) -> Option<String> {
    if sysroot.parent().and_then(Path::file_name) != Some("toolchains".as_ref()) {
        return None;
    }
    sysroot.file_name().map(|n| n.to_string_lossy().into_owned())
}

fn with_cargo(name: Option<String>, sysroot: PathBuf) -> Toolchain {
    let own = sysroot.join("bin/cargo");
    let cargo = if own.is_file() { own } else { crate::programs::find("cargo").unwrap_or_else(|_| "cargo".into()) };
    Toolchain { name, sysroot, cargo }
}

/// A command for a question to the toolchain: from `/`, standard input
/// closed, the toolchain named (or rustup's default).
fn question(program: &str, name: Option<&str>) -> Command {
    let mut c = Command::new(program);
    c.current_dir("/").stdin(Stdio::null()).stderr(Stdio::null());
    match name {
        Some(n) => c.env("RUSTUP_TOOLCHAIN", n),
        None => c.env_remove("RUSTUP_TOOLCHAIN"),
    };
    c
}

fn ask_sysroot(name: Option<&str>) -> Option<PathBuf> {
    ask_sysroot_of("rustc", name)
}

/// The sysroot `rustc` (a program) says, when it answers with success.
fn ask_sysroot_of(rustc: &str, name: Option<&str>) -> Option<PathBuf> {
    let out = question(rustc, name).args(["--print", "sysroot"]).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !text.is_empty()).then(|| PathBuf::from(text)).filter(|p| p.is_dir())
}

impl Toolchain {
    /// Whether the toolchain has the standard library of [`TARGET`].
    pub fn has_target(&self) -> bool {
        self.sysroot.join("lib/rustlib").join(TARGET).join("lib").is_dir()
    }

    /// Installs [`TARGET`] with rustup when the toolchain lacks it.
    pub fn ensure_target(&self, progress: &dyn Fn(&str)) -> Result<(), BuildError> {
        self.ensure_target_with("rustup", progress)
    }

    /// [`Toolchain::ensure_target`] with the program `rustup`.
    fn ensure_target_with(&self, rustup: &str, progress: &dyn Fn(&str)) -> Result<(), BuildError> {
        if self.has_target() {
            return Ok(());
        }
        let Some(name) = &self.name else {
            return refuse(format!(
                "the toolchain at {} has no {TARGET} target and is not rustup's; add the target to it, or name a rustup channel in rust-toolchain.toml",
                self.sysroot.display()
            ));
        };
        progress(&format!("the Rust target {TARGET} is missing; installing it with `rustup target add {TARGET}`"));
        let status = question(rustup, None)
            .args(["target", "add", TARGET, "--toolchain", name])
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            .status();
        match status {
            Ok(s) if s.success() && self.has_target() => Ok(()),
            Ok(_) => refuse(format!(
                "rustup could not install the target {TARGET}; run `rustup target add {TARGET} --toolchain {name}` and build again"
            )),
            Err(_) => refuse(format!(
                "the Rust target {TARGET} is not installed and rustup is not available; install it for your toolchain and build again"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> PathBuf {
        PathBuf::from("/ws/rust-toolchain.toml")
    }

    #[test]
    fn a_toolchain_file_names_a_channel_or_a_path_and_nothing_else_runs() {
        let named = parse("[toolchain]\nchannel = \"1.95.0\"\ntargets = [\"wasm32-wasip2\"]\n", &file()).unwrap();
        assert_eq!(named, Choice::Named { name: "1.95.0".into(), by: "/ws/rust-toolchain.toml".into() });
        let path = parse("[toolchain]\npath = \"target/evil\"\n", &file()).unwrap();
        assert_eq!(path, Choice::Path { path: "/ws/target/evil".into(), by: "/ws/rust-toolchain.toml".into() });
        assert_eq!(
            parse("nightly-2026-01-01\n", Path::new("/ws/rust-toolchain")).unwrap(),
            Choice::Named { name: "nightly-2026-01-01".into(), by: "/ws/rust-toolchain".into() }
        );
        assert!(matches!(parse("../../x\n", Path::new("/ws/rust-toolchain")).unwrap(), Choice::Path { .. }));
    }

    #[test]
    fn a_name_that_is_not_a_name_is_refused() {
        for bad in ["", "../x", "a b", "-stable", "stable;rm", "a\u{0}b"] {
            let text = format!("[toolchain]\nchannel = {bad:?}\n");
            assert!(parse(&text, &file()).is_err(), "{bad:?}");
        }
        assert!(parse("[toolchain]\nchannel = 3\n", &file()).is_err());
        assert!(parse("[other]\n", &file()).is_err());
        assert!(parse("one\ntwo\n", Path::new("/ws/rust-toolchain")).is_err());
        assert!(checked_name(&"a".repeat(MAX_NAME + 1), "x").is_err());
        assert!(checked_name("1.95.0-x86_64-unknown-linux-gnu", "x").is_ok());
    }

    #[test]
    fn the_nearest_file_wins_and_a_path_is_never_run() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("a/ws");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(dir.path().join("a/rust-toolchain.toml"), "[toolchain]\nchannel = \"stable\"\n").unwrap();
        // A toolchain folder whose rustc and cargo would leave a mark if run.
        let evil = dir.path().join("evil");
        std::fs::create_dir_all(evil.join("bin")).unwrap();
        let mark = dir.path().join("ran");
        for p in ["rustc", "cargo"] {
            let script = format!("#!/bin/sh\ntouch {}\n", mark.display());
            std::fs::write(evil.join("bin").join(p), script).unwrap();
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(evil.join("bin").join(p), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::fs::write(
            ws.join("rust-toolchain.toml"),
            format!("[toolchain]\npath = {:?}\n", evil.display().to_string()),
        )
        .unwrap();
        let c = choice_with(&ws, None).unwrap();
        assert!(matches!(c, Choice::Path { .. }), "{c:?}");
        let t = resolve(&c).unwrap();
        assert_eq!(t.sysroot, std::fs::canonicalize(&evil).unwrap());
        assert!(!t.has_target());
        assert!(t.ensure_target(&|_| {}).is_err(), "a path toolchain is never asked to install");
        assert!(!mark.exists(), "nothing of the folder ran");
        // Without the file, the one above is the nearest; the environment wins over both.
        std::fs::remove_file(ws.join("rust-toolchain.toml")).unwrap();
        assert!(matches!(choice_with(&ws, None).unwrap(), Choice::Named { name, .. } if name == "stable"));
        let env = choice_with(&ws, Some("1.95.0".into())).unwrap();
        assert_eq!(env, Choice::Named { name: "1.95.0".into(), by: "RUSTUP_TOOLCHAIN".into() });
    }

    #[test]
    fn a_channel_is_asked_of_rustup_and_a_missing_one_is_named() {
        // The project's own toolchain (rust-toolchain.toml), with its wasm target.
        let c = Choice::Named { name: "1.95.0".into(), by: "x".into() };
        let t = resolve(&c).unwrap();
        assert_eq!(t.name.as_deref(), Some("1.95.0"));
        assert!(t.sysroot.join("bin/rustc").is_file(), "{}", t.sysroot.display());
        assert!(t.has_target(), "the tests' toolchain has {TARGET}");
        assert!(t.ensure_target(&|_| panic!("nothing to install")).is_ok());
        let c = Choice::Named { name: "0.0.1-never".into(), by: "x".into() };
        let e = resolve(&c).unwrap_err().to_string();
        assert!(e.contains("`0.0.1-never` that x names is not installed"), "{e}");
    }

    #[test]
    fn a_sysroot_is_taken_only_from_a_rustc_that_succeeds_naming_a_folder() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let rustc = |name: &str, body: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            // Another test's child may hold the new file a moment ("text file busy").
            for _ in 0..200 {
                match Command::new(&p).status() {
                    Err(e) if e.raw_os_error() == Some(26) => std::thread::sleep(std::time::Duration::from_millis(10)),
                    _ => break,
                }
            }
            p.display().to_string()
        };
        let here = dir.path().display().to_string();
        assert_eq!(ask_sysroot_of(&rustc("good", &format!("echo {here}")), None), Some(dir.path().to_path_buf()));
        assert_eq!(ask_sysroot_of(&rustc("failing", &format!("echo {here}; exit 1")), None), None);
        assert_eq!(ask_sysroot_of(&rustc("silent", "exit 0"), None), None);
        assert_eq!(ask_sysroot_of(&rustc("nowhere", "echo /no/such/folder"), None), None);
    }

    #[test]
    fn rustups_toolchain_is_named_by_its_folder() {
        let name = rustup_name(Path::new("/h/.rustup/toolchains/1.95.0-x86_64-unknown-linux-gnu"));
        assert_eq!(name.as_deref(), Some("1.95.0-x86_64-unknown-linux-gnu"));
        assert_eq!(rustup_name(Path::new("/usr/lib/rust")), None, "not rustup's");
    }

    #[test]
    fn a_toolchain_folder_needs_both_cargo_and_rustc() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("bin")).unwrap();
        std::fs::write(dir.path().join("bin/cargo"), "").unwrap();
        let c = Choice::Path { path: dir.path().into(), by: "x".into() };
        assert!(resolve(&c).unwrap_err().to_string().contains("no bin/cargo and bin/rustc"));
        std::fs::write(dir.path().join("bin/rustc"), "").unwrap();
        assert!(resolve(&c).is_ok());
    }

    #[test]
    fn a_missing_target_is_installed_by_rustup_and_checked_after() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let sysroot = dir.path().join("sysroot");
        std::fs::create_dir_all(&sysroot).unwrap();
        let t = Toolchain { name: Some("stable".into()), sysroot: sysroot.clone(), cargo: "cargo".into() };
        let lib = sysroot.join("lib/rustlib").join(TARGET).join("lib");
        let rustup = |name: &str, body: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, format!("#!/bin/sh\n[ \"$1\" = probe ] && exit 0\n{body}\n")).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            // Another test's child, forked while the file was open for writing,
            // may hold it a moment ("text file busy"): wait until it runs.
            for _ in 0..200 {
                match std::process::Command::new(&p).arg("probe").status() {
                    Err(e) if e.raw_os_error() == Some(26) => std::thread::sleep(std::time::Duration::from_millis(10)),
                    _ => break,
                }
            }
            p.display().to_string()
        };
        let said = std::cell::RefCell::new(Vec::new());
        let progress = |l: &str| said.borrow_mut().push(l.to_string());
        // Says yes, installs nothing: refused.
        let liar = rustup("liar", "exit 0");
        let e = t.ensure_target_with(&liar, &progress).unwrap_err().to_string();
        assert!(e.contains("could not install the target"), "{e}");
        // Installs, then fails: refused.
        let failing = rustup("failing", &format!("mkdir -p {}\nexit 1", lib.display()));
        assert!(t.ensure_target_with(&failing, &progress).is_err());
        std::fs::remove_dir_all(sysroot.join("lib")).unwrap();
        // Installs and says so: done, and the person was told.
        let args = dir.path().join("args");
        let good = rustup("good", &format!("echo \"$@\" > {}\nmkdir -p {}", args.display(), lib.display()));
        t.ensure_target_with(&good, &progress).unwrap();
        assert!(t.has_target());
        assert_eq!(std::fs::read_to_string(&args).unwrap().trim(), format!("target add {TARGET} --toolchain stable"));
        assert!(said.borrow().iter().any(|l| l.contains("installing it with `rustup target add")));
        std::fs::remove_dir_all(sysroot.join("lib")).unwrap();
        let e = t.ensure_target_with("/nonexistent/rustup", &progress).unwrap_err().to_string();
        assert!(e.contains("rustup is not available"), "{e}");
    }
}
