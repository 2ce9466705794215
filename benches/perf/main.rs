//! Autoapp's benchmarks: each figure beside a peer measured in the same run on
//! the same machine (docs/performance.md says what each row means).
//!
//! Run them with `scripts/bench`, which installs the tools (wrk, the
//! wasmtime CLI) and passes their paths; `--quick` takes fewer samples,
//! `--only P1,P3` runs some rows, `--write docs/performance.md` puts the
//! table into the document, `--profile p1-ours` runs one series alone for a
//! profiler (valgrind --tool=callgrind).
//!
//! These are never timed assertions: a missed target is printed as MISSED
//! and explained in docs/performance.md, and the run still ends normally.

mod support;

// The same allocator as the `autoapp` binary (host/src/main.rs): the rows
// measured in process (P1, P3, P4's peer, P4 cold) run on what the product
// runs on, and so do their peers, which share this process.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use autoapp::apps::Apps;
use autoapp::config::Config;
use autoapp::gate::Caller;
use autoapp::manifest::AppId;
use autoapp::root::Root;
use clap::Parser;
use support::{Autoapp, Http, Row, Samples, median_of, us};
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, ComponentExportIndex, InstancePre, Linker, ResourceTable, Val};
use wasmtime::{Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

#[derive(Parser)]
#[command(about = "Autoapp's benchmarks, each against a peer measured in the same run")]
struct Args {
    /// Fewer samples and shorter loads: a quick look, not figures to publish.
    #[arg(long)]
    quick: bool,
    /// Only these rows, like `P1,P3`.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Put the table into this document between its `bench:begin`/`bench:end` marks.
    #[arg(long)]
    write: Option<PathBuf>,
    /// The wasmtime CLI whose `serve` is P2's peer.
    #[arg(long, env = "AUTOAPP_BENCH_WASMTIME")]
    wasmtime: Option<PathBuf>,
    /// The wrk load generator of P2.
    #[arg(long, env = "AUTOAPP_BENCH_WRK", default_value = "wrk")]
    wrk: PathBuf,
    /// Run one series alone for a profiler: p1-ours, p1-peer, p2-ours, p2r-ours, p3-ours, p3-peer, p3c-ours, p4-ours.
    #[arg(long)]
    profile: Option<String>,
    /// How many calls `--profile` makes (2,000); for the profiles of a real
    /// server (p2-ours, p2r-ours, p3c-ours), how many seconds wrk runs (15).
    #[arg(long)]
    calls: Option<usize>,
    /// Keep the work folder (its path is printed).
    #[arg(long)]
    keep: bool,
    /// P3 and P3c on a record over its bounds (issue 76): 200,000 old reads
    /// in it, `record_keep_mib = 1` and `record_keep_days = 1`, let go while
    /// the writes run. Compare with a run without it.
    #[arg(long)]
    letting_go: bool,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

struct Ctx {
    args: Args,
    work: PathBuf,
    bench_wasm: PathBuf,
}

impl Ctx {
    fn scale(&self, quick: usize, full: usize) -> usize {
        if self.args.quick { quick } else { full }
    }

    /// A root with `config.toml` and the app `id` of guest `guest` installed.
    fn root_with(&self, name: &str, config: &str, apps: &[(&str, &str, &Path)]) -> anyhow::Result<Autoapp> {
        let a = Autoapp::new(self.work.join(name), config)?;
        for (id, guest, wasm) in apps {
            a.install(id, guest, wasm)?;
        }
        Ok(a)
    }
}

const QUIET: &str = "opener = \"none\"\n";
const HELLO: &str = r#"{"hello":"world"}"#;

fn hello_json() -> serde_json::Value {
    serde_json::json!({ "hello": "world" })
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let work = tempfile::Builder::new().prefix("autoapp-bench-").tempdir()?;
    let machine = support::machine();
    eprintln!("Autoapp benchmarks on {machine}; work folder {}", work.path().display());
    let bench_wasm = support::guest("bench")?;
    let ctx = Ctx { args, work: work.path().to_path_buf(), bench_wasm };

    if let Some(which) = ctx.args.profile.clone() {
        return profile(&ctx, &which);
    }

    let want = |id: &str| ctx.args.only.is_empty() || ctx.args.only.iter().any(|o| o.eq_ignore_ascii_case(id));
    let mut rows = Vec::new();
    type Bench = fn(&Ctx) -> anyhow::Result<Row>;
    let all: [(&str, Bench); 14] = [
        ("P1", p1),
        ("P2", p2),
        ("P2r", p2r),
        ("P2n", p2_native),
        ("P3", p3),
        ("P3", p3_power),
        ("P3c", p3c),
        ("P4", p4),
        ("P4", p4_cold),
        ("P5", p5),
        ("P5c", p5_cold),
        ("P6", p6),
        ("P7", p7),
        ("P8", p8),
    ];
    for (id, bench) in all {
        if want(id) {
            eprintln!("{id} …");
            let row = bench(&ctx).map_err(|e| anyhow::anyhow!("benchmark {id} could not run: {e:?}"))?;
            eprintln!("{id}: ours {} | {} {} | {} | {}", row.ours, row.peer_name, row.peer, row.ratio, row.verdict());
            rows.push(row);
        }
    }
    let table = support::table(&rows);
    println!("\n{table}");
    if let Some(path) = &ctx.args.write {
        if ctx.args.quick || !ctx.args.only.is_empty() {
            eprintln!("{} is left as it is: only a full run of every row is written there", path.display());
        } else {
            write_doc(path, &table, &machine)?;
            eprintln!("wrote the table into {}", path.display());
        }
    }
    if ctx.args.keep {
        let kept = work.keep();
        eprintln!("kept the work folder {}", kept.display());
    }
    Ok(())
}

/// Replaces the text between the document's bench marks with this run.
fn write_doc(path: &Path, table: &str, machine: &str) -> anyhow::Result<()> {
    const BEGIN: &str = "<!-- bench:begin -->";
    const END: &str = "<!-- bench:end -->";
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let (Some(b), Some(e)) = (text.find(BEGIN), text.find(END)) else {
        bail!("{} has no {BEGIN} … {END} marks to write between", path.display());
    };
    ensure!(b < e, "the bench marks of {} are out of order", path.display());
    let rustc = support::run(std::process::Command::new("rustc").arg("--version")).unwrap_or_default();
    let body = format!(
        "{BEGIN}\nRun {} on {machine}; {}; wasmtime 48.0.8 (the crate we link and the CLI of P2).\n\n{table}{END}",
        autoapp::release::now_rfc3339(),
        rustc.trim(),
    );
    let out = format!("{}{body}{}", &text[..b], &text[e + END.len()..]);
    std::fs::write(path, out)?;
    Ok(())
}

fn current_thread() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

fn open_apps(root: &Path) -> anyhow::Result<Apps> {
    Apps::new(Root::open(root)?, &Config::load(root)?)
}

fn id(s: &str) -> AppId {
    AppId::parse(s).expect("a valid app id")
}

/// Rows of `runs` in an app's record that match `route` and `outcome`.
/// With `--letting-go`: the configuration that bounds the record.
fn letting_go_config(ctx: &Ctx) -> &'static str {
    if ctx.args.letting_go { "record_keep_mib = 1\nrecord_keep_days = 1\n" } else { "" }
}

/// The old reads `--letting-go` puts into the record of `app` first.
const OLD_ROWS: i64 = 200_000;

/// With `--letting-go`: [`OLD_ROWS`] reads of 2020 in the record of `app`.
fn fill_record(ctx: &Ctx, root: &Path, app: &str) -> anyhow::Result<()> {
    if !ctx.args.letting_go {
        return Ok(());
    }
    let mut c = rusqlite::Connection::open(root.join("apps").join(app).join("data").join("runs.sqlite"))?;
    let tx = c.transaction()?;
    {
        let mut insert = tx.prepare(
            "INSERT INTO runs (time, request_id, channel, caller, app, release, route, effect, arguments_hash,
                               decision, reason, outcome, duration_ms, answered_by)
             VALUES ('2020-01-01T00:00:00Z', ?1, 'ai', 'agent', ?2, 'r', 'old', 'read', 'h', 'allowed', '', 'ok', 1.0, 'nobody')",
        )?;
        for i in 0..OLD_ROWS {
            insert.execute(rusqlite::params![format!("old-{i}"), app])?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// With `--letting-go`: how many of the old reads are still in the record.
fn old_rows_left(ctx: &Ctx, root: &Path, app: &str) -> anyhow::Result<String> {
    if !ctx.args.letting_go {
        return Ok(String::new());
    }
    let c = rusqlite::Connection::open(root.join("apps").join(app).join("data").join("runs.sqlite"))?;
    let left: i64 = c.query_row("SELECT count(*) FROM runs WHERE time < '2021'", [], |r| r.get(0))?;
    Ok(format!(" · while the record let go {} of {OLD_ROWS} old rows", OLD_ROWS - left))
}

fn recorded(root: &Path, app: &str, route: &str, outcome: &str) -> anyhow::Result<i64> {
    let db = root.join("apps").join(app).join("data").join("runs.sqlite");
    let c = rusqlite::Connection::open(db)?;
    Ok(c.query_row("SELECT count(*) FROM runs WHERE route = ?1 AND outcome = ?2", [route, outcome], |r| r.get(0))?)
}

// ---------------------------------------------------------------- P1

/// Bare wasmtime: the same engine, an `InstancePre` of the same component
/// with only WASI linked (our interfaces trap if called; `hello` calls none),
/// a fresh store per call, no gate, no store transaction, no record.
struct Bare {
    engine: Engine,
    pre: InstancePre<BareState>,
    handle: ComponentExportIndex,
}

struct BareState {
    wasi: WasiCtx,
    table: ResourceTable,
}

impl WasiView for BareState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl Bare {
    fn new(engine: &Engine, wasm: &Path) -> anyhow::Result<Bare> {
        let component = Component::from_file(engine, wasm)?;
        let mut linker: Linker<BareState> = Linker::new(engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        // Our own interfaces trap if called (`hello` calls none of them).
        // (`define_unknown_imports_as_traps` would also shadow WASI's
        // semver-matched instances, so only `autoapp:` is stubbed.)
        for (name, item) in component.component_type().imports(engine) {
            let ComponentItem::ComponentInstance(instance) = item.ty else { continue };
            if !name.starts_with("autoapp:") {
                continue;
            }
            let mut stubs = linker.instance(name)?;
            for (func, item) in instance.exports(engine) {
                if let ComponentItem::ComponentFunc(_) = item.ty {
                    let what = format!("{name}#{func}");
                    stubs.func_new(func, move |_, _, _, _| {
                        Err(wasmtime::format_err!("bare wasmtime does not give `{what}`"))
                    })?;
                }
            }
        }
        let pre = linker.instantiate_pre(&component)?;
        let routes = component.get_export_index(None, "autoapp:app/routes@0.1.0").context("no routes export")?;
        let handle = component.get_export_index(Some(&routes), "handle").context("no handle function")?;
        Ok(Bare { engine: engine.clone(), pre, handle })
    }

    async fn call(&self, route: &str) -> anyhow::Result<String> {
        let state = BareState { wasi: WasiCtx::builder().build(), table: ResourceTable::new() };
        let mut store = Store::new(&self.engine, state);
        store.set_epoch_deadline(1 << 40);
        let instance = self.pre.instantiate_async(&mut store).await?;
        let func = instance.get_func(&mut store, self.handle).context("handle is a function")?;
        let mut results = [Val::Bool(false)];
        func.call_async(&mut store, &[Val::String(route.into()), Val::String("{}".into())], &mut results).await?;
        match &results[0] {
            Val::Result(Ok(Some(v))) => match v.as_ref() {
                Val::String(s) => Ok(s.to_string()),
                other => bail!("handle answered {other:?}"),
            },
            other => bail!("handle answered {other:?}"),
        }
    }
}

fn p1(ctx: &Ctx) -> anyhow::Result<Row> {
    let a = ctx.root_with("p1", QUIET, &[("bench", "bench", &ctx.bench_wasm)])?;
    let apps = open_apps(&a.root)?;
    let peer = Bare::new(apps.engine(), &ctx.bench_wasm)?;
    let app = id("bench");
    let me = Caller::command_line();
    let (rounds, per, warm) = (ctx.scale(3, 10), ctx.scale(300, 1000), 200);
    let (mut ours, mut bare) = (Samples::default(), Samples::default());
    current_thread()?.block_on(async {
        for _ in 0..warm {
            apps.call(&me, &app, "hello", "{}").await?;
            peer.call("hello").await?;
        }
        for round in 0..rounds {
            // Alternate which goes first, so neither always runs warmer.
            for side in [round % 2, 1 - round % 2] {
                for _ in 0..per {
                    let t = Instant::now();
                    if side == 0 {
                        let a = apps.call(&me, &app, "hello", "{}").await?;
                        ours.push(t.elapsed());
                        ensure!(a.output == hello_json(), "ours answered {}", a.output);
                    } else {
                        let out = peer.call("hello").await?;
                        bare.push(t.elapsed());
                        ensure!(out == HELLO, "bare wasmtime answered {out}");
                    }
                }
            }
        }
        anyhow::Ok(())
    })?;
    apps.flush_record();
    drop(apps);
    let calls = (warm + rounds * per) as i64;
    let kept = recorded(&a.root, "bench", "hello", "ok")?;
    ensure!(kept == calls, "{calls} calls made, {kept} recorded");
    let ratio = ours.median().as_secs_f64() / bare.median().as_secs_f64();
    Ok(Row {
        id: "P1",
        what: "a trivial `read` route: gate + fresh instance + call + record (in process)".into(),
        ours: format!("median {} · p99 {} ({} calls, all recorded)", us(ours.median()), us(ours.p99()), ours.len()),
        peer_name: "bare wasmtime: `InstancePre` instantiate + call, same engine and component".into(),
        peer: format!("median {} · p99 {}", us(bare.median()), us(bare.p99())),
        ratio: format!("{ratio:.2}× (medians)"),
        target: "≤ 1.15×".into(),
        met: Some(ratio <= 1.15),
    })
}

// ---------------------------------------------------------------- P2

fn p2(ctx: &Ctx) -> anyhow::Result<Row> {
    let (o, p, total) = against_wasmtime_serve(ctx, "p2", "hello", HELLO)?;
    let ratio = rps(&o) / rps(&p);
    Ok(Row {
        id: "P2",
        what: format!(
            "HTTP POSTs of `hello` through the app's server (wrk, keep-alive, 32 connections; {total} requests)"
        ),
        ours: fmt_load(&o),
        peer_name: PEER.into(),
        peer: fmt_load(&p),
        ratio: format!("{ratio:.2}× requests/s"),
        target: "≥ 2.5× requests/s".into(),
        met: Some(ratio >= 2.5),
    })
}

/// P2r: like P2, but the route reads the app's store (`SELECT count(*)` on
/// an empty table), so the figure includes the store's read path.
fn p2r(ctx: &Ctx) -> anyhow::Result<Row> {
    let (o, p, total) = against_wasmtime_serve(ctx, "p2r", "count", r#"{"rows":0}"#)?;
    let ratio = rps(&o) / rps(&p);
    Ok(Row {
        id: "P2r",
        what: format!(
            "HTTP POSTs of `count` (a read of the store: `SELECT count(*)` on an empty table) through the app's server (wrk, keep-alive, 32 connections; {total} requests)"
        ),
        ours: fmt_load(&o),
        peer_name: PEER.into(),
        peer: fmt_load(&p),
        ratio: format!("{ratio:.2}× requests/s"),
        target: "≥ 2× requests/s".into(),
        met: Some(ratio >= 2.0),
    })
}

/// The peer of P2 and P2r, configured for throughput as its documentation
/// recommends for serving.
const PEER: &str =
    "`wasmtime serve -O pooling-allocator=y` of a wasi:http hello component (same answer as `hello`; it has no store)";

fn rps(v: &[support::Load]) -> f64 {
    median_of(&v.iter().map(|l| l.requests_per_sec).collect::<Vec<_>>())
}

fn fmt_load(v: &[support::Load]) -> String {
    let p99 = median_of(&v.iter().map(|l| l.p99.as_secs_f64()).collect::<Vec<_>>());
    let p50 = median_of(&v.iter().map(|l| l.p50.as_secs_f64()).collect::<Vec<_>>());
    format!(
        "{:.0} req/s · p50 {} · p99 {}{}",
        rps(v),
        us(Duration::from_secs_f64(p50)),
        us(Duration::from_secs_f64(p99)),
        fmt_cpu(v)
    )
}

/// The processor time a request of the server and of wrk, which share the
/// machine's cores: on a machine the two keep busy, requests/s is about
/// cores / (server + wrk), so the same server's ratio moves with wrk's cost.
fn fmt_cpu(v: &[support::Load]) -> String {
    match support::cpu_a_request(v) {
        Some((server, wrk)) => format!(" · processor {} a request (wrk {})", us(server), us(wrk)),
        None => String::new(),
    }
}

/// Loads `route` of our server (which must answer `answer`) and the hello of
/// `wasmtime serve` with wrk, in alternating rounds; returns our loads, the
/// peer's, and how many requests we answered.
fn against_wasmtime_serve(
    ctx: &Ctx,
    name: &str,
    route: &str,
    answer: &str,
) -> anyhow::Result<(Vec<support::Load>, Vec<support::Load>, u64)> {
    let wasmtime = ctx.args.wasmtime.clone().context(
        "P2 needs the wasmtime CLI 48.0.8: scripts/bench installs it, or pass --wasmtime PATH (or AUTOAPP_BENCH_WASMTIME)",
    )?;
    let version = support::run(std::process::Command::new(&wasmtime).arg("--version"))?;
    ensure!(
        version.contains("48.0.8"),
        "P2's peer must be wasmtime 48.0.8 (the version we link); {wasmtime:?} is {version}"
    );
    support::run(std::process::Command::new(&ctx.args.wrk).arg("--version")).or_else(|e| {
        // wrk prints its version and exits 1.
        if e.to_string().contains("Usage: wrk") { Ok(String::new()) } else { Err(e) }
    })?;
    let http_wasm = support::guest("bench-http")?;
    let a = ctx.root_with(name, QUIET, &[("bench", "bench", &ctx.bench_wasm)])?;
    let server = a.start(&["serve", "bench"])?;
    let tab = Http::launch(&server.address_of("bench")?)?;
    let ours_url = format!("http://127.0.0.1:{}/api/call/{route}", tab.port());
    let ours_headers = page_headers(&tab);
    let peer_port = support::free_port()?;
    let log = ctx.work.join(format!("{name}-wasmtime-serve.log"));
    let mut peer = std::process::Command::new(&wasmtime)
        // -Scli: Rust's standard library on wasip2 imports wasi:cli, which
        // `serve` links only when asked. The pooling allocator: what
        // wasmtime's documentation recommends for a server's throughput.
        .args(["serve", "-Scli", "-O", "pooling-allocator=y", "--addr", &format!("127.0.0.1:{peer_port}")])
        .arg(&http_wasm)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .spawn()
        .context("cannot start wasmtime serve")?;
    let result = (|| {
        support::wait_for_port(peer_port, Duration::from_secs(120))
            .with_context(|| std::fs::read_to_string(&log).unwrap_or_default())?;
        let peer_url = format!("http://127.0.0.1:{peer_port}/api/call/hello");
        let peer_headers = vec![
            ("Origin".to_string(), format!("http://127.0.0.1:{peer_port}")),
            ("Sec-Fetch-Site".to_string(), "same-origin".to_string()),
        ];
        // Both answer what they should.
        let mut check = Http::new(peer_port);
        let r = check.request("POST", "/api/call/hello", Some("{}"))?;
        ensure!(r.status == 200 && r.body == HELLO.as_bytes(), "wasmtime serve answered {}", r.status);
        let mut mine = Http::new(tab.port());
        mine.cookie = tab.cookie.clone();
        let r = mine.request("POST", &format!("/api/call/{route}"), Some("{}"))?;
        ensure!(r.status == 200 && r.body == answer.as_bytes(), "our server answered {}", r.status);

        let (rounds, secs, conns) = (ctx.scale(1, 3), ctx.scale(3, 10) as u64, 32);
        let post = support::post_script("{}", &ours_headers);
        let peer_post = support::post_script("{}", &peer_headers);
        support::wrk(&ctx.args.wrk, &ours_url, &post, 2, conns)?.ok()?;
        support::wrk(&ctx.args.wrk, &peer_url, &peer_post, 2, conns)?.ok()?;
        let (mut o, mut p) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            for side in [round % 2, 1 - round % 2] {
                if side == 0 {
                    o.push(support::wrk_at(server.pid(), &ctx.args.wrk, &ours_url, &post, secs, conns)?.ok()?);
                } else {
                    p.push(support::wrk_at(peer.id(), &ctx.args.wrk, &peer_url, &peer_post, secs, conns)?.ok()?);
                }
            }
        }
        anyhow::Ok((o, p))
    })();
    let _ = peer.kill();
    let _ = peer.wait();
    server.stop()?;
    let (o, p) = result?;
    let total: u64 = o.iter().map(|l| l.requests).sum();
    Ok((o, p, total))
}

// ---------------------------------------------------------------- P2n

/// P2n: the limit itself — P2's route through the app's server against a
/// native server answering the same bytes (axum on hyper, two threads, in
/// this process), over the same wrk on the same machine. Reported, with the
/// processor time a request of each.
fn p2_native(ctx: &Ctx) -> anyhow::Result<Row> {
    let a = ctx.root_with("p2n", QUIET, &[("bench", "bench", &ctx.bench_wasm)])?;
    let server = a.start(&["serve", "bench"])?;
    let tab = Http::launch(&server.address_of("bench")?)?;
    let ours_url = format!("http://127.0.0.1:{}/api/call/hello", tab.port());
    let post = support::post_script("{}", &page_headers(&tab));
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let native_port = listener.local_addr()?.port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let native = std::thread::spawn(move || -> anyhow::Result<()> {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        rt.block_on(async move {
            let app = axum::Router::new().route(
                "/api/call/hello",
                axum::routing::post(|| async { ([("content-type", "application/json")], HELLO) }),
            );
            let listener = tokio::net::TcpListener::from_std(listener)?;
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await?;
            anyhow::Ok(())
        })
    });
    let result = (|| {
        support::wait_for_port(native_port, Duration::from_secs(10))?;
        let native_url = format!("http://127.0.0.1:{native_port}/api/call/hello");
        let native_post = support::post_script("{}", &[]);
        // Both answer the same bytes.
        let r = Http::new(native_port).request("POST", "/api/call/hello", Some("{}"))?;
        ensure!(r.status == 200 && r.body == HELLO.as_bytes(), "the native server answered {}", r.status);
        let mut mine = Http::new(tab.port());
        mine.cookie = tab.cookie.clone();
        let r = mine.request("POST", "/api/call/hello", Some("{}"))?;
        ensure!(r.status == 200 && r.body == HELLO.as_bytes(), "our server answered {}", r.status);
        let (rounds, secs, conns) = (ctx.scale(1, 3), ctx.scale(3, 10) as u64, 32);
        support::wrk(&ctx.args.wrk, &ours_url, &post, 2, conns)?.ok()?;
        support::wrk(&ctx.args.wrk, &native_url, &native_post, 2, conns)?.ok()?;
        let (mut o, mut n) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            for side in [round % 2, 1 - round % 2] {
                if side == 0 {
                    o.push(support::wrk_at(server.pid(), &ctx.args.wrk, &ours_url, &post, secs, conns)?.ok()?);
                } else {
                    // This process's own time (its threads; not wrk's, a child).
                    let before = support::cpu_of(std::process::id())?;
                    let mut load = support::wrk(&ctx.args.wrk, &native_url, &native_post, secs, conns)?;
                    load.server_cpu = Some(support::cpu_of(std::process::id())?.saturating_sub(before));
                    n.push(load.ok()?);
                }
            }
        }
        anyhow::Ok((o, n))
    })();
    let _ = stop.send(());
    let _ = native.join();
    server.stop()?;
    let (o, n) = result?;
    Ok(Row {
        id: "P2n",
        what: "HTTP POSTs of `hello` through the app's server, against a native server answering the same bytes (wrk, keep-alive, 32 connections)".into(),
        ours: fmt_load(&o),
        peer_name: "a native server: axum on hyper, two threads, answering the same body".into(),
        peer: fmt_load(&n),
        ratio: format!("{:.0} % of native requests/s", 100.0 * rps(&o) / rps(&n)),
        target: "reported".into(),
        met: None,
    })
}

/// The headers a page of the server `tab` is a session of sends with a POST.
fn page_headers(tab: &Http) -> Vec<(String, String)> {
    vec![
        ("Cookie".to_string(), tab.cookie.clone().expect("a session")),
        ("Origin".to_string(), format!("http://127.0.0.1:{}", tab.port())),
        ("Sec-Fetch-Site".to_string(), "same-origin".to_string()),
    ]
}

// ---------------------------------------------------------------- P3c

/// P3c: 64 writers at once on one app, over HTTP: each wrk connection posts
/// `put` with keys of its own; after a clean stop every acknowledged row is
/// counted in the store and in the record.
fn p3c(ctx: &Ctx) -> anyhow::Result<Row> {
    let config = format!("{QUIET}{}", letting_go_config(ctx));
    let a = ctx.root_with("p3c", &config, &[("bench", "bench", &ctx.bench_wasm)])?;
    fill_record(ctx, &a.root, "bench")?;
    let server = a.start(&["serve", "bench"])?;
    let tab = Http::launch(&server.address_of("bench")?)?;
    if ctx.args.letting_go {
        // A read: the record's writer starts, and lets go from then on.
        let mut first = Http::new(tab.port());
        first.cookie = tab.cookie.clone();
        first.request("POST", "/api/call/count", Some("{}"))?;
    }
    let url = format!("http://127.0.0.1:{}/api/call/put", tab.port());
    let (rounds, secs, conns) = (ctx.scale(1, 3), ctx.scale(3, 10) as u64, 64);
    let mut loads = Vec::new();
    for round in 0..rounds + 1 {
        // Round 0 warms up; every round's keys are its own.
        let script = support::unique_keys_script(&format!("r{round}"), &page_headers(&tab));
        let load =
            support::wrk_at(server.pid(), &ctx.args.wrk, &url, &script, if round == 0 { 2 } else { secs }, conns)?;
        if round > 0 {
            loads.push(load);
        }
    }
    server.stop()?;
    let store = rusqlite::Connection::open(a.root.join("apps/bench/data/app.sqlite"))?;
    let stored: i64 = store.query_row("SELECT count(*) FROM rows", [], |r| r.get(0))?;
    let recorded = recorded(&a.root, "bench", "put", "ok")?;
    let let_go = old_rows_left(ctx, &a.root, "bench")?;
    let errors: u64 = loads.iter().map(|l| l.non_2xx + l.socket_errors).sum();
    let answered: u64 = loads.iter().map(|l| l.requests).sum();
    let rate = median_of(&loads.iter().map(|l| l.requests_per_sec).collect::<Vec<_>>());
    let p50 = Duration::from_secs_f64(median_of(&loads.iter().map(|l| l.p50.as_secs_f64()).collect::<Vec<_>>()));
    let p99 = Duration::from_secs_f64(median_of(&loads.iter().map(|l| l.p99.as_secs_f64()).collect::<Vec<_>>()));
    // wrk does not count the requests still in flight when it stops; the
    // server answered (and stored) those too.
    ensure!(
        stored == recorded && stored as u64 >= answered,
        "{answered} writes answered (after warm-up), but the store holds {stored} rows and the record {recorded}"
    );
    Ok(Row {
        id: "P3c",
        what: format!(
            "64 writers at once on one app over HTTP (wrk, `put` of a unique row, keep-alive); clean stop, then counted ({answered} answered after warm-up)"
        ),
        ours: format!(
            "{rate:.0} writes/s · p50 {} · p99 {} · {errors} errors · {stored} rows in the store, {recorded} in the record{}{let_go}",
            us(p50),
            us(p99),
            fmt_cpu(&loads)
        ),
        peer_name: "—".into(),
        peer: "—".into(),
        ratio: "—".into(),
        target: "≥ 15,000 writes/s, 0 errors, p99 ≤ 50 ms".into(),
        met: Some(rate >= 15_000.0 && errors == 0 && p99 <= Duration::from_millis(50)),
    })
}

// ---------------------------------------------------------------- P3

fn note(i: usize) -> (String, String, String) {
    (format!("note {i}"), format!("the body of note {i}, a few words long"), format!("tag{}", i % 10))
}

/// The inputs of `notes.add` for the notes `range`, as a caller sends them.
fn note_inputs(range: std::ops::Range<usize>) -> Vec<String> {
    range
        .map(|i| {
            let (title, body, tag) = note(i);
            serde_json::json!({ "title": title, "body": body, "tags": [tag] }).to_string()
        })
        .collect()
}

/// The record's table, as the host makes it (`gate::record`).
const RUNS_TABLE: &str = "CREATE TABLE IF NOT EXISTS runs (
    seq INTEGER PRIMARY KEY, time TEXT NOT NULL, request_id TEXT NOT NULL, channel TEXT NOT NULL,
    caller TEXT NOT NULL, app TEXT NOT NULL, release TEXT NOT NULL, route TEXT NOT NULL, effect TEXT NOT NULL,
    arguments_hash TEXT NOT NULL, decision TEXT NOT NULL, reason TEXT NOT NULL, outcome TEXT NOT NULL,
    duration_ms REAL NOT NULL, answered_by TEXT NOT NULL DEFAULT 'nobody')";

/// SQLite's `synchronous` at a durability level, for the native side: what
/// the host's commits are worth at that level (at `power` the host commits
/// with NORMAL and then syncs each log once per group; one writer at a time
/// is a group of one, so FULL is the same work).
fn synchronous(power: bool) -> &'static str {
    if power { "FULL" } else { "NORMAL" }
}

/// Native Rust: the same durable work as the host at a level, one write
/// after another — the note and its tag in the app's schema (WAL, foreign
/// keys) in one transaction, then a decision row in a record of its own in
/// another, each at the level's `synchronous`.
fn native_writes(db: &Path, runs: &Path, power: bool, from: usize, n: usize) -> anyhow::Result<Duration> {
    let pragmas = format!("PRAGMA journal_mode = WAL; PRAGMA synchronous = {};", synchronous(power));
    let mut c = rusqlite::Connection::open(db)?;
    c.execute_batch(&format!("{pragmas} PRAGMA foreign_keys = ON;"))?;
    let mut r = rusqlite::Connection::open(runs)?;
    r.execute_batch(&format!("{pragmas} {RUNS_TABLE};"))?;
    // The values, and the request ids, are made before the clock starts.
    let values: Vec<((String, String, String), String)> =
        (from..from + n).map(|i| (note(i), format!("request-{i}"))).collect();
    let t = Instant::now();
    for ((title, body, tag), request_id) in &values {
        let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let id: i64 = tx
            .prepare_cached("INSERT INTO notes (title, body) VALUES (?1, ?2) RETURNING id")?
            .query_row([&title, &body], |r| r.get(0))?;
        tx.prepare_cached("INSERT OR IGNORE INTO note_tags (note_id, tag) VALUES (?1, ?2)")?
            .execute(rusqlite::params![id, tag])?;
        tx.commit()?;
        let tx = r.transaction()?;
        tx.prepare_cached(
            "INSERT INTO runs (time, request_id, channel, caller, app, release, route, effect,
                               arguments_hash, decision, reason, outcome, duration_ms, answered_by)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
        )?
        .execute(rusqlite::params![
            "2026-12-01T00:00:00.000000Z",
            request_id,
            "user",
            "command line",
            "notes",
            "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "notes.add",
            "write",
            "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "allowed",
            "",
            "ok",
            0.1,
            "person"
        ])?;
        tx.commit()?;
    }
    Ok(t.elapsed())
}

fn p3(ctx: &Ctx) -> anyhow::Result<Row> {
    p3_at(ctx, false)
}

fn p3_power(ctx: &Ctx) -> anyhow::Result<Row> {
    p3_at(ctx, true)
}

/// P3 at one durability level (`power`, else `process`).
fn p3_at(ctx: &Ctx, power: bool) -> anyhow::Result<Row> {
    let level = if power { "power" } else { "process" };
    let notes_wasm = support::guest("notes")?;
    let config = format!("{QUIET}durability = \"{level}\"\n{}", letting_go_config(ctx));
    let a = ctx.root_with(&format!("p3-{level}"), &config, &[("notes", "notes", &notes_wasm)])?;
    fill_record(ctx, &a.root, "notes")?;
    let native_db = ctx.work.join(format!("p3-native-{level}.sqlite"));
    let native_runs = ctx.work.join(format!("p3-native-runs-{level}.sqlite"));
    {
        let c = rusqlite::Connection::open(&native_db)?;
        for m in std::fs::read_dir(support::repo().join("guests/notes/migrations"))? {
            c.execute_batch(&std::fs::read_to_string(m?.path())?)?;
        }
    }
    let apps = open_apps(&a.root)?;
    let app = id("notes");
    let me = Caller::command_line();
    if ctx.args.letting_go {
        // A read: the record's writer starts, and lets go from then on.
        current_thread()?.block_on(apps.call(&me, &app, "notes.list", "{}"))?;
    }
    // At `power` every write waits for two syncs (on this disk ~0.2 ms each): fewer of them.
    let (rounds, per) = (3, if power { ctx.scale(300, 2_000) } else { ctx.scale(1000, 10_000) });
    let mut latencies = Samples::default();
    let (mut ours_rate, mut peer_rate) = (Vec::new(), Vec::new());
    let rt = current_thread()?;
    let mut made = 0;
    for round in 0..rounds {
        for side in [round % 2, 1 - round % 2] {
            if side == 0 {
                // The callers' JSON is made before the clock starts, as the
                // native side's values are: what is timed is the host's work.
                let inputs = note_inputs(made..made + per);
                let t = Instant::now();
                rt.block_on(async {
                    for input in &inputs {
                        let c = Instant::now();
                        apps.call(&me, &app, "notes.add", input).await?;
                        latencies.push(c.elapsed());
                    }
                    anyhow::Ok(())
                })?;
                ours_rate.push(per as f64 / t.elapsed().as_secs_f64());
                made += per;
            } else {
                let took = native_writes(&native_db, &native_runs, power, round * per, per)?;
                peer_rate.push(per as f64 / took.as_secs_f64());
            }
        }
    }
    // A clean stop, then count: every write is in the store and in the record.
    apps.flush_record();
    drop(apps);
    let store = rusqlite::Connection::open(a.root.join("apps/notes/data/app.sqlite"))?;
    let notes: i64 = store.query_row("SELECT count(*) FROM notes", [], |r| r.get(0))?;
    let tags: i64 = store.query_row("SELECT count(*) FROM note_tags", [], |r| r.get(0))?;
    let runs = recorded(&a.root, "notes", "notes.add", "ok")?;
    let let_go = old_rows_left(ctx, &a.root, "notes")?;
    ensure!(
        notes == made as i64 && tags == made as i64 && runs == made as i64,
        "{made} writes answered, but the store holds {notes} notes and {tags} tags and the record {runs} rows"
    );
    let (ours, peer) = (median_of(&ours_rate), median_of(&peer_rate));
    let ratio = ours / peer;
    let synced = if power { "synced (fdatasync) before the answer" } else { "committed to the log, not synced" };
    Ok(Row {
        id: if power { "P3 power" } else { "P3" },
        what: format!(
            "`notes.add` writes, one after another, at `durability = \"{level}\"` (the write and its decision row {synced}); clean stop, then counted"
        ),
        ours: format!(
            "{ours:.0} writes/s · median {} · p99 {} ({made} of {made} in the store and the record){let_go}",
            us(latencies.median()),
            us(latencies.p99())
        ),
        peer_name: format!(
            "native Rust + rusqlite: the note and its tag in one transaction, a decision row in a record of its own in another, WAL, `synchronous = {}`",
            synchronous(power)
        ),
        peer: format!("{peer:.0} writes/s"),
        ratio: format!("{ratio:.2}× (ours/native)"),
        target: "≥ 0.8× native".into(),
        met: Some(ratio >= 0.8),
    })
}

// ---------------------------------------------------------------- P4

/// Empties the compile cache, so the next load compiles from scratch.
fn empty(cache: &Path) -> anyhow::Result<()> {
    for f in std::fs::read_dir(cache)? {
        std::fs::remove_file(f?.path())?;
    }
    Ok(())
}

/// P4: a launcher that is running, and a release activated by another
/// process (`autoapp activate` from the command line, which asks the running
/// launcher to load the release before it switches): the launcher's first
/// response of the new release, over the control connection (`invoke`, a
/// connection opened before). Each round activates a new release (the same
/// component; the manifest differs by a comment, so the id does). **Peer:**
/// a host that loads the release at its first call, compiling it from
/// scratch (an in-process host on a root of its own, the cache emptied after
/// the activation) — measured in process, without the connection ours pays.
fn p4(ctx: &Ctx) -> anyhow::Result<Row> {
    let a = ctx.root_with("p4", QUIET, &[("bench", "bench", &ctx.bench_wasm)])?;
    let b = ctx.root_with("p4-peer", QUIET, &[("bench", "bench", &ctx.bench_wasm)])?;
    let app = id("bench");
    let me = Caller::command_line();
    let workspace = |r: &Autoapp| {
        let mut ws = r.root.clone().into_os_string();
        ws.push("-workspaces");
        PathBuf::from(ws).join("bench").join("autoapp.toml")
    };
    let manifest = std::fs::read_to_string(workspace(&a))?;
    let wasm = ctx.bench_wasm.to_str().context("a UTF-8 path")?;
    let rt = current_thread()?;
    let launcher = a.start(&["open"])?;
    launcher.address_of("the Autoapp panel")?;
    let root = Root::open(&a.root)?;
    let mut client = rt.block_on(autoapp::control::Client::connect(&root))?;
    let hello = serde_json::json!({ "type": "invoke", "app": "bench", "route": "hello", "input": {} });
    let first = rt.block_on(client.request(&hello))?;
    ensure!(first["output"] == hello_json(), "the launcher answered {first}");
    let peer_cache = Root::open(&b.root)?.compiled_of(&app);
    let peer = open_apps(&b.root)?;
    rt.block_on(peer.call(&me, &app, "hello", "{}")).map_err(|e| anyhow::anyhow!("{e}"))?;
    let (mut cached, mut scratch) = (Samples::default(), Samples::default());
    let mut activated = Vec::new();
    let mut n = 0;
    for round in 0..ctx.scale(5, 15) {
        for side in [round % 2, 1 - round % 2] {
            n += 1;
            let r = if side == 0 { &a } else { &b };
            std::fs::write(workspace(r), format!("{manifest}\n# release {n} of benchmark P4\n"))?;
            let built: serde_json::Value =
                serde_json::from_str(&r.ok(&["build", "bench", "--component", wasm, "--json"])?)?;
            let release = built["release"].as_str().context("build --json names the release")?.to_string();
            r.ok(&["activate", "bench", &release])?;
            if side == 0 {
                let t = Instant::now();
                let answer = rt.block_on(client.request(&hello))?;
                cached.push(t.elapsed());
                ensure!(answer["output"] == hello_json(), "ours answered {answer}");
                activated.push(release);
            } else {
                empty(&peer_cache)?;
                let t = Instant::now();
                let answer = rt.block_on(peer.call(&me, &app, "hello", "{}")).map_err(|e| anyhow::anyhow!("{e}"))?;
                scratch.push(t.elapsed());
                ensure!(answer.output == hello_json(), "the peer answered {}", answer.output);
                ensure!(answer.release == release, "the peer answered from {} instead of {release}", answer.release);
            }
        }
    }
    peer.flush_record();
    drop(client);
    launcher.stop()?;
    // Each of ours was answered by the release just activated: its record says so.
    for release in &activated {
        let c = rusqlite::Connection::open(a.root.join("apps/bench/data/runs.sqlite"))?;
        let calls: i64 = c.query_row(
            "SELECT count(*) FROM runs WHERE route = 'hello' AND outcome = 'ok' AND release = ?1",
            [release],
            |r| r.get(0),
        )?;
        ensure!(calls == 1, "release {release} answered {calls} calls, not the one made after its activation");
    }
    let ratio = scratch.median().as_secs_f64() / cached.median().as_secs_f64();
    Ok(Row {
        id: "P4",
        what: "first response of a release activated from the command line while a launcher runs (`activate` has the launcher load it before the switch; the call over the control connection)"
            .into(),
        ours: format!("median {} · p99 {} (prepared before the switch)", us(cached.median()), us(cached.p99())),
        peer_name: "a host that loads the release at its first call, compiling the component from scratch (in process)".into(),
        peer: format!("median {} · p99 {}", us(scratch.median()), us(scratch.p99())),
        ratio: format!("{ratio:.0}× faster"),
        target: "≤ 1 ms; ≥ 50× faster".into(),
        met: Some(cached.median() <= Duration::from_millis(1) && ratio >= 50.0),
    })
}

/// P4, cold: a host process that has just started (a fresh engine, nothing
/// loaded) and its first call. Reported beside P4, no target of its own.
fn p4_cold(ctx: &Ctx) -> anyhow::Result<Row> {
    let a = ctx.root_with("p4-cold", QUIET, &[("bench", "bench", &ctx.bench_wasm)])?;
    let app = id("bench");
    let me = Caller::command_line();
    let cache = Root::open(&a.root)?.compiled_of(&app);
    let rt = current_thread()?;
    let (mut cached, mut scratch) = (Samples::default(), Samples::default());
    for round in 0..ctx.scale(5, 15) {
        for side in [round % 2, 1 - round % 2] {
            if side == 1 {
                empty(&cache)?;
            }
            let apps = open_apps(&a.root)?;
            let t = Instant::now();
            let answer = rt.block_on(apps.call(&me, &app, "hello", "{}")).map_err(|e| anyhow::anyhow!("{e}"))?;
            let took = t.elapsed();
            ensure!(answer.output == hello_json(), "ours answered {}", answer.output);
            if side == 0 {
                cached.push(took)
            } else {
                scratch.push(took)
            }
            apps.flush_record();
        }
    }
    let ratio = scratch.median().as_secs_f64() / cached.median().as_secs_f64();
    Ok(Row {
        id: "P4 cold",
        what: "first call of a host that has just started: fresh engine, nothing loaded (in process)".into(),
        ours: format!("median {} · p99 {} (from the precompiled cache)", us(cached.median()), us(cached.p99())),
        peer_name: "the same first call compiling the component from scratch".into(),
        peer: format!("median {} · p99 {}", us(scratch.median()), us(scratch.p99())),
        ratio: format!("{ratio:.0}× faster"),
        target: "reported".into(),
        met: None,
    })
}

// ---------------------------------------------------------------- P5

/// Starts a launcher on `a`, calls `hello` of every app once over the control
/// connection (so each release is loaded and its store open), lets it idle,
/// and reads its resident memory.
/// How long an idle worker lives in P5's launchers (`worker_idle_secs`).
const P5_IDLE_SECS: u64 = 5;

/// The resident memory of a launcher, and what every worker it runs adds
/// of its own (each app's calls run in processes of its own: `autoapp
/// status` lists them): their private pages, since the pages of the binary
/// they share with the launcher are counted once, in its figure.
fn with_workers(pid: u32, status: &serde_json::Value) -> anyhow::Result<u64> {
    let mut total = support::rss(pid)?;
    for w in status["workers"].as_array().into_iter().flatten() {
        let worker = w["pid"].as_u64().context("a worker's pid")?;
        total += support::private(worker as u32)?;
    }
    Ok(total)
}

/// Waits, up to `within`, until the launcher on `c` runs no worker (each
/// ended idle).
async fn no_workers(c: &mut autoapp::control::Client, within: Duration) -> anyhow::Result<()> {
    let until = Instant::now() + within;
    loop {
        let status = c.request(&serde_json::json!({ "type": "status" })).await?;
        if status["workers"].as_array().is_none_or(Vec::is_empty) {
            return Ok(());
        }
        ensure!(Instant::now() < until, "the idle workers did not end within {}s", within.as_secs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A launcher of `a` that calls each of `apps` once: its memory and its
/// workers' while they live, and once they have ended (idle).
fn launcher_rss(a: &Autoapp, apps: &[String]) -> anyhow::Result<(u64, u64)> {
    let launcher = a.start(&["open"])?;
    launcher.address_of("the Autoapp panel")?;
    let root = Root::open(&a.root)?;
    let pid = launcher.pid();
    let measured = current_thread()?.block_on(async {
        let mut c = autoapp::control::Client::connect(&root).await?;
        for app in apps {
            let v =
                c.request(&serde_json::json!({ "type": "invoke", "app": app, "route": "hello", "input": {} })).await?;
            ensure!(v["ok"] == true, "{app} answered {v}");
        }
        let status = c.request(&serde_json::json!({ "type": "status" })).await?;
        let serving = status["serving"].as_array().map(Vec::len).unwrap_or(0);
        ensure!(serving == apps.len(), "the launcher serves {serving} apps, not {}", apps.len());
        let live = with_workers(pid, &status)?;
        // Then idle: each worker ends after `worker_idle_secs`.
        no_workers(&mut c, Duration::from_secs(P5_IDLE_SECS + 60)).await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let status = c.request(&serde_json::json!({ "type": "status" })).await?;
        anyhow::Ok((live, with_workers(pid, &status)?))
    })?;
    launcher.stop()?;
    Ok(measured)
}

fn p5(ctx: &Ctx) -> anyhow::Result<Row> {
    let n = 100;
    let config = format!("{QUIET}worker_idle_secs = {P5_IDLE_SECS}\n");
    let full = Autoapp::new(ctx.work.join("p5-full"), &config)?;
    let mut ids = Vec::new();
    for i in 0..n {
        let id = format!("app-{i:03}");
        full.install(&id, "bench", &ctx.bench_wasm)?;
        if (i + 1) % 20 == 0 {
            eprintln!("  {} of {n} apps installed", i + 1);
        }
        ids.push(id);
    }
    let empty = Autoapp::new(ctx.work.join("p5-empty"), &config)?;
    let (mut with, mut live, mut none) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ctx.scale(1, 2) {
        none.push(launcher_rss(&empty, &[])?.1 as f64);
        let (l, w) = launcher_rss(&full, &ids)?;
        live.push(l as f64);
        with.push(w as f64);
    }
    let mib = |b: f64| b / (1024.0 * 1024.0);
    let (w, l, z) = (mib(median_of(&with)), mib(median_of(&live)), mib(median_of(&none)));
    Ok(Row {
        id: "P5",
        what: format!(
            "resident memory of a launcher with {n} active apps, each served and called once, then idle (its workers ended after `worker_idle_secs` = {P5_IDLE_SECS}); the launcher and its workers together"
        ),
        ours: format!(
            "{w:.1} MiB (while the {n} workers lived: {l:.1} MiB, {:.1} MiB of its own per worker)",
            (l - w) / n as f64
        ),
        peer_name: "the same launcher with no apps".into(),
        peer: format!("{z:.1} MiB"),
        ratio: format!("+{:.1} MiB ({:.2} MiB per app)", w - z, (w - z) / n as f64),
        target: "≤ 150 MiB above".into(),
        met: Some(w - z <= 150.0),
    })
}

/// P5c: the first call of an app whose worker ended idle (a worker started,
/// confined, its release loaded from the compiled cache, then the call),
/// beside a call to the worker that is running.
fn p5_cold(ctx: &Ctx) -> anyhow::Result<Row> {
    let a = ctx.root_with("p5c", &format!("{QUIET}worker_idle_secs = 1\n"), &[("bench", "bench", &ctx.bench_wasm)])?;
    let launcher = a.start(&["serve", "bench"])?;
    let mut tab = Http::launch(&launcher.address_of("bench")?)?;
    let root = Root::open(&a.root)?;
    let mut call = || -> anyhow::Result<Duration> {
        let t = Instant::now();
        let r = tab.request("POST", "/api/call/hello", Some("{}"))?;
        let took = t.elapsed();
        ensure!(r.status == 200 && r.body == HELLO.as_bytes(), "hello answered {}", r.status);
        Ok(took)
    };
    let (mut cold, mut warm) = (Samples::default(), Samples::default());
    for _ in 0..ctx.scale(5, 15) {
        // Wait for its worker to end idle.
        current_thread()?.block_on(async {
            let mut c = autoapp::control::Client::connect(&root).await?;
            no_workers(&mut c, Duration::from_secs(30)).await
        })?;
        cold.push(call()?);
        for _ in 0..10 {
            warm.push(call()?);
        }
    }
    launcher.stop()?;
    let ratio = cold.median().as_secs_f64() / warm.median().as_secs_f64();
    Ok(Row {
        id: "P5c",
        what: "the first call of an app whose worker had ended idle (HTTP POST of `hello` from its page: a worker started and confined, the release loaded from the compiled cache, the call)".into(),
        ours: format!("median {} · p99 {} ({} calls)", us(cold.median()), us(cold.p99()), cold.len()),
        peer_name: "the next calls, to the running worker".into(),
        peer: format!("median {} · p99 {}", us(warm.median()), us(warm.p99())),
        ratio: format!("{ratio:.0}× the warm call"),
        target: "≤ 50 ms".into(),
        met: Some(cold.median() <= Duration::from_millis(50)),
    })
}

// ---------------------------------------------------------------- P6

/// A launcher (`autoapp open`) on `a`, and a tab of each of two of its apps,
/// opened from its panel as a person opens them.
fn two_tabs(a: &Autoapp, first: &str, second: &str) -> anyhow::Result<(support::Running, Http, Http)> {
    let launcher = a.start(&["open"])?;
    let mut panel = Http::launch(&launcher.address_of("the Autoapp panel")?)?;
    let mut tab = |app: &str| -> anyhow::Result<Http> {
        let r = panel.request("POST", "/api/open", Some(&format!(r#"{{"app":"{app}"}}"#)))?;
        ensure!(r.status == 200, "the panel did not open {app}: {}", r.status);
        Http::launch(&launcher.address_of(app)?)
    };
    let (first, second) = (tab(first)?, tab(second)?);
    Ok((launcher, first, second))
}

/// One POST of `hello` from a tab, timed; anything but its answer fails.
fn call_hello(h: &mut Http) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let r = h.request("POST", "/api/call/hello", Some("{}"))?;
    let took = t.elapsed();
    ensure!(r.status == 200 && r.body == HELLO.as_bytes(), "hello answered {}", r.status);
    Ok(took)
}

fn p6(ctx: &Ctx) -> anyhow::Result<Row> {
    let deadline_ms = 2000;
    let config = format!("{QUIET}call_deadline_ms = {deadline_ms}\n");
    let a =
        ctx.root_with("p6", &config, &[("bench", "bench", &ctx.bench_wasm), ("spinner", "bench", &ctx.bench_wasm)])?;
    let (launcher, mut hello, spinner) = two_tabs(&a, "bench", "spinner")?;
    for _ in 0..200 {
        call_hello(&mut hello)?;
    }
    let (rounds, per) = (ctx.scale(3, 5), ctx.scale(300, 2000));
    let (mut alone, mut beside) = (Samples::default(), Samples::default());
    let stopped = Arc::new(AtomicUsize::new(0));
    let mut spinner = Some(spinner);
    for _ in 0..rounds {
        for _ in 0..per {
            alone.push(call_hello(&mut hello)?);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let mut s = spinner.take().expect("the spinner's tab");
        let spinning = {
            let (stop, stopped) = (stop.clone(), stopped.clone());
            std::thread::spawn(move || -> anyhow::Result<Http> {
                while !stop.load(Ordering::Relaxed) {
                    let r = s.request("POST", "/api/call/spin", Some("{}"))?;
                    ensure!(r.status == 502, "spin answered {} (it should be stopped at its deadline)", r.status);
                    stopped.fetch_add(1, Ordering::Relaxed);
                }
                Ok(s)
            })
        };
        std::thread::sleep(Duration::from_millis(100));
        for _ in 0..per {
            beside.push(call_hello(&mut hello)?);
        }
        stop.store(true, Ordering::Relaxed);
        spinner = Some(spinning.join().map_err(|_| anyhow::anyhow!("the spinner thread panicked"))??);
    }
    launcher.stop()?;
    let ratio = beside.p99().as_secs_f64() / alone.p99().as_secs_f64();
    Ok(Row {
        id: "P6",
        what: format!(
            "`hello` over HTTP while another app of the launcher spins until its deadline ({deadline_ms} ms; stopped {} times)",
            stopped.load(Ordering::Relaxed)
        ),
        ours: format!("p99 {} · median {}", us(beside.p99()), us(beside.median())),
        peer_name: "the same app alone".into(),
        peer: format!("p99 {} · median {}", us(alone.p99()), us(alone.median())),
        ratio: format!("{ratio:.2}× (p99)"),
        target: "≤ 2×".into(),
        met: Some(ratio <= 2.0),
    })
}

// ---------------------------------------------------------------- P7

/// P7: `hello` of one app over HTTP, one request at a time, while another
/// app of the same launcher is under load (wrk, 32 keep-alive connections
/// posting `hello` to that app's own server, so its worker and wrk keep the
/// machine's cores busy); the peer is the same app alone, in the same
/// rounds. Reported: the ratio of the p99s, and what the neighbour answered.
fn p7(ctx: &Ctx) -> anyhow::Result<Row> {
    let a =
        ctx.root_with("p7", QUIET, &[("bench", "bench", &ctx.bench_wasm), ("neighbour", "bench", &ctx.bench_wasm)])?;
    let (launcher, mut hello, neighbour) = two_tabs(&a, "bench", "neighbour")?;
    for _ in 0..200 {
        call_hello(&mut hello)?;
    }
    let url = format!("http://127.0.0.1:{}/api/call/hello", neighbour.port());
    let script = support::post_script("{}", &page_headers(&neighbour));
    // wrk's first and last moments (connecting, ending) are left out of
    // the calls measured beside it.
    let (rounds, secs) = (ctx.scale(2, 5), ctx.scale(2, 4) as u64);
    let margin = Duration::from_millis(300);
    let window = Duration::from_secs(secs) - 2 * margin;
    let (mut alone, mut beside) = (Samples::default(), Samples::default());
    let (mut answered, mut neighbour_rates) = (0u64, Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        while t.elapsed() < window {
            alone.push(call_hello(&mut hello)?);
        }
        let load = {
            let (wrk, url, script) = (ctx.args.wrk.clone(), url.clone(), script.clone());
            std::thread::spawn(move || support::wrk(&wrk, &url, &script, secs, 32).and_then(|l| l.ok()))
        };
        std::thread::sleep(margin);
        let t = Instant::now();
        while t.elapsed() < window {
            beside.push(call_hello(&mut hello)?);
        }
        let load = load.join().map_err(|_| anyhow::anyhow!("the neighbour's load thread panicked"))??;
        answered += load.requests;
        neighbour_rates.push(load.requests_per_sec);
    }
    launcher.stop()?;
    let ratio = beside.p99().as_secs_f64() / alone.p99().as_secs_f64();
    Ok(Row {
        id: "P7",
        what: format!(
            "`hello` over HTTP, one request at a time, while another app of the launcher is under load (wrk, 32 connections, `hello` of its own server: {:.0} req/s, {answered} answered)",
            median_of(&neighbour_rates)
        ),
        ours: format!("p99 {} · median {} ({} calls)", us(beside.p99()), us(beside.median()), beside.len()),
        peer_name: "the same app alone".into(),
        peer: format!("p99 {} · median {} ({} calls)", us(alone.p99()), us(alone.median()), alone.len()),
        ratio: format!("{ratio:.2}× (p99)"),
        target: "reported".into(),
        met: None,
    })
}

// ---------------------------------------------------------------- P8

/// P8: an external route's call against a service on loopback, through the
/// app's server: the worker hands the request to its launcher, which sends
/// it (issue 72, rule 1: a worker holds no socket and no key). The peer is
/// the same service loaded directly, the floor of one such request. Run it
/// with `AUTOAPP_BENCH_BIN` set to a build before the change for the
/// figure without the hop.
fn p8(ctx: &Ctx) -> anyhow::Result<Row> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let service_port = listener.local_addr()?.port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let service = std::thread::spawn(move || -> anyhow::Result<()> {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        rt.block_on(async move {
            let app = axum::Router::new().route("/", axum::routing::get(|| async { HELLO }));
            axum::serve(tokio::net::TcpListener::from_std(listener)?, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await?;
            anyhow::Ok(())
        })
    });
    let result = (|| {
        let hostile = support::guest("hostile")?;
        let a = Autoapp::new(ctx.work.join("p8"), QUIET)?;
        let origin = format!("http://127.0.0.1:{service_port}");
        a.install_with("hostile", "hostile", &hostile, &format!("[capabilities]\nnetwork = [\"{origin}\"]\n"))?;
        let server = a.start(&["serve", "hostile"])?;
        let tab = Http::launch(&server.address_of("hostile")?)?;
        let ours_url = format!("http://127.0.0.1:{}/api/call/http.send", tab.port());
        let input = serde_json::json!({ "url": format!("{origin}/") }).to_string();
        let post = support::post_script(&input, &page_headers(&tab));
        let service_url = format!("{origin}/");
        let measured = (|| {
            support::wait_for_port(service_port, Duration::from_secs(10))?;
            // Ours reaches the service and answers what it sent.
            let mut mine = Http::new(tab.port());
            mine.cookie = tab.cookie.clone();
            let r = mine.request("POST", "/api/call/http.send", Some(&input))?;
            let answer: serde_json::Value = serde_json::from_slice(&r.body)?;
            ensure!(
                r.status == 200 && answer["status"] == 200 && answer["body"] == HELLO,
                "our server answered {answer}"
            );
            let (rounds, secs, conns) = (ctx.scale(1, 3), ctx.scale(3, 10) as u64, 8);
            support::wrk(&ctx.args.wrk, &ours_url, &post, 2, conns)?.ok()?;
            let (mut o, mut d) = (Vec::new(), Vec::new());
            for round in 0..rounds {
                for side in [round % 2, 1 - round % 2] {
                    if side == 0 {
                        o.push(support::wrk_at(server.pid(), &ctx.args.wrk, &ours_url, &post, secs, conns)?.ok()?);
                    } else {
                        d.push(support::wrk(&ctx.args.wrk, &service_url, "", secs, conns)?.ok()?);
                    }
                }
            }
            anyhow::Ok((o, d))
        })();
        server.stop()?;
        measured
    })();
    let _ = stop.send(());
    let _ = service.join();
    let (o, d) = result?;
    let hop = std::env::var_os("AUTOAPP_BENCH_BIN").map_or("this build", |_| "AUTOAPP_BENCH_BIN's build");
    Ok(Row {
        id: "P8",
        what: format!(
            "HTTP POSTs of the hostile guest's `http.send` (an external route: a GET of a service on loopback, its answer reported) through the app's server, {hop} (wrk, keep-alive, 8 connections)"
        ),
        ours: fmt_load(&o),
        peer_name: "the service itself, loaded directly (axum, two threads)".into(),
        peer: fmt_load(&d),
        ratio: format!("{:.0} % of the service's requests/s", 100.0 * rps(&o) / rps(&d)),
        target: "reported (before and after the hop: run once with AUTOAPP_BENCH_BIN)".into(),
        met: None,
    })
}

// ---------------------------------------------------------------- profiles

/// One series alone, for `valgrind --tool=callgrind` or `perf record`.
fn profile(ctx: &Ctx, which: &str) -> anyhow::Result<()> {
    let serves = matches!(which, "p2-ours" | "p2r-ours" | "p3c-ours");
    let n = ctx.args.calls.unwrap_or(if serves { 15 } else { 2000 });
    // A small pool, so the engine's address-space reservation fits under
    // valgrind (in process), yet room for the call's instance, its
    // release's two spares (the second perhaps still being made) and the
    // used one being freed, with a slot to spare: with 2, a call waited for
    // a slot and the spare was given up (and made again) at every call. A served profile runs on the row's own
    // configuration (64 writers on a few slots would profile waiting for
    // slots).
    const SMALL: &str = "opener = \"none\"\nmax_instances = 6\n";
    match which {
        "p1-ours" | "p1-peer" => {
            let a = ctx.root_with("profile", SMALL, &[("bench", "bench", &ctx.bench_wasm)])?;
            let apps = open_apps(&a.root)?;
            let peer = Bare::new(apps.engine(), &ctx.bench_wasm)?;
            let (app, me) = (id("bench"), Caller::command_line());
            let t = Instant::now();
            current_thread()?.block_on(async {
                for _ in 0..n {
                    if which == "p1-ours" {
                        apps.call(&me, &app, "hello", "{}").await?;
                    } else {
                        peer.call("hello").await?;
                    }
                }
                anyhow::Ok(())
            })?;
            eprintln!("{which}: {n} calls in {:?}", t.elapsed());
            apps.flush_record();
        }
        "p3-ours" => {
            let notes_wasm = support::guest("notes")?;
            let a = ctx.root_with("profile", SMALL, &[("notes", "notes", &notes_wasm)])?;
            let apps = open_apps(&a.root)?;
            let (app, me) = (id("notes"), Caller::command_line());
            let inputs = note_inputs(0..n);
            let mut each = Samples::default();
            let t = Instant::now();
            current_thread()?.block_on(async {
                for input in &inputs {
                    let one = Instant::now();
                    apps.call(&me, &app, "notes.add", input).await?;
                    each.push(one.elapsed());
                }
                anyhow::Ok(())
            })?;
            let took = t.elapsed();
            eprintln!("{which}: {n} calls in {took:?}, {} a call on average", us(took / n as u32));
            // Where the mean stands against the median: the calls' spread.
            let quantiles = [0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999];
            let shown: Vec<String> =
                quantiles.iter().map(|&q| format!("p{} {}", q * 100.0, us(each.quantile(q)))).collect();
            eprintln!("{which}: {}", shown.join(" · "));
            let median = each.median();
            let slow: Vec<Duration> = each.0.iter().filter(|d| **d > median * 2).map(|d| *d - median).collect();
            eprintln!(
                "{which}: calls over twice the median: {} of {n}, adding {} a call on average",
                slow.len(),
                us(slow.iter().sum::<Duration>() / n as u32)
            );
            apps.flush_record();
            // The logs' length after the run: the checkpoints kept up.
            let data = a.root.join("apps/notes/data");
            for f in ["app.sqlite-wal", "runs.sqlite-wal"] {
                let len = std::fs::metadata(data.join(f)).map(|m| m.len()).unwrap_or(0);
                eprintln!("{which}: {f} {} KiB", len / 1024);
            }
        }
        "p3-peer" => {
            let native_db = ctx.work.join("profile-p3-native.sqlite");
            let native_runs = ctx.work.join("profile-p3-native-runs.sqlite");
            let c = rusqlite::Connection::open(&native_db)?;
            for m in std::fs::read_dir(support::repo().join("guests/notes/migrations"))? {
                c.execute_batch(&std::fs::read_to_string(m?.path())?)?;
            }
            drop(c);
            let took = native_writes(&native_db, &native_runs, false, 0, n)?;
            eprintln!("{which}: {n} writes in {took:?}");
        }
        "p4-ours" => {
            let a = ctx.root_with("profile", SMALL, &[("bench", "bench", &ctx.bench_wasm)])?;
            let (app, me) = (id("bench"), Caller::command_line());
            let rt = current_thread()?;
            let mut first = Samples::default();
            for _ in 0..n {
                let apps = open_apps(&a.root)?;
                let t = Instant::now();
                rt.block_on(apps.call(&me, &app, "hello", "{}")).map_err(|e| anyhow::anyhow!("{e}"))?;
                first.push(t.elapsed());
            }
            eprintln!("{which}: {n} first calls, median {}", us(first.median()));
        }
        "p2-ours" | "p2r-ours" | "p3c-ours" => {
            // A real server under wrk for `--calls` seconds; its pid is
            // printed first and wrk starts 3 s later, for `perf record -p`.
            let a = ctx.root_with("profile", QUIET, &[("bench", "bench", &ctx.bench_wasm)])?;
            let server = a.start(&["serve", "bench"])?;
            let tab = Http::launch(&server.address_of("bench")?)?;
            let (route, conns) = match which {
                "p2-ours" => ("hello", 32),
                "p2r-ours" => ("count", 32),
                _ => ("put", 64),
            };
            let url = format!("http://127.0.0.1:{}/api/call/{route}", tab.port());
            let script = if route == "put" {
                support::unique_keys_script("profile", &page_headers(&tab))
            } else {
                support::post_script("{}", &page_headers(&tab))
            };
            eprintln!("{which}: server pid {}", server.pid());
            std::thread::sleep(Duration::from_secs(3));
            let load = support::wrk(&ctx.args.wrk, &url, &script, n as u64, conns)?.ok()?;
            eprintln!("{which}: {:.0} req/s · p50 {} · p99 {}", load.requests_per_sec, us(load.p50), us(load.p99));
            server.stop()?;
        }
        other => bail!(
            "no profile `{other}`; choose p1-ours, p1-peer, p2-ours, p2r-ours, p3-ours, p3-peer, p3c-ours or p4-ours"
        ),
    }
    Ok(())
}
