//! `autoapp plans` and `autoapp plan stop|reject`: the person's side of the
//! engineer's plans ([`crate::plans`]), on the same file the launcher reads.

use super::{Failure, app_id, fail, open_apps, print_json};
use crate::gate::Caller;
use crate::root::Root;

/// How many plans `autoapp plans` shows, newest first.
const PLANS_LISTED: usize = 200;

/// `autoapp plans <app> [--json]`.
pub(super) fn list(root: Root, app: String, json: bool) -> Result<(), Failure> {
    let id = app_id(&app)?;
    if !root.app(&id).exists() {
        return fail(crate::error::no_such_app(&id));
    }
    let apps = open_apps(&root)?;
    let plans = apps.plans().list(&id, PLANS_LISTED)?;
    if json {
        return print_json(&serde_json::json!({ "app": id, "plans": plans }));
    }
    if plans.is_empty() {
        say!("{id} has no plans: an engineer writes one with plan_open (docs/engineer.md, \"Plans and runs\")");
        return Ok(());
    }
    for p in &plans {
        let when = match p.state {
            crate::plans::State::Running => format!(" (until {} at the latest)", p.ends_by.as_deref().unwrap_or("?")),
            _ => String::new(),
        };
        say!("{}{when}", p.text().trim_end());
        match p.state {
            crate::plans::State::Submitted => {
                say!(
                    "  → waits for you: the engineer asks you to start it; `autoapp plan reject {id} {}` refuses it",
                    p.id
                )
            }
            crate::plans::State::Running => say!("  → `autoapp plan stop {id}` ends the run"),
            _ => {}
        }
        say!();
    }
    Ok(())
}

/// `autoapp plan stop|reject <app> [<plan>]`.
pub(super) fn act(root: Root, action: String, app: String, plan: Option<u64>) -> Result<(), Failure> {
    let id = app_id(&app)?;
    if !root.app(&id).exists() {
        return fail(crate::error::no_such_app(&id));
    }
    let apps = open_apps(&root)?;
    let me = Caller::command_line();
    if action == "stop" {
        let p = apps.plans().stop(&me, &id, plan)?;
        say!("stopped the run of plan {} of {id}: the engineer's next change asks you again", p.id);
    } else {
        let p = apps.plans().reject(&me, &id, plan)?;
        say!("rejected plan {} of {id}: the engineer may change {id} again, asking you each time", p.id);
    }
    Ok(())
}
