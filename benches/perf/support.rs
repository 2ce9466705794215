//! What the benchmarks share: statistics, the table, processes, a small
//! keep-alive HTTP/1.1 client, the wrk driver and the apps' set-up.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};

/// Latencies of one series.
#[derive(Debug, Clone, Default)]
pub struct Samples(pub Vec<Duration>);

impl Samples {
    pub fn push(&mut self, d: Duration) {
        self.0.push(d);
    }

    fn sorted(&self) -> Vec<Duration> {
        let mut v = self.0.clone();
        v.sort_unstable();
        v
    }

    /// The `q` quantile (0..=1), nearest rank.
    pub fn quantile(&self, q: f64) -> Duration {
        let v = self.sorted();
        if v.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
        v[rank - 1]
    }

    pub fn median(&self) -> Duration {
        self.quantile(0.5)
    }

    pub fn p99(&self) -> Duration {
        self.quantile(0.99)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }
}

/// The median of some figures (one per round).
pub fn median_of(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return 0.0;
    }
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

pub fn us(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us >= 10_000.0 { format!("{:.1} ms", us / 1000.0) } else { format!("{us:.1} µs") }
}

/// One line of the table.
#[derive(Debug, Clone)]
pub struct Row {
    pub id: &'static str,
    pub what: String,
    pub ours: String,
    pub peer_name: String,
    pub peer: String,
    pub ratio: String,
    pub target: String,
    /// Whether the target was met; `None` when the row only reports.
    pub met: Option<bool>,
}

impl Row {
    pub fn verdict(&self) -> &'static str {
        match self.met {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "reported",
        }
    }
}

pub fn table(rows: &[Row]) -> String {
    let mut s = String::from("| id | what | ours | peer (same run) | peer | ratio | target | |\n");
    s.push_str("|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.id,
            r.what,
            r.ours,
            r.peer_name,
            r.peer,
            r.ratio,
            r.target,
            r.verdict()
        ));
    }
    s
}

/// Runs a command to its end; its stdout, or an error with its stderr.
pub fn run(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd.stdin(Stdio::null()).output().with_context(|| format!("cannot run {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The repository's root (this file is `benches/perf/support.rs`).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the host crate is in the repository").to_path_buf()
}

/// Builds `guests/<name>` for wasm32-wasip2 into `target/guests` (shared with
/// the tests); returns the component's path.
pub fn guest(name: &str) -> anyhow::Result<PathBuf> {
    let target = repo().join("target").join("guests");
    eprintln!("  building guests/{name} …");
    run(Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--release", "--target", "wasm32-wasip2", "--quiet"])
        .current_dir(repo().join("guests").join(name))
        .env("CARGO_TARGET_DIR", &target))?;
    let file = format!("{}.wasm", name.replace('-', "_"));
    let path = target.join("wasm32-wasip2").join("release").join(file);
    ensure!(path.is_file(), "guests/{name} built no {}", path.display());
    Ok(path)
}

/// The `autoapp` binary of this build, on one root.
#[derive(Clone)]
pub struct Autoapp {
    pub bin: PathBuf,
    pub root: PathBuf,
}

impl Autoapp {
    pub fn new(root: PathBuf, config: &str) -> anyhow::Result<Autoapp> {
        std::fs::create_dir_all(&root)?;
        std::fs::write(root.join("config.toml"), config)?;
        // Another build of the host (AUTOAPP_BENCH_BIN), to measure a change
        // before and after in one run; this build's by default.
        let bin = std::env::var_os("AUTOAPP_BENCH_BIN").map(PathBuf::from);
        Ok(Autoapp { bin: bin.unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_autoapp"))), root })
    }

    pub fn command(&self) -> Command {
        let mut c = Command::new(&self.bin);
        c.arg("--root").arg(&self.root).env_remove("RUST_LOG").env("NO_COLOR", "1");
        c
    }

    pub fn ok(&self, args: &[&str]) -> anyhow::Result<String> {
        run(self.command().args(args))
    }

    /// Makes app `id` from a guest's manifest (its id replaced) and a built
    /// component, builds it and activates it; returns the release id.
    pub fn install(&self, id: &str, guest_name: &str, component: &Path) -> anyhow::Result<String> {
        self.install_with(id, guest_name, component, "")
    }

    /// [`Autoapp::install`] with the guest's `[capabilities]` replaced by
    /// `capabilities` (a table of its own), when it is not empty.
    pub fn install_with(
        &self,
        id: &str,
        guest_name: &str,
        component: &Path,
        capabilities: &str,
    ) -> anyhow::Result<String> {
        let src = repo().join("guests").join(guest_name);
        // Workspaces may not be inside the root.
        let mut ws = self.root.clone().into_os_string();
        ws.push("-workspaces");
        let ws = PathBuf::from(ws).join(id);
        std::fs::create_dir_all(&ws)?;
        let manifest = std::fs::read_to_string(src.join("autoapp.toml"))?.replacen(
            &format!("id = \"{guest_name}\""),
            &format!("id = \"{id}\""),
            1,
        );
        let manifest = match (capabilities.is_empty(), manifest.find("\n[capabilities]")) {
            (false, Some(at)) => {
                // The table's keys, up to the next table.
                let rest = &manifest[at + 1..];
                let end = rest[1..].find("\n[").map_or(manifest.len(), |e| at + 2 + e);
                format!("{}\n{capabilities}{}", &manifest[..at], &manifest[end..])
            }
            (false, None) => format!("{manifest}\n{capabilities}"),
            (true, _) => manifest,
        };
        std::fs::write(ws.join("autoapp.toml"), manifest)?;
        if src.join("migrations").is_dir() {
            std::fs::create_dir_all(ws.join("migrations"))?;
            for m in std::fs::read_dir(src.join("migrations"))? {
                let m = m?;
                std::fs::copy(m.path(), ws.join("migrations").join(m.file_name()))?;
            }
        }
        self.ok(&["create", id, "--at", ws.to_str().context("a UTF-8 path")?])?;
        let built: serde_json::Value = serde_json::from_str(&self.ok(&[
            "build",
            id,
            "--component",
            component.to_str().context("a UTF-8 path")?,
            "--json",
        ])?)?;
        let release = built["release"].as_str().context("build --json names the release")?.to_string();
        if !capabilities.is_empty() {
            // What the benchmark's own capabilities ask for, granted by it.
            self.ok(&["grant", id, "--all-asked"])?;
        }
        self.ok(&["activate", id, &release])?;
        Ok(release)
    }

    /// Starts a long-running command (`open`, `serve APP`) whose stdout lines
    /// arrive on a channel.
    pub fn start(&self, args: &[&str]) -> anyhow::Result<Running> {
        let mut child = self
            .command()
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start autoapp")?;
        let stdout = child.stdout.take().expect("piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Running { child, lines })
    }
}

/// A launcher (or single-app server) started by [`Autoapp::start`].
pub struct Running {
    pub child: Child,
    lines: mpsc::Receiver<String>,
}

impl Running {
    /// The first launch address printed for `what` (`bench`, `the Autoapp panel`).
    pub fn address_of(&self, what: &str) -> anyhow::Result<String> {
        let prefix = format!("Open {what}: ");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line =
                self.lines.recv_timeout(left).with_context(|| format!("autoapp printed no address for {what}"))?;
            if let Some(url) = line.strip_prefix(&prefix) {
                return Ok(url.trim().to_string());
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops it as Ctrl+C would (SIGTERM) and waits for a clean exit.
    pub fn stop(mut self) -> anyhow::Result<()> {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).context("a pid")?;
        rustix::process::kill_process(pid, rustix::process::Signal::TERM)?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait()? {
                ensure!(status.success(), "autoapp stopped with {status}");
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                bail!("autoapp did not stop within 30 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Resident memory of a process, in bytes (VmRSS).
pub fn rss(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).context("no VmRSS")?;
    let kib: u64 = line.split_whitespace().nth(1).context("VmRSS value")?.parse()?;
    Ok(kib * 1024)
}

/// A process's private resident memory (clean and dirty), bytes: what it
/// holds that no other process shares.
pub fn private(pid: u32) -> anyhow::Result<u64> {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))?;
    let mut kib = 0u64;
    for line in rollup.lines().filter(|l| l.starts_with("Private_Clean:") || l.starts_with("Private_Dirty:")) {
        kib += line.split_whitespace().nth(1).context("a Private_ value")?.parse::<u64>()?;
    }
    Ok(kib * 1024)
}

/// A free loopback port (bound and released; good enough for one run).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

pub fn wait_for_port(port: u16, within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        ensure!(Instant::now() < deadline, "nothing listens on port {port} after {within:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

// The keep-alive HTTP client a tab would be, shared with the tests.
#[path = "../../tests/common/http.rs"]
mod http;
pub use http::Http;

/// What wrk measured.
#[derive(Debug, Clone)]
pub struct Load {
    pub requests_per_sec: f64,
    pub p50: Duration,
    pub p99: Duration,
    pub requests: u64,
    /// Answers that were not 2xx or 3xx.
    pub non_2xx: u64,
    /// Connect, read, write and timeout errors.
    pub socket_errors: u64,
    /// What wrk printed.
    pub output: String,
    /// The processor time wrk itself used (user and system, all threads).
    pub wrk_cpu: Duration,
    /// The processor time the server used meanwhile, when it was measured
    /// ([`wrk_at`]).
    pub server_cpu: Option<Duration>,
}

impl Load {
    /// The load, refused when any request failed.
    pub fn ok(self) -> anyhow::Result<Load> {
        ensure!(self.non_2xx == 0, "some requests failed:\n{}", self.output);
        ensure!(self.socket_errors == 0, "wrk saw socket errors:\n{}", self.output);
        Ok(self)
    }
}

/// A wrk script that POSTs `body` with `headers`.
pub fn post_script(body: &str, headers: &[(String, String)]) -> String {
    let mut lua =
        format!("wrk.method = \"POST\"\nwrk.body = {body:?}\nwrk.headers[\"Content-Type\"] = \"application/json\"\n");
    for (k, v) in headers {
        lua.push_str(&format!("wrk.headers[{k:?}] = {v:?}\n"));
    }
    lua
}

/// A wrk script whose every request POSTs `{"key": "<prefix>-<thread>-<n>"}`:
/// a key no other request of the run sends.
pub fn unique_keys_script(prefix: &str, headers: &[(String, String)]) -> String {
    let mut lua = post_script("", headers);
    lua.push_str(&format!(
        r#"local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end
local n = 0
function request()
  n = n + 1
  return wrk.format(nil, nil, nil, '{{"key":"{prefix}-' .. tid .. '-' .. n .. '"}}')
end
"#
    ));
    lua
}

/// Runs wrk (2 threads, `connections` keep-alive connections, `secs`
/// seconds) with the Lua `script` against `url`.
pub fn wrk(wrk: &Path, url: &str, script: &str, secs: u64, connections: u32) -> anyhow::Result<Load> {
    let path = std::env::temp_dir().join(format!("autoapp-bench-{}.lua", std::process::id()));
    std::fs::write(&path, script)?;
    // wrk is the only child waited for meanwhile (the servers are waited for
    // at their stop), so the children's usage grows by wrk's alone.
    let children = children_cpu();
    let out = run(Command::new(wrk)
        .args(["-t2", &format!("-c{connections}"), &format!("-d{secs}s"), "--latency", "-s"])
        .arg(&path)
        .arg(url))?;
    let wrk_cpu = children_cpu().saturating_sub(children);
    let _ = std::fs::remove_file(&path);
    let field = |prefix: &str| -> anyhow::Result<&str> {
        out.lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(prefix))
            .map(str::trim)
            .with_context(|| format!("wrk printed no `{prefix}`:\n{out}"))
    };
    let requests_per_sec: f64 = field("Requests/sec:")?.parse()?;
    let requests: u64 = out
        .lines()
        .find(|l| l.contains("requests in"))
        .and_then(|l| l.split_whitespace().next())
        .context("a request count")?
        .parse()?;
    let non_2xx: u64 = field("Non-2xx or 3xx responses:").ok().map(str::parse).transpose()?.unwrap_or(0);
    // "Socket errors: connect 0, read 0, write 0, timeout 0"
    let socket_errors: u64 = field("Socket errors:")
        .ok()
        .map(|l| l.split(',').filter_map(|p| p.split_whitespace().last()?.parse::<u64>().ok()).sum())
        .unwrap_or(0);
    Ok(Load {
        requests_per_sec,
        p50: duration(field("50%")?)?,
        p99: duration(field("99%")?)?,
        requests,
        non_2xx,
        socket_errors,
        output: out.clone(),
        wrk_cpu,
        server_cpu: None,
    })
}

/// [`wrk`] against the server process `server`, counting the processor time
/// it used while wrk ran.
pub fn wrk_at(
    server: u32,
    wrk_bin: &Path,
    url: &str,
    script: &str,
    secs: u64,
    connections: u32,
) -> anyhow::Result<Load> {
    let before = cpu_with_children(server)?;
    let mut load = wrk(wrk_bin, url, script, secs, connections)?;
    load.server_cpu = Some(cpu_with_children(server)?.saturating_sub(before));
    Ok(load)
}

/// The processor time of process `pid` and of its live children (a
/// launcher and its apps' workers, which run the calls and serve the pages).
pub fn cpu_with_children(pid: u32) -> anyhow::Result<Duration> {
    let mut total = cpu_of(pid)?;
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let name = entry.file_name();
        let Some(child) = name.to_str().filter(|n| n.bytes().all(|b| b.is_ascii_digit())) else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let parent = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if parent == Some(pid) {
            total += proc_stat_ticks(child, 11).unwrap_or_default();
        }
    }
    Ok(total)
}

/// Processor time a request, over `loads`: the server's and wrk's (the two
/// share the machine's cores, so requests/s is bounded by their sum).
pub fn cpu_a_request(loads: &[Load]) -> Option<(Duration, Duration)> {
    let requests: u64 = loads.iter().map(|l| l.requests).sum();
    let server: Duration = loads.iter().map(|l| l.server_cpu).sum::<Option<Duration>>()?;
    let wrk: Duration = loads.iter().map(|l| l.wrk_cpu).sum();
    let n = u32::try_from(requests).ok().filter(|n| *n > 0)?;
    Some((server / n, wrk / n))
}

/// The processor time (user and system, all threads) process `pid` has
/// used: `/proc/<pid>/stat`.
pub fn cpu_of(pid: u32) -> anyhow::Result<Duration> {
    proc_stat_ticks(&pid.to_string(), 11)
}

/// The processor time of this process's children that were waited for:
/// `/proc/self/stat`'s `cutime` and `cstime`.
fn children_cpu() -> Duration {
    proc_stat_ticks("self", 13).unwrap_or_default()
}

/// Two clock-tick fields of `/proc/<which>/stat`, from the `at`-th after the
/// name (utime and stime at 11, cutime and cstime at 13), added up.
fn proc_stat_ticks(which: &str, at: usize) -> anyhow::Result<Duration> {
    // The kernel gives these in USER_HZ, which is 100 on Linux's every
    // architecture this runs on.
    const USER_HZ: f64 = 100.0;
    let stat = std::fs::read_to_string(format!("/proc/{which}/stat"))?;
    // The name may hold spaces and parentheses: the fields follow the last ')'.
    let rest = stat.rsplit_once(')').context("a /proc stat line")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| -> anyhow::Result<u64> { Ok(fields.get(i).context("a short /proc stat line")?.parse()?) };
    Ok(Duration::from_secs_f64((field(at)? + field(at + 1)?) as f64 / USER_HZ))
}

/// A wrk duration: `812.00us`, `1.23ms`, `2.00s`.
fn duration(s: &str) -> anyhow::Result<Duration> {
    let (n, scale) = if let Some(n) = s.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else {
        bail!("not a wrk duration: {s}")
    };
    Ok(Duration::from_secs_f64(n.parse::<f64>()? * scale))
}

/// The machine the figures come from.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| m.lines().next().and_then(|l| l.split_whitespace().nth(1)).and_then(|k| k.parse::<u64>().ok()))
        .map(|kib| format!("{:.0} GiB", kib as f64 / 1024.0 / 1024.0))
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{cpu}, {cores} cores, {mem}, Linux {}", kernel.trim())
}
