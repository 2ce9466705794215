//! The authorizer: the rule that holds whatever SQL a guest (or a migration
//! from elsewhere) sends. SQLite asks it about every action of a statement as
//! the statement is prepared; a refusal says why, and the statement never
//! runs.
//!
//! In a `read` call only `SELECT` and reads of the app's tables pass; in
//! every call `ATTACH`, `DETACH`, `PRAGMA`, transaction control, savepoints,
//! temporary objects, virtual tables other than FTS5 and R*Tree, any use of a
//! database but `main`, and any access to the host's `_autoapp*` tables are
//! refused. It decides from the action alone: it must never consult the
//! guest's state, and never allow by default an action it does not name.

use rusqlite::hooks::{AuthAction, AuthContext};

use super::Mode;

/// Tables of the host inside the app's database: never visible to the guest.
pub(super) const HOST_TABLE_PREFIX: &str = "_autoapp";

/// The authorizer's refusal of any database but `main`.
pub(super) const ONLY_MAIN: &str = "only the app's own database (`main`) can be used";

/// Decides one action of a statement the guest sent. `Err` says why not.
pub(super) fn authorize(mode: Mode, ctx: &AuthContext<'_>) -> Result<(), String> {
    use AuthAction as A;
    let host_table =
        |t: &str| t.get(..HOST_TABLE_PREFIX.len()).is_some_and(|p| p.eq_ignore_ascii_case(HOST_TABLE_PREFIX));
    if ctx.database_name.is_some_and(|d| d != "main")
        && !matches!(ctx.action, A::Select | A::Function { .. } | A::Recursive)
    {
        return Err(ONLY_MAIN.into());
    }
    match ctx.action {
        A::Select | A::Recursive => Ok(()),
        A::Read { table_name, .. } if host_table(table_name) => {
            Err(format!("the table {table_name} belongs to the host"))
        }
        A::Read { .. } => Ok(()),
        A::Function { function_name } => {
            let f = function_name.to_ascii_lowercase();
            if matches!(f.as_str(), "load_extension" | "fts3_tokenizer" | "readfile" | "writefile" | "edit") {
                Err(format!("the function {function_name} is not available"))
            } else {
                Ok(())
            }
        }
        // The r-tree module reads the page size when it makes a table; reading
        // it changes nothing.
        A::Pragma { pragma_name, pragma_value: None } if pragma_name.eq_ignore_ascii_case("page_size") => Ok(()),
        A::Pragma { .. } => Err("PRAGMA statements are not available: the host keeps the database's settings".into()),
        A::Attach { .. } | A::Detach { .. } => {
            Err("ATTACH and DETACH are not available: an app has exactly one database".into())
        }
        A::Transaction { .. } | A::Savepoint { .. } => Err(
            "transaction control is not available: each call of a write route is already one transaction, committed when the route succeeds".into(),
        ),
        A::CreateTempIndex { .. }
        | A::CreateTempTable { .. }
        | A::CreateTempTrigger { .. }
        | A::CreateTempView { .. }
        | A::DropTempIndex { .. }
        | A::DropTempTable { .. }
        | A::DropTempTrigger { .. }
        | A::DropTempView { .. } => Err("temporary tables, views and triggers are not available; use a table".into()),
        _ if mode == Mode::ReadOnly => Err("this route's effect is read, so the store is read-only; declare the route with effect = \"write\" to change data".into()),
        A::Insert { table_name }
        | A::Delete { table_name }
        | A::Update { table_name, .. }
        | A::CreateTable { table_name }
        | A::DropTable { table_name }
        | A::CreateIndex { table_name, .. }
        | A::DropIndex { table_name, .. }
        | A::CreateTrigger { table_name, .. }
        | A::DropTrigger { table_name, .. }
        | A::AlterTable { table_name, .. }
        | A::Analyze { table_name } => {
            if host_table(table_name) {
                Err(format!("the table {table_name} belongs to the host"))
            } else {
                Ok(())
            }
        }
        A::CreateView { .. } | A::DropView { .. } | A::Reindex { .. } => Ok(()),
        A::CreateVtable { module_name, .. } | A::DropVtable { module_name, .. } => {
            if matches!(module_name.to_ascii_lowercase().as_str(), "fts5" | "rtree") {
                Ok(())
            } else {
                Err(format!("the virtual table module {module_name} is not available (fts5 and rtree are)"))
            }
        }
        _ => Err("this statement is not available to apps".into()),
    }
}
