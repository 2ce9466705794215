//! A SQLite file from elsewhere (a backup's data or record): opened
//! read-only through the host's hardened opening (`crate::sqlite`:
//! `trusted_schema = OFF`, no extension), with its triggers and views
//! switched off for this connection, SQLite's integrity check passed, and its
//! schema compared with what is expected: an object that is not expected (a
//! trigger, a view, a table) is refused, named.
//!
//! It is never opened as one of the host's own databases: the record is made
//! anew and its rows copied in, typed and checked ([`Foreign::rows`]); an
//! app's data is used only once its schema is exactly its release's.

use std::path::Path;

use rusqlite::config::DbConfig;
use rusqlite::types::ValueRef;

use super::{Refused, named, refused};

/// One object of a schema (a row of `sqlite_schema`): its type (`table`,
/// `index`, `view`, `trigger`), name, table and SQL text.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Object {
    pub kind: String,
    pub name: String,
    pub table: String,
    pub sql: Option<String>,
}

/// The longest text one cell read from elsewhere may hold.
pub const MAX_CELL: usize = 64 * 1024;

/// What a column holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    Text,
    Integer,
    /// A number (an integer is taken as one).
    Real,
}

/// A column a reader asks for: its name and type, and what a row that lacks
/// the column holds instead (`None`: the column must be there).
#[derive(Debug, Clone, Copy)]
pub struct Column {
    pub name: &'static str,
    pub ty: Type,
    pub default: Option<&'static str>,
}

/// One cell, as read and checked.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Text(String),
    Integer(i64),
    Real(f64),
}

impl Cell {
    pub fn text(self) -> String {
        match self {
            Cell::Text(t) => t,
            Cell::Integer(i) => i.to_string(),
            Cell::Real(r) => r.to_string(),
        }
    }

    pub fn real(&self) -> f64 {
        match self {
            Cell::Real(r) => *r,
            Cell::Integer(i) => *i as f64,
            Cell::Text(_) => 0.0,
        }
    }
}

/// A SQLite file from elsewhere, open read-only and checked.
pub struct Foreign {
    conn: rusqlite::Connection,
    /// Its name, for sentences (`runs.sqlite`).
    label: String,
}

/// The schema of `conn` (the objects of `sqlite_schema`), sorted. SQLite's
/// own tables that hold no code (`sqlite_sequence`, `sqlite_stat1`,
/// `sqlite_stat4`, by their exact names) are left out; any other name, also
/// one that begins with `sqlite_` in any case, is compared like the rest.
pub fn schema_of(conn: &rusqlite::Connection) -> rusqlite::Result<Vec<Object>> {
    let mut stmt = conn.prepare(
        "SELECT type, name, tbl_name, sql FROM sqlite_schema
         WHERE NOT (type = 'table' AND name IN ('sqlite_sequence', 'sqlite_stat1', 'sqlite_stat4'))",
    )?;
    let mut objects: Vec<Object> = stmt
        .query_map([], |r| Ok(Object { kind: r.get(0)?, name: r.get(1)?, table: r.get(2)?, sql: r.get(3)? }))?
        .collect::<Result<_, _>>()?;
    objects.sort();
    Ok(objects)
}

/// How long SQLite's integrity check of a file from elsewhere may run: it
/// evaluates the file's CHECK constraints and expression indexes.
pub const CHECK_BUDGET: std::time::Duration = std::time::Duration::from_secs(30);

/// SQLite virtual-machine steps between two looks at the budget.
const PROGRESS_STEPS: i32 = 10_000;

/// Opens the SQLite file at `path` (called `label` in sentences): read-only,
/// triggers and views off, no string, blob or row longer than `max_length`
/// bytes (`SQLITE_LIMIT_LENGTH`: a 900 MB cell compresses to a megabyte),
/// `cell_size_check` on. Nothing of the file is evaluated yet: its schema is
/// compared first ([`Foreign::check_schema`], [`Foreign::check_schema_one_of`]),
/// then [`Foreign::check_integrity`] runs SQLite's integrity check.
pub fn open(path: &Path, label: &str, max_length: usize) -> Result<Foreign, Refused> {
    let cannot = |e: rusqlite::Error| refused(format!("{label} cannot be read as a SQLite database ({e})"));
    let conn = crate::sqlite::open(path, crate::sqlite::read_only()).map_err(cannot)?;
    // Nothing in the file runs: a trigger fires on no write (none is made),
    // and a view is not read through.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_TRIGGER, false).map_err(cannot)?;
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_VIEW, false).map_err(cannot)?;
    conn.pragma_update(None, "query_only", true).map_err(cannot)?;
    conn.pragma_update(None, "cell_size_check", true).map_err(cannot)?;
    conn.set_limit(rusqlite::limits::Limit::SQLITE_LIMIT_LENGTH, i32::try_from(max_length).unwrap_or(i32::MAX))
        .map_err(cannot)?;
    Ok(Foreign { conn, label: label.to_string() })
}

impl Foreign {
    /// SQLite's integrity check, within [`CHECK_BUDGET`]; only once the
    /// schema is the one expected (the check evaluates what the schema says).
    pub fn check_integrity(&mut self) -> Result<(), Refused> {
        let label = &self.label;
        let deadline = std::time::Instant::now() + CHECK_BUDGET;
        let handler = self.conn.progress_handler(PROGRESS_STEPS, Some(move || std::time::Instant::now() >= deadline));
        handler.map_err(|e| refused(format!("{label} cannot be read as a SQLite database ({e})")))?;
        let found: Result<Vec<String>, rusqlite::Error> = (|| {
            let mut stmt = self.conn.prepare("PRAGMA integrity_check(5)")?;
            stmt.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()
        })();
        let _ = self.conn.progress_handler(0, None::<fn() -> bool>);
        let found = found.map_err(|e| {
            refused(format!("{label} fails SQLite's integrity check ({})", super::text::one_line(&e.to_string())))
        })?;
        if found != ["ok"] {
            let said = super::text::cut(&found.join("; "), 300).into_owned();
            return Err(refused(format!("{label} fails SQLite's integrity check ({})", super::text::terminal(&said))));
        }
        Ok(())
    }

    /// Refuses unless its schema is one of `variants`, compared with their
    /// SQL's runs of white space made one space (a file's text as another
    /// version wrote it).
    pub fn check_schema_one_of(&self, variants: &[Vec<Object>]) -> Result<(), Refused> {
        let squeeze = |objects: &[Object]| -> Vec<Object> {
            objects
                .iter()
                .map(|o| Object {
                    sql: o.sql.as_ref().map(|t| t.split_whitespace().collect::<Vec<_>>().join(" ")),
                    ..o.clone()
                })
                .collect()
        };
        let found = squeeze(&self.schema()?);
        if variants.iter().any(|v| squeeze(v) == found) {
            return Ok(());
        }
        // Name what no variant has, by kind and name; else say the text differs.
        let known = |o: &Object| variants.iter().flatten().any(|v| v.kind == o.kind && v.name == o.name);
        let extra: Vec<String> =
            found.iter().filter(|o| !known(o)).take(5).map(|o| format!("{} {}", o.kind, named(&o.name))).collect();
        Err(refused(if extra.is_empty() {
            format!("{} does not have exactly the schema Autoapp makes for it", self.label)
        } else {
            format!("{} holds {} that Autoapp does not make in it", self.label, extra.join(", "))
        }))
    }

    /// Its schema ([`schema_of`]).
    pub fn schema(&self) -> Result<Vec<Object>, Refused> {
        schema_of(&self.conn).map_err(|e| {
            refused(format!("{} cannot be read as a SQLite database: its schema cannot be read ({e})", self.label))
        })
    }

    /// Refuses unless its schema is exactly `expected` (objects in
    /// `optional` may be missing): an object it holds that is not expected is
    /// named, and so is one expected that it lacks or holds otherwise.
    pub fn check_schema(&self, expected: &[Object], optional: &[&str]) -> Result<(), Refused> {
        let found = self.schema()?;
        let extra: Vec<String> =
            found.iter().filter(|o| !expected.contains(o)).map(|o| format!("{} {}", o.kind, named(&o.name))).collect();
        if !extra.is_empty() {
            let (first, more) = (&extra[..extra.len().min(5)], extra.len().saturating_sub(5));
            return Err(refused(format!(
                "{} holds {} that its release's migrations do not make{}",
                self.label,
                first.join(", "),
                if more > 0 { format!(" (and {more} more)") } else { String::new() }
            )));
        }
        if let Some(o) = expected.iter().find(|o| !found.contains(o) && !optional.contains(&o.name.as_str())) {
            return Err(refused(format!(
                "{} lacks the {} {} that its release's migrations make",
                self.label,
                o.kind,
                named(&o.name)
            )));
        }
        Ok(())
    }

    /// Each row of `table` (which must be a table, not a view), its `columns`
    /// read typed and checked, handed to `each` in order of `order_by` (a
    /// column of the table). A cell of another type, a text longer than
    /// [`MAX_CELL`], a missing column without a default: refused with a
    /// sentence naming the table, the row and the column.
    pub fn rows(
        &self,
        table: &str,
        columns: &[Column],
        order_by: &str,
        mut each: impl FnMut(Vec<Cell>) -> Result<(), Refused>,
    ) -> Result<u64, Refused> {
        let label = &self.label;
        let sql_error = |e: rusqlite::Error| refused(format!("the table {table} of {label} cannot be read ({e})"));
        let kind: Option<String> = self
            .conn
            .query_row("SELECT type FROM sqlite_schema WHERE name = ?1", [table], |r| r.get(0))
            .map(Some)
            .or_else(|e| if matches!(e, rusqlite::Error::QueryReturnedNoRows) { Ok(None) } else { Err(e) })
            .map_err(sql_error)?;
        match kind.as_deref() {
            Some("table") => {}
            Some(other) => {
                return Err(refused(format!("{label} holds a {other} {} where a table should be", named(table))));
            }
            None => return Err(refused(format!("{label} has no table {}", named(table)))),
        }
        let present: Vec<String> = {
            let mut stmt = self.conn.prepare("SELECT name FROM pragma_table_info(?1)").map_err(sql_error)?;
            stmt.query_map([table], |r| r.get(0)).map_err(sql_error)?.collect::<Result<_, _>>().map_err(sql_error)?
        };
        let quote = |n: &str| format!("\"{}\"", n.replace('"', "\"\""));
        let mut select = Vec::new();
        for c in columns {
            if present.iter().any(|p| p == c.name) {
                select.push(quote(c.name));
            } else if let Some(d) = c.default {
                select.push(format!("'{}'", d.replace('\'', "''")));
            } else {
                return Err(refused(format!("the table {table} of {label} has no column {}", c.name)));
            }
        }
        if !present.iter().any(|p| p == order_by) {
            return Err(refused(format!("the table {table} of {label} has no column {order_by}")));
        }
        let sql = format!("SELECT {} FROM {} ORDER BY {}", select.join(", "), quote(table), quote(order_by));
        let mut stmt = self.conn.prepare(&sql).map_err(sql_error)?;
        let mut rows = stmt.query([]).map_err(sql_error)?;
        let mut n = 0u64;
        while let Some(row) = rows.next().map_err(sql_error)? {
            n += 1;
            let mut cells = Vec::with_capacity(columns.len());
            for (i, c) in columns.iter().enumerate() {
                let value = row.get_ref(i).map_err(sql_error)?;
                let wrong = |held: &str| {
                    refused(format!(
                        "row {n} of the table {table} of {label} holds {held} where its column {} holds {}",
                        c.name,
                        match c.ty {
                            Type::Text => "text",
                            Type::Integer => "an integer",
                            Type::Real => "a number",
                        }
                    ))
                };
                let cell = match (c.ty, value) {
                    (Type::Text, ValueRef::Text(t)) => {
                        let t = std::str::from_utf8(t).map_err(|_| wrong("text that is not UTF-8"))?;
                        if t.len() > MAX_CELL {
                            return Err(wrong(&format!("a text of {} bytes (at most {MAX_CELL})", t.len())));
                        }
                        Cell::Text(t.to_string())
                    }
                    (Type::Integer, ValueRef::Integer(i)) => Cell::Integer(i),
                    (Type::Real, ValueRef::Real(r)) => Cell::Real(r),
                    (Type::Real, ValueRef::Integer(i)) => Cell::Real(i as f64),
                    (_, ValueRef::Null) => return Err(wrong("nothing (NULL)")),
                    (_, ValueRef::Blob(_)) => return Err(wrong("bytes")),
                    (_, ValueRef::Text(_)) => return Err(wrong("text")),
                    (_, ValueRef::Integer(_)) => return Err(wrong("an integer")),
                    (_, ValueRef::Real(_)) => return Err(wrong("a number")),
                };
                cells.push(cell);
            }
            each(cells)?;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db(sql: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.sqlite");
        let conn = crate::sqlite::open(&path, crate::sqlite::read_write()).unwrap();
        conn.execute_batch(sql).unwrap();
        drop(conn);
        (dir, path)
    }

    const COLUMNS: &[Column] = &[
        Column { name: "seq", ty: Type::Integer, default: None },
        Column { name: "who", ty: Type::Text, default: None },
        Column { name: "ms", ty: Type::Real, default: None },
        Column { name: "by", ty: Type::Text, default: Some("nobody") },
    ];

    #[test]
    fn rows_are_read_typed_and_a_row_that_does_not_fit_is_named() {
        let (_d, path) = db("CREATE TABLE runs (seq INTEGER PRIMARY KEY, who TEXT, ms REAL);
             INSERT INTO runs VALUES (1, 'a', 1.5), (2, 'b', 3);
             CREATE TRIGGER t BEFORE INSERT ON runs BEGIN SELECT RAISE(ABORT, 'no'); END;");
        let f = open(&path, "runs.sqlite", 1 << 20).unwrap();
        let mut got = Vec::new();
        f.rows("runs", COLUMNS, "seq", |c| {
            got.push(c);
            Ok(())
        })
        .unwrap();
        assert_eq!(
            got[1],
            vec![Cell::Integer(2), Cell::Text("b".into()), Cell::Real(3.0), Cell::Text("nobody".into())]
        );
        let (_d, path) = db("CREATE TABLE runs (seq INTEGER PRIMARY KEY, who, ms REAL);
             INSERT INTO runs VALUES (1, 'a', 1.5), (2, x'00', 3);");
        let e = open(&path, "runs.sqlite", 1 << 20).unwrap().rows("runs", COLUMNS, "seq", |_| Ok(())).unwrap_err();
        assert_eq!(e.0, "row 2 of the table runs of runs.sqlite holds bytes where its column who holds text");
    }

    #[test]
    fn a_cell_gives_its_text_and_its_number() {
        assert_eq!(Cell::Text("a b".into()).text(), "a b");
        assert_eq!(Cell::Integer(-3).text(), "-3");
        assert_eq!(Cell::Real(1.5).text(), "1.5");
        assert_eq!(Cell::Real(2.5).real(), 2.5);
        assert_eq!(Cell::Integer(4).real(), 4.0);
        assert_eq!(Cell::Text("7".into()).real(), 0.0);
    }

    #[test]
    fn a_text_cell_of_64_kib_is_read() {
        let (_d, path) = db(&format!(
            "CREATE TABLE runs (seq INTEGER PRIMARY KEY, who TEXT, ms REAL);
             INSERT INTO runs VALUES (1, '{}', 1);",
            "w".repeat(65_536)
        ));
        let f = open(&path, "runs.sqlite", 1 << 20).unwrap();
        f.rows("runs", &COLUMNS[..3], "seq", |c| {
            assert_eq!(c[1].clone().text().len(), 65_536);
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn a_text_cell_may_hold_up_to_its_bound_and_the_order_column_must_be_there() {
        let (_d, path) = db(&format!(
            "CREATE TABLE runs (seq INTEGER PRIMARY KEY, who TEXT, ms REAL);
             INSERT INTO runs VALUES (1, '{}', 1), (2, 'short', 2);",
            "w".repeat(MAX_CELL)
        ));
        let f = open(&path, "runs.sqlite", 1 << 20).unwrap();
        let mut lengths = Vec::new();
        let n = f
            .rows("runs", &COLUMNS[..3], "seq", |c| {
                lengths.push(c[1].clone().text().len());
                Ok(())
            })
            .unwrap();
        assert_eq!((n, lengths), (2, vec![MAX_CELL, 5]));
        let (_d, path) = db(&format!(
            "CREATE TABLE runs (seq INTEGER PRIMARY KEY, who TEXT, ms REAL);
             INSERT INTO runs VALUES (1, '{}', 1);",
            "w".repeat(MAX_CELL + 1)
        ));
        let e =
            open(&path, "runs.sqlite", 1 << 20).unwrap().rows("runs", &COLUMNS[..3], "seq", |_| Ok(())).unwrap_err();
        assert!(e.0.contains(&format!("a text of {} bytes (at most {MAX_CELL})", MAX_CELL + 1)), "{e}");
        let e = open(&path, "runs.sqlite", 1 << 20).unwrap().rows("runs", &COLUMNS[..3], "at", |_| Ok(())).unwrap_err();
        assert_eq!(e.0, "the table runs of runs.sqlite has no column at");
        let e =
            open(&path, "runs.sqlite", 1 << 20).unwrap().rows("gone", &COLUMNS[..3], "seq", |_| Ok(())).unwrap_err();
        assert_eq!(e.0, "runs.sqlite has no table \"gone\"");
    }

    #[test]
    fn the_integrity_check_passes_a_whole_file_within_its_budget_and_names_a_damaged_one() {
        // Enough rows that the check takes many thousand steps: a budget that
        // has already passed would stop it.
        let rows = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000)
                    INSERT INTO t SELECT i, 'row ' || i FROM n;";
        let (_d, path) =
            db(&format!("CREATE TABLE t (id INTEGER PRIMARY KEY, x TEXT); CREATE INDEX tx ON t(x); {rows}"));
        open(&path, "app.sqlite", 1 << 20).unwrap().check_integrity().unwrap();
        // The index says one order, its rows are in another.
        {
            let conn = crate::sqlite::open(&path, crate::sqlite::read_write()).unwrap();
            conn.set_db_config(DbConfig::SQLITE_DBCONFIG_DEFENSIVE, false).unwrap();
            conn.execute_batch(
                "PRAGMA writable_schema = ON;
                 UPDATE sqlite_schema SET sql = 'CREATE INDEX tx ON t(x DESC)' WHERE name = 'tx';",
            )
            .unwrap();
        }
        let e = open(&path, "app.sqlite", 1 << 20).unwrap().check_integrity().unwrap_err();
        assert!(e.0.starts_with("app.sqlite fails SQLite's integrity check ("), "{e}");
    }

    #[test]
    fn a_schema_is_one_of_its_variants_whatever_its_white_space() {
        let schema = |sql: &str| {
            let conn = crate::sqlite::in_memory().unwrap();
            conn.execute_batch(sql).unwrap();
            schema_of(&conn).unwrap()
        };
        let old = schema("CREATE TABLE runs (seq INTEGER PRIMARY KEY, who TEXT);");
        let new = schema("CREATE TABLE runs (seq INTEGER PRIMARY KEY, who TEXT, ms REAL);");
        let variants = [old, new];
        let (_d, path) = db("CREATE TABLE runs (seq   INTEGER PRIMARY KEY,\n   who TEXT,  ms REAL);");
        open(&path, "runs.sqlite", 1 << 20).unwrap().check_schema_one_of(&variants).unwrap();
        let (_d, path) = db("CREATE TABLE runs (seq INTEGER PRIMARY KEY, who BLOB);");
        let e = open(&path, "runs.sqlite", 1 << 20).unwrap().check_schema_one_of(&variants).unwrap_err();
        assert_eq!(e.0, "runs.sqlite does not have exactly the schema Autoapp makes for it");
        let (_d, path) = db("CREATE TABLE runs (seq INTEGER PRIMARY KEY, who TEXT);
             CREATE TRIGGER t AFTER INSERT ON runs BEGIN DELETE FROM runs; END;");
        let e = open(&path, "runs.sqlite", 1 << 20).unwrap().check_schema_one_of(&variants).unwrap_err();
        assert_eq!(e.0, "runs.sqlite holds trigger \"t\" that Autoapp does not make in it");
        // Another table: a kind the variants have, under a name they do not.
        let (_d, path) = db("CREATE TABLE runs (seq INTEGER PRIMARY KEY, who TEXT); CREATE TABLE other (x);");
        let e = open(&path, "runs.sqlite", 1 << 20).unwrap().check_schema_one_of(&variants).unwrap_err();
        assert_eq!(e.0, "runs.sqlite holds table \"other\" that Autoapp does not make in it");
    }

    #[test]
    fn an_optional_object_may_be_missing_and_another_may_not() {
        let made = "CREATE TABLE notes (id INTEGER PRIMARY KEY); CREATE TABLE tags (id INTEGER PRIMARY KEY);";
        let expected = {
            let conn = crate::sqlite::in_memory().unwrap();
            conn.execute_batch(made).unwrap();
            schema_of(&conn).unwrap()
        };
        let (_d, path) = db("CREATE TABLE notes (id INTEGER PRIMARY KEY);");
        let f = open(&path, "app.sqlite", 1 << 20).unwrap();
        f.check_schema(&expected, &["tags"]).unwrap();
        let e = f.check_schema(&expected, &[]).unwrap_err();
        assert_eq!(e.0, "app.sqlite lacks the table \"tags\" that its release's migrations make");
    }

    #[test]
    fn a_view_where_a_table_should_be_is_refused() {
        let (_d, path) = db("CREATE TABLE real_runs (seq INTEGER PRIMARY KEY, who TEXT, ms REAL);
             CREATE VIEW runs AS SELECT * FROM real_runs;");
        let e = open(&path, "runs.sqlite", 1 << 20).unwrap().rows("runs", COLUMNS, "seq", |_| Ok(())).unwrap_err();
        assert_eq!(e.0, "runs.sqlite holds a view \"runs\" where a table should be");
    }

    #[test]
    fn an_object_the_schema_does_not_expect_is_named() {
        let made = "CREATE TABLE notes (id INTEGER PRIMARY KEY, title TEXT);";
        let expected = {
            let conn = crate::sqlite::in_memory().unwrap();
            conn.execute_batch(made).unwrap();
            schema_of(&conn).unwrap()
        };
        let (_d, path) = db(made);
        open(&path, "app.sqlite", 1 << 20).unwrap().check_schema(&expected, &[]).unwrap();
        let (_d, path) = db(&format!(
            "{made} CREATE TRIGGER sneaky AFTER INSERT ON notes BEGIN DELETE FROM notes; END;
             CREATE VIEW peek AS SELECT 1;"
        ));
        let e = open(&path, "app.sqlite", 1 << 20).unwrap().check_schema(&expected, &[]).unwrap_err();
        assert_eq!(e.0, "app.sqlite holds trigger \"sneaky\", view \"peek\" that its release's migrations do not make");
        let (_d, path) = db("CREATE TABLE other (x);");
        let e = open(&path, "app.sqlite", 1 << 20).unwrap().check_schema(&expected, &[]).unwrap_err();
        assert!(e.0.contains("table \"other\""), "{e}");
        // A table whose name only begins like SQLite's own is compared like the rest.
        let (_d, path) = db(made);
        {
            let conn = crate::sqlite::open(&path, crate::sqlite::read_write()).unwrap();
            conn.set_db_config(DbConfig::SQLITE_DBCONFIG_DEFENSIVE, false).unwrap();
            conn.execute_batch("PRAGMA writable_schema = ON; CREATE TABLE Sqlite_x (x);").unwrap();
        }
        let e = open(&path, "app.sqlite", 1 << 20).unwrap().check_schema(&expected, &[]).unwrap_err();
        assert!(e.0.contains("table \"Sqlite_x\""), "{e}");
    }

    #[test]
    fn a_file_that_is_not_a_database_is_a_sentence() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.sqlite");
        std::fs::write(&path, vec![0x5a; 8192]).unwrap();
        let e = match open(&path, "app.sqlite", 1 << 20) {
            Err(e) => e,
            Ok(f) => f.schema().unwrap_err(),
        };
        assert!(e.0.starts_with("app.sqlite"), "{e}");
    }
}
