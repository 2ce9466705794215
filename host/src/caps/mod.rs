//! The capabilities a call can be given, one module each. Everything is
//! denied by default, and each module has the same parts, so that one file
//! says everything a capability means:
//!
//! - **what a release asks for** — `parse_declared`: its key of the
//!   manifest's `[capabilities]`, parsed and checked, every problem with its
//!   fix (`network`, `files`, `spawn`; [`parse`] calls them, and
//!   `secret`'s, bound to `network`'s origins);
//! - **what the person grants** — `resolve`: what a grant holds, found when
//!   it is given (a folder's real path, a program's absolute path; an origin
//!   is its own grant);
//! - **what a release may use** — `configure`: what it declares **and** the
//!   person granted, decided before the call (`store` and `log` need no grant:
//!   the route's effect decides the store's mode);
//! - **a per-call value** (`CallStore`, `CallLog`, `CallNetwork`,
//!   `CallFiles`, `CallSpawn`) that carries it into the call's store, and that
//!   the host functions consult, nothing else;
//! - **how the call reaches it**: our WIT interfaces (`store`, `log`, `spawn`)
//!   implement their `Host` on the per-call value and are added to the linker
//!   by their own `add_to_linker`, given a projection of the call's state;
//!   WASI's own interfaces are served by wasmtime-wasi, so `network` is its
//!   HTTP hook and `files` its preopens, applied to that call's WASI context.
//!
//! `caps` knows no app, no grant file and no release: `grants` stores what
//! was granted, `apps` hands each capability its part.

pub mod confine;
pub mod files;
pub mod log;
pub mod network;
pub mod secret;
pub mod spawn;
pub mod store;

use serde::{Deserialize, Serialize};

use crate::problems::Problems;

/// Everything the app asks for beyond its own store.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Capabilities {
    pub network: Vec<network::Origin>,
    pub files: Vec<files::FilesCap>,
    pub spawn: Vec<spawn::SpawnCap>,
    /// Keys the person sets, each bound to one of `network` and one place in
    /// a request (`[[capabilities.secret]]`; the values are `crate::secrets`'):
    /// the host adds them, the app never holds them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret: Vec<secret::SecretCap>,
}

impl Capabilities {
    pub fn is_empty(&self) -> bool {
        self.network.is_empty() && self.files.is_empty() && self.spawn.is_empty()
    }
}

/// `[capabilities]` of a manifest: each capability parses and checks its own
/// key.
pub fn parse(t: &toml::Table, p: &mut Problems) -> Capabilities {
    p.unknown_keys(t, "[capabilities]", &["network", "files", "spawn", "secret"]);
    let network: Vec<network::Origin> = t.get("network").map(|v| network::parse_declared(v, p)).unwrap_or_default();
    Capabilities {
        secret: t.get("secret").map(|v| secret::parse_declared(v, &network, p)).unwrap_or_default(),
        network,
        files: t.get("files").map(|v| files::parse_declared(v, p)).unwrap_or_default(),
        spawn: t.get("spawn").map(|v| spawn::parse_declared(v, p)).unwrap_or_default(),
    }
}
