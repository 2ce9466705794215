//! Every SQLite connection the host opens is opened here, one way: a database
//! file may have come from elsewhere (a restored backup, a file put in the
//! root by hand), so no connection trusts what its schema says.
//!
//! - `trusted_schema = OFF`: a view or trigger in the file cannot call a
//!   function that has side effects, and a virtual table cannot be used from
//!   one (SQLite's own defence against a hostile schema).
//! - `SQLITE_DBCONFIG_DEFENSIVE`: no `writable_schema`, no write to shadow
//!   tables, no corrupting pragmas.
//! - no extension: rusqlite is built without its `load_extension` feature
//!   (`tests/all/tidy.rs` holds that), and SQLite's `load_extension()` SQL
//!   function stays off (its default; a test below holds that too).
//!
//! `tests/all/tidy.rs` finds no `Connection::open` outside this file.

use std::path::Path;

use rusqlite::config::DbConfig;
pub use rusqlite::{Connection, OpenFlags};

/// The flags `Connection::open` uses: read and write, created if missing.
pub fn read_write() -> OpenFlags {
    OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX
}

/// Read only: never writes the file (nor creates it).
pub fn read_only() -> OpenFlags {
    OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
}

/// Opens the database at `path` with `flags`, hardened.
pub fn open(path: &Path, flags: OpenFlags) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(path, flags)?;
    harden(&conn)?;
    Ok(conn)
}

/// A new database in memory, hardened the same way.
pub fn in_memory() -> rusqlite::Result<Connection> {
    let conn = Connection::open_in_memory()?;
    harden(&conn)?;
    Ok(conn)
}

fn harden(conn: &Connection) -> rusqlite::Result<()> {
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_TRUSTED_SCHEMA, false)?;
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_DEFENSIVE, true)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_trusts_no_schema_and_loads_no_extension() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("x.sqlite"), read_write()).unwrap();
        let trusted: i64 = conn.query_row("PRAGMA trusted_schema", [], |r| r.get(0)).unwrap();
        assert_eq!(trusted, 0);
        let e = conn.query_row("SELECT load_extension('/nonexistent/x')", [], |r| r.get::<_, i64>(0)).unwrap_err();
        assert!(e.to_string().contains("not authorized"), "{e}");
        let mem = in_memory().unwrap();
        assert_eq!(mem.query_row("PRAGMA trusted_schema", [], |r| r.get::<_, i64>(0)).unwrap(), 0);
        assert!(mem.execute_batch("PRAGMA writable_schema = ON; CREATE TABLE t(x)").is_ok());
        let writable: i64 = mem.query_row("PRAGMA writable_schema", [], |r| r.get(0)).unwrap();
        assert_eq!(writable, 0, "defensive: writable_schema stays off");
    }
}
