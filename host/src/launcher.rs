//! The launcher's composition root (`autoapp open`, `autoapp serve <app>`):
//! the apps, their servers and the panel (`server`), the control connection
//! (`control`), the workflows' runner, and the signals that stop them.

use std::sync::Arc;

use crate::apps::Apps;
use crate::config::Config;
use crate::manifest::AppId;
use crate::server::{Launcher, Opener, SiteKey};

/// Runs the launcher until Ctrl+C, SIGTERM or a `stop` request: the panel
/// (unless `only` names one app to serve), the apps' servers, the control
/// connection. First of all it takes the root's launcher lock (one root, one
/// launcher), held until it returns; a root another launcher holds is
/// refused, naming that launcher. On the way out the calls in flight finish,
/// the record is flushed and `launcher.json` is removed.
pub async fn run(root: crate::root::Root, config: Config, only: Option<AppId>) -> anyhow::Result<()> {
    let me = crate::root::Holder {
        pid: std::process::id(),
        started_at: crate::release::now_rfc3339(),
        id: crate::secret::random_hex(),
    };
    let Some(_lock) = crate::root::take_launcher_lock(&root, &me)? else {
        anyhow::bail!("{}", crate::control::held_by(&root));
    };
    let apps = Arc::new(Apps::new(root.clone(), &config)?);
    // Every call the gate passes runs in its app's worker (issue 54).
    let workers = crate::worker::pool::Workers::new(root.clone(), config.clone())?;
    apps.run_elsewhere(Arc::new(workers.clone()));
    workers.compile_with(&apps);
    // Only runs and authors of this start are live in it.
    apps.plans().bind_launcher(&me.id);
    // A run does not survive a restart: one found running was stopped by it.
    if let Err(e) = apps.plans().end_launcher(None, "the launcher restarted") {
        tracing::error!("cannot end the runs of the last launcher: {e:#}");
    }
    let opener = Opener::from_config(&config.opener);
    let launcher = Launcher::new(apps, config, opener, only.is_none(), me.id.clone(), me.started_at.clone());
    // Each app's own server is served by its worker, on the socket the
    // launcher opens and keeps.
    launcher.serve_through(workers.clone());
    let control = crate::control::start(&root, launcher.clone()).await?;
    match &only {
        None => {
            launcher.start().await?;
            let o = launcher.open(SiteKey::Panel).await?;
            say!(
                "Autoapp is running (serving {}); {}. Press Ctrl+C to stop.",
                launcher.serving().join(", "),
                o.message
            );
        }
        Some(app) => {
            anyhow::ensure!(
                crate::release::active(&root.app(app)).ok().flatten().is_some(),
                "{app} has no active release; activate one first with `autoapp activate {app} RELEASE`"
            );
            let o = launcher.open(SiteKey::App(app.clone())).await?;
            say!("Autoapp is serving {app}; {}. Press Ctrl+C to stop.", o.message);
        }
    }
    // The active releases' workflows (of the one app, for `serve`).
    let runner = tokio::spawn(crate::workflows::run(
        launcher.apps().clone(),
        only.clone(),
        Arc::new(crate::workflows::SystemClock),
        launcher.stopping(),
    ));
    launcher.keep(runner);
    launcher.keep(tokio::spawn(workers.clone().retire_idle(launcher.stopping())));
    let mut stopping = launcher.stopping();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
        _ = stopping.wait_for(|s| *s) => {}
    }
    say!("Autoapp is stopping: finishing the calls in flight.");
    launcher.shutdown().await;
    // Each finishes what it has, writes its last rows and ends; then the
    // rows the launcher wrote meanwhile.
    workers.stop_all(std::time::Duration::from_secs(10)).await;
    launcher.apps().flush_record();
    drop(control);
    if let Err(e) = launcher.apps().plans().end_launcher(Some(&me.id), "the launcher stopped") {
        tracing::error!("cannot end the runs: {e:#}");
    }
    Ok(())
}
