//! `autoapp grant`, `revoke` and `standing`: what the person lets an app
//! reach, and whether the engineer's work asks first ([`crate::grants`],
//! [`crate::gate::standing`]).

use super::{Failure, app_id, print_json};
use crate::gate::Caller;
use crate::grants;
use crate::root::Root;

/// `autoapp grant`.
pub(super) fn grant(root: Root, app: String, all_asked: bool, capabilities: Vec<String>) -> Result<(), Failure> {
    let id = app_id(&app)?;
    let paths = root.app(&id);
    let which = match (all_asked, capabilities.is_empty()) {
        (true, _) => grants::Asked::All,
        (false, false) => grants::Asked::Named(capabilities),
        (false, true) => {
            return Err(Failure {
                code: 2,
                message: "name the capabilities to grant (network:<origin>, files:<name>, spawn:<program>) or pass --all-asked".into(),
            });
        }
    };
    for line in grants::grant_newest(&Caller::command_line(), &paths, which)? {
        say!("granted {line}");
    }
    Ok(())
}

/// `autoapp revoke`.
pub(super) fn revoke(root: Root, app: String, capabilities: Vec<String>) -> Result<(), Failure> {
    let id = app_id(&app)?;
    for line in grants::revoke(&Caller::command_line(), &root.app(&id), &capabilities)? {
        say!("revoked {line}");
    }
    Ok(())
}

/// `autoapp standing on|off|status`.
pub(super) fn standing(root: Root, action: String, json: bool) -> Result<(), Failure> {
    use crate::gate::standing;
    if action != "status" {
        standing::set(&root, &Caller::command_line(), action == "on").map_err(|e| format!("{e:#}"))?;
    }
    let since = standing::since(&standing::file(&root));
    if json {
        return print_json(&serde_json::json!({ "standing": since.is_some(), "since": since }));
    }
    match since {
        Some(ms) => {
            let when = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
            say!(
                "standing approval is on (since {}): the engineer's edits, builds and previews run without asking; `autoapp standing off` asks again",
                humantime::format_rfc3339_seconds(when)
            );
        }
        None => say!(
            "standing approval is off: every edit, build and preview of the engineer asks you first; `autoapp standing on` lets it work without asking"
        ),
    }
    Ok(())
}
