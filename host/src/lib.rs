//! Autoapp: runs a person's applications as WebAssembly components on their own
//! computer, and keeps that person in charge of what they may do.
//!
//! `ARCHITECTURE.md` at the repository's root is the map of this crate.
//!
//! Only what the binary, the end-to-end tests and the benchmarks use is
//! public; everything else is `pub(crate)`.

// First: its macros (`say!`, `tell!`: the one writer to a terminal) are
// used by the modules after it.
#[macro_use]
pub mod elsewhere;
pub mod applog;
pub mod apps;
pub(crate) mod bindings;
pub(crate) mod build;
pub(crate) mod caps;
pub mod cli;
pub mod config;
pub mod control;
pub(crate) mod engineer;
pub(crate) mod error;
pub(crate) mod explain;
pub mod gate;
pub(crate) mod grants;
pub mod housekeeping;
pub(crate) mod launcher;
pub(crate) mod lifecycle;
pub mod manifest;
pub(crate) mod mcp;
pub(crate) mod packages;
pub(crate) mod plans;
pub(crate) mod pointer;
// Debug builds only (`tests/all/tidy.rs`): what a runtime escape would
// try, the import a test's guest plays it with.
#[cfg(debug_assertions)]
pub(crate) mod probe;
pub(crate) mod problems;
pub(crate) mod programs;
pub mod release;
pub mod root;
pub(crate) mod runtime;
pub(crate) mod sanitize;
pub(crate) mod secret;
pub(crate) mod secrets;
pub(crate) mod server;
pub(crate) mod sqlite;
pub(crate) mod template;
pub(crate) mod view;
pub(crate) mod worker;
pub(crate) mod workflows;
pub(crate) mod workspace;
