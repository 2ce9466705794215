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
    pub not_granted: Vec<String>,
    pub migrations: Vec<String>,
    /// Compared with the active release; `None` when nothing is active or this is it.
    pub changes: Option<Changes>,
    /// Things a person should know before granting or activating.
    pub warnings: Vec<String>,
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
    Ok(Explanation {
        warnings,
        app: app.id.to_string(),
        release: id.to_string(),
        version: info.version,
        active: active.as_deref() == Some(id),
        routes,
        not_granted: grants::ungranted(app, &m)?,
        capabilities: caps,
        migrations: m.migrations.clone(),
        changes,
    })
}

fn diff(against: &str, old: &Manifest, new: &Manifest) -> Changes {
    let names = |m: &Manifest| m.routes.iter().map(|r| r.name.clone()).collect::<BTreeSet<_>>();
    let (o, n) = (names(old), names(new));
    let (oc, nc): (BTreeSet<String>, BTreeSet<String>) =
        (grants::asked(old).into_iter().collect(), grants::asked(new).into_iter().collect());
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
    }
}

/// The explanation as text for a terminal.
pub fn render(e: &Explanation) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let state = if e.active { "active" } else { "candidate" };
    let _ = writeln!(s, "{} {} — release {} ({state})", e.app, e.version, crate::apps::short(&e.release));
    let _ = writeln!(s, "\nroutes:");
    for r in &e.routes {
        let _ = writeln!(s, "  {:<24} {:<9} {}", r.name, r.effect.as_str(), r.summary);
        let _ = writeln!(s, "  {:<24} input: {}", "", r.input);
        if r.effect == Effect::External {
            let _ = writeln!(s, "  {:<24} can use: {}", "", r.can_use.join(", "));
        }
    }
    if e.capabilities.is_empty() {
        let _ = writeln!(s, "\ncapabilities: none (reaches nothing outside its own store)");
    } else {
        let _ = writeln!(s, "\ncapabilities asked:");
        for c in &e.capabilities {
            let mark = if e.not_granted.contains(c) { "not granted" } else { "granted" };
            let _ = writeln!(s, "  {c:<50} {mark}");
        }
    }
    if !e.migrations.is_empty() {
        let _ = writeln!(s, "\nmigrations: {}", e.migrations.join(", "));
    }
    if let Some(c) = &e.changes {
        let _ = writeln!(s, "\ncompared with the active release {}:", crate::apps::short(&c.against));
        let mut any = false;
        for (label, items) in [
            ("routes added", &c.routes_added),
            ("routes removed", &c.routes_removed),
            ("effects changed", &c.effects_changed),
            ("capabilities added", &c.capabilities_added),
            ("capabilities removed", &c.capabilities_removed),
            ("migrations added", &c.migrations_added),
        ] {
            if !items.is_empty() {
                any = true;
                let _ = writeln!(s, "  {label}: {}", items.join(", "));
            }
        }
        if !any {
            let _ = writeln!(s, "  no change to routes, effects, capabilities or migrations");
        }
    }
    for w in &e.warnings {
        let _ = writeln!(s, "\nwarning: {w}");
    }
    if !e.not_granted.is_empty() {
        let _ = writeln!(s, "\nbefore activating, grant: autoapp grant {} {}", e.app, e.not_granted.join(" "));
    }
    s
}
