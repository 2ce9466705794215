//! Autoapp: runs a person's applications as WebAssembly components on their own
//! computer, and keeps that person in charge of what they may do.
//!
//! `ARCHITECTURE.md` at the repository's root is the map of this crate.

pub mod apps;
pub mod bindings;
pub mod build;
pub mod caps;
pub mod cli;
pub mod config;
pub mod control;
pub mod error;
pub mod explain;
pub mod gate;
pub mod grants;
pub mod launcher;
pub mod lifecycle;
pub mod manifest;
pub mod mcp;
pub mod programs;
pub mod release;
pub mod root;
pub mod runtime;
pub mod sanitize;
pub mod secret;
pub mod server;
pub mod template;
pub mod view;
pub mod workflows;
pub mod workspace;
