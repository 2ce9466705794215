//! What each step of a build may read, write and reach: two
//! [`confine::Policy`](crate::caps::confine::Policy) values made from one
//! [`Plan`], and nothing else decides it.
//!
//! | step | reads | writes | reaches |
//! |---|---|---|---|
//! | fetch (`cargo fetch`) | the workspace less `.git/`, the toolchain, cargo's downloads, the cargo configuration files cargo reads, the person's `build_read` folders | cargo's downloads (`registry/`, `git/`), the workspace's `Cargo.lock`, the step's scratch folder | TCP to the registries' and proxies' ports and 53, UDP (name lookups) |
//! | build (`cargo build --offline`) | the same | the target folder (its scratch folder inside) | nothing |
//!
//! Both see the system's programs and libraries and only the parts of `/etc`
//! a compiler and a name lookup read (`confine::System::Build`), and an
//! environment built here from a short list — never the launcher's own. Each
//! build has a scratch folder of its own outside the target folder, made anew
//! for each step (its `HOME` and `TMPDIR`), so nothing a step leaves there
//! reaches the next one and one build cannot reach another's. Their
//! `CARGO_HOME` is [`BUILD_HOME`] inside the person's cargo home: links to its
//! `registry/`, `git/` and the lock files that keep two cargos from writing
//! them at once, and nothing else — cargo's own configuration and credentials
//! are never read, and no step may write there.

use std::path::{Path, PathBuf};

use crate::caps::confine::{Policy, Sockets, System};

use super::{MAX_WALK, is_local_source};

/// The folder of the builds' own cargo home, inside the person's.
pub const BUILD_HOME: &str = "autoapp-builds";

/// The lock files of cargo's home, shared with every cargo of the person's,
/// so that two never write the downloads at once.
const CARGO_LOCKS: &[&str] = &[".package-cache", ".package-cache-mutate"];

/// The port of name lookups over TCP (UDP is the fetch's anyway).
const DNS_PORT: u16 = 53;

/// The keys of the person's own cargo configuration a fetch is given
/// (`--config`): where crates come from and how to reach them; never a token,
/// a credential provider or a program.
const PASSED_FROM_HOME: &[&str] = &[
    "registry.default",
    "http.proxy",
    "http.timeout",
    "http.cainfo",
    "http.check-revoke",
    "http.multiplexing",
    "http.low-speed-limit",
    "net.retry",
    "net.offline",
];

/// What a fetch needs to reach its registries, from the person's own
/// environment and cargo configuration.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Network {
    /// The TCP ports it may connect to.
    pub ports: Vec<u16>,
    /// Proxy and certificate variables of the launcher's environment.
    pub env: Vec<(String, String)>,
    /// `--config` arguments from the person's cargo configuration.
    pub config_args: Vec<String>,
    /// Files those name (a certificate bundle).
    pub read: Vec<PathBuf>,
}

/// The environment variables a fetch is given when the launcher has them.
const NETWORK_VARS: &[&str] = &[
    "http_proxy",
    "https_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "all_proxy",
    "ALL_PROXY",
    "no_proxy",
    "NO_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "CARGO_HTTP_CAINFO",
];

/// The port of a URL (`scheme://[user@]host[:port][/…]`): its own, or its
/// scheme's.
pub fn port_of(url: &str) -> Option<u16> {
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let scheme = scheme.trim_start_matches("sparse+").trim_start_matches("registry+").to_ascii_lowercase();
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit('@').next().unwrap_or(authority);
    let explicit = if host_port.starts_with('[') {
        host_port.split_once("]:").map(|(_, p)| p)
    } else {
        host_port.rsplit_once(':').map(|(_, p)| p)
    };
    match explicit {
        Some(p) => p.parse().ok(),
        None => match scheme.as_str() {
            "https" => Some(443),
            "http" => Some(80),
            "socks5" | "socks5h" | "socks4" | "socks4a" | "socks" => Some(1080),
            "ssh" => Some(22),
            "git" => Some(9418),
            _ => None,
        },
    }
}

impl Network {
    /// The fetch's network, from `vars` (the launcher's environment) and the
    /// text of the person's cargo configuration (`home_config`), if any.
    pub fn of(vars: &[(String, String)], home_config: Option<&str>) -> Network {
        let mut n = Network { ports: vec![443, DNS_PORT], ..Network::default() };
        for (k, v) in vars {
            if !NETWORK_VARS.contains(&k.as_str()) || v.is_empty() {
                continue;
            }
            n.env.push((k.clone(), v.clone()));
            let lower = k.to_ascii_lowercase();
            if lower == "no_proxy" {
                continue;
            } else if lower.ends_with("proxy") {
                n.ports.extend(port_of(v));
            } else {
                n.read.push(PathBuf::from(v));
            }
        }
        if let Some(table) = home_config.and_then(|t| toml::from_str::<toml::Table>(t).ok()) {
            n.add_home(&table);
        }
        n.ports.sort_unstable();
        n.ports.dedup();
        n
    }

    fn add_home(&mut self, table: &toml::Table) {
        for key in PASSED_FROM_HOME {
            let Some(value) = lookup(table, key) else { continue };
            if let Some(s) = value.as_str() {
                match *key {
                    "http.proxy" => self.ports.extend(port_of(s)),
                    "http.cainfo" => self.read.push(PathBuf::from(s)),
                    _ => {}
                }
            }
            self.config_args.push(format!("{key}={value}"));
        }
        // Registries reached by URL: their index (never their token).
        if let Some(regs) = table.get("registries").and_then(toml::Value::as_table) {
            for (name, reg) in regs {
                if let Some(index) = reg.get("index").and_then(toml::Value::as_str)
                    && !is_local_source(index)
                {
                    self.ports.extend(port_of(index));
                    self.config_args.push(format!("registries.{name}.index={}", toml::Value::from(index)));
                }
            }
        }
        // A mirror by URL in place of crates.io (never a local folder).
        if let Some(sources) = table.get("source").and_then(toml::Value::as_table) {
            let remote = |name: &str| {
                sources
                    .get(name)
                    .and_then(|s| s.get("registry"))
                    .and_then(toml::Value::as_str)
                    .filter(|r| !is_local_source(r))
            };
            for (name, source) in sources {
                if let Some(registry) = remote(name) {
                    self.ports.extend(port_of(registry));
                    self.config_args.push(format!("source.{name}.registry={}", toml::Value::from(registry)));
                }
                if let Some(with) = source.get("replace-with").and_then(toml::Value::as_str)
                    && remote(with).is_some()
                {
                    self.config_args.push(format!("source.{name}.replace-with={}", toml::Value::from(with)));
                }
            }
        }
    }
}

/// The value at the dotted `key` of `table`.
fn lookup<'a>(table: &'a toml::Table, key: &str) -> Option<&'a toml::Value> {
    let mut parts = key.split('.');
    let mut value = table.get(parts.next()?)?;
    for part in parts {
        value = value.get(part)?;
    }
    Some(value)
}

/// Everything a build's two steps are confined by.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The workspace (its real path); cargo runs there.
    pub ws: PathBuf,
    /// What of the workspace may be read: all of it but `.git/` ([`readable`]).
    pub ws_read: Vec<PathBuf>,
    /// The target folder (real path).
    pub target_dir: PathBuf,
    /// This build's own scratch folder (outside the target folder).
    pub scratch: PathBuf,
    /// The toolchain's sysroot, and its name for rustup.
    pub sysroot: PathBuf,
    pub toolchain_name: Option<String>,
    /// The person's cargo home and rustup home (real paths).
    pub cargo_home: PathBuf,
    pub rustup_home: Option<PathBuf>,
    /// The cargo configuration files cargo reads for this workspace.
    pub configs: Vec<PathBuf>,
    /// Folders the person lets their builds read (`build_read`, the demo's WIT).
    pub also_read: Vec<PathBuf>,
    /// How the fetch reaches its registries.
    pub network: Network,
    /// The wall-clock deadline of each step.
    pub deadline_secs: u64,
    /// Landlock is not applied (the person's build on a kernel without it).
    pub unconfined: bool,
    /// The launcher's locale (`LANG`), passed on.
    pub lang: Option<String>,
}

/// The limits of a build's processes (each; the deadline bounds them all).
const CPU_SECS: u64 = 3600;
const FILE_SIZE_BYTES: u64 = 8 << 30;
const PROCESSES: u64 = 4096;

impl Plan {
    /// The build's scratch folder, made anew before each step ([`Plan::fresh_scratch`]).
    pub fn scratch(&self) -> PathBuf {
        self.scratch.clone()
    }

    /// The builds' cargo home: a folder inside the person's cargo home that
    /// holds only links to its `registry/`, `git/` and lock files. Its path is
    /// the same for every build (cargo rebuilds a dependency whose source
    /// path changed), and no step may write it.
    pub fn build_cargo_home(&self) -> PathBuf {
        self.cargo_home.join(BUILD_HOME)
    }

    /// cargo's downloads in the person's cargo home.
    pub fn downloads(&self) -> [PathBuf; 2] {
        [self.cargo_home.join("registry"), self.cargo_home.join("git")]
    }

    /// cargo's lock files in the person's cargo home.
    pub fn locks(&self) -> Vec<PathBuf> {
        CARGO_LOCKS.iter().map(|l| self.cargo_home.join(l)).collect()
    }

    /// The workspace's lock file, which only the fetch writes.
    pub fn lockfile(&self) -> PathBuf {
        self.ws.join("Cargo.lock")
    }

    /// Empties the build's scratch folder and makes the step's home and
    /// temporary folder in it; makes the builds' cargo home hold exactly its
    /// links (and nothing a step or anyone else left there, like a
    /// `config.toml`).
    pub fn fresh_scratch(&self) -> std::io::Result<()> {
        let scratch = self.scratch();
        if std::fs::symlink_metadata(&scratch).is_ok() {
            std::fs::remove_dir_all(&scratch)?;
        }
        for dir in ["home", "tmp"] {
            std::fs::create_dir_all(scratch.join(dir))?;
        }
        let home = self.build_cargo_home();
        std::fs::create_dir_all(&home)?;
        for real in self.downloads() {
            std::fs::create_dir_all(&real)?;
        }
        for real in self.locks() {
            std::fs::OpenOptions::new().create(true).append(true).open(&real)?;
        }
        let links: Vec<PathBuf> = self.downloads().into_iter().chain(self.locks()).collect();
        for entry in std::fs::read_dir(&home)? {
            let entry = entry?;
            let name = entry.file_name();
            let wanted = links.iter().find(|l| l.file_name() == Some(name.as_os_str()));
            let right = wanted.is_some_and(|l| std::fs::read_link(entry.path()).is_ok_and(|to| &to == l));
            if !right {
                let p = entry.path();
                if p.is_dir() && !p.is_symlink() { std::fs::remove_dir_all(&p)? } else { std::fs::remove_file(&p)? }
            }
        }
        for real in links {
            let link = home.join(real.file_name().expect("registry, git and the lock files have names"));
            if let Err(e) = std::os::unix::fs::symlink(&real, &link) {
                // Already made, by the loop above or a build beside this one.
                if !std::fs::read_link(&link).is_ok_and(|to| to == real) {
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// The environment of a step: this list and nothing else.
    pub fn env(&self, fetch: bool) -> Vec<(String, String)> {
        let s = |p: &Path| p.to_string_lossy().into_owned();
        let mut env = vec![
            ("PATH".to_string(), format!("{}:/usr/local/bin:/usr/bin:/bin", s(&self.sysroot.join("bin")))),
            ("HOME".to_string(), s(&self.scratch().join("home"))),
            ("TMPDIR".to_string(), s(&self.scratch().join("tmp"))),
            ("CARGO_HOME".to_string(), s(&self.build_cargo_home())),
            ("CARGO_TARGET_DIR".to_string(), s(&self.target_dir)),
            ("LANG".to_string(), self.lang.clone().unwrap_or_else(|| "C.UTF-8".into())),
            // The builds' cargo home keeps no record of what was used (no step
            // may write it): its cache cleaning would judge the person's
            // downloads by a record it never kept.
            ("CARGO_CACHE_AUTO_CLEAN_FREQUENCY".to_string(), "never".into()),
        ];
        if let Some(r) = &self.rustup_home {
            env.push(("RUSTUP_HOME".to_string(), s(r)));
        }
        if let Some(n) = &self.toolchain_name {
            env.push(("RUSTUP_TOOLCHAIN".to_string(), n.clone()));
        }
        if fetch {
            env.extend(self.network.env.iter().cloned());
        }
        env
    }

    fn reads(&self) -> Vec<PathBuf> {
        let mut read = self.ws_read.clone();
        read.push(self.sysroot.clone());
        read.extend(self.configs.iter().cloned());
        read.extend(self.also_read.iter().cloned());
        read
    }

    fn base(&self, fetch: bool) -> Policy {
        Policy {
            system: System::Build,
            list: vec![self.ws.clone()],
            unconfined: self.unconfined,
            env: self.env(fetch),
            wall_secs: Some(self.deadline_secs),
            cpu_secs: CPU_SECS,
            address_space_bytes: u64::MAX,
            file_size_bytes: FILE_SIZE_BYTES,
            processes: PROCESSES,
            ..Policy::default()
        }
    }

    /// The fetch: downloads, no crate code; TCP to the registries' ports,
    /// UDP for name lookups.
    pub fn fetch(&self) -> Policy {
        let mut read = self.reads();
        read.extend(self.network.read.iter().cloned());
        let mut write: Vec<PathBuf> = self.downloads().into();
        write.extend(self.locks());
        write.push(self.scratch());
        write.push(self.lockfile());
        write.push(PathBuf::from("/dev/null"));
        Policy { read, write, connect_ports: self.network.ports.clone(), sockets: Sockets::TcpUdp, ..self.base(true) }
    }

    /// The build: offline; build scripts and proc macros run here and write
    /// only the target folder (and the build's scratch folder), reach nothing.
    pub fn build(&self) -> Policy {
        let mut read = self.reads();
        read.extend(self.downloads());
        let mut write = vec![self.target_dir.clone(), self.scratch()];
        write.extend(self.locks());
        write.push(PathBuf::from("/dev/null"));
        // No `connect_ports` and no sockets: the default.
        Policy { read, write, ..self.base(false) }
    }
}

/// What of the workspace a build may read: everything but the `.git`
/// folders, as the fewest rules — a folder with no `.git` below it whole, a
/// folder with one entry by entry. Symlinks are not followed (where one
/// leads is not the workspace's to grant). The target folder is not walked
/// (the build writes it anyway). `None` when the workspace has more than
/// [`MAX_WALK`] entries.
pub fn readable(ws: &Path, target_dir: &Path) -> Option<Vec<PathBuf>> {
    readable_within(ws, target_dir, MAX_WALK)
}

/// [`readable`], walking at most `limit` entries.
fn readable_within(ws: &Path, target_dir: &Path, limit: usize) -> Option<Vec<PathBuf>> {
    let mut gits = Vec::new();
    let mut stack = vec![ws.to_path_buf()];
    let mut seen = 0usize;
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.filter_map(Result::ok) {
            seen += 1;
            if seen > limit {
                return None;
            }
            let Ok(kind) = e.file_type() else { continue };
            if e.file_name() == ".git" {
                gits.push(e.path());
            } else if kind.is_dir() && e.path() != target_dir {
                stack.push(e.path());
            }
        }
    }
    let mut out = Vec::new();
    cover(ws, &gits, &mut out);
    Some(out)
}

fn cover(dir: &Path, gits: &[PathBuf], out: &mut Vec<PathBuf>) {
    if !gits.iter().any(|g| g.starts_with(dir)) {
        out.push(dir.to_path_buf());
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let Ok(kind) = e.file_type() else { continue };
        if e.file_name() == ".git" || kind.is_symlink() {
            continue;
        }
        if kind.is_dir() {
            cover(&e.path(), gits, out);
        } else {
            out.push(e.path());
        }
    }
}

#[cfg(test)]
mod tests;
