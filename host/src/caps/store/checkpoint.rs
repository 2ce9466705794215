//! Checkpoints: what calls committed is copied from the write-ahead log into
//! the database off the calls' path — once a second by the host, and soon
//! after a write makes the log long ([`CHECKPOINT_PAGES`]). Never inside a
//! call: a checkpoint copies many pages and syncs, which would be somebody's
//! wait.

use std::sync::Arc;
use std::sync::atomic::Ordering;
#[cfg(test)]
use std::time::Duration;

use anyhow::Context as _;

use super::{AppStore, Mode};

/// The length of the write-ahead log, in pages, at which the writer that
/// reaches it checkpoints the log ([`AppStore::checkpoint_soon`]): four
/// times SQLite's own default (about 16 MiB of 4 KiB pages), moved off the
/// calls. Each checkpoint syncs both logs and both databases (the store and
/// the record beside it); at SQLite's 1,000 pages that was 0.12 `fsync` a
/// write of `notes.add`, at 4,000 (and with the log started again after
/// each checkpoint, [`AppStore::checkpoint_soon`]) it is 0.008, under the
/// native peer's 0.016 (docs/performance.md). The log stays well under
/// `journal_size_limit`.
pub(super) const CHECKPOINT_PAGES: u64 = 4000;

impl AppStore {
    /// Copies what calls committed since the last checkpoint from the write-
    /// ahead log into the database (PASSIVE: it never waits for, nor blocks,
    /// a call). The host runs it on its own thread once a second.
    ///
    /// First it commits a group left parked with nobody to commit it (its
    /// calls and its closer gone with a server that stopped): otherwise its
    /// transaction would hold the database's write lock, and keep every
    /// other process's write waiting, until the app's next write.
    pub fn checkpoint(&self) -> anyhow::Result<()> {
        self.commit_orphaned();
        self.checkpoint_passive()
    }

    /// Commits the parked group when nobody holds or waits for the write
    /// permit: then no call of the group is running and no writer is about
    /// to take it (one that comes just after begins a transaction of its
    /// own).
    pub(super) fn commit_orphaned(&self) {
        if self.parked.lock().expect("group").is_none() {
            return;
        }
        if let Ok(_permit) = self.writer.clone().try_acquire_owned() {
            self.commit_parked();
        }
    }

    /// [`checkpoint`](Self::checkpoint), one PASSIVE step over both logs.
    pub(super) fn checkpoint_passive(&self) -> anyhow::Result<()> {
        let commits = self.commits.load(Ordering::Acquire);
        if commits == self.checkpointed.load(Ordering::Acquire) {
            self.checkpoint_at.store(CHECKPOINT_PAGES, Ordering::Release);
            return Ok(());
        }
        let mut slot = self.checkpointer.lock().expect("checkpointer");
        if slot.is_none() {
            *slot = Some(self.connect(Mode::ReadWrite)?);
        }
        let conn = &slot.as_ref().expect("just opened").conn;
        let mut schemas = vec!["main"];
        schemas.extend(self.beside.as_ref().map(|b| b.name));
        let (mut busy, mut logged, mut copied) = (0i64, 0i64, 0i64);
        for schema in schemas {
            let (b, l, c): (i64, i64, i64) =
                conn.query_row(&format!("PRAGMA {schema}.wal_checkpoint(PASSIVE)"), [], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })?;
            busy |= b;
            if l - c >= logged - copied {
                (logged, copied) = (l, c);
            }
        }
        // All of the log is in the database: nothing left to do until the
        // next commit, which starts the log again from its beginning.
        let all = busy == 0 && logged == copied;
        if all {
            self.checkpointed.store(commits, Ordering::Release);
            self.checkpoint_at.store(CHECKPOINT_PAGES, Ordering::Release);
        } else {
            // A reader still needs the log's end: try again once it has grown
            // as much again, not at every commit.
            self.checkpoint_at.store(u64::try_from(logged).unwrap_or(0) + CHECKPOINT_PAGES, Ordering::Release);
        }
        Ok(())
    }

    /// Whether the log has grown to where its next writer checkpoints it.
    pub(super) fn log_is_long(&self) -> bool {
        let longer = self.wal_pages.load(Ordering::Acquire).max(self.beside_pages.load(Ordering::Acquire));
        longer >= self.checkpoint_at.load(Ordering::Acquire)
    }

    /// Checkpoints the logs on a blocking thread, off the calls' path, in
    /// two steps. First beside the writers: most of the log is copied and
    /// synced while they go on. But SQLite starts a log again from its
    /// beginning only for a writer whose transaction began when all of the
    /// log was already copied, and while writes keep coming, one is always
    /// in a transaction that began before the copy ended, even when the
    /// copy reached the log's end: the log would grow for as long as writes
    /// keep coming (1 GB in 9 s of writes, measured), and every write past
    /// [`CHECKPOINT_PAGES`] would start another checkpoint (43 in 5,000
    /// writes one after another, measured). So then the write permit is
    /// taken (in turn, after the writers already waiting) and what was
    /// logged since is copied too: writers wait for that short part only,
    /// and the next one starts the log again from its beginning. The log
    /// stays near [`CHECKPOINT_PAGES`]. Without a runtime to run it on, the
    /// background checkpoint does the first step.
    pub(super) fn checkpoint_soon(self: Arc<Self>) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        // Not again by the next writer while this one runs.
        self.checkpoint_at.store(u64::MAX, Ordering::Release);
        rt.spawn_blocking(move || {
            let done = self.checkpoint_passive().and_then(|()| {
                let _permit = futures::executor::block_on(self.writer.clone().acquire_owned())
                    .context("the store's write permit is gone")?;
                self.commit_parked();
                self.checkpoint_passive()
            });
            if let Err(e) = done {
                self.checkpoint_at.store(CHECKPOINT_PAGES, Ordering::Release);
                tracing::warn!("cannot checkpoint a store: {e:#}");
            }
        });
    }

    /// Groups that stay open as long as a test needs (not cut by time): for
    /// tests that set up a group step by step. Before the store is shared.
    #[cfg(test)]
    pub(crate) fn keep_groups_open(self: &mut Arc<Self>) {
        Arc::get_mut(self).expect("not shared yet").group_window = Duration::from_secs(600);
    }
}
