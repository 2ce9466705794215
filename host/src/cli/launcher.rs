//! `autoapp open`, `serve`, `status`, `stop` and `mcp`: the launcher and
//! the MCP servers, started here or asked over the control connection.

use super::{Failure, app_id, block_on, fail, print_json};
use crate::config::Config;
use crate::root::Root;

/// `autoapp open`.
pub(super) fn open(root: Root) -> Result<(), Failure> {
    if crate::control::running(&root)?.is_some() {
        let answer = block_on(async {
            let mut c = crate::control::Client::connect(&root).await?;
            c.request(&serde_json::json!({ "type": "panel" })).await
        })
        .map_err(|e| format!("{e:#}"))?;
        if answer["ok"] != true {
            return fail(answer["error"]["message"].as_str().unwrap_or("the launcher refused").to_string());
        }
        match answer["url"].as_str() {
            Some(url) => say!("Autoapp is already running; open the panel: {url}"),
            None => say!("Autoapp is already running; the panel was opened in your browser"),
        }
        return Ok(());
    }
    let config = Config::load(root.dir())?;
    block_on(crate::launcher::run(root, config, None)).map_err(|e| format!("{e:#}"))?;
    Ok(())
}

/// `autoapp serve`.
pub(super) fn serve(root: Root, app: String) -> Result<(), Failure> {
    let id = app_id(&app)?;
    if let Some(f) = crate::control::running(&root)? {
        return fail(format!(
            "a launcher (pid {}) is already running on this root and serves its apps; use `autoapp open`",
            f.pid
        ));
    }
    let config = Config::load(root.dir())?;
    block_on(crate::launcher::run(root, config, Some(id))).map_err(|e| format!("{e:#}"))?;
    Ok(())
}

/// `autoapp status`.
pub(super) fn status(root: Root, json: bool) -> Result<(), Failure> {
    let answer = block_on(async {
        let mut c = crate::control::Client::connect(&root).await?;
        c.request(&serde_json::json!({ "type": "status" })).await
    })
    .map_err(|e| format!("{e:#}"))?;
    if json {
        return print_json(&answer);
    }
    let serving: Vec<&str> = answer["serving"].as_array().into_iter().flatten().filter_map(|v| v.as_str()).collect();
    say!(
        "Autoapp is running: pid {}, since {}, serving {}",
        answer["pid"],
        answer["startedAt"].as_str().unwrap_or("?"),
        if serving.is_empty() { "no app".to_string() } else { serving.join(", ") }
    );
    if let Some(spawn) = answer["spawnedPrograms"].as_str() {
        say!("spawned programs: {spawn}");
    }
    if let Some(pages) = answer["pagesOpen"].as_u64() {
        say!("pages open that can answer a question: {pages}");
    }
    if let Some(workers) = answer["workers"].as_array() {
        say!("apps' workers (each app's calls run confined in processes of its own): {}", workers.len());
        for w in workers {
            let memory = match w["memory_kib"].as_u64() {
                Some(kib) => format!("{:.1} MiB", kib as f64 / 1024.0),
                None => "memory unknown".into(),
            };
            let serves = match w["serves_port"].as_u64() {
                Some(port) => format!("; serves its page on port {port}"),
                None => String::new(),
            };
            let reset = match w["in_place"].as_bool() {
                Some(true) => ", instances reset in place",
                _ => ", instances given back to the kernel",
            };
            say!(
                "  {} ({}{serves}): pid {}, {}, {} calls now, {memory}, {}{reset}, started {}s ago",
                w["app"].as_str().unwrap_or("?"),
                match w["side"].as_str() {
                    Some("outer") => "external routes",
                    _ => "reads, writes, pages",
                },
                w["pid"],
                w["state"].as_str().unwrap_or("?"),
                w["calls"],
                w["confined"].as_str().unwrap_or("?"),
                w["started_secs_ago"],
            );
        }
    }
    Ok(())
}

/// `autoapp stop`.
pub(super) fn stop(root: Root) -> Result<(), Failure> {
    let answer = block_on(async {
        let mut c = crate::control::Client::connect(&root).await?;
        c.request(&serde_json::json!({ "type": "stop" })).await
    })
    .map_err(|e| format!("{e:#}"))?;
    if answer["ok"] != true {
        return fail("the launcher refused to stop");
    }
    say!("the launcher is stopping");
    Ok(())
}

/// `autoapp mcp`.
pub(super) fn mcp(root: Root, app: Option<String>, engineer: bool) -> Result<(), Failure> {
    match (app, engineer) {
        (None, true) => block_on(crate::mcp::serve_engineer(root)).map_err(|e| format!("{e:#}"))?,
        (Some(app), false) => block_on(crate::mcp::serve(root, app_id(&app)?)).map_err(|e| format!("{e:#}"))?,
        _ => {
            return Err(Failure {
                code: 2,
                message: "give either an app (`autoapp mcp notes`) or --engineer, not both".into(),
            });
        }
    }
    Ok(())
}
