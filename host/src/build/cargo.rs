//! Running cargo's two steps under the confinement shim, and taking the
//! component it built.
//!
//! Each step is `autoapp __confined <policy> -- cargo …` (see
//! `caps::confine`): the supervisor ends the step and everything it started
//! at the policy's deadline, when [`Stop`] is set (the caller went away, the
//! launcher stops) and when this process dies. What cargo says passes the
//! sanitiser line by line before anyone sees it.

use std::io::{BufRead as _, Read as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Context as _;

use super::{BuildError, Stop, refuse};
use crate::caps::confine::{CANNOT_CONFINE, PAST_DEADLINE, Policy, STOPPED};

/// The most lines of cargo's messages a failed build keeps for its answer.
const KEPT_MESSAGES: usize = 400;

/// The largest component the host reads from a build.
pub const MAX_COMPONENT: u64 = 256 << 20;

/// How often a running step looks at its [`Stop`].
const POLL: Duration = Duration::from_millis(50);

/// What one step said.
pub struct Step {
    pub success: bool,
    /// Its messages (stderr, sanitised), the last [`KEPT_MESSAGES`] lines.
    pub messages: String,
    /// The `.wasm` files of the cdylibs it says it built.
    pub wasm: Vec<PathBuf>,
}

/// Runs `cargo <args>` in `cwd` under `policy`, passing each line of its
/// messages to `progress` (sanitised) as it comes. `what` names the step in
/// a refusal.
pub fn run(
    policy: &Policy,
    cargo: &Path,
    args: &[String],
    cwd: &Path,
    what: &str,
    stop: &Stop,
    progress: &dyn Fn(&str),
) -> Result<Step, BuildError> {
    let me = std::env::current_exe().context("cannot find the autoapp binary")?;
    let policy_json = serde_json::to_string(policy).context("the policy is JSON")?;
    let mut child = Command::new(me)
        .arg("__confined")
        .arg(policy_json)
        .arg("--")
        .arg(cargo)
        .args(args)
        .env_clear()
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| BuildError::Refused(format!("cannot run cargo ({e})")))?;
    let stderr = child.stderr.take().expect("piped stderr");
    let (lines_tx, lines_rx) = std::sync::mpsc::channel::<String>();
    let relay = std::thread::spawn(move || {
        let mut clean = crate::sanitize::Lines::default();
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(line) = clean.line(&line)
                && lines_tx.send(line).is_err()
            {
                break;
            }
        }
    });
    let stdout = child.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || built_components(stdout));
    let mut kept = std::collections::VecDeque::new();
    let mut first_line: Option<String> = None;
    let mut told = false;
    let status = loop {
        match lines_rx.recv_timeout(POLL) {
            Ok(line) => {
                progress(&line);
                first_line.get_or_insert_with(|| line.clone());
                if kept.len() == KEPT_MESSAGES {
                    kept.pop_front();
                }
                kept.push_back(line);
                continue;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                // Standard error closed; the step may still be running.
                std::thread::sleep(POLL.min(Duration::from_millis(10)));
            }
        }
        if stop.is_set() && !told {
            // The supervisor ends the step and everything it started.
            if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
            told = true;
        }
        if let Some(status) = child.try_wait().context("cannot wait for cargo")? {
            break status;
        }
    };
    for line in lines_rx.try_iter() {
        progress(&line);
        kept.push_back(line);
    }
    let _ = relay.join();
    let wasm = reader.join().unwrap_or_default();
    let messages = Vec::from(kept).join("\n");
    let said = |prefix: &str| messages.lines().find_map(|l| l.strip_prefix(prefix)).map(str::to_string);
    match status.code() {
        Some(PAST_DEADLINE) if said("autoapp: it ran past its deadline").is_some() => refuse(format!(
            "the {what} ran past its deadline and was stopped, with every process it started (build_deadline_secs in config.toml sets the deadline); nothing changed"
        )),
        Some(STOPPED) | None if told => refuse(format!(
            "the {what} was stopped, with every process it started, because its caller went away; nothing changed"
        )),
        Some(STOPPED) => {
            refuse(format!("the {what} was interrupted and stopped, with every process it started; nothing changed"))
        }
        Some(CANNOT_CONFINE) if said("autoapp: ").is_some() => {
            refuse(format!("the {what} was not run: {}", said("autoapp: ").unwrap_or_default()))
        }
        _ => Ok(Step { success: status.success(), messages, wasm }),
    }
}

/// The `.wasm` files of the cdylibs named by cargo's JSON messages.
fn built_components(stdout: impl std::io::Read) -> Vec<PathBuf> {
    let mut wasm: Vec<PathBuf> = Vec::new();
    for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(&line) else { continue };
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        let is_cdylib = msg["target"]["kind"].as_array().is_some_and(|k| k.iter().any(|k| k == "cdylib"));
        if !is_cdylib {
            continue;
        }
        for f in msg["filenames"].as_array().into_iter().flatten() {
            if let Some(f) = f.as_str().filter(|f| f.ends_with(".wasm")) {
                wasm.push(PathBuf::from(f));
            }
        }
    }
    wasm
}

/// Reads the component at `path`, which must be a regular file inside
/// `target_dir` (a real path) reached without a symlink, of at most
/// [`MAX_COMPONENT`] bytes — whatever cargo's messages said.
pub fn read_component(target_dir: &Path, path: &Path) -> Result<Vec<u8>, BuildError> {
    use rustix::fs::{Mode, OFlags};
    let outside = || {
        BuildError::Refused(format!(
            "cargo named {} as the component, which is not a file inside the build's target folder; nothing was read",
            path.display()
        ))
    };
    let rel = path.strip_prefix(target_dir).map_err(|_| outside())?;
    let parts: Vec<&std::ffi::OsStr> = rel
        .components()
        .map(|c| match c {
            std::path::Component::Normal(n) => Ok(n),
            _ => Err(outside()),
        })
        .collect::<Result<_, _>>()?;
    let Some((file, dirs)) = parts.split_last() else { return Err(outside()) };
    let no_follow = OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut dir = rustix::fs::open(target_dir, OFlags::DIRECTORY | OFlags::RDONLY | no_follow, Mode::empty())
        .map_err(|_| outside())?;
    for d in dirs {
        dir = rustix::fs::openat(&dir, *d, OFlags::DIRECTORY | OFlags::RDONLY | no_follow, Mode::empty())
            .map_err(|_| outside())?;
    }
    let fd = rustix::fs::openat(&dir, *file, OFlags::RDONLY | no_follow, Mode::empty()).map_err(|_| outside())?;
    let stat = rustix::fs::fstat(&fd).map_err(|_| outside())?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(outside());
    }
    if stat.st_size as u64 > MAX_COMPONENT {
        return refuse(format!(
            "the component cargo built is {} MiB; a component may be at most {} MiB",
            stat.st_size as u64 >> 20,
            MAX_COMPONENT >> 20
        ));
    }
    let mut bytes = Vec::with_capacity(stat.st_size as usize);
    std::fs::File::from(fd)
        .take(MAX_COMPONENT + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {}", path.display()))?;
    if bytes.len() as u64 > MAX_COMPONENT {
        return refuse(format!("the component cargo built is over {} MiB", MAX_COMPONENT >> 20));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_component_is_read_only_as_a_regular_file_inside_the_target_folder() {
        let dir = tempfile::tempdir().unwrap();
        let target = std::fs::canonicalize(dir.path()).unwrap().join("target");
        let release = target.join("wasm32-wasip2/release");
        std::fs::create_dir_all(&release).unwrap();
        std::fs::write(release.join("app.wasm"), b"\0asm\x0d\0\x01\0").unwrap();
        assert_eq!(read_component(&target, &release.join("app.wasm")).unwrap(), b"\0asm\x0d\0\x01\0");

        let secret = dir.path().join("secret");
        std::fs::write(&secret, "a key").unwrap();
        std::os::unix::fs::symlink(&secret, release.join("link.wasm")).unwrap();
        std::os::unix::fs::symlink(dir.path(), target.join("up")).unwrap();
        for named in [
            secret.clone(),
            release.join("link.wasm"),
            target.join("up/secret"),
            target.join("wasm32-wasip2/../../secret"),
            release.clone(),
            release.join("missing.wasm"),
        ] {
            let e = read_component(&target, &named).unwrap_err().to_string();
            assert!(e.contains("not a file inside the build's target folder"), "{}: {e}", named.display());
        }
    }

    #[test]
    fn only_cdylib_artifacts_of_cargo_are_components() {
        let messages = concat!(
            r#"{"reason":"compiler-artifact","target":{"kind":["lib"]},"filenames":["/t/a.rlib"]}"#,
            "\n",
            r#"{"reason":"compiler-artifact","target":{"kind":["cdylib"]},"filenames":["/t/app.wasm","/t/app.d"]}"#,
            "\n",
            "not json\n",
            r#"{"reason":"build-script-executed","filenames":["/t/x.wasm"]}"#,
            "\n"
        );
        assert_eq!(built_components(messages.as_bytes()), [PathBuf::from("/t/app.wasm")]);
    }
}
