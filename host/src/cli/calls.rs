//! `autoapp call`, `runs`, `workflows` and `workflow`: an app's routes
//! called from the command line, and what its record and its workflows say.

use super::{Failure, app_id, fail, print_json};
use crate::gate::Caller;
use crate::root::Root;

/// `autoapp call`.
pub(super) fn call(
    root: Root,
    app: String,
    route: String,
    json_input: Option<String>,
    preview: Option<String>,
) -> Result<(), Failure> {
    let id = app_id(&app)?;
    let input = match json_input.as_deref() {
        None => "{}".to_string(),
        Some("-") => input_from_stdin()?,
        Some(_) => json_input.unwrap_or_default(),
    };
    // In a worker confined to the app, as the person.
    let output = crate::worker::call(&root, &id, preview.as_deref(), &route, &input)?;
    print_json(&output)
}

/// The most of an input `autoapp call` reads from standard input.
const MAX_STDIN_INPUT: u64 = 32 << 20;

/// A call's input given as `-`: standard input, whole, bounded.
fn input_from_stdin() -> Result<String, Failure> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    std::io::stdin()
        .take(MAX_STDIN_INPUT + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read the input from standard input ({e})"))?;
    if bytes.len() as u64 > MAX_STDIN_INPUT {
        return fail(format!("the input on standard input is longer than {} MiB", MAX_STDIN_INPUT >> 20));
    }
    String::from_utf8(bytes).or_else(|_| fail("the input on standard input is not UTF-8 text"))
}

/// `autoapp runs` (with `summary`, `runs --summary`).
pub(super) fn runs(root: Root, app: String, limit: usize, summary: bool, json: bool) -> Result<(), Failure> {
    let id = app_id(&app)?;
    let paths = root.app(&id);
    if !paths.exists() {
        return fail(crate::error::no_such_app(&id));
    }
    if summary {
        return days(&id, &paths, limit, json);
    }
    let rows = crate::gate::record::read(&paths.data(), limit)?;
    if json {
        return print_json(&rows);
    }
    if rows.is_empty() {
        say!("no calls recorded for {id} yet");
        return Ok(());
    }
    say!(
        "{:<20} {:<8} {:<14} {:<16} {:<9} {:<10} {:<17} {:<8} {:>8}  {:<12} reason",
        "time",
        "channel",
        "caller",
        "route",
        "effect",
        "decision",
        "answered by",
        "outcome",
        "ms",
        "arguments"
    );
    for r in rows {
        say!(
            "{:<20} {:<8} {:<14} {:<16} {:<9} {:<10} {:<17} {:<8} {:>8.1}  {:<12} {}",
            r.time,
            r.channel,
            r.caller.chars().take(14).collect::<String>(),
            r.route,
            r.effect,
            r.decision,
            r.answered_by,
            r.outcome,
            r.duration_ms,
            r.arguments_hash.get(..12).unwrap_or("-"),
            r.reason
        );
    }
    let gone = crate::gate::record::let_go_of(&paths.data())?;
    if let (rows @ 1.., Some(through)) = (gone.rows, gone.through) {
        say!(
            "(older rows were let go: {rows} rows, up to {through}, by record_keep_days and record_keep_mib or `prune --record-before`; `autoapp runs {id} --summary` counts them by day)"
        );
    }
    Ok(())
}

/// `autoapp runs --summary`: calls, refusals and errors per day, route and
/// channel, the rows let go included.
fn days(id: &crate::manifest::AppId, paths: &crate::root::AppPaths, limit: usize, json: bool) -> Result<(), Failure> {
    let days = crate::gate::record::summary(&paths.data(), limit)?;
    if json {
        return print_json(&days);
    }
    if days.is_empty() {
        say!("no calls recorded for {id} yet");
        return Ok(());
    }
    say!("{:<10} {:<8} {:<24} {:>8} {:>8} {:>8}", "day", "channel", "route", "calls", "refused", "errors");
    for d in days {
        say!(
            "{:<10} {:<8} {:<24} {:>8} {:>8} {:>8}",
            d.day,
            d.channel,
            crate::elsewhere::text::terminal(&d.route),
            d.calls,
            d.refused,
            d.errors
        );
    }
    Ok(())
}

/// `autoapp workflows`.
pub(super) fn workflows(root: Root, app: String, json: bool) -> Result<(), Failure> {
    let id = app_id(&app)?;
    let list = crate::workflows::status(&root, &id, chrono::Local::now()).map_err(|e| format!("{e:#}"))?;
    if json {
        return print_json(&list);
    }
    if list.is_empty() {
        say!("the active release of {id} has no workflows ([[workflow]] in autoapp.toml)");
        return Ok(());
    }
    // A schedule runs only while a launcher does.
    let unserved = match crate::root::running_launcher(&root) {
        Ok(Some(_)) => "",
        _ => " (when a launcher runs: none does now; `autoapp open`)",
    };
    for w in list {
        let approval = match (w.needs_approval, w.approved) {
            (false, _) => "runs without approval (a read)".to_string(),
            (true, true) => "approved for this release".to_string(),
            (true, false) => {
                format!("not approved: each run asks (`autoapp workflow approve {id} {}`)", w.name)
            }
        };
        say!("{}  route {} ({}), {}", w.name, w.route, w.effect, w.schedule);
        match w.next_run.as_deref() {
            Some(next) => say!("  next run: {next}{unserved}"),
            None => say!("  next run: never"),
        }
        match &w.last_run {
            Some(l) => say!(
                "  last run: {} {} {}{}",
                l.time,
                l.decision,
                l.outcome,
                if l.reason.is_empty() { String::new() } else { format!(" ({})", l.reason) }
            ),
            None => say!("  last run: none yet"),
        }
        say!("  {approval}");
    }
    Ok(())
}

/// `autoapp workflow`.
pub(super) fn workflow(root: Root, action: String, app: String, name: String) -> Result<(), Failure> {
    let id = app_id(&app)?;
    let message = match action.as_str() {
        "approve" => crate::workflows::approve(&Caller::command_line(), &root, &id, &name),
        _ => crate::workflows::revoke(&Caller::command_line(), &root, &id, &name),
    }
    .map_err(|e| format!("{e:#}"))?;
    say!("{message}");
    Ok(())
}
