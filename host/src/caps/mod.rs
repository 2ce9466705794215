//! The capabilities a call can be given, one module each. Everything is
//! denied by default, and each module has the same parts:
//!
//! - **what a release may use** — `configure(declared, grants, …)`: what the
//!   release's manifest declares **and** the person granted, decided before
//!   the call (`network`, `files`, `spawn`; `store` and `log` need no grant:
//!   the route's effect decides the store's mode);
//! - **a per-call value** (`CallStore`, `CallLog`, `CallNetwork`,
//!   `CallFiles`, `CallSpawn`) that carries it into the call's store, and that
//!   the host functions consult, nothing else;
//! - **how the call reaches it**: our WIT interfaces (`store`, `log`, `spawn`)
//!   implement their `Host` on the per-call value, and `runtime` links each
//!   through a projection of the call's state; WASI's own interfaces are
//!   served by wasmtime-wasi, so `network` is its HTTP hook and `files` its
//!   preopens, applied to that call's WASI context.

pub mod confine;
pub mod files;
pub mod log;
pub mod network;
pub mod spawn;
pub mod store;
