//! The backup file's format, which `backup` writes and `restore` reads: one
//! file, a tar archive compressed with zstd, whose first entry is
//! `backup.json` ([`Manifest`]: format, version, app, when, the active
//! release, and every other entry's size and SHA-256), then `data/*.sqlite`
//! (each a consistent copy made with SQLite's online backup while the app may
//! be serving and writing), `release/…` (the active release's folder:
//! component, manifest, migrations, release.json), `grants.json`, and
//! `publisher.json` for an app installed from a signed package (the publisher
//! its installs are pinned to).
//!
//! This room holds the names, the limits and the versions only: it never
//! reads or writes a file, so the writer and the reader both import it and
//! neither imports the other.

use serde::{Deserialize, Serialize};

/// What `backup.json` calls the format.
pub const FORMAT: &str = "autoapp-backup";
/// The version this Autoapp writes and the newest it reads.
pub const VERSION: u32 = 1;
/// The file name's ending.
pub const EXTENSION: &str = "autoapp-backup";

/// The backup's first entry: what it holds.
pub const MANIFEST: &str = "backup.json";
/// The app's grants, as `grants.json` in its folder.
pub const GRANTS: &str = "grants.json";
/// The publisher an installed app is pinned to.
pub const PUBLISHER: &str = crate::packages::install::PUBLISHER_FILE;
/// The most `backup.json` may be.
pub const MAX_MANIFEST: u64 = 4 << 20;

/// `backup.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub version: u32,
    /// The Autoapp that wrote it.
    pub autoapp: String,
    pub app: String,
    /// The app the release is of, when not `app` (an app installed or
    /// restored under another id, `--as`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_of: Option<String>,
    pub taken_at: String,
    /// The active release when it was taken.
    pub release: String,
    pub files: Vec<Entry>,
}

/// One file of a backup.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Entry {
    pub path: String,
    pub bytes: u64,
    pub sha256: String,
}
