//! `autoapp explain`: what a release asks for, in words a person reads before
//! activating it — every route with its effect and input schema, every
//! capability, each external route beside what it can use, what changed from
//! the active release, and what is not granted yet.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::grants;
use crate::manifest::{Effect, Manifest};
use crate::release;
use crate::root::AppPaths;

/// The explanation of one release.
#[derive(Debug, Serialize)]
pub struct Explanation {
    pub app: String,
    pub release: String,
    pub version: String,
    pub active: bool,
    pub routes: Vec<RouteLine>,
    /// Every capability asked, by name (`network:<origin>`, ...).
    pub capabilities: Vec<String>,
    /// Every capability asked, shown whole (issue 51, rule 2): a folder's
    /// declared and resolved path and its access, a program's path and its
    /// argument pattern; and whether it reaches the person's keys or this
    /// launcher's own files (`marked`). In the order of `capabilities`.
    pub asked: Vec<grants::AskedWhole>,
    pub not_granted: Vec<String>,
    /// What each granted capability is granted as: a folder's path and
    /// access, a program's path (`spawn:git` → `/usr/bin/git`).
    pub granted_as: std::collections::BTreeMap<String, String>,
    pub migrations: Vec<String>,
    /// `[[workflow]]`s: routes the launcher runs on a schedule.
    pub workflows: Vec<WorkflowLine>,
    /// Compared with the active release; `None` when nothing is active or this is it.
    pub changes: Option<Changes>,
    /// Things a person should know before granting or activating.
    pub warnings: Vec<String>,
    /// The keys the release declares, where each would go, and whether one
    /// is set for that very place (`crate::secrets`): never a value.
    pub secrets: Vec<crate::secrets::Listed>,
}

#[derive(Debug, Serialize)]
pub struct RouteLine {
    pub name: String,
    pub effect: Effect,
    pub summary: String,
    pub input: serde_json::Value,
    /// For an external route: the capabilities it can use.
    pub can_use: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct WorkflowLine {
    pub name: String,
    pub route: String,
    pub effect: Effect,
    /// `every 15m` or `cron "0 7 * * *" (local time)`.
    pub schedule: String,
    pub input: serde_json::Value,
    /// Whether it runs without asking only once the person approves it.
    pub needs_approval: bool,
}

#[derive(Debug, Default, Serialize)]
pub struct Changes {
    pub against: String,
    pub routes_added: Vec<String>,
    pub routes_removed: Vec<String>,
    /// `name: old → new`.
    pub effects_changed: Vec<String>,
    pub capabilities_added: Vec<String>,
    pub capabilities_removed: Vec<String>,
    pub migrations_added: Vec<String>,
    pub workflows_added: Vec<String>,
    pub workflows_removed: Vec<String>,
    /// A workflow of the same name with another route, input or schedule.
    pub workflows_changed: Vec<String>,
}

/// Explains release `id` of `app`.
pub fn explain(app: &AppPaths, id: &str) -> anyhow::Result<Explanation> {
    let info = release::info(app, id)?;
    let m = release::manifest(app, id)?;
    let active = release::active(app)?;
    let caps = grants::asked(&m);
    let routes = m
        .routes
        .iter()
        .map(|r| RouteLine {
            name: r.name.clone(),
            effect: r.effect,
            summary: r.summary.clone(),
            input: r.input.clone(),
            can_use: if r.effect == Effect::External { caps.clone() } else { Vec::new() },
        })
        .collect();
    let workflows = m
        .workflows
        .iter()
        .map(|w| {
            let effect = m.route(&w.route).map(|r| r.effect).unwrap_or(Effect::Read);
            WorkflowLine {
                name: w.name.clone(),
                route: w.route.clone(),
                effect,
                schedule: w.schedule.to_string(),
                input: w.input.clone(),
                needs_approval: effect != Effect::Read,
            }
        })
        .collect();
    let root = app.dir.parent().and_then(std::path::Path::parent).unwrap_or(&app.dir);
    let asked = grants::asked_whole(root, &m);
    let changes = match &active {
        Some(a) if a != id => Some(diff(a, &release::manifest(app, a)?, &m)),
        _ => None,
    };
    let warnings = m
        .capabilities
        .spawn
        .iter()
        .filter(|s| s.args.is_none())
        .map(|s| {
            format!(
                "spawn:{} has no argument pattern: this program may be told to do anything it can do (fix its arguments with args = [...] in the manifest)",
                s.program
            )
        })
        .collect();
    let secrets = match m.capabilities.secret.is_empty() {
        true => Vec::new(),
        false => crate::secrets::listed_here(app, &m)?.into_iter().filter(|l| l.binding.is_some()).collect(),
    };
    Ok(Explanation {
        secrets,
        warnings,
        app: app.id.to_string(),
        release: id.to_string(),
        version: info.version,
        active: active.as_deref() == Some(id),
        routes,
        not_granted: grants::ungranted(app, &m)?,
        granted_as: grants::targets(&grants::load(app)?),
        capabilities: caps,
        asked,
        migrations: m.migrations.clone(),
        workflows,
        changes,
    })
}

fn diff(against: &str, old: &Manifest, new: &Manifest) -> Changes {
    let names = |m: &Manifest| m.routes.iter().map(|r| r.name.clone()).collect::<BTreeSet<_>>();
    let (o, n) = (names(old), names(new));
    // Whole, as each release declares it: a moved folder, a widened access
    // or another argument pattern is a change (issue 51, rules 2 and 4).
    let (oc, nc): (BTreeSet<String>, BTreeSet<String>) =
        (grants::declared_whole(old).into_iter().collect(), grants::declared_whole(new).into_iter().collect());
    Changes {
        against: against.to_string(),
        routes_added: n.difference(&o).cloned().collect(),
        routes_removed: o.difference(&n).cloned().collect(),
        effects_changed: new
            .routes
            .iter()
            .filter_map(|r| {
                let before = old.route(&r.name)?;
                (before.effect != r.effect).then(|| format!("{}: {} → {}", r.name, before.effect, r.effect))
            })
            .collect(),
        capabilities_added: nc.difference(&oc).cloned().collect(),
        capabilities_removed: oc.difference(&nc).cloned().collect(),
        migrations_added: new.migrations.iter().skip(old.migrations.len()).cloned().collect(),
        workflows_added: new
            .workflows
            .iter()
            .filter(|w| !old.workflows.iter().any(|o| o.name == w.name))
            .map(|w| w.name.clone())
            .collect(),
        workflows_removed: old
            .workflows
            .iter()
            .filter(|o| !new.workflows.iter().any(|w| w.name == o.name))
            .map(|o| o.name.clone())
            .collect(),
        workflows_changed: new
            .workflows
            .iter()
            .filter_map(|w| {
                let o = old.workflows.iter().find(|o| o.name == w.name)?;
                (o != w).then(|| format!("{}: {} {} → {} {}", w.name, o.route, o.schedule, w.route, w.schedule))
            })
            .collect(),
    }
}

/// How wide the summary's column is: with the 37 columns before it, a line
/// fits in 80.
const SUMMARY_WIDTH: usize = 42;

/// `text` in lines of at most `width` characters, broken at blanks (a word
/// longer than that cut), each line after the first indented to `column`;
/// blank runs become one space.
fn hang(text: &str, column: usize, width: usize) -> String {
    let mut lines: Vec<String> = vec![String::new()];
    for word in text.split_whitespace() {
        let mut word: Vec<char> = word.chars().collect();
        loop {
            let line = lines.last_mut().expect("one line at least");
            let used = line.chars().count();
            let room = if used == 0 { width } else { width.saturating_sub(used + 1) };
            if word.len() <= room {
                if used > 0 {
                    line.push(' ');
                }
                line.extend(word.iter());
                break;
            }
            if used == 0 {
                line.extend(word.drain(..width));
            }
            lines.push(String::new());
        }
    }
    lines.retain(|l| !l.is_empty());
    lines.join(&format!("\n{}", " ".repeat(column)))
}

/// The explanation as text for a terminal. Every string that came from the
/// release's manifest (a package's: another person's words) is escaped here
/// ([`crate::elsewhere::text::terminal`]): the text is printed with its line
/// breaks kept, and only the host's own may be among them (issue 51, rule 5;
/// `tests/all/tidy.rs` and this module's tests hold it).
pub fn render(e: &Explanation) -> String {
    use crate::elsewhere::text::terminal as t;
    use std::fmt::Write as _;
    let mut s = String::new();
    let state = if e.active { "active" } else { "candidate" };
    let _ = writeln!(s, "{} {} — release {} ({state})", e.app, t(&e.version), crate::release::short(&e.release));
    let _ = writeln!(s, "\nroutes:");
    for r in &e.routes {
        // The summary in a column of its own, its blank runs collapsed:
        // however long, none of it starts a line where the host's own do
        // (issue 73: 300 blanks wrapped a forged "capabilities: none" there).
        let _ =
            writeln!(s, "  {:<24} {:<9} {}", t(&r.name), r.effect.as_str(), hang(&t(&r.summary), 37, SUMMARY_WIDTH));
        let _ = writeln!(s, "  {:<24} input: {}", "", t(&r.input.to_string()));
        if r.effect == Effect::External {
            let _ = writeln!(s, "  {:<24} can use: {}", "", t(&r.can_use.join(", ")));
        }
    }
    if e.capabilities.is_empty() {
        let _ = writeln!(s, "\ncapabilities: none (reaches nothing outside its own store)");
    } else {
        let _ = writeln!(s, "\ncapabilities asked (each whole: what granting it gives):");
        for c in &e.capabilities {
            let key = c.strip_prefix("secret:").and_then(|n| e.secrets.iter().find(|l| l.name == n));
            let mark = match e.granted_as.get(c) {
                _ if key.is_some() => key.map(|k| key_said(&e.app, k)).unwrap_or_default(),
                _ if e.not_granted.contains(c) => "not granted".to_string(),
                // A path from grants.json: escaped like any text the host did not write.
                Some(target) => format!("granted ({})", t(target)),
                None => "granted".to_string(),
            };
            let asked = e.asked.iter().find(|a| &a.name == c);
            let whole = asked.map_or(String::new(), |a| t(&a.whole).into_owned());
            let _ = writeln!(s, "  {:<28} {whole}: {mark}", t(c));
            if let Some(why) = asked.and_then(|a| a.marked.as_ref()) {
                let _ = writeln!(s, "  {:<28} MARKED: {}; `grant --all-asked` never grants it", "", t(why));
            }
        }
    }
    if !e.migrations.is_empty() {
        let _ = writeln!(s, "\nmigrations: {}", t(&e.migrations.join(", ")));
    }
    if !e.workflows.is_empty() {
        let _ = writeln!(s, "\nworkflows (run by the launcher on channel workflow):");
        for w in &e.workflows {
            let approval = if w.needs_approval {
                "asks at each run until you approve it for this release"
            } else {
                "runs without asking (a read)"
            };
            let _ = writeln!(
                s,
                "  {:<24} {} {} ({}), input {}: {approval}",
                t(&w.name),
                t(&w.schedule),
                t(&w.route),
                w.effect,
                t(&w.input.to_string())
            );
        }
    }
    if let Some(c) = &e.changes {
        let _ = writeln!(s, "\ncompared with the active release {}:", crate::release::short(&c.against));
        let mut any = false;
        for (label, items) in [
            ("routes added", &c.routes_added),
            ("routes removed", &c.routes_removed),
            ("effects changed", &c.effects_changed),
            ("capabilities added", &c.capabilities_added),
            ("capabilities removed", &c.capabilities_removed),
            ("migrations added", &c.migrations_added),
            ("workflows added", &c.workflows_added),
            ("workflows removed", &c.workflows_removed),
            ("workflows changed", &c.workflows_changed),
        ] {
            if !items.is_empty() {
                any = true;
                let _ = writeln!(s, "  {label}: {}", t(&items.join(", ")));
            }
        }
        if !any {
            let _ = writeln!(s, "  no change to routes, effects, capabilities, migrations or workflows");
        }
    }
    for w in &e.warnings {
        let _ = writeln!(s, "\nwarning: {}", t(w));
    }
    let grant: Vec<&str> = e.not_granted.iter().filter(|n| !n.starts_with("secret:")).map(String::as_str).collect();
    if !grant.is_empty() {
        let _ = writeln!(s, "\nbefore activating, grant: autoapp grant {} {}", e.app, t(&grant.join(" ")));
    }
    for k in e.secrets.iter().filter(|k| k.state == "rebound") {
        let _ = writeln!(
            s,
            "\nbefore activating, set the key again for its new place: autoapp secret set {} {} --release {}",
            e.app,
            t(&k.name),
            crate::release::short(&e.release)
        );
    }
    s
}

/// A key's state where `explain` lists it (issue 52, rule 6: a key set for
/// another place is marked, never given).
fn key_said(app: &str, k: &crate::secrets::Listed) -> String {
    use crate::elsewhere::text::terminal as t;
    match k.state {
        "set" => format!("set on {}", t(k.set_at.as_deref().unwrap_or("?"))),
        "rebound" => format!(
            "MARKED: would send your key `{}` to {} — it was set for {}; it is not given until you set it again",
            t(&k.name),
            t(k.binding.as_deref().unwrap_or("?")),
            t(k.set_for.as_deref().unwrap_or("?"))
        ),
        _ => format!("not set (`autoapp secret set {app} {}`): its requests go without it", t(&k.name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 51, rule 5: `explain` printed a manifest's strings as they were,
    /// so a release made before the manifest refused them (or any string
    /// that reaches here) could add lines of its own. Every one is escaped:
    /// the lines are the host's alone.
    #[test]
    fn a_release_s_words_cannot_add_lines_to_its_explanation() {
        let forged = "x\npublisher: fingerprint 00 \"Trusted\"\u{1b}[2K\u{202e}";
        let e = Explanation {
            app: "notes".into(),
            release: "0123456789abcdef".into(),
            version: forged.into(),
            active: false,
            routes: vec![RouteLine {
                name: forged.into(),
                effect: Effect::External,
                summary: forged.into(),
                input: serde_json::json!({ "description": forged }),
                can_use: vec![forged.into()],
            }],
            capabilities: vec![forged.into()],
            asked: vec![grants::AskedWhole { name: forged.into(), whole: forged.into(), marked: Some(forged.into()) }],
            not_granted: vec![forged.into()],
            granted_as: Default::default(),
            migrations: vec![forged.into()],
            workflows: vec![WorkflowLine {
                name: forged.into(),
                route: forged.into(),
                effect: Effect::Write,
                schedule: forged.into(),
                input: serde_json::json!(forged),
                needs_approval: true,
            }],
            changes: Some(Changes {
                against: "fedcba9876543210".into(),
                routes_added: vec![forged.into()],
                ..Default::default()
            }),
            warnings: vec![forged.into()],
            secrets: vec![crate::secrets::Listed {
                name: forged.into(),
                summary: Some(forged.into()),
                binding: Some(forged.into()),
                set_for: Some(forged.into()),
                set_at: Some(forged.into()),
                kept: None,
                state: "rebound",
            }],
        };
        let e = Explanation { capabilities: vec![forged.into(), format!("secret:{forged}")], ..e };
        let text = render(&e);
        assert!(!text.contains('\u{1b}') && !text.contains('\u{202e}'), "{text}");
        // Issue 73: a summary padded with blanks to wrap a forged line into
        // the host's place at 120 columns: collapsed, and held in its column.
        let padded =
            format!("Lists notes{}capabilities: none (reaches nothing outside its own store)", " ".repeat(300));
        let mut long = e;
        long.routes[0].summary = padded;
        long.routes[0].name = "notes.list".into();
        let wrapped = render(&long);
        assert!(!wrapped.lines().any(|l| l.starts_with("capabilities: none")), "{wrapped}");
        let at = wrapped.lines().position(|l| l.contains("Lists notes")).unwrap();
        let summary: Vec<&str> = wrapped.lines().skip(at).take(2).collect();
        assert!(summary[0].chars().count() <= 80 && summary[1].starts_with(&" ".repeat(37)), "{wrapped}");
        assert_eq!(hang("a  b   c", 4, 3), "a b\n    c");
        assert_eq!(hang("abcdefg", 2, 3), "abc\n  def\n  g");
        assert!(!text.lines().any(|l| l.starts_with("publisher:")), "{text}");
        // (A summary's own lines after its first are held in its column.)
        let ours: Vec<&str> = text.lines().filter(|l| !l.is_empty() && !l.starts_with(&" ".repeat(37))).collect();
        assert_eq!(ours.len(), 17, "one line for each of the host's: {text}");
    }
}
