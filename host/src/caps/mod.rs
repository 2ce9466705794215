//! The capabilities a call can be given, one module each, each the same shape:
//! what the manifest and the grants allow is decided up front, a per-call value
//! carries it into the call's store, and the host functions consult only that
//! value. Everything is denied by default.

pub mod confine;
pub mod files;
pub mod log;
pub mod network;
pub mod spawn;
pub mod store;
