//! The kinds of failure, kept from where an error is made to the adapter that
//! reports it: the HTTP API turns them into statuses (404, 400, 409, 403,
//! 502, 500), MCP and the control connection into their `kind` field. The
//! command line keeps its documented contract instead: exit 1 for any failure
//! (with the whole cause chain), 2 for bad usage. A leaf.

use serde::Serialize;

/// What kind of failure a call or an action met.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    /// No such app, release, route, page, preview or workflow.
    NotFound,
    /// The input did not fit.
    InvalidInput,
    /// The state did not allow it.
    Conflict,
    /// The host, a capability or the gate refused.
    Denied,
    /// The guest was stopped (trap, deadline, limit).
    Trap,
    /// Something else failed.
    Internal,
}

/// An error that says its kind. Made with [`kinded`]; anywhere in an
/// `anyhow` chain (under added context), [`kind_of`] finds it.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Kinded {
    pub kind: ErrorKind,
    pub message: String,
}

/// An error of `kind` saying `message`.
pub fn kinded(kind: ErrorKind, message: impl Into<String>) -> anyhow::Error {
    Kinded { kind, message: message.into() }.into()
}

/// The one sentence for an app id that names no app.
pub fn no_such_app(app: &impl std::fmt::Display) -> String {
    format!("there is no app `{app}`; `autoapp create {app}` makes one")
}

/// The kind of `e`: the first [`Kinded`] in its chain; otherwise `Conflict`:
/// the state did not allow what was asked.
pub fn kind_of(e: &anyhow::Error) -> ErrorKind {
    for cause in e.chain() {
        if let Some(k) = cause.downcast_ref::<Kinded>() {
            return k.kind;
        }
    }
    ErrorKind::Conflict
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_is_found_under_context_and_the_default_is_conflict() {
        let e = kinded(ErrorKind::NotFound, "there is no app `x`").context("cannot activate x");
        assert_eq!(kind_of(&e), ErrorKind::NotFound);
        assert_eq!(format!("{e:#}"), "cannot activate x: there is no app `x`");
        assert_eq!(kind_of(&anyhow::anyhow!("busy")), ErrorKind::Conflict);
    }
}
