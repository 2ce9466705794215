//! Group commit. A write call that ends while other writers wait for the
//! permit, or while other write calls of the app are on their way to it
//! (begun, before their first statement: [`CallStore::on_its_way`]), does
//! not commit: it parks its open transaction ([`Group`]) and waits. The next
//! writer goes on in that transaction inside a savepoint of its own (its
//! failure undoes only its savepoint), and so on, until a call ends with
//! nobody waiting or on the way, the group is [`GROUP_WINDOW`] old or
//! [`GROUP_MOST`] calls long, or the group's closer (a task that queued for
//! the permit when the group was first parked) has its turn: then one
//! `COMMIT` ends them all, the calls' record rows committed just before it
//! (in the record's own transaction: [`AppStore::commit_group`]),
//! and each call is answered. One writer alone commits at once.
//!
//! A closer whose group waits only for calls on their way does not hold
//! the permit: it sleeps until the window ends, or until one of them ends
//! without writing. A group left with nobody to commit it (its closer gone
//! with a stopped server's runtime) is committed by a call still waiting in
//! it, or else by the store's once-a-second checkpoint.
//!
//! The group's commit rule: a write is acknowledged only after the commit
//! that holds it; a call whose statement made SQLite end the transaction
//! itself (`OR ROLLBACK`, an interrupted write, a full disk) takes the calls
//! before it in its group with it: they hear that nothing they wrote was
//! kept. A call whose own part leaves a deferred foreign key violated fails
//! alone, never the group. A call that goes away while it waits for its
//! group's commit (its future dropped) still has its row when its write is
//! kept: its row went in before the writes. (Where nothing is beside the
//! store, the commit hands each member its [`Step`] back, owed, and a step
//! nobody takes back hands its row on by itself.) Only the holder of the
//! write permit takes, parks or commits a group.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rusqlite::Connection;

use super::database::{BEGIN_WRITE, COMMIT, Pooled, ROLLBACK, SAVEPOINT, hand_to_call, run_host};
use super::{AppStore, Mode};

/// What a call in a group hears when its write was undone with the group's
/// transaction: another call's statement made SQLite end it, or the group
/// was lost before its commit.
pub(super) const GROUP_LOST: &str = "the store undid the transaction this call's writes shared with other writes of the app \
                          (one of them failed in a way that ends a transaction); nothing it wrote is kept; try again";

/// A write call hands its open transaction on to the next writer only while
/// the group is younger than this: it bounds how long an answer waits for
/// the writes that came after it (at most this, plus the run of the last
/// call that joined).
pub(super) const GROUP_WINDOW: Duration = Duration::from_millis(2);

/// The most calls one group commit ends.
pub(super) const GROUP_MOST: usize = 64;

/// How often a call waiting for its group's commit looks whether the group
/// was left with nobody to commit it.
pub(super) const ORPHAN_CHECK: Duration = Duration::from_millis(100);

/// A statement of the host's, committed into the database beside the store
/// just before the commit of the call's write ([`CallStore::finish_with`],
/// [`AppStore::commit_group`]); it owns what it writes, because the call
/// that commits a group runs the steps of every call in it.
///
/// Where nothing is beside the store, the step cannot run and is **owed**:
/// what it would have written must reach its database another way. The
/// call that waits for the commit takes it back and does that itself
/// ([`taken_back`](Step::taken_back)); a call that went away while it waited
/// in a group (its client disconnected, its future dropped) is not there to,
/// so an owed step that is dropped without being taken back hands what it
/// holds on by itself ([`owed`](Step::owed); `gate::record`'s step gives its
/// row to the record's writer).
pub trait Step: Send {
    /// Runs the statement on `conn`, the database beside's own connection,
    /// inside a transaction committed just before the write's.
    fn run(&mut self, conn: &Connection) -> rusqlite::Result<()>;
    /// Takes back what [`run`](Step::run) committed, on the same connection:
    /// the write it belongs to was not kept after all.
    fn undo(&mut self, _conn: &Connection) -> rusqlite::Result<()> {
        Ok(())
    }
    /// The write was committed without this step's statement: from now on,
    /// dropping the step without [`taken_back`](Step::taken_back) hands what
    /// it holds on its own way.
    fn owed(&mut self) {}
    /// The call heard that its step did not go in, and writes what it holds
    /// itself: dropping the step does nothing more.
    fn taken_back(&mut self) {}
}

/// A statement with nothing to hand on (tests, and any step whose loss is
/// the caller's to notice).
impl<F: FnMut(&Connection) -> rusqlite::Result<()> + Send> Step for F {
    fn run(&mut self, conn: &Connection) -> rusqlite::Result<()> {
        self(conn)
    }
}

/// A [`Step`], owned.
pub type HostStep = Box<dyn Step>;

/// A call whose writes are in a group's open transaction, waiting for the
/// commit: its row's step, and where it hears whether the commit held (and
/// whether its row went in with it).
pub(super) struct Member {
    pub(super) step: Option<HostStep>,
    pub(super) told: tokio::sync::oneshot::Sender<Result<Heard, String>>,
}

/// What a member hears when its group committed: whether its step went in
/// with the commit, and if not, the step itself, owed ([`Step::owed`]): the
/// member takes it back, or, gone, drops it and the step hands its row on.
pub(super) struct Heard {
    pub(super) beside: bool,
    pub(super) owed: Option<HostStep>,
}

/// The open transaction of a group of write calls, parked between two of
/// them (see the module's doc). Only the holder of the write permit takes
/// or parks it.
pub(super) struct Group {
    pub(super) conn: Pooled,
    pub(super) members: Vec<Member>,
    pub(super) opened: Instant,
}

/// The group a running call has joined: the calls in it before this one.
pub(super) struct Joined {
    pub(super) members: Vec<Member>,
    pub(super) opened: Instant,
}

impl AppStore {
    /// The parked group's transaction, for the holder of the write permit
    /// whose call goes on in it, inside a savepoint of its own.
    pub(super) fn join(&self, g: Group, deadline: Instant) -> anyhow::Result<(Pooled, Joined)> {
        let Group { conn: mut p, members, opened } = g;
        if let Err(e) = run_host(&p.conn, SAVEPOINT).and_then(|()| hand_to_call(&mut p, deadline)) {
            // Cannot go on in it: commit what it holds, and say why this call cannot begin.
            let _ = self.commit_group(p, members, None);
            return Err(e.into());
        }
        Ok((p, Joined { members, opened }))
    }

    /// Commits the parked group, if there is one. The caller holds the
    /// write permit (the group's closer, a checkpoint's last step, a
    /// migration).
    pub(super) fn commit_parked(&self) {
        let parked = self.parked.lock().expect("group").take();
        if let Some(g) = parked
            && let Err(e) = self.commit_group(g.conn, g.members, None)
        {
            tracing::warn!("cannot commit a group of writes: {e:#}");
        }
    }

    /// Queues for the write permit behind the writers waiting now; at its
    /// turn, leaves a parked group to the writers still waiting (and queues
    /// again) while the group may grow, and commits it otherwise: a group
    /// whose next writer gave up its turn (its deadline, its connection
    /// closed) is never left open, and a closer does not cut a group short.
    /// While the group waits only for writers on their way, the closer lets
    /// the permit go and sleeps until the group's window ends (or one of
    /// them ends without writing), so they take the permit straight away.
    pub(super) fn close_later(self: &Arc<Self>, rt: &tokio::runtime::Handle) {
        let store = self.clone();
        rt.spawn(async move {
            while let Ok(permit) = store.writer.clone().acquire_owned().await {
                let grows = store
                    .parked
                    .lock()
                    .expect("group")
                    .as_ref()
                    .map(|g| (store.may_grow(&g.members, g.opened), g.opened));
                let opened = match grows {
                    Some((true, opened)) => opened,
                    Some((false, _)) => return store.commit_parked(),
                    None => return,
                };
                drop(permit);
                if store.queued.load(Ordering::Acquire) > 0 {
                    // The waiters go first (one counted may not be queued yet).
                    tokio::task::yield_now().await;
                } else {
                    let end = opened + store.group_window;
                    tokio::select! {
                        () = tokio::time::sleep_until(end.into()) => {}
                        () = store.gone.notified() => {}
                    }
                }
            }
        });
    }

    /// Whether a group of `members` opened at `opened` may be handed on to
    /// a writer waiting now, or on its way.
    pub(super) fn may_grow(&self, members: &[Member], opened: Instant) -> bool {
        (self.queued.load(Ordering::Acquire) > 0 || self.coming.load(Ordering::Acquire) > 0)
            && members.len() + 1 < GROUP_MOST
            && opened.elapsed() < self.group_window
    }

    /// Ends a group's transaction: the host's steps of its calls (their
    /// record rows) and then `own` are committed into the database beside
    /// first, in a transaction of their own ([`rows_first`](Self::rows_first)),
    /// then the group's `COMMIT`; tells each member how it went. Answers
    /// whether `own` went in. The caller holds the write permit, and lets it
    /// go after.
    ///
    /// The rows go first because no one `COMMIT` is atomic across two
    /// databases in WAL mode: SQLite appends it to each file's log in turn,
    /// `main`'s first, and a process killed between the two (or while the
    /// record was left to be written after, when it was busy) kept a write
    /// without its row. Now a process killed between the two commits leaves
    /// a row whose write was not kept (its call was never answered), never
    /// a kept write without its row. When the rows cannot be committed
    /// (the record stays locked by another process past `BESIDE_WAIT`, a
    /// full disk), nothing of the group is kept; when the group's own
    /// `COMMIT` fails after them, its rows are taken back.
    pub(super) fn commit_group(
        &self,
        p: Pooled,
        mut members: Vec<Member>,
        own: Option<HostStep>,
    ) -> anyhow::Result<bool> {
        let mut own = own;
        if deferred_violations(&p.conn) {
            // SQLite's COMMIT would refuse it (a head whose own part left a
            // deferred foreign key violated commits alone): no row goes in.
            let why = "cannot commit the call's writes; nothing it wrote was kept: FOREIGN KEY constraint failed";
            undone(&p, members, why);
            return Err(anyhow::anyhow!(why));
        }
        let has_rows = own.is_some() || members.iter().any(|m| m.step.is_some());
        let beside = self.beside.is_some() && has_rows;
        if beside && let Err(e) = self.rows_first(&mut members, &mut own) {
            let why = format!("cannot record the call, so nothing it wrote was kept ({e:#}); try again");
            undone(&p, members, &why);
            return Err(anyhow::anyhow!(why));
        }
        if beside {
            crate::caps::confine::pause("store:rows-committed");
        }
        if beside && crate::caps::confine::fault_is("rows-first") {
            // A process killed between the two commits (debug builds).
            tell!("autoapp: fault injected between the rows' commit and the writes'");
            std::process::abort();
        }
        match run_host(&p.conn, COMMIT) {
            Ok(()) => {
                self.commits.fetch_add(1, Ordering::AcqRel);
                self.put_back(Mode::ReadWrite, p);
                for m in members {
                    // A step left out of the commit (no database beside) is
                    // owed. Its member may be gone (its future dropped while
                    // it waited): then the send fails, or the answer is
                    // dropped unread, and either way the owed step, dropped,
                    // hands its row on.
                    let went = beside && m.step.is_some();
                    let owed = m.step.filter(|_| !went).map(|mut s| {
                        s.owed();
                        s
                    });
                    let _ = m.told.send(Ok(Heard { beside: went, owed }));
                }
                Ok(beside && own.is_some())
            }
            Err(e) => {
                // The rows taken back while the store's write lock is still
                // held (no one reads the record's last row meanwhile:
                // `with_writes_held`), then nothing half-done survives, and
                // the connection is dropped.
                if beside {
                    self.rows_taken_back(&mut members, &mut own);
                }
                undone(&p, members, &format!("cannot commit the call's writes; nothing it wrote was kept: {e}"));
                Err(e).context("cannot commit the call's writes; nothing it wrote was kept")
            }
        }
    }

    /// Commits the steps of `members` and `own` into the database beside, in
    /// one transaction of its own, waiting up to `BESIDE_WAIT` for its
    /// write lock.
    fn rows_first(&self, members: &mut [Member], own: &mut Option<HostStep>) -> anyhow::Result<()> {
        self.beside_each(members, own, true, |s, conn| s.run(conn)).context("the record's commit failed")
    }

    /// Takes back the rows [`rows_first`](Self::rows_first) committed for
    /// writes whose `COMMIT` then failed (best effort: a row left says a
    /// call ran whose write was not kept).
    fn rows_taken_back(&self, members: &mut [Member], own: &mut Option<HostStep>) {
        if let Err(e) = self.beside_each(members, own, false, |s, conn| s.undo(conn)) {
            tracing::warn!("a write was not kept, and its row could not be taken back: {e}");
        }
    }

    /// Does `each` with every step of `members` and `own`, in one
    /// transaction on the connection of the database beside (opened first
    /// when `open` and there is none). A connection an error left inside a
    /// transaction it could not roll back is dropped, and opened again next
    /// time.
    fn beside_each(
        &self,
        members: &mut [Member],
        own: &mut Option<HostStep>,
        open: bool,
        each: impl Fn(&mut HostStep, &Connection) -> rusqlite::Result<()>,
    ) -> anyhow::Result<()> {
        let mut slot = self.beside_conn.lock().expect("beside");
        if slot.is_none() && open {
            *slot = Some(self.connect_beside()?);
        }
        let Some(conn) = slot.as_ref() else { return Ok(()) };
        let done = run_host(conn, BEGIN_WRITE).and_then(|()| {
            for s in members.iter_mut().filter_map(|m| m.step.as_mut()).chain(own.as_mut()) {
                each(s, conn)?;
            }
            run_host(conn, COMMIT)
        });
        if let Err(e) = done {
            if !conn.is_autocommit() && run_host(conn, ROLLBACK).is_err() {
                *slot = None;
            }
            return Err(e.into());
        }
        Ok(())
    }
}

/// Undoes a group's transaction on `p` and tells each of its members why
/// nothing it wrote was kept.
fn undone(p: &Pooled, members: Vec<Member>, why: &str) {
    let _ = run_host(&p.conn, ROLLBACK);
    for m in members {
        let _ = m.told.send(Err(why.to_string()));
    }
}

/// Whether the connection's open transaction holds a deferred foreign-key
/// violation (SQLite checks those only at `COMMIT`). When SQLite cannot
/// tell, it is taken as violated: the call then commits alone.
pub(super) fn deferred_violations(conn: &Connection) -> bool {
    let (mut now, mut most) = (0, 0);
    // SAFETY: the handle is `conn`'s own open database, used on this thread
    // while `conn` is borrowed; `sqlite3_db_status` only reads one of its
    // counters into the two integers given.
    #[allow(unsafe_code)]
    let rc = unsafe {
        rusqlite::ffi::sqlite3_db_status(
            conn.handle(),
            rusqlite::ffi::SQLITE_DBSTATUS_DEFERRED_FKS,
            &mut now,
            &mut most,
            0,
        )
    };
    rc != rusqlite::ffi::SQLITE_OK || now != 0
}
