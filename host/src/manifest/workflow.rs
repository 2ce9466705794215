//! `[[workflow]]`: a route the launcher runs on a schedule, with a fixed
//! input (DESIGN.md, "Workflows"). Parsing and the checks that need only the
//! manifest live here; the runner, the approvals and the clock are in
//! `crate::workflows`.

use std::collections::BTreeSet;
use std::str::FromStr as _;

use chrono::{DateTime, TimeZone};
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use super::{MAX_ROUTE_NAME, Problems, Route, is_name};

/// A declared workflow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workflow {
    pub name: String,
    pub route: String,
    /// The input every run sends (checked against the route's schema).
    pub input: Json,
    pub schedule: Schedule,
}

/// When a workflow runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Schedule {
    /// `every = "15m"`: a duration of s, m, h or d, from when the launcher
    /// starts (or the release is activated).
    Every(String),
    /// `cron = "0 7 * * *"`: minute, hour, day of month, month, day of week,
    /// in the person's local time zone.
    Cron(String),
}

impl Schedule {
    /// The interval of an `every` schedule.
    pub fn every_secs(&self) -> Option<u64> {
        match self {
            Schedule::Every(text) => parse_every(text).ok(),
            Schedule::Cron(_) => None,
        }
    }

    /// The first time strictly after `after` when this schedule is due.
    pub fn next_after<Tz: TimeZone>(&self, after: &DateTime<Tz>) -> Option<DateTime<Tz>> {
        match self {
            Schedule::Every(text) => {
                let secs = parse_every(text).ok()?;
                after.clone().checked_add_signed(chrono::TimeDelta::try_seconds(secs as i64)?)
            }
            Schedule::Cron(line) => {
                let cron = parse_cron(line).ok()?;
                cron.find_next_occurrence(after, false).ok()
            }
        }
    }
}

impl std::fmt::Display for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Schedule::Every(t) => write!(f, "every {t}"),
            Schedule::Cron(t) => write!(f, "cron \"{t}\" (local time)"),
        }
    }
}

/// The longest interval `every` accepts: a year.
const MAX_EVERY_SECS: u64 = 366 * 86_400;

/// Seconds of `15m`, `30s`, `2h`, `1d`.
pub fn parse_every(text: &str) -> Result<u64, String> {
    let fix = "write a whole number and one unit, s, m, h or d, like \"15m\" or \"1h\"";
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().map_err(|_| format!("`{}` is not a duration: {fix}", text.escape_debug()))?;
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("`{}` is not a duration: {fix}", text.escape_debug())),
    };
    match n.checked_mul(scale) {
        Some(0) => Err(format!("`{}` is no time at all: {fix}", text.escape_debug())),
        Some(secs) if secs <= MAX_EVERY_SECS => Ok(secs),
        _ => Err(format!("`{}` is longer than a year: use cron for rare runs", text.escape_debug())),
    }
}

/// A five-field cron line (minute hour day-of-month month day-of-week).
pub fn parse_cron(line: &str) -> Result<croner::Cron, String> {
    let fields = line.split_whitespace().count();
    if fields != 5 {
        return Err(format!(
            "`{}` has {fields} fields, not 5: write minute, hour, day of month, month and day of week, like \"0 7 * * *\" (7:00 every day)",
            line.escape_debug()
        ));
    }
    croner::Cron::from_str(line).map_err(|e| {
        format!(
            "`{}` is not a cron line ({e}): like \"0 7 * * *\" (7:00 every day) or \"*/15 * * * *\"",
            line.escape_debug()
        )
    })
}

/// Parses the `workflow` array of tables, given the routes already parsed.
pub(super) fn parse(value: Option<&toml::Value>, routes: &[Route], p: &mut Problems) -> Vec<Workflow> {
    let items = match value {
        None => return Vec::new(),
        Some(toml::Value::Array(items)) => items,
        Some(_) => {
            p.add("`workflow` must be an array of tables: write each workflow as [[workflow]]");
            return Vec::new();
        }
    };
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let where_ = format!("[[workflow]] number {}", i + 1);
        let Some(t) = item.as_table() else {
            p.add(format!("{where_} must be a table: write [[workflow]] on its own line"));
            continue;
        };
        if let Some(w) = parse_one(t, &where_, routes, &mut seen, p) {
            out.push(w);
        }
    }
    out
}

fn parse_one(
    t: &toml::Table,
    where_: &str,
    routes: &[Route],
    seen: &mut BTreeSet<String>,
    p: &mut Problems,
) -> Option<Workflow> {
    p.unknown_keys(t, where_, &["name", "route", "input", "every", "cron"]);
    let name = p.string(t, where_, "name");
    let where_ = match &name {
        Some(n) => format!("workflow `{}`", n.escape_debug()),
        None => where_.to_string(),
    };
    if let Some(n) = &name {
        if !is_name(n) {
            p.add(format!(
                "{where_}: the name must match [a-z][a-z0-9_.-]* and be at most {MAX_ROUTE_NAME} characters, like \"refresh\""
            ));
        }
        if !seen.insert(n.clone()) {
            p.add(format!("{where_} is declared twice: give each [[workflow]] its own name"));
        }
    }
    let route_name = p.string(t, &where_, "route");
    let route = route_name.as_deref().and_then(|r| {
        let found = routes.iter().find(|x| x.name == r);
        if found.is_none() {
            let names: Vec<&str> = routes.iter().map(|x| x.name.as_str()).collect();
            p.add(format!(
                "{where_}: there is no route `{}`; the routes are {}",
                r.escape_debug(),
                if names.is_empty() { "none".to_string() } else { names.join(", ") }
            ));
        }
        found
    });
    let input = match t.get("input") {
        None => Some(Json::Object(Default::default())),
        Some(v @ toml::Value::Table(_)) => serde_json::to_value(v).ok(),
        Some(_) => {
            p.add(format!("{where_}: input must be a table, like input = {{ limit = 10 }}"));
            None
        }
    };
    if let (Some(route), Some(input)) = (route, &input)
        && let Ok(validator) = crate::manifest::input_validator(&route.input)
    {
        let problems: Vec<String> = validator.iter_errors(input).take(3).map(|e| e.to_string()).collect();
        if !problems.is_empty() {
            p.add(format!(
                "{where_}: its input does not fit route `{}` ({}); give an input that does",
                route.name,
                problems.join("; ")
            ));
        }
    }
    let schedule = match (t.get("every"), t.get("cron")) {
        (Some(_), Some(_)) => {
            p.add(format!("{where_} has both every and cron: keep one"));
            None
        }
        (None, None) => {
            p.add(format!(
                "{where_} has no schedule: add every = \"15m\" (s, m, h or d) or cron = \"0 7 * * *\" (local time)"
            ));
            None
        }
        (Some(toml::Value::String(s)), None) => match parse_every(s) {
            Ok(_) => Some(Schedule::Every(s.clone())),
            Err(e) => {
                p.add(format!("{where_}: every {e}"));
                None
            }
        },
        (None, Some(toml::Value::String(s))) => match parse_cron(s) {
            Ok(_) => Some(Schedule::Cron(s.split_whitespace().collect::<Vec<_>>().join(" "))),
            Err(e) => {
                p.add(format!("{where_}: cron {e}"));
                None
            }
        },
        _ => {
            p.add(format!("{where_}: every and cron must be strings, like every = \"15m\""));
            None
        }
    };
    Some(Workflow { name: name?, route: route_name?, input: input?, schedule: schedule? })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    #[test]
    fn durations_are_a_number_and_one_unit() {
        assert_eq!(parse_every("30s"), Ok(30));
        assert_eq!(parse_every("15m"), Ok(900));
        assert_eq!(parse_every("2h"), Ok(7200));
        assert_eq!(parse_every("1d"), Ok(86_400));
        for bad in ["", "15", "m", "1.5h", "15 m", "-1m", "15min", "1w", "0m"] {
            let e = parse_every(bad).unwrap_err();
            assert!(e.contains("duration") || e.contains("no time"), "{bad}: {e}");
        }
        assert!(parse_every("400d").unwrap_err().contains("longer than a year"));
        assert!(parse_every("99999999999999999999m").is_err());
    }

    #[test]
    fn cron_lines_have_five_fields_and_valid_values() {
        assert!(parse_cron("0 7 * * *").is_ok());
        assert!(parse_cron("*/15 * * * MON-FRI").is_ok());
        let e = parse_cron("0 0 7 * * *").unwrap_err();
        assert!(e.contains("6 fields, not 5"), "{e}");
        let e = parse_cron("61 * * * *").unwrap_err();
        assert!(e.contains("is not a cron line"), "{e}");
        assert!(parse_cron("@daily").unwrap_err().contains("1 fields"));
    }

    #[test]
    fn the_next_run_follows_the_schedule() {
        let at = Utc.with_ymd_and_hms(2026, 11, 30, 6, 59, 30).unwrap();
        let cron = Schedule::Cron("0 7 * * *".into());
        assert_eq!(cron.next_after(&at), Some(Utc.with_ymd_and_hms(2026, 11, 30, 7, 0, 0).unwrap()));
        let later = Utc.with_ymd_and_hms(2026, 11, 30, 7, 0, 0).unwrap();
        assert_eq!(cron.next_after(&later), Some(Utc.with_ymd_and_hms(2026, 12, 1, 7, 0, 0).unwrap()));
        let every = Schedule::Every("15m".into());
        assert_eq!(every.next_after(&at), Some(Utc.with_ymd_and_hms(2026, 11, 30, 7, 14, 30).unwrap()));
    }
}
