//! What an app's record keeps, and for how long (issue 76).
//!
//! Every call's row goes into the record of its data folder, reads included:
//! an agent that reads an app once a second writes 86,000 rows a day. The
//! person bounds each record (`record_keep_days`, `record_keep_mib`); its
//! writer lets the oldest rows go past either bound, [`STEP`] rows at a time
//! in transactions of their own between its batches, so no call waits for
//! it. What it lets go is counted first, per day, route and channel, in the
//! record's `days` table ([`DAYS_TABLE`]): `autoapp runs --summary` still
//! says what an app did, and `autoapp runs` says up to when rows were let go.
//!
//! Kept whatever the bounds ([`KEPT_ALWAYS`]): the person's actions
//! (activations, rollbacks, grants, keys, restores, installs: effect
//! `lifecycle`), every question the person answered, and every write since
//! the app's last activation or rollback (what a rollback would set aside).
//! Only `autoapp prune --record-before DATE`, which the person names, takes
//! out rows of the first two kinds ([`prune_before`]).

use rusqlite::Connection;

/// The summary of the rows let go: per day (UTC), route and channel.
pub const DAYS_TABLE: &str = "CREATE TABLE IF NOT EXISTS days (
             day TEXT NOT NULL, route TEXT NOT NULL, channel TEXT NOT NULL,
             calls INTEGER NOT NULL, refused INTEGER NOT NULL, errors INTEGER NOT NULL,
             PRIMARY KEY (day, route, channel));";

/// The rows no bound lets go: the person's actions, the questions the
/// person answered, and the writes since the last activation or rollback
/// (`?1`: the row of that action, 0 for none).
const KEPT_ALWAYS: &str = "(effect = 'lifecycle'
     OR (answered_by = 'person' AND decision IN ('confirmed', 'denied') AND channel <> 'user')
     OR (effect IN ('write', 'external') AND outcome = 'ok' AND seq > ?1))";

/// The rows let go in one transaction.
pub const STEP: i64 = 500;

/// The most steps of one round (a round runs between the writer's batches).
const STEPS_A_ROUND: usize = 16;

/// The most rows one round lets go: a round that let this many go may
/// have left more.
pub const ROUND: u64 = STEP as u64 * STEPS_A_ROUND as u64;

/// A record's bounds, from the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Rows older than this many days go (0: no bound of age).
    pub days: u64,
    /// Past this many bytes of rows, the oldest go (0: no bound of size).
    pub bytes: u64,
}

impl Bounds {
    /// The configuration's `record_keep_days` and `record_keep_mib`.
    pub fn of(config: &crate::config::Config) -> Bounds {
        Bounds { days: config.record_keep_days, bytes: config.record_keep_mib << 20 }
    }

    /// No bound: nothing is let go.
    pub const NONE: Bounds = Bounds { days: 0, bytes: 0 };
}

/// The row of the last activation or rollback, after which writes are kept.
fn fence(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row(
        "SELECT coalesce(max(seq), 0) FROM runs WHERE effect = 'lifecycle' AND route IN ('activate', 'rollback')",
        [],
        |r| r.get(0),
    )
}

/// The bytes the record's pages in use take.
pub fn used_bytes(conn: &Connection) -> rusqlite::Result<u64> {
    let pragma = |name: &str| conn.query_row(&format!("PRAGMA {name}"), [], |r| r.get::<_, i64>(0));
    let used = pragma("page_count")?.saturating_sub(pragma("freelist_count")?);
    Ok(u64::try_from(used.saturating_mul(pragma("page_size")?)).unwrap_or(0))
}

/// The time `days` days before `now`, as the record writes times.
fn days_before(now: std::time::SystemTime, days: u64) -> String {
    let then = now.checked_sub(std::time::Duration::from_secs(days.saturating_mul(86_400)));
    humantime::format_rfc3339_seconds(then.unwrap_or(std::time::UNIX_EPOCH)).to_string()
}

/// Lets go of the oldest rows past `bounds` (at most a round's steps),
/// each counted in `days` first; answers how many went.
pub fn let_go(conn: &mut Connection, bounds: Bounds, now: std::time::SystemTime) -> anyhow::Result<u64> {
    if bounds == Bounds::NONE {
        return Ok(0);
    }
    conn.execute_batch(DAYS_TABLE)?;
    let fence = fence(conn)?;
    let cutoff = (bounds.days > 0).then(|| days_before(now, bounds.days));
    let mut gone = 0;
    for _ in 0..STEPS_A_ROUND {
        let over = bounds.bytes > 0 && used_bytes(conn)? > bounds.bytes;
        // Past the size, the oldest rows; else those older than the age.
        let older_than = match (over, &cutoff) {
            (true, _) => None,
            (false, Some(cutoff)) => Some(cutoff.as_str()),
            (false, None) => break,
        };
        let n = step(conn, fence, older_than, None)?;
        gone += n;
        if n < STEP as u64 {
            break;
        }
    }
    Ok(gone)
}

/// Lets go of one step of rows not always kept, oldest first: of those
/// before `older_than` when given, else any; with `before_seq`, only rows
/// before it. Counts them in `days`, in the same transaction.
fn step(conn: &mut Connection, fence: i64, older_than: Option<&str>, before_seq: Option<i64>) -> anyhow::Result<u64> {
    let tx = conn.transaction()?;
    let which = format!("NOT {KEPT_ALWAYS} AND (?2 IS NULL OR time < ?2) AND (?3 IS NULL OR seq < ?3)");
    let (first, last): (Option<i64>, Option<i64>) = tx.query_row(
        &format!("SELECT min(seq), max(seq) FROM (SELECT seq FROM runs WHERE {which} ORDER BY seq LIMIT {STEP})"),
        rusqlite::params![fence, older_than, before_seq],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let (Some(first), Some(last)) = (first, last) else { return Ok(0) };
    // The same rows: the first STEP of them in order are all of them
    // between the first and the last.
    let these = format!("{which} AND seq BETWEEN ?4 AND ?5");
    let params = rusqlite::params![fence, older_than, before_seq, first, last];
    tx.execute(&count_into_days(&these), params)?;
    let n = tx.execute(&format!("DELETE FROM runs WHERE {these}"), params)?;
    tx.commit()?;
    Ok(n as u64)
}

/// The statement that adds the rows `which` selects to the day summary.
fn count_into_days(which: &str) -> String {
    format!(
        "INSERT INTO days (day, route, channel, calls, refused, errors)
         SELECT substr(time, 1, 10), route, channel, count(*),
                sum(decision IN ('denied', 'refused')), sum(outcome IN ('error', 'trap'))
         FROM runs WHERE {which} GROUP BY 1, 2, 3
         ON CONFLICT (day, route, channel) DO UPDATE SET
             calls = calls + excluded.calls, refused = refused + excluded.refused,
             errors = errors + excluded.errors"
    )
}

/// What `prune --record-before` found or took out.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pruned {
    pub rows: u64,
    /// Of them, the person's actions and answered questions.
    pub decisions: u64,
}

/// The rows of the record before `day` (`YYYY-MM-DD`, UTC) that `prune
/// --record-before` takes out: every row but the writes a rollback still
/// needs, the person's own actions and answers included (the person named
/// the date). With `dry`, counted only; else taken out (counted in `days`).
pub fn prune_before(conn: &mut Connection, day: &str, dry: bool) -> anyhow::Result<Pruned> {
    conn.execute_batch(DAYS_TABLE)?;
    let fence = fence(conn)?;
    let which = "time < ?2 AND NOT (effect IN ('write', 'external') AND outcome = 'ok' AND seq > ?1)";
    let (rows, decisions): (i64, i64) = conn.query_row(
        &format!("SELECT count(*), coalesce(sum({KEPT_ALWAYS}), 0) FROM runs WHERE {which}"),
        rusqlite::params![fence, day],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let found = Pruned { rows: rows as u64, decisions: decisions as u64 };
    if dry || rows == 0 {
        return Ok(found);
    }
    let tx = conn.transaction()?;
    tx.execute(&count_into_days(which), rusqlite::params![fence, day])?;
    tx.execute(&format!("DELETE FROM runs WHERE {which}"), rusqlite::params![fence, day])?;
    tx.commit()?;
    Ok(found)
}

/// `prune --record-to`: about how many rows would go for the record's rows
/// to take `bytes` at most (the oldest first, never those always kept).
pub fn to_size_estimate(conn: &Connection, bytes: u64) -> anyhow::Result<u64> {
    let used = used_bytes(conn)?;
    if used <= bytes {
        return Ok(0);
    }
    let fence = fence(conn)?;
    let (all, loose): (i64, i64) =
        conn.query_row(&format!("SELECT count(*), coalesce(sum(NOT {KEPT_ALWAYS}), 0) FROM runs"), [fence], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
    let per_row = used / (all.max(1) as u64);
    Ok(((used - bytes).div_ceil(per_row.max(1))).min(loose as u64))
}

/// `prune --record-to`: lets the oldest rows go (never those always kept)
/// until the record's rows take `bytes` at most, or none is left to go.
pub fn to_size(conn: &mut Connection, bytes: u64) -> anyhow::Result<u64> {
    let bounds = Bounds { days: 0, bytes: bytes.max(1) };
    let mut gone = 0;
    loop {
        let n = let_go(conn, bounds, std::time::SystemTime::now())?;
        gone += n;
        if n == 0 {
            return Ok(gone);
        }
    }
}

/// What was let go: the rows counted in `days`, and the last day they span.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LetGo {
    pub rows: u64,
    pub through: Option<String>,
}

/// What the record's day summary counts (none when it has none).
pub fn let_go_so_far(conn: &Connection) -> anyhow::Result<LetGo> {
    if !has_days(conn)? {
        return Ok(LetGo::default());
    }
    let (rows, through): (i64, Option<String>) =
        conn.query_row("SELECT coalesce(sum(calls), 0), max(day) FROM days", [], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(LetGo { rows: rows as u64, through })
}

/// Whether the record has its day summary.
pub fn has_days(conn: &Connection) -> rusqlite::Result<bool> {
    conn.query_row("SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'days')", [], |r| {
        r.get(0)
    })
}

/// One line of `runs --summary`: a day, a route and a channel.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Day {
    pub day: String,
    pub route: String,
    pub channel: String,
    pub calls: u64,
    pub refused: u64,
    pub errors: u64,
}

/// Every day the record knows of, oldest first (at most `limit` lines, the
/// newest): the rows let go and the rows it holds, counted alike.
pub fn summary(conn: &Connection, limit: usize) -> anyhow::Result<Vec<Day>> {
    let kept = "SELECT substr(time, 1, 10) AS day, route, channel, count(*) AS calls,
                       sum(decision IN ('denied', 'refused')) AS refused,
                       sum(outcome IN ('error', 'trap')) AS errors
                FROM runs GROUP BY 1, 2, 3";
    let all = match has_days(conn)? {
        true => format!("SELECT day, route, channel, calls, refused, errors FROM days UNION ALL {kept}"),
        false => kept.to_string(),
    };
    let mut stmt = conn.prepare(&format!(
        "SELECT * FROM (SELECT day, route, channel, sum(calls), sum(refused), sum(errors) FROM ({all})
                        GROUP BY 1, 2, 3 ORDER BY 1 DESC, 2, 3 LIMIT ?1)
         ORDER BY 1, 2, 3"
    ))?;
    let days = stmt.query_map([limit as i64], |r| {
        Ok(Day {
            day: r.get(0)?,
            route: r.get(1)?,
            channel: r.get(2)?,
            calls: r.get::<_, i64>(3)? as u64,
            refused: r.get::<_, i64>(4)? as u64,
            errors: r.get::<_, i64>(5)? as u64,
        })
    })?;
    Ok(days.collect::<Result<_, _>>()?)
}
