//! The person's standing approval ("Work without asking"): one switch for the
//! whole launcher that answers **yes** — never no — to the engineer's
//! questions of [`super::STANDING_TOOLS`] and to its calls of a preview's
//! routes, on channel `ai` only ([`super::standing_covers`]).
//!
//! `<root>/standing.json` holds `{"version":1,"standing":true,"since":<ms>}`,
//! written atomically. Anything else — absent, unreadable, another version,
//! `standing` not `true` — is off; turning it off removes the file. The gate
//! reads it at every question it could answer, never a cached copy, so the
//! switch flipped anywhere (the command line, the panel, a card's third
//! button) answers the next question without a restart. Only the person sets
//! it: no engineer tool, MCP request or workflow reaches [`set`].

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use super::Caller;
use crate::root::Root;

/// The file's name in the root.
pub const FILE: &str = "standing.json";

/// The one version of the file this host reads.
const VERSION: u32 = 1;

#[derive(Debug, Serialize, Deserialize)]
struct OnDisk {
    version: u32,
    standing: bool,
    since: u64,
}

/// Where the root keeps the switch.
pub fn file(root: &Root) -> PathBuf {
    root.dir().join(FILE)
}

/// Since when (milliseconds since the epoch) the standing approval is on, or
/// `None` when it is off (the file is absent or anything but version 1 with
/// `standing: true`).
pub fn since(file: &Path) -> Option<u64> {
    let text = std::fs::read(file).ok()?;
    let on: OnDisk = serde_json::from_slice(&text).ok()?;
    (on.version == VERSION && on.standing).then_some(on.since)
}

/// Whether the standing approval is on.
pub fn is_on(file: &Path) -> bool {
    since(file).is_some()
}

/// Turns the standing approval on or off for the whole root, as the person
/// (`caller` is the adapter's: the command line, the panel, a page). Each app's
/// record gets a row saying so, since the switch answers for every app.
/// Returns whether it changed.
pub fn set(root: &Root, caller: &Caller, on: bool) -> anyhow::Result<bool> {
    anyhow::ensure!(
        caller.channel() == super::Channel::User,
        "only the person turns the standing approval on or off (channel user)"
    );
    let path = file(root);
    let was = is_on(&path);
    let done: anyhow::Result<bool> = if on {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let text = serde_json::to_vec(&OnDisk { version: VERSION, standing: true, since })?;
        crate::root::write_atomic(&path, &text).map(|()| !was)
    } else {
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(was),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e).with_context(|| format!("cannot remove {}", path.display())),
        }
    };
    let name = if on { "standing-on" } else { "standing-off" };
    let changed = done?;
    for app in root.app_ids().unwrap_or_default() {
        let result: anyhow::Result<bool> = Ok(changed);
        let recorded = super::record::recorded(&root.app(&app), caller, name, serde_json::json!({}), result, |c| {
            let said = match (on, *c) {
                (true, true) => "the engineer's edits, builds and previews run without asking",
                (true, false) => "was on already",
                (false, true) => "every question goes to the person again",
                (false, false) => "was off already",
            };
            (String::new(), said.to_string())
        });
        if let Err(e) = recorded {
            tracing::error!(%app, "{e:#}");
        }
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anything_but_version_1_with_standing_true_is_off() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join(FILE);
        assert!(!is_on(&f), "absent is off");
        for off in [
            "",
            "not json",
            r#"{"version":2,"standing":true,"since":1}"#,
            r#"{"version":1,"standing":false,"since":1}"#,
            r#"{"version":1,"standing":"true","since":1}"#,
            r#"{"standing":true,"since":1}"#,
        ] {
            std::fs::write(&f, off).unwrap();
            assert!(!is_on(&f), "{off:?} is off");
        }
        std::fs::write(&f, r#"{"version":1,"standing":true,"since":1700000000000}"#).unwrap();
        assert_eq!(since(&f), Some(1_700_000_000_000));
    }

    #[test]
    fn only_the_person_sets_it_and_off_removes_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::open(dir.path()).unwrap();
        let f = file(&root);
        for not_the_person in [Caller::ai("engineer"), Caller::control("agent"), Caller::workflow("nightly")] {
            assert!(set(&root, &not_the_person, true).is_err());
            assert!(!f.exists());
        }
        assert!(set(&root, &Caller::command_line(), true).unwrap());
        assert!(is_on(&f));
        assert!(!set(&root, &Caller::panel(), true).unwrap(), "on again changes nothing");
        assert!(set(&root, &Caller::panel(), false).unwrap());
        assert!(!f.exists(), "off removes the file");
        assert!(!set(&root, &Caller::panel(), false).unwrap());
    }
}
