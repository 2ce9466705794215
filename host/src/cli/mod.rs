//! The command line: the argument types and the dispatch, glue over the
//! library. Each command's work and printing is in the room of its kin:
//! `releases` (create to remove), `grants` (grant, revoke, standing), `calls`
//! (call, runs, workflows), `launcher` (open, serve, status, stop, mcp),
//! `housekeeping` (apps, backup, restore, space, prune, logs), `packages`
//! (key, pack, publish, install), `plans`, `secrets` and `demo`. Every call
//! made here is channel `user`: a process running as the person is the person.

mod calls;
mod demo;
mod grants;
mod housekeeping;
mod launcher;
mod packages;
mod plans;
mod releases;
mod secrets;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use serde::Serialize;

use crate::apps::Apps;
use crate::config::Config;
use crate::gate::Caller;
use crate::manifest::AppId;
use crate::root::Root;

/// Autoapp runs your applications as WebAssembly components on your own
/// computer, and keeps you in charge of what they — and the AI agents that
/// call them — may do.
///
/// A typical session: `autoapp create notes`, edit the workspace it prints,
/// `autoapp build notes`, `autoapp activate notes <release>`, then
/// `autoapp call notes notes.list`. Start with `autoapp demo` to see it work.
#[derive(Debug, Parser)]
#[command(name = "autoapp", version, about, long_about, max_term_width = 100)]
pub struct Cli {
    /// Where the launcher keeps everything [default: $AUTOAPP_ROOT, else ~/.autoapp]
    #[arg(long, global = true, value_name = "DIR")]
    root: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Build the bundled example apps, activate them, run a short tour of calls, open the panel.
    Demo,
    /// Start the launcher: the panel and every active app, each on its own loopback port.
    ///
    /// Opens the panel in your browser (or prints its single-use address when no
    /// browser can be opened). Against a launcher that is already running, asks it
    /// for a fresh panel address instead of starting a second one.
    Open,
    /// Serve one app, without the panel.
    Serve { app: String },
    /// Show the running launcher: its pid, when it started, which apps it serves.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Stop the running launcher (calls in flight finish first).
    Stop,
    /// Serve an app's routes as MCP tools, or the engineer's tools, on stdin/stdout.
    ///
    /// `autoapp mcp <app>`: for an AI agent that *uses* an app. Its read and write
    /// routes are the tools; calls reach the running launcher (`autoapp open`) over
    /// its control connection and pass the gate on channel mcp: every write is
    /// approved by you in the app's page first. External routes are not offered.
    ///
    /// `autoapp mcp --engineer`: for an AI agent that *changes* apps (docs/engineer.md).
    /// Its tools read and edit an app's workspace, build candidates, and try them in
    /// previews, on channel ai: every edit, build and preview asks you first (unless
    /// you started its plan, `autoapp plans`, or turned on `autoapp standing`). Only you
    /// activate, grant, remove or turn the standing approval on.
    #[command(group(clap::ArgGroup::new("who").required(true).args(["app", "engineer"])))]
    Mcp {
        app: Option<String>,
        /// Serve the engineer's tools instead of one app's routes.
        #[arg(long)]
        engineer: bool,
    },
    /// Let the engineer work without asking, or ask again; `status` says which.
    ///
    /// `on` answers yes — never no — to the engineer's edits, builds and previews
    /// (source_edit, source_write, source_delete, candidate_build, candidate_preview,
    /// preview_call, preview_stop) for every app, on channel ai only; creating an
    /// app, and everything on channels mcp and workflow, still ask. Each answer it
    /// gives is recorded as answered by the standing approval. Kept in
    /// <root>/standing.json and read at every question: a running launcher follows
    /// the change at once.
    Standing {
        #[arg(value_parser = ["on", "off", "status"])]
        action: String,
        #[arg(long)]
        json: bool,
    },
    /// Show an app's plans: drafts, the one waiting for you, the run and its tasks, finished ones.
    ///
    /// An engineer (an AI agent, `autoapp mcp --engineer`) may write down what it
    /// means to do to one app first: a plan, with the request it was given, its
    /// tasks, and the routes, tables and files it says it changes (each marked when
    /// the app has no such thing). It asks you to start it (plan_start, a card in
    /// the panel). Starting it agrees to one thing: until the run ends, that
    /// agent's edits, builds and previews of that app, from its own connection,
    /// run without asking; nobody else changes the app and you do not activate it
    /// until the run ends. `autoapp plan stop` ends a run; `autoapp plan reject`
    /// refuses a plan that waits.
    Plans {
        app: String,
        #[arg(long)]
        json: bool,
    },
    /// Stop the running plan of an app, or reject a plan that waits for you.
    ///
    /// `stop` ends the app's run at once: the engineer's next change asks you
    /// again. `reject` refuses the plan that waits for you (or the draft or
    /// waiting plan named): the engineer may change the app again, asking you
    /// each time. Both are recorded in the app's record.
    Plan {
        #[arg(value_parser = ["stop", "reject"])]
        action: String,
        app: String,
        /// The plan's id (default: the running plan for stop, the waiting one for reject).
        plan: Option<u64>,
    },
    /// Make a publisher's signing key, or show the one you have.
    ///
    /// `autoapp key new [--name NAME]` makes an Ed25519 key and keeps it in your
    /// configuration folder ($XDG_CONFIG_HOME/autoapp, else ~/.config/autoapp), mode
    /// 0600, never under an app; it prints the key's fingerprint, which the people who
    /// install your packages see and pin. A key is never replaced. `autoapp key show`
    /// prints the name and fingerprint of yours.
    Key {
        #[arg(value_parser = ["new", "show"])]
        action: String,
        /// The publisher's name your packages show (with `new`) [default: your user name]
        #[arg(long)]
        name: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Write one release of an app as a package: one .wasm file another person installs.
    ///
    /// The package is the release's component with the manifest, the migrations and
    /// the WIT version it was built against carried inside it as custom sections (a
    /// runtime ignores them, so the file runs as it is); with --sign, your signature
    /// (`autoapp key new`) is embedded too, over every byte, your name and your key.
    /// An existing file is never written over.
    Pack {
        app: String,
        /// The release to pack (a unique prefix of its id) [default: the active release]
        #[arg(long, value_name = "ID")]
        release: Option<String>,
        /// The file to write, or a folder to write `<app>-<version>.wasm` in [default: the current folder]
        #[arg(long, value_name = "FILE|DIR")]
        to: Option<PathBuf>,
        /// Sign it with your publisher key.
        #[arg(long)]
        sign: bool,
        #[arg(long)]
        json: bool,
    },
    /// Push one release of an app, packed, to an OCI registry: `registry/repository:tag`.
    ///
    /// The package (as `autoapp pack` writes it; --sign signs it) goes up as a standard
    /// Wasm OCI artifact: a config `application/vnd.wasm.config.v0+json` naming the
    /// component's imports and exports, exactly one `application/wasm` layer — the
    /// packed file, byte for byte — and `org.opencontainers.image.*` annotations. It
    /// prints the manifest's digest: `registry/repository@<digest>` names exactly these
    /// bytes. Your login is the one `docker login` or `skopeo login` keeps. A registry on
    /// a loopback address (127.0.0.1:5000, localhost) is spoken to over plain HTTP, any
    /// other only over HTTPS.
    Publish {
        app: String,
        /// Where to push it: registry/repository:tag (e.g. ghcr.io/you/notes:1.0).
        reference: String,
        /// The release to publish (a unique prefix of its id) [default: the active release]
        #[arg(long, value_name = "ID")]
        release: Option<String>,
        /// Sign it with your publisher key (`autoapp key new`).
        #[arg(long)]
        sign: bool,
        #[arg(long)]
        json: bool,
    },
    /// Install a package, from a file or a registry, as a candidate release of its app.
    ///
    /// SOURCE is a package file (`autoapp pack`'s) or a registry reference
    /// (registry/repository:tag or registry/repository@sha256:…, as `autoapp publish`
    /// pushed it). The package is checked whole before anything is placed: its size
    /// (package_max_mib), its digests (a registry's), its sections, its signature, the
    /// WIT version, the manifest and the component (as a build checks them). It becomes a
    /// candidate, as a build does: nothing runs until you `autoapp activate` it, and it
    /// gets nothing you did not `autoapp grant`. The publisher's key is pinned at an
    /// app's first install; a package for it signed by another key is refused unless you
    /// name that key with --publisher.
    Install {
        /// A package file (`<app>-<version>.wasm`) or registry/repository:tag.
        #[arg(value_name = "SOURCE")]
        source: String,
        /// The id to install it as [default: the id its manifest gives]: beside an app of
        /// that id, say. Later packages of it update it when installed with the same --as.
        #[arg(long = "as", value_name = "APP")]
        as_id: Option<String>,
        /// Install a package nobody signed (anyone could have made it).
        #[arg(long)]
        unsigned: bool,
        /// Accept a package signed by this key (its fingerprint) for an app pinned to another.
        #[arg(long, value_name = "FINGERPRINT")]
        publisher: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Write one file holding a copy of an app: its data, active release, grants and record.
    ///
    /// Each database (the app's store, its record) is copied with SQLite's online
    /// backup, as of one moment, while a launcher may go on serving and writing. The file (a zstd-compressed tar) lists
    /// every part with its SHA-256; `autoapp restore` checks them all before it
    /// places anything. The app's workspace (its source) is not in it.
    Backup {
        app: String,
        /// The new file, or a folder to write `<app>-<time>.autoapp-backup` in
        /// [default: the current folder]. An existing file is never written over.
        #[arg(long, value_name = "FILE|DIR")]
        to: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Place an app from a backup file, as a new app (never over an existing one).
    ///
    /// Every part's hash, the release's id, SQLite's integrity check and the
    /// migrations are checked before anything is placed; the app appears whole in
    /// one step, or not at all. The backup's grants are kept and each is named;
    /// grants of folders or programs this computer does not have are left out and
    /// named, to grant again.
    Restore {
        /// The backup file (`autoapp backup` wrote it).
        file: PathBuf,
        /// Restore it under this id instead of the backup's own.
        #[arg(long = "as", value_name = "APP")]
        as_id: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// List the apps of this root, whether or not a launcher runs.
    ///
    /// Each app's id and name, its active release and version, where it came
    /// from (built, installed from a publisher, restored), the candidates
    /// waiting, and whether the running launcher serves it.
    Apps {
        #[arg(long)]
        json: bool,
    },
    /// Show how much disk each app uses: data, snapshots, releases, compiled code, previews, logs, trash.
    Space {
        /// One app [default: every app, and the whole root].
        app: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Remove what no rollback can use any more: old snapshots, old releases, their compiled code.
    ///
    /// Never removed: the active release; the release and the data snapshot a
    /// rollback of the last activation needs; a release `rollback --downgrade` can
    /// use; a preview's release and copy; a release built, or data a rollback set
    /// aside, in the last day (unless --keep is given). Compiled code goes when no
    /// release uses it, or when another version of autoapp compiled it and this
    /// one has compiled its own. Prints exactly what it removes and how much it frees, then
    /// asks (unless --yes). docs/releases.md, "Prune".
    Prune {
        /// One app [default: every app, and compiled code no release uses].
        app: Option<String>,
        /// Print what would be removed; remove nothing.
        #[arg(long)]
        dry_run: bool,
        /// Keep the N newest of the releases and of the snapshots prune could remove
        /// (releases built in the last day are then no exception).
        #[arg(long, value_name = "N")]
        keep: Option<usize>,
        /// Also empty the trash (removed apps).
        #[arg(long)]
        trash: bool,
        /// Also remove each workspace's build output (<workspace>/target): no candidate
        /// needs it (each release holds its own component) and `autoapp build` makes it
        /// again. Kept while a build is using it.
        #[arg(long)]
        builds: bool,
        /// Also take each app's record's rows before DATE (YYYY-MM-DD, UTC) out, your own
        /// actions and answers included (the bounds `record_keep_days` and `record_keep_mib`
        /// never take those); never the writes a rollback still needs. `autoapp runs
        /// --summary` still counts them by day.
        #[arg(long, value_name = "DATE", value_parser = crate::housekeeping::prune::record_day)]
        record_before: Option<chrono::NaiveDate>,
        /// Also let each app's record's oldest rows go until its rows take at most MIB
        /// (as `record_keep_mib` does, now): never your own actions and answers, nor the
        /// writes a rollback still needs.
        #[arg(long, value_name = "MIB", value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(1..))]
        record_to: Option<u64>,
        /// Do not ask on the terminal.
        #[arg(long)]
        yes: bool,
    },
    /// Show the lines an app's calls wrote to its log (secrets filtered), oldest first.
    ///
    /// Kept in <root>/apps/<app>/logs/ across restarts, about 2 MiB at most per app (a
    /// file of 1 MiB and the one before it).
    Logs {
        app: String,
        /// Keep printing lines as the app writes them (Ctrl+C ends).
        #[arg(long, short)]
        follow: bool,
        /// One JSON object per line: time, level, route, message.
        #[arg(long)]
        json: bool,
        /// Only lines from this time on: 2026-12-01T09:00:00Z, or a span back from now (10m, 2h, 3days).
        #[arg(long, value_name = "TIME")]
        since: Option<String>,
        /// How many of the newest lines to print.
        #[arg(long, short = 'n', default_value_t = 100, value_name = "N")]
        lines: usize,
    },
    /// Make a new app from the starter template (or register an existing workspace).
    ///
    /// Without --at the workspace is <root>/apps/<app>/workspace. With --at, the
    /// folder must be new or empty (or already hold this app's autoapp.toml), and
    /// may not be inside the root or another app's workspace.
    Create {
        /// The app's id: lowercase letters, digits and '-', starting with a letter.
        app: String,
        /// Put the workspace in this folder instead of the root.
        #[arg(long, value_name = "DIR")]
        at: Option<PathBuf>,
    },
    /// Build the app's workspace into a candidate release.
    ///
    /// Runs `cargo build --release --target wasm32-wasip2` in the workspace (installing
    /// the target with rustup when it is missing), checks the component against the
    /// manifest and the WIT, precompiles it, and writes an immutable release whose id
    /// is the SHA-256 of component, manifest and migrations.
    Build {
        app: String,
        /// Use this component (built by any toolchain) instead of running cargo;
        /// the manifest and migrations still come from the workspace.
        #[arg(long, value_name = "FILE.wasm")]
        component: Option<PathBuf>,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the app's candidate releases (built or installed, not active), each with its
    /// source (cargo, component, package), and the publisher pinned for an app installed
    /// from packages.
    Candidates {
        app: String,
        #[arg(long)]
        json: bool,
    },
    /// Show what a release asks for: routes and effects, capabilities, what changed.
    ///
    /// Names every route with its effect and input schema, every capability asked,
    /// each external route beside the capabilities it can use, what is new or gone
    /// compared with the active release, and which capabilities are not granted.
    Explain {
        app: String,
        /// The release id or a unique prefix [default: the newest release].
        release: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Allow the app a capability it asks for: network:<origin>, files:<name>, spawn:<program>.
    Grant {
        app: String,
        /// Grant everything the newest release asks for.
        #[arg(long, conflicts_with = "capabilities")]
        all_asked: bool,
        #[arg(value_name = "CAPABILITY")]
        capabilities: Vec<String>,
    },
    /// The keys your apps use to reach services: set, list, remove.
    ///
    /// A release declares each key it needs ([[capabilities.secret]]: a name, one of
    /// its network origins, and the header or query parameter it goes in). You set
    /// the value; the host keeps it in your system's keyring (else a private file of
    /// your configuration folder, never under the root) and adds it to the app's
    /// requests to that origin only, taking it out of everything that comes back.
    /// The app never holds it; no agent, tool or workflow can read, set or remove it.
    Secret {
        #[command(subcommand)]
        action: secrets::SecretAction,
    },
    /// Take back capabilities granted to the app.
    Revoke {
        app: String,
        #[arg(value_name = "CAPABILITY", required = true)]
        capabilities: Vec<String>,
    },
    /// Make a release the app's active release (the person's action alone).
    ///
    /// Refuses a release that asks for a capability nobody granted, or whose
    /// migrations do not extend the ones already applied; then applies its new
    /// migrations and switches to it.
    Activate {
        app: String,
        /// The release id, or a unique prefix of it.
        release: String,
        #[arg(long)]
        json: bool,
    },
    /// Call a route of the app's active release as yourself, and print its JSON answer.
    ///
    /// The call runs in a process of its own confined to the app (Landlock and a
    /// system-call filter, as docs/security.md says under "When the runtime itself
    /// fails"): its data, its releases, its logs, and only what you granted it.
    Call {
        app: String,
        route: String,
        /// The input, a JSON object [default: {}]; `-` reads it from standard input
        /// (for one too long for a command line).
        json_input: Option<String>,
        /// Call the preview instead (the newest, or the one whose release starts with the value).
        #[arg(long, value_name = "RELEASE", num_args = 0..=1, default_missing_value = "")]
        preview: Option<String>,
    },
    /// Serve a candidate on a copy of the app's data (external routes refused).
    ///
    /// The data is copied consistently (SQLite's backup API), the candidate's
    /// migrations are applied to the copy, and `autoapp call <app> <route> --preview`
    /// reaches it. The live data is never touched. `preview-stop` removes the copy.
    Preview {
        app: String,
        /// The release id or a unique prefix [default: the newest candidate].
        release: Option<String>,
    },
    /// Stop the app's previews (or the one named) and remove their copies of the data.
    PreviewStop { app: String, release: Option<String> },
    /// Go back to the release that was active before the last activation.
    ///
    /// Before the active release's first write this switches data and release back
    /// and loses nothing. After it, choose: `--downgrade RELEASE` (an older release
    /// that reads the newer schema; data kept), a forward repair (build and activate a
    /// fix), or `--restore --yes` (the data as it was before the activation; the
    /// writes since are set aside, not deleted).
    Rollback {
        app: String,
        #[arg(long, value_name = "RELEASE", conflicts_with = "restore")]
        downgrade: Option<String>,
        #[arg(long)]
        restore: bool,
        /// Confirms a restore, which discards the writes since activation.
        #[arg(long, requires = "restore")]
        yes: bool,
        #[arg(long)]
        json: bool,
    },
    /// Move an app to <root>/trash (the id is given twice: `remove notes --yes notes`).
    ///
    /// A workspace you chose with `create --at` stays where it is.
    Remove {
        app: String,
        /// The app's id again, to confirm.
        #[arg(long = "yes", value_name = "APP", required = true)]
        confirm: String,
    },
    /// Show the app's record: every call's decision and outcome, and every lifecycle action, newest last.
    ///
    /// One row per call: time, channel, caller, release, route, effect, the
    /// arguments' hash (never the arguments), the decision (allowed, confirmed,
    /// denied, refused), the reason, and the outcome (ok, error, trap, not-run).
    /// A page render is a read whose route is `page:<name>`. Lifecycle actions
    /// (create, activate, rollback, grant, revoke, preview-start, preview-stop,
    /// remove, workflow-approve, workflow-revoke) have effect `lifecycle`, the caller that
    /// took them (command line, panel) and what they did or why they failed.
    Runs {
        app: String,
        /// How many of the newest rows to show (at least 1); with --summary, of the newest lines.
        #[arg(long, default_value_t = 50, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
        limit: usize,
        /// Calls, refusals and errors per day, route and channel, the rows the record's
        /// bounds let go included (`record_keep_days`, `record_keep_mib`).
        #[arg(long)]
        summary: bool,
        #[arg(long)]
        json: bool,
    },
    /// Show the workflows of the app's active release: schedule, next run, last run, approval.
    ///
    /// A workflow's route runs on its schedule while a launcher (`autoapp open` or
    /// `autoapp serve <app>`) runs, on channel workflow. A write or external route
    /// runs without asking only once you approve that workflow for the active release
    /// (`autoapp workflow approve`); otherwise each run asks you in the app's page.
    Workflows {
        app: String,
        #[arg(long)]
        json: bool,
    },
    /// Approve a workflow of the active release to run without asking, or take that back.
    ///
    /// The approval holds for this release, this route and this input; a new release
    /// needs a new approval. It is read at every run, so `revoke` holds from the next.
    Workflow {
        #[arg(value_parser = ["approve", "revoke"])]
        action: String,
        app: String,
        /// The workflow's name, as `autoapp workflows <app>` lists it.
        name: String,
    },
    /// Write the WIT package (and the WASI packages it uses) for a toolchain.
    Wit {
        /// The folder to write to.
        #[arg(long, value_name = "DIR", default_value = "wit")]
        out: PathBuf,
    },
}

/// A failure to report: one sentence, and the exit code.
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl<E: std::fmt::Display> From<E> for Failure {
    /// The whole cause chain (`{:#}`): "grants.json is damaged" says why.
    fn from(e: E) -> Failure {
        Failure { code: 1, message: format!("{e:#}") }
    }
}

fn fail<T>(message: impl Into<String>) -> Result<T, Failure> {
    Err(Failure { code: 1, message: message.into() })
}

/// The binary's entry point.
pub fn main() -> ExitCode {
    // What whoever started it left open reaches nothing it starts.
    crate::caps::confine::inherit_nothing();
    // The confinement shim and the kernel probe are internal: our own binary
    // run as the parent of a spawned program (see caps::confine).
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("__confined") => return ExitCode::from(crate::caps::confine::confined_main(&args[2..]) as u8),
        Some("__confined-exec") => return ExitCode::from(crate::caps::confine::exec_main(&args[2..]) as u8),
        Some("__landlock-probe") => return ExitCode::from(crate::caps::confine::probe_main() as u8),
        Some(crate::runtime::COMPILE_COMMAND) => {
            return ExitCode::from(crate::runtime::compile_main(&args[2..]) as u8);
        }
        // An app's worker: confined before anything else runs (see worker).
        Some(crate::worker::COMMAND) => {
            return ExitCode::from(crate::worker::main(&args[2..], init_tracing, crate::server::front::serve) as u8);
        }
        // Debug builds only: what an escape would try, unconfined.
        #[cfg(debug_assertions)]
        Some("__escape-probe") => return ExitCode::from(crate::probe::main(&args[2..]) as u8),
        _ => {}
    }
    // Nothing of the same account that is not allowed to debug this process
    // reads its memory or environment (`/proc/<pid>/environ`): a program it
    // confines is such a thing (see caps::confine).
    let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
    let cli = Cli::parse();
    init_tracing();
    let ran = run(cli);
    // Whatever ran, the apps' log lines it queued are written before it ends.
    crate::applog::flush();
    match ran {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            tell!("autoapp: {}", f.message.trim_end());
            ExitCode::from(f.code)
        }
    }
}

fn init_tracing() {
    let mut filter = tracing_subscriber::EnvFilter::try_from_env("AUTOAPP_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,app=info"));
    // Whatever level the person asks for, the guest's raw output (wasmtime-wasi
    // logs the bytes of its stdout and stderr at debug) and the arguments of its
    // calls to our imports (bindgen's tracing, at trace) stay out of the log:
    // they are the app's words, unsanitised. Its log lines, sanitised, are the
    // `app` target.
    for quiet in ["wasmtime_wasi::p2::write_stream=info", "autoapp::bindings=info"] {
        if let Ok(d) = quiet.parse() {
            filter = filter.add_directive(d);
        }
    }
    // Colours only for a terminal (and not when NO_COLOR is set): a file or
    // a pipe gets the plain words.
    let writer = std::io::stderr;
    let colours = std::io::IsTerminal::is_terminal(&writer()) && std::env::var_os("NO_COLOR").is_none();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_target(false)
        .with_ansi(colours)
        .try_init();
}

fn app_id(s: &str) -> Result<AppId, Failure> {
    AppId::parse(s).map_err(|e| Failure { code: 2, message: e })
}

fn print_json<T: Serialize>(v: &T) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(v).map_err(|e| e.to_string())?;
    say!("{}", crate::elsewhere::text::json_for_terminal(&text));
    Ok(())
}

fn progress(msg: &str) {
    tell!("  {msg}");
}

fn run(cli: Cli) -> Result<(), Failure> {
    let root = Root::resolve(cli.root.as_deref())?;
    // An activation or rollback that a crash interrupted is finished or undone
    // before anything else looks at the apps.
    for r in crate::lifecycle::recover(&root).map_err(|e| format!("{e:#}"))? {
        tell!("autoapp: recovered {}: an interrupted {:?} (at step {:?}) was {}", r.app, r.op, r.step, r.outcome);
    }
    for said in crate::housekeeping::recover(&root, &Caller::command_line()).map_err(|e| format!("{e:#}"))? {
        tell!("autoapp: recovered: {said}");
    }
    match cli.command {
        Command::Create { app, at } => releases::create(root, app, at),
        Command::Wit { out } => releases::wit(out),
        Command::Build { app, component, json } => releases::build(root, app, component, json),
        Command::Candidates { app, json } => releases::candidates(root, app, json),
        Command::Explain { app, release: which, json } => releases::explain(root, app, which, json),
        Command::Grant { app, all_asked, capabilities } => grants::grant(root, app, all_asked, capabilities),
        Command::Revoke { app, capabilities } => grants::revoke(root, app, capabilities),
        Command::Secret { action } => secrets::secret(root, action),
        Command::Activate { app, release, json } => releases::activate(root, app, release, json),
        Command::Call { app, route, json_input, preview } => calls::call(root, app, route, json_input, preview),
        Command::Preview { app, release } => releases::preview(root, app, release),
        Command::PreviewStop { app, release } => releases::preview_stop(root, app, release),
        Command::Rollback { app, downgrade, restore, yes, json } => {
            releases::rollback(root, app, downgrade, restore, yes, json)
        }
        Command::Remove { app, confirm } => releases::remove(root, app, confirm),
        Command::Runs { app, limit, summary, json } => calls::runs(root, app, limit, summary, json),
        Command::Workflows { app, json } => calls::workflows(root, app, json),
        Command::Workflow { action, app, name } => calls::workflow(root, action, app, name),
        Command::Open => launcher::open(root),
        Command::Serve { app } => launcher::serve(root, app),
        Command::Status { json } => launcher::status(root, json),
        Command::Stop => launcher::stop(root),
        Command::Mcp { app, engineer } => launcher::mcp(root, app, engineer),
        Command::Standing { action, json } => grants::standing(root, action, json),
        Command::Plans { app, json } => plans::list(root, app, json),
        Command::Plan { action, app, plan } => plans::act(root, action, app, plan),
        Command::Key { action, name, json } => packages::key(action, name, json),
        Command::Pack { app, release, to, sign, json } => packages::pack(root, app, release, to, sign, json),
        Command::Publish { app, reference, release, sign, json } => {
            packages::publish(root, app, reference, release, sign, json)
        }
        Command::Install { source, as_id, unsigned, publisher, json } => {
            packages::install(root, source, as_id, unsigned, publisher, json)
        }
        Command::Backup { app, to, json } => housekeeping::backup(root, app, to, json),
        Command::Restore { file, as_id, json } => housekeeping::restore(root, file, as_id, json),
        Command::Space { app, json } => housekeeping::space(root, app, json),
        Command::Apps { json } => housekeeping::apps(root, json),
        Command::Prune { app, dry_run, keep, trash, builds, record_before, record_to, yes } => {
            let opts = crate::housekeeping::Options { keep, trash, builds, record_before, record_to_mib: record_to };
            housekeeping::prune(root, app, dry_run, opts, yes)
        }
        Command::Logs { app, follow, json, since, lines } => housekeeping::logs(root, app, follow, json, since, lines),
        Command::Demo => demo::run(&root).map_err(|e| Failure { code: 1, message: format!("{e:#}") }),
    }
}

/// The service over `root`, with its configuration.
pub fn open_apps(root: &Root) -> Result<Apps, Failure> {
    let config = Config::load(root.dir())?;
    Ok(Apps::new(root.clone(), &config).map_err(|e| format!("{e:#}"))?)
}

/// Runs a future on a runtime made for one command.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime starts").block_on(f)
}
