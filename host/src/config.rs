//! The launcher's configuration: the built-in defaults of `config/autoapp.toml`,
//! overlaid by the keys a person wrote to `<root>/config.toml`.

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

/// The documented defaults, compiled in so the binary needs no file beside it.
pub const DEFAULT_CONFIG: &str = include_str!("../../config/autoapp.toml");

/// The file in the root that overrides some keys.
pub const CONFIG_FILE: &str = "config.toml";

/// Every key of `config/autoapp.toml`; each is documented there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub call_deadline_ms: u64,
    pub epoch_tick_ms: u64,
    pub memory_max_mib: u64,
    pub stack_max_kib: u64,
    pub max_instances: u32,
    pub log_lines_per_call: u32,
    /// How many days an app's record keeps a row (0: no bound of age).
    pub record_keep_days: u64,
    /// How many MiB of rows an app's record keeps (0: no bound of size).
    pub record_keep_mib: u64,
    pub approval_window_secs: u64,
    pub http_request_max_kib: u64,
    pub http_response_max_kib: u64,
    pub http_connect_timeout_ms: u64,
    pub spawn_output_max_kib: u64,
    pub launch_token_secs: u64,
    pub opener: OpenerChoice,
    pub landlock: Landlock,
    pub spawn_unconfined: bool,
    pub spawn_cpu_secs: u64,
    pub spawn_memory_mib: u64,
    pub spawn_file_size_mib: u64,
    pub spawn_processes: u64,
    pub workflow_min_every_secs: u64,
    pub build_deadline_secs: u64,
    pub build_read: Vec<String>,
    pub run_limit_secs: u64,
    pub package_max_mib: u64,
    pub compile_memory_mib: u64,
    pub compile_deadline_secs: u64,
    pub install_deadline_secs: u64,
    pub worker_idle_secs: u64,
    pub durability: Durability,
    pub secrets_kept_in: SecretsKeptIn,
}

/// Where the keys the person sets for their apps are kept (`secrets_kept_in`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SecretsKeptIn {
    /// The system's keyring when one answers, else a private file.
    Auto,
    /// The system's keyring, or nowhere (setting a key fails without one).
    Keyring,
    /// A file of mode 0600 in a 0700 folder of the person's configuration.
    File,
}

/// The person's configuration folder: `$XDG_CONFIG_HOME/autoapp`, else
/// `$HOME/.config/autoapp` (publisher keys, the keys apps use). Never under
/// a root.
pub fn person_dir() -> anyhow::Result<std::path::PathBuf> {
    if let Some(x) = std::env::var_os("XDG_CONFIG_HOME").filter(|x| Path::new(x).is_absolute()) {
        return Ok(std::path::PathBuf::from(x).join("autoapp"));
    }
    let home = std::env::var_os("HOME").filter(|h| Path::new(h).is_absolute()).context(
        "neither XDG_CONFIG_HOME nor HOME names a folder, so there is no configuration folder to keep a key in; set one",
    )?;
    Ok(std::path::PathBuf::from(home).join(".config").join("autoapp"))
}

/// How durable an acknowledged write is, with the record of its decision
/// (`durability`): both are made durable together, at this one level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// Survives the launcher being killed: the write and its record row are
    /// committed to their write-ahead logs (in the system's cache) before
    /// the answer; no sync.
    Process,
    /// Survives a power cut: as `process`, then both logs are synced
    /// (`fdatasync`) before the answer, once for every write waiting.
    Power,
}

/// Whether spawned programs are confined with Landlock (`landlock`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Landlock {
    /// Used wherever the kernel enforces it.
    Auto,
    /// Never: programs then run only with `spawn_unconfined = true`.
    Off,
}

/// How the launcher opens tabs (`opener`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum OpenerChoice {
    /// The system's opener (`xdg-open`, `open`), when there is one.
    Auto,
    /// None: addresses are printed in the launcher's terminal.
    None,
    /// This program, given the address as its one argument.
    Program(String),
}

impl From<String> for OpenerChoice {
    fn from(s: String) -> OpenerChoice {
        match s.as_str() {
            "auto" => OpenerChoice::Auto,
            "none" => OpenerChoice::None,
            _ => OpenerChoice::Program(s),
        }
    }
}

impl From<OpenerChoice> for String {
    fn from(o: OpenerChoice) -> String {
        match o {
            OpenerChoice::Auto => "auto".into(),
            OpenerChoice::None => "none".into(),
            OpenerChoice::Program(p) => p,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        toml::from_str(DEFAULT_CONFIG).expect("config/autoapp.toml is valid")
    }
}

impl Config {
    /// The defaults overlaid by `<root>/config.toml` when it exists.
    pub fn load(root: &Path) -> anyhow::Result<Config> {
        let path = root.join(CONFIG_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        Self::overlay(&text).map_err(|e| {
            anyhow::anyhow!(
                "{} is not a valid configuration: {e}; the keys and their defaults are in config/autoapp.toml",
                path.display()
            )
        })
    }

    /// The defaults overlaid by the keys in `text`.
    pub fn overlay(text: &str) -> Result<Config, String> {
        let mut base: toml::Table = toml::from_str(DEFAULT_CONFIG).expect("defaults parse");
        let over: toml::Table = toml::from_str(text).map_err(|e| e.message().to_string())?;
        for (k, v) in over {
            if !base.contains_key(&k) {
                return Err(format!("unknown key `{}`", k.escape_debug()));
            }
            base.insert(k, v);
        }
        let c: Config = toml::Value::Table(base).try_into().map_err(|e: toml::de::Error| e.message().to_string())?;
        c.check()?;
        Ok(c)
    }

    fn check(&self) -> Result<(), String> {
        let positive = [
            ("call_deadline_ms", self.call_deadline_ms),
            ("epoch_tick_ms", self.epoch_tick_ms),
            ("memory_max_mib", self.memory_max_mib),
            ("stack_max_kib", self.stack_max_kib),
            ("max_instances", u64::from(self.max_instances)),
            ("approval_window_secs", self.approval_window_secs),
            ("http_connect_timeout_ms", self.http_connect_timeout_ms),
            ("launch_token_secs", self.launch_token_secs),
            ("workflow_min_every_secs", self.workflow_min_every_secs),
            ("build_deadline_secs", self.build_deadline_secs),
            ("run_limit_secs", self.run_limit_secs),
            ("package_max_mib", self.package_max_mib),
            ("compile_memory_mib", self.compile_memory_mib),
            ("compile_deadline_secs", self.compile_deadline_secs),
            ("install_deadline_secs", self.install_deadline_secs),
            ("worker_idle_secs", self.worker_idle_secs),
        ];
        for (k, v) in positive {
            if v == 0 {
                return Err(format!("{k} must be more than 0"));
            }
        }
        if self.memory_max_mib > 4096 {
            return Err("memory_max_mib may be at most 4096 (a 32-bit memory)".into());
        }
        if self.package_max_mib > 4096 {
            return Err("package_max_mib may be at most 4096".into());
        }
        if self.epoch_tick_ms > self.call_deadline_ms {
            return Err("epoch_tick_ms must not be longer than call_deadline_ms".into());
        }
        for dir in &self.build_read {
            if !(dir.starts_with('/') || dir.starts_with("~/")) || dir.contains('\0') {
                return Err(format!(
                    "build_read lists `{}`: each folder is an absolute path or starts with ~/",
                    dir.escape_debug()
                ));
            }
        }
        Ok(())
    }

    pub fn call_deadline(&self) -> Duration {
        Duration::from_millis(self.call_deadline_ms)
    }

    /// The longest one compile of a component may take (`compile_deadline_secs`).
    pub fn compile_budget(&self) -> Duration {
        Duration::from_secs(self.compile_deadline_secs)
    }

    pub fn epoch_tick(&self) -> Duration {
        Duration::from_millis(self.epoch_tick_ms)
    }

    pub fn memory_max_bytes(&self) -> usize {
        (self.memory_max_mib as usize) << 20
    }

    /// How long `install` waits for a registry's whole answer.
    pub fn install_deadline(&self) -> Duration {
        Duration::from_secs(self.install_deadline_secs)
    }

    /// The largest package `install` reads, in bytes.
    pub fn package_max_bytes(&self) -> u64 {
        self.package_max_mib << 20
    }

    pub fn stack_max_bytes(&self) -> usize {
        (self.stack_max_kib as usize) << 10
    }
}

/// `~/x` as a folder of the home directory; any other path as it is.
pub fn expand_home(path: &str) -> std::path::PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => std::path::Path::new(&home).join(rest),
        _ => std::path::PathBuf::from(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_defaults_load() {
        let c = Config::default();
        assert_eq!(c.approval_window_secs, 600);
        assert!(c.call_deadline_ms > 0);
    }

    #[test]
    fn a_key_is_overridden_and_an_unknown_key_is_refused() {
        let c = Config::overlay("call_deadline_ms = 250").unwrap();
        assert_eq!(c.call_deadline_ms, 250);
        assert_eq!(c.memory_max_mib, Config::default().memory_max_mib);
        let e = Config::overlay("call_deadline = 5").unwrap_err();
        assert!(e.contains("unknown key `call_deadline`"), "{e}");
        assert!(Config::overlay("memory_max_mib = 0").is_err());
        assert_eq!(Config::overlay("landlock = \"off\"").unwrap().landlock, Landlock::Off);
        let e = Config::overlay("landlock = \"maybe\"").unwrap_err();
        assert!(e.contains("`auto`") && e.contains("`off`"), "{e}");
        assert_eq!(Config::overlay("opener = \"none\"").unwrap().opener, OpenerChoice::None);
        assert_eq!(Config::default().durability, Durability::Process);
        assert_eq!(Config::overlay("durability = \"power\"").unwrap().durability, Durability::Power);
        let e = Config::overlay("durability = \"disk\"").unwrap_err();
        assert!(e.contains("`process`") && e.contains("`power`"), "{e}");
        assert_eq!(Config::overlay("build_read = [\"~/wit\", \"/srv/wit\"]").unwrap().build_read.len(), 2);
        let e = Config::overlay("build_read = [\"wit\"]").unwrap_err();
        assert!(e.contains("absolute path"), "{e}");
        assert!(Config::overlay("build_deadline_secs = 0").is_err());
        assert_eq!(
            Config::overlay("opener = \"/usr/bin/firefox\"").unwrap().opener,
            OpenerChoice::Program("/usr/bin/firefox".into())
        );
    }
}
