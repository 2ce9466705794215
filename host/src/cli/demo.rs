//! `autoapp demo`: builds the bundled example apps from `guests/`, activates
//! them, and runs a short tour of real calls, saying what each step did.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::releases::build_app;
use super::{block_on, open_apps};
use crate::gate::Caller;
use crate::manifest::AppId;
use crate::release;
use crate::release::short;
use crate::root::{Root, write_atomic};

/// The example apps the demo builds, in order.
pub const DEMO_APPS: &[&str] = &["notes"];

/// Where the bundled examples are: the `guests/` folder of the checkout this
/// binary was built from.
pub fn guests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("guests")
}

pub fn run(root: &Root) -> anyhow::Result<()> {
    let guests = guests_dir();
    anyhow::ensure!(
        guests.is_dir(),
        "the bundled example apps are not at {} (the demo runs from a checkout of the repository: `cargo run --release -- demo`)",
        guests.display()
    );
    let guests = std::fs::canonicalize(&guests)?;
    // One cargo target folder for every example, so shared crates build once
    // (unless the person set CARGO_TARGET_DIR: then cargo's choice stands).
    let shared = root.dir().join("cache").join("guest-target");
    let target_dir = std::env::var_os("CARGO_TARGET_DIR").is_none().then_some(shared.as_path());
    // The examples share the checkout's WIT folder (`../../wit`): the demo's
    // builds may read it, and nothing else outside their workspaces.
    let also_read = vec![guests.join("..").join("wit")];
    say!("Autoapp demo — root {}", root.dir().display());
    let apps = open_apps(root).map_err(|f| anyhow::anyhow!(f_message(f)))?;
    for name in DEMO_APPS {
        let id = AppId::parse(name).map_err(anyhow::Error::msg)?;
        let paths = root.app(&id);
        if !paths.exists() {
            std::fs::create_dir_all(&paths.dir)?;
            write_atomic(&paths.workspace_pointer(), format!("{}\n", guests.join(name).display()).as_bytes())?;
            say!("registered the example {id} (workspace {})", guests.join(name).display());
        }
        let built = build_app(
            &apps,
            &id,
            crate::build::Source::Cargo {
                target_dir,
                by: crate::build::By::Person,
                also_read: &also_read,
                stop: &crate::build::Stop::default(),
            },
        )
        .map_err(|f| anyhow::anyhow!(f_message(f)))?;
        say!("built {id} {}: release {}", built.info.version, short(&built.info.id));
        if release::active(&paths)?.as_deref() == Some(built.info.id.as_str()) {
            say!("{id} {} is already active", short(&built.info.id));
        } else {
            let a = apps
                .activate(&Caller::command_line(), &id, &built.info.id)
                .with_context(|| format!("cannot activate {id}"))?;
            say!("activated {id} {} ({})", short(&a.release), a.migrations_said());
        }
    }

    say!("\nA short tour, each a real call through the host as you (channel user):");
    let notes = AppId::parse("notes").map_err(anyhow::Error::msg)?;
    let me = Caller::command_line();
    let tour = [
        ("notes.add", serde_json::json!({ "title": "Try Autoapp", "body": "Written by the demo", "tags": ["demo"] })),
        ("notes.list", serde_json::json!({})),
    ];
    for (route, input) in tour {
        say!("\n$ autoapp call notes {route} '{input}'");
        // As `autoapp call` runs it: in a worker confined to the app.
        match crate::worker::call(root, &notes, None, route, &input.to_string()) {
            Ok(output) => {
                say!("{}", crate::elsewhere::text::json_for_terminal(&serde_json::to_string_pretty(&output)?))
            }
            Err(e) => anyhow::bail!("the demo call {route} failed: {e}"),
        }
    }
    say!("\n$ (the notes index page, as the renderer receives it)");
    // As the launcher renders it: in the app's worker.
    let config = crate::config::Config::load(root.dir())?;
    let workers = crate::worker::pool::Workers::new(root.clone(), config)?;
    apps.run_elsewhere(std::sync::Arc::new(workers.clone()));
    let view = block_on(async {
        let view = apps.render(&me, &notes, "index", "{}").await;
        workers.stop_all(std::time::Duration::from_secs(10)).await;
        view
    })
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    say!("{}", crate::elsewhere::text::json_for_terminal(&serde_json::to_string_pretty(&view)?));
    let default_root = Root::resolve(None).ok().map(|r| r.dir().to_path_buf());
    let root_flag = if default_root.as_deref() == Some(root.dir()) {
        String::new()
    } else {
        format!(" --root {}", root.dir().display())
    };
    say!(
        "\nTry it yourself in another terminal:\n  autoapp{root_flag} call notes notes.list\n  autoapp{root_flag} create my-app\n"
    );
    drop(apps);
    // The demo ends in the launcher: the panel, and every active app.
    if crate::control::running(root)?.is_some() {
        say!("A launcher is already running on this root: `autoapp{root_flag} open` opens its panel.");
        return Ok(());
    }
    let config = crate::config::Config::load(root.dir())?;
    block_on(crate::launcher::run(root.clone(), config, None))
}

fn f_message(f: super::Failure) -> String {
    f.message
}
