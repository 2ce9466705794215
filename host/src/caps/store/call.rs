//! The store as one call sees it ([`CallStore`]) and as the WIT serves it
//! (`autoapp:app/store`, [`Given`]): one connection inside one transaction,
//! begun at the guest's first use (a call that never touches the store costs
//! no SQLite work), ended by the host — committed when the route succeeds,
//! rolled back otherwise. A query's answer is bounded ([`MAX_ROWS`],
//! [`MAX_RESULT_BYTES`]); a statement that runs past the call's deadline is
//! interrupted by a progress handler (epoch interruption cannot reach into
//! host code).
//!
//! Never: a guest's statement taken from the cache as the host prepared it
//! ([`guest_statement`]), a host path in what the guest hears, or a
//! statement run after SQLite ended the call's transaction by itself.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rusqlite::types::{Value as SqlValue, ValueRef};
use rusqlite::{Connection, ErrorCode};

use super::database::{HOST_STATEMENTS, Pooled, RELEASE, ROLLBACK, ROLLBACK_TO, is_busy, run_host};
use super::group::{GROUP_LOST, Group, Heard, HostStep, Joined, Member, ORPHAN_CHECK, deferred_violations};
use super::{AppStore, BUSY, MAX_RESULT_BYTES, MAX_ROWS, Mode};
use crate::bindings::AppError;
use crate::bindings::app::autoapp::app::store::{Host, Rows, Value};

/// What a call hears when SQLite ended its transaction by itself after one
/// of its statements failed: what it sends next would run outside any
/// transaction, so it is refused.
pub(super) const LOST: &str = "the store undid this call's transaction after a statement failed \
                    (a conflict under OR ROLLBACK, an interrupted write, a full disk); nothing it wrote is kept";

/// The store as one call sees it: one connection inside one transaction,
/// begun at the guest's first use.
pub struct CallStore {
    pub(super) conn: Option<Pooled>,
    /// The group whose transaction this call goes on in (a savepoint is
    /// open), when it joined one.
    pub(super) joined: Option<Joined>,
    /// When this call began the transaction it heads.
    pub(super) began: Option<Instant>,
    /// The app's write permit, held from before the transaction begins until
    /// after it ends (fields drop in order: the connection is rolled back in
    /// `Drop` before the permit is let go).
    pub(super) permit: Option<tokio::sync::OwnedSemaphorePermit>,
    pub(super) home: Arc<AppStore>,
    pub(super) mode: Mode,
    pub(super) deadline: Instant,
    pub(super) state: State,
    /// Counted among the writers on their way to the permit.
    pub(super) coming: bool,
    /// The deadline passed while the call waited for the write permit.
    pub(super) waited_out: bool,
    /// How long the call waited for its turn to write.
    pub(super) waited: Duration,
}

/// Where a call's transaction is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    /// The guest has not used the store.
    Unused,
    /// A transaction is open on `conn`.
    Open,
    /// The transaction could not begin, or was ended.
    Closed,
    /// SQLite ended the transaction by itself ([`LOST`]).
    Lost,
}

impl CallStore {
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Counts this write call among the app's writers on their way to the
    /// write permit, from now until it asks for the permit or ends: a group
    /// ending meanwhile is handed on to it rather than committed (within the
    /// group's window). For calls that should reach the store soon (a
    /// `write` route's), not for ones that may first spend long elsewhere
    /// (an `external` route's network or programs): a group would wait its
    /// whole window for them.
    pub fn on_its_way(mut self) -> CallStore {
        if self.mode == Mode::ReadWrite && self.state == State::Unused && !self.coming {
            self.home.coming.fetch_add(1, Ordering::AcqRel);
            self.coming = true;
        }
        self
    }

    /// Whether the call's deadline passed while it waited for its turn to
    /// write: whatever the guest did after, the call's answer is [`BUSY`].
    pub fn waited_out(&self) -> bool {
        self.waited_out
    }

    /// How long the call waited for its turn to write (for the permit, and
    /// for another process's write lock).
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// Ends the call's transaction: commits when `commit` and the call may
    /// write, rolls back otherwise. The connection goes back to the pool only
    /// when it is clean.
    pub async fn finish(self, commit: bool) -> anyhow::Result<()> {
        self.finish_with(commit, None).await.map(drop)
    }

    /// Ends the call's transaction as [`finish`](Self::finish) does, and
    /// returns once what it wrote is committed. Just before that commit,
    /// `host` (the row that records the call) is committed into the database
    /// beside `main`, on its own connection (`AppStore::commit_group`): a
    /// process killed between the two leaves a row whose write was not kept,
    /// never a kept write without its row (no one `COMMIT` is atomic across
    /// two databases in WAL mode; docs/security.md). Answers whether `host`
    /// was committed: not when the call wrote nothing (no transaction),
    /// nothing is beside the store, or the call is not committed (then the
    /// caller records the row its own way).
    ///
    /// While other writers wait for their turn, the transaction is handed on
    /// rather than committed (group commit, see the module's doc): this call
    /// then waits for the commit of its group.
    pub async fn finish_with(mut self, commit: bool, host: Option<HostStep>) -> anyhow::Result<bool> {
        self.state = State::Closed;
        let joined = self.joined.take();
        let Some(mut p) = self.conn.take() else {
            return Ok(false);
        };
        p.rules.host.store(true, Ordering::Release);
        p.conn.progress_handler(0, None::<fn() -> bool>)?;
        if self.mode == Mode::ReadOnly {
            let ended = if p.conn.is_autocommit() { Ok(()) } else { run_host(&p.conn, ROLLBACK) };
            ended.context("cannot end the call's read")?;
            self.home.put_back(self.mode, p);
            return Ok(false);
        }
        if p.conn.is_autocommit() {
            // SQLite ended the transaction itself, and with it the writes of
            // the calls before this one in its group (told by their dropped
            // `Member`s). The connection is clean.
            drop(joined);
            self.home.put_back(self.mode, p);
            self.permit.take();
            return if commit { Err(anyhow::anyhow!(LOST)) } else { Ok(false) };
        }
        // This call's part: kept (its savepoint released into the group's
        // transaction) or undone.
        // A deferred foreign key this call left violated fails its commit
        // alone, as it would with no group: never one it shares with others,
        // and never made good by a later call of the group.
        let violated = commit && deferred_violations(&p.conn);
        let (members, opened) = match joined {
            Some(j) => {
                let ended = if commit && !violated {
                    run_host(&p.conn, RELEASE)
                } else {
                    run_host(&p.conn, ROLLBACK_TO).and_then(|()| run_host(&p.conn, RELEASE))
                };
                if let Err(e) = ended {
                    let _ = run_host(&p.conn, ROLLBACK);
                    self.permit.take();
                    // The members are told by their dropped `Member`s.
                    return Err(e).context("cannot end the call's part of its group; nothing it wrote was kept");
                }
                if violated {
                    // Its own part undone; the group goes on without it.
                    let _ = self.hand_on_or_commit(p, j.members, j.opened, false, None, true).await;
                    return Err(anyhow::anyhow!(
                        "cannot commit the call's writes; nothing it wrote was kept: FOREIGN KEY constraint failed"
                    ));
                }
                (j.members, j.opened)
            }
            None if !commit => {
                let ended = run_host(&p.conn, ROLLBACK);
                self.permit.take();
                return match ended {
                    Ok(()) => {
                        self.home.put_back(self.mode, p);
                        Ok(false)
                    }
                    Err(e) => Err(e).context("cannot end the call's transaction"),
                };
            }
            None => (Vec::new(), self.began.unwrap_or_else(Instant::now)),
        };
        // A head with a violation commits at once, alone: SQLite's COMMIT
        // refuses it.
        self.hand_on_or_commit(p, members, opened, commit, host, !violated).await
    }

    /// The call's connection; the first use begins its transaction (a write
    /// call first waits for the app's write permit).
    pub(super) async fn conn(&mut self) -> Result<&mut Connection, AppError> {
        if self.state == State::Open && self.conn.as_ref().is_some_and(|p| p.conn.is_autocommit()) {
            // A statement made SQLite end the transaction (`LOST`): nothing
            // more may run, or it would be committed on its own at once.
            self.state = State::Lost;
        }
        if self.state == State::Lost {
            return Err(AppError::Conflict(LOST.into()));
        }
        if self.state == State::Unused {
            self.state = State::Closed;
            let asked = Instant::now();
            if self.mode == Mode::ReadWrite {
                let permit = self.home.write_permit(self.deadline, &mut self.coming).await;
                self.waited = asked.elapsed();
                match permit {
                    Some(permit) => self.permit = Some(permit),
                    None => {
                        self.waited_out = true;
                        return Err(AppError::Conflict(BUSY.into()));
                    }
                }
            }
            let parked = match self.mode {
                Mode::ReadWrite => self.home.parked.lock().expect("group").take(),
                Mode::ReadOnly => None,
            };
            let opened = match parked {
                Some(g) => self.home.join(g, self.deadline).map(|(p, joined)| {
                    self.joined = Some(joined);
                    p
                }),
                None => self.home.open_transaction(self.mode, self.deadline).await.inspect(|_| {
                    self.began = Some(Instant::now());
                }),
            };
            if self.mode == Mode::ReadWrite {
                self.waited = asked.elapsed();
            }
            match opened {
                Ok(p) => {
                    self.conn = Some(p);
                    self.state = State::Open;
                }
                Err(e) => {
                    self.permit.take();
                    // The guest hears what it can act on, never a host path.
                    tracing::warn!("a call's store transaction could not begin: {e:#}");
                    let busy = e.chain().any(|c| c.downcast_ref::<rusqlite::Error>().is_some_and(is_busy));
                    self.waited_out = busy;
                    return Err(if busy {
                        AppError::Conflict(BUSY.into())
                    } else {
                        AppError::Internal("the store could not be opened".into())
                    });
                }
            }
        }
        self.conn.as_mut().map(|p| &mut p.conn).ok_or_else(|| AppError::Internal("the store is closed".into()))
    }

    pub(super) fn map_err(&self, e: rusqlite::Error) -> AppError {
        // Why the connection's authorizer refused, when it did.
        let denial = self.conn.as_ref().and_then(|p| p.rules.denial.lock().expect("denial").take());
        // SQLite's own failures, whether or not rusqlite attached the SQL.
        let failure = match e {
            rusqlite::Error::SqliteFailure(f, msg) => Ok((f.code, msg.unwrap_or_else(|| f.to_string()))),
            rusqlite::Error::SqlInputError { error, msg, .. } => Ok((error.code, msg)),
            other => Err(other),
        };
        match failure {
            // The authorizer refused part of the statement: say why, whatever
            // code SQLite chose to report it with.
            Ok(_) if denial.is_some() => AppError::Denied(denial.unwrap_or_default()),
            Ok((code, msg)) => match code {
                ErrorCode::AuthorizationForStatementDenied => {
                    AppError::Denied("this statement is not available to apps".into())
                }
                ErrorCode::OperationInterrupted => {
                    AppError::Denied("the statement ran past the call's deadline and was interrupted".into())
                }
                ErrorCode::ReadOnly => {
                    AppError::Denied("this route's effect is read, so the store is read-only".into())
                }
                ErrorCode::ConstraintViolation => AppError::Conflict(msg),
                ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => AppError::Conflict(BUSY.into()),
                ErrorCode::TooBig => AppError::Denied("a value is too big for the store".into()),
                _ if msg.starts_with("not authorized") => {
                    AppError::Denied(format!("{msg}: this is not available to apps"))
                }
                _ if msg.contains("VACUUM") => {
                    AppError::Denied("VACUUM is not available: the host keeps the database file".into())
                }
                _ => AppError::InvalidInput(msg),
            },
            Err(rusqlite::Error::MultipleStatement) => AppError::InvalidInput("send one SQL statement per call".into()),
            Err(rusqlite::Error::ExecuteReturnedResults) => {
                AppError::InvalidInput("this statement returns rows: use query instead of execute".into())
            }
            Err(rusqlite::Error::InvalidParameterCount(got, want)) => {
                AppError::InvalidInput(format!("the statement has {want} parameters but {got} values were given"))
            }
            Err(other) => AppError::InvalidInput(other.to_string()),
        }
    }
}

impl Drop for CallStore {
    fn drop(&mut self) {
        if std::mem::take(&mut self.coming) {
            // On its way, it never asked for the permit: a group waiting
            // for it need wait no longer.
            self.home.coming.fetch_sub(1, Ordering::AcqRel);
            self.home.gone.notify_one();
        }
        // A call that was never settled (a trap unwinding, a dropped future)
        // keeps nothing.
        if let Some(mut p) = self.conn.take() {
            p.rules.host.store(true, Ordering::Release);
            if let Some(j) = self.joined.take()
                && !p.conn.is_autocommit()
                && run_host(&p.conn, ROLLBACK_TO).and_then(|()| run_host(&p.conn, RELEASE)).is_ok()
                && p.conn.progress_handler(0, None::<fn() -> bool>).is_ok()
            {
                // What the calls before it in its group wrote stays, parked
                // for the next writer or the group's closer (before the
                // permit is let go: fields drop after this).
                *self.home.parked.lock().expect("group") =
                    Some(Group { conn: p, members: j.members, opened: j.opened });
                return;
            }
            let _ = run_host(&p.conn, ROLLBACK);
        }
    }
}

pub(super) fn bind(params: Vec<Value>) -> Vec<SqlValue> {
    params
        .into_iter()
        .map(|v| match v {
            Value::Null => SqlValue::Null,
            Value::Integer(i) => SqlValue::Integer(i),
            Value::Real(r) => SqlValue::Real(r),
            Value::Text(t) => SqlValue::Text(t),
            Value::Blob(b) => SqlValue::Blob(b),
        })
        .collect()
}

pub(super) fn value_of(v: ValueRef<'_>) -> (Value, usize) {
    match v {
        ValueRef::Null => (Value::Null, 1),
        ValueRef::Integer(i) => (Value::Integer(i), 8),
        ValueRef::Real(r) => (Value::Real(r), 8),
        ValueRef::Text(t) => (Value::Text(String::from_utf8_lossy(t).into_owned()), t.len()),
        ValueRef::Blob(b) => (Value::Blob(b.to_vec()), b.len()),
    }
}

/// A guest's statement on `c`: cached per connection (connections are pooled
/// per mode, so a statement is reused only under the rules it was authorized
/// by), except one of the text of a host's own cached statement (the
/// [`HOST_STATEMENTS`], and `beside`: the row of the database attached beside
/// `main`), which the cache would hand over as the host prepared it,
/// authorized for the host. Those control the transaction or write beside
/// `main`, so prepared afresh under the guest's rules they are refused, and
/// they are refused whatever the authorizer makes of them.
pub(super) fn guest_statement<'c>(
    c: &'c Connection,
    sql: &str,
    beside: Option<&str>,
) -> rusqlite::Result<rusqlite::CachedStatement<'c>> {
    // The cache's key is the trimmed text.
    let key = sql.trim();
    if HOST_STATEMENTS.contains(&key) || beside.is_some_and(|h| h.trim() == key) {
        return Err(c.prepare(sql).err().unwrap_or_else(|| {
            rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_AUTH),
                Some("this statement is the host's, not available to apps".into()),
            )
        }));
    }
    c.prepare_cached(sql)
}

impl CallStore {
    pub async fn execute(&mut self, sql: &str, params: Vec<Value>) -> Result<u64, AppError> {
        let params = bind(params);
        let host_text = self.home.beside.as_ref().map(|b| b.statement);
        let r = self.conn().await.map_err(Ok).and_then(|c| {
            let mut stmt = guest_statement(c, sql, host_text).map_err(Err)?;
            stmt.execute(rusqlite::params_from_iter(params)).map_err(Err)
        });
        match r {
            Ok(n) => Ok(n as u64),
            Err(e) => Err(self.to_app_error(e)),
        }
    }

    pub async fn query(&mut self, sql: &str, params: Vec<Value>) -> Result<Rows, AppError> {
        let params = bind(params);
        let host_text = self.home.beside.as_ref().map(|b| b.statement);
        let r = self.conn().await.map_err(Ok).and_then(|c| {
            let mut stmt = guest_statement(c, sql, host_text).map_err(Err)?;
            let columns: Vec<String> = stmt.column_names().map(|s| s.to_string()).collect();
            let width = columns.len();
            let mut rows = stmt.query(rusqlite::params_from_iter(params)).map_err(Err)?;
            let mut out = Vec::new();
            let mut bytes = 0usize;
            while let Some(row) = rows.next().map_err(Err)? {
                if out.len() == MAX_ROWS {
                    return Err(Ok(AppError::Denied(format!(
                        "the query returns more than {MAX_ROWS} rows; page through it with LIMIT and OFFSET"
                    ))));
                }
                let mut vals = Vec::with_capacity(width);
                for i in 0..width {
                    let (v, n) = value_of(row.get_ref(i).map_err(Err)?);
                    bytes += n;
                    vals.push(v);
                }
                if bytes > MAX_RESULT_BYTES {
                    return Err(Ok(AppError::Denied(format!(
                        "the query returns more than {} MiB; select fewer columns or page with LIMIT",
                        MAX_RESULT_BYTES >> 20
                    ))));
                }
                out.push(vals);
            }
            Ok(Rows { columns, rows: out })
        });
        match r {
            Ok(rows) => Ok(rows),
            Err(e) => Err(self.to_app_error(e)),
        }
    }

    pub(super) fn to_app_error(&self, e: Result<AppError, rusqlite::Error>) -> AppError {
        match e {
            Ok(app) => app,
            Err(sql) => self.map_err(sql),
        }
    }
}

/// The store as an instance holds it: none while the instance is being made
/// (code a component runs then, a start function, is refused), the call's
/// [`CallStore`] once the call is given it (`runtime`).
#[derive(Default)]
pub struct Given(pub Option<CallStore>);

/// What code that runs before a call is given the store is told.
pub(super) const NOT_GIVEN: &str = "the store is not available while the instance is being made";

/// Serves `autoapp:app/store` to a call, from the store that `get` projects out of
/// the call's state.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut wasmtime::component::Linker<T>,
    get: fn(&mut T) -> &mut Given,
) -> anyhow::Result<()> {
    crate::bindings::app::autoapp::app::store::add_to_linker::<T, wasmtime::component::HasSelf<Given>>(linker, get)?;
    Ok(())
}

impl Host for Given {
    async fn execute(&mut self, sql: String, params: Vec<Value>) -> Result<u64, AppError> {
        match &mut self.0 {
            Some(store) => store.execute(&sql, params).await,
            None => Err(AppError::Denied(NOT_GIVEN.into())),
        }
    }

    async fn query(&mut self, sql: String, params: Vec<Value>) -> Result<Rows, AppError> {
        match &mut self.0 {
            Some(store) => store.query(&sql, params).await,
            None => Err(AppError::Denied(NOT_GIVEN.into())),
        }
    }
}

impl AppStore {
    /// The store of one call in `mode`. Nothing is opened yet: the call's
    /// connection and transaction begin when the guest first uses the store,
    /// so a call that never touches it costs no SQLite work at all.
    pub fn begin(self: &Arc<Self>, mode: Mode, deadline: Instant) -> anyhow::Result<CallStore> {
        Ok(CallStore {
            conn: None,
            joined: None,
            began: None,
            permit: None,
            home: self.clone(),
            mode,
            deadline,
            coming: false,
            state: State::Unused,
            waited_out: false,
            waited: Duration::ZERO,
        })
    }
}

/// The end of a write call, with its group.
impl CallStore {
    /// The end of a write call whose own part is settled in the open
    /// transaction on `p` (kept when `commit`): while writers wait and the
    /// group may grow (and `may_park`), parks it for them and waits for its
    /// commit; commits it otherwise. Lets the permit go either way.
    pub(super) async fn hand_on_or_commit(
        &mut self,
        p: Pooled,
        members: Vec<Member>,
        opened: Instant,
        commit: bool,
        host: Option<HostStep>,
        may_park: bool,
    ) -> anyhow::Result<bool> {
        if may_park
            && (commit || !members.is_empty())
            && self.home.may_grow(&members, opened)
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            // Writers wait: hand the transaction on, and wait for its commit.
            let mut members = members;
            let (told, mut answer) = tokio::sync::oneshot::channel();
            if commit {
                members.push(Member { step: host, told });
            }
            *self.home.parked.lock().expect("group") = Some(Group { conn: p, members, opened });
            // The call that began the transaction parks it first.
            if self.began.is_some() {
                self.home.close_later(&rt);
            }
            self.permit.take();
            if !commit {
                return Ok(false);
            }
            loop {
                tokio::select! {
                    told = &mut answer => return match told {
                        Ok(Ok(Heard { beside, owed })) => {
                            // This call records its row itself (its caller
                            // goes on from here without another await).
                            if let Some(mut step) = owed {
                                step.taken_back();
                            }
                            Ok(beside)
                        }
                        Ok(Err(why)) => Err(anyhow::anyhow!(why)),
                        Err(_) => Err(anyhow::anyhow!(GROUP_LOST)),
                    },
                    () = tokio::time::sleep(ORPHAN_CHECK) => {
                        // Nobody holds or waits for the permit, yet a group
                        // is parked: its closer is gone with its runtime (a
                        // server stopped). Commit it here.
                        self.home.commit_orphaned();
                    }
                }
            }
        }
        let own = if commit { host } else { None };
        let done = self.home.commit_group(p, members, own);
        self.permit.take();
        if done.is_ok() && self.home.log_is_long() {
            self.home.clone().checkpoint_soon();
        }
        match done {
            Ok(beside) => Ok(beside && commit),
            // What this call wrote was undone before; its own answer stands.
            Err(_) if !commit => Ok(false),
            Err(e) => Err(e),
        }
    }
}
