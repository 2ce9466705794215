//! `autoapp mcp <app>`: a stdio MCP server (the official Rust SDK, rmcp) that
//! offers an app's `read` and `write` routes as tools. `external` routes are
//! not offered at all. Every call goes over the control connection to the
//! running launcher and through the gate on channel `mcp`: a write asks the
//! person in the app's page and the tool call waits for the answer. Refusals
//! and denials come back as tool errors whose text says what happened, never
//! as protocol failures.
//!
//! The tools follow the active release: when the person activates another one
//! (or rolls back), the tools are read anew and the client is told with
//! `notifications/tools/list_changed`; an external route is never offered,
//! whatever a new release declares.

use std::collections::BTreeMap;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, InitializeResult,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt as _};
use serde_json::{Value, json};

use crate::control::Client;
use crate::manifest::{AppId, Effect, Manifest};
use crate::release;
use crate::root::Root;

/// The MCP server of one app.
#[derive(Clone)]
pub struct AppTools {
    root: Root,
    app: AppId,
    current: Arc<std::sync::Mutex<ToolSet>>,
}

/// The tools of one release.
struct ToolSet {
    release: String,
    tools: Vec<Tool>,
    /// Tool name → route name (tool names use `_` where routes use `.`, which
    /// some clients do not accept in tool names).
    routes: BTreeMap<String, String>,
}

/// A tool call's answer once its client cancelled it (which it does not
/// wait for).
const CANCELLED: &str = "cancelled: the call was dropped, and a question it waited for was withdrawn";

/// How often the active release is looked at for a change.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

/// A tool name every client accepts: `[A-Za-z0-9_-]`, at most 64 characters.
fn tool_name(route: &str, taken: &BTreeMap<String, String>) -> String {
    let base: String =
        route.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
    let base: String = base.chars().take(60).collect();
    let mut name = base.clone();
    let mut n = 2;
    while taken.contains_key(&name) {
        name = format!("{base}_{n}");
        n += 1;
    }
    name
}

impl AppTools {
    /// The tools of `app`'s active release.
    pub fn new(root: Root, app: AppId) -> anyhow::Result<AppTools> {
        let current = tool_set(&root, &app)?;
        Ok(AppTools { root, app, current: Arc::new(std::sync::Mutex::new(current)) })
    }

    /// Reads the tools anew when the active release changed; says whether
    /// they did. (A release that cannot be read leaves the tools as they are:
    /// the launcher refuses what no longer exists.)
    fn refresh(&self) -> bool {
        let active = release::active(&self.root.app(&self.app)).ok().flatten();
        if active.is_none() || active.as_deref() == Some(self.current.lock().expect("tools").release.as_str()) {
            return false;
        }
        match tool_set(&self.root, &self.app) {
            Ok(set) => {
                *self.current.lock().expect("tools") = set;
                true
            }
            Err(e) => {
                tracing::warn!(app = %self.app, "cannot read the new release's tools: {e:#}");
                false
            }
        }
    }
}

fn tool_set(root: &Root, app: &AppId) -> anyhow::Result<ToolSet> {
    let paths = root.app(app);
    anyhow::ensure!(paths.exists(), crate::error::no_such_app(app));
    let active = release::active(&paths)?.ok_or_else(|| {
        anyhow::anyhow!("{app} has no active release; activate one with `autoapp activate {app} RELEASE`")
    })?;
    let manifest = release::manifest(&paths, &active)?;
    let (tools, routes) = tools_of(&manifest);
    Ok(ToolSet { release: active, tools, routes })
}

/// The tools for `manifest`: its read and write routes, never its external ones.
pub fn tools_of(manifest: &Manifest) -> (Vec<Tool>, BTreeMap<String, String>) {
    let mut routes = BTreeMap::new();
    let mut tools = Vec::new();
    for r in manifest.routes.iter().filter(|r| r.effect != Effect::External) {
        let name = tool_name(&r.name, &routes);
        routes.insert(name.clone(), r.name.clone());
        let schema = r.input.as_object().cloned().unwrap_or_default();
        let annotations = match r.effect {
            Effect::Read => ToolAnnotations::new().read_only(true).destructive(false),
            _ => ToolAnnotations::new().read_only(false).destructive(true),
        };
        let description = match r.effect {
            Effect::Read => format!("{} (route {}; reads, answers at once)", r.summary, r.name),
            _ => format!(
                "{} (route {}; a write: the person approves each call in the app's page first, and the call waits for that answer)",
                r.summary, r.name
            ),
        };
        let mut tool = Tool::new(name, description, Arc::new(schema));
        tool.title = Some(format!("{}: {}", manifest.name, r.name));
        tool.annotations = Some(annotations);
        tools.push(tool);
    }
    (tools, routes)
}

/// The launcher's answer as a tool result: its output (as `text` says it,
/// and as structured content when it is an object), or a tool error whose
/// text is the launcher's sentence.
fn tool_answer(answer: anyhow::Result<Value>, text: impl Fn(&Value) -> String) -> CallToolResponse {
    match answer {
        Ok(a) if a["ok"] == true => {
            let out = a["output"].clone();
            let mut result = CallToolResult::success(vec![ContentBlock::text(text(&out))]);
            if out.is_object() {
                result.structured_content = Some(out);
            }
            result.into()
        }
        Ok(a) => tool_error(a["error"]["message"].as_str().unwrap_or("the launcher refused the call").to_string()),
        Err(e) => tool_error(format!("the launcher could not be reached: {e:#}")),
    }
}

fn tool_error(text: impl Into<String>) -> CallToolResponse {
    CallToolResult::error(vec![ContentBlock::text(text.into())]).into()
}

impl ServerHandler for AppTools {
    fn get_info(&self) -> ServerConfig {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().enable_tool_list_changed().build())
            .with_server_info(Implementation::new("autoapp", env!("CARGO_PKG_VERSION")))
            .with_instructions(format!(
                "The tools are the routes of the app `{}`. Reads answer at once. Every write is shown to the person in the app's page and runs only if they approve it; with no page open it is refused.",
                self.app
            ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        if self.refresh() {
            let _ = context.peer.notify_tool_list_changed().await;
        }
        Ok(ListToolsResult::with_all_items(self.current.lock().expect("tools").tools.clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if self.refresh() {
            let _ = context.peer.notify_tool_list_changed().await;
        }
        let (route, names) = {
            let set = self.current.lock().expect("tools");
            (set.routes.get(request.name.as_ref()).cloned(), set.routes.keys().cloned().collect::<Vec<_>>())
        };
        let Some(route) = route else {
            return Ok(tool_error(format!(
                "{} is not a tool of {}; the tools are {}",
                request.name,
                self.app,
                names.join(", ")
            )));
        };
        let client =
            context.peer.peer_info().map(|i| i.client_info.name.clone()).unwrap_or_else(|| "an MCP client".to_string());
        let input = Value::Object(request.arguments.unwrap_or_default());
        let mut conn = match Client::connect(&self.root).await {
            Ok(c) => c,
            Err(e) => {
                return Ok(tool_error(format!("{e:#}, and keep the app's page open to approve writes")));
            }
        };
        let call = json!({ "type": "invoke", "app": self.app, "route": &route, "input": input, "client": client });
        if call.to_string().len() >= crate::control::MAX_LINE {
            return Ok(tool_error(format!(
                "the arguments are too long: a call carries at most {} MiB to the launcher; nothing was sent",
                crate::control::MAX_LINE >> 20
            )));
        }
        // Cancelled by the client (or the client went away): the connection
        // closes, and the launcher withdraws a question the call waited on.
        let answer = tokio::select! {
            answer = conn.request(&call) => answer,
            () = context.ct.cancelled() => return Ok(tool_error(CANCELLED.to_string())),
        };
        Ok(tool_answer(answer, |out| serde_json::to_string_pretty(out).unwrap_or_default()))
    }
}

/// Serves MCP on stdin/stdout until the client goes away.
pub async fn serve(root: Root, app: AppId) -> anyhow::Result<()> {
    let tools = AppTools::new(root, app)?;
    let running = tools
        .clone()
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| anyhow::anyhow!("the MCP session did not start: {e}"))?;
    // Tell the client when the person activates another release.
    let peer = running.peer().clone();
    let watcher = tokio::spawn(async move {
        loop {
            tokio::time::sleep(WATCH_EVERY).await;
            if tools.refresh() && peer.notify_tool_list_changed().await.is_err() {
                break;
            }
        }
    });
    let ended = running.waiting().await;
    watcher.abort();
    ended.map_err(|e| anyhow::anyhow!("the MCP session ended with an error: {e}"))?;
    Ok(())
}

/// The MCP server of `autoapp mcp --engineer`: the engineer's tools
/// ([`crate::engineer::tools`]), each forwarded over the control connection,
/// where the launcher runs it on channel `ai`. Long steps (a build, a wait
/// for the person) come back as `notifications/progress` when the client
/// gave a progress token.
#[derive(Clone)]
pub struct EngineerTools {
    root: Root,
    /// The session this MCP server holds open with the launcher: a control
    /// connection kept for its whole life, whose token each call sends, so a
    /// run the person starts is bound to this agent and ends when it exits.
    session: Arc<tokio::sync::Mutex<Option<(Client, String)>>>,
}

impl EngineerTools {
    /// This server's session token, opening the session when there is none.
    async fn session(&self) -> Option<String> {
        let mut held = self.session.lock().await;
        if held.is_none()
            && let Ok(mut c) = Client::connect(&self.root).await
            && let Ok(answer) = c.request(&json!({ "type": "session" })).await
            && let Some(token) = answer["session"].as_str()
        {
            *held = Some((c, token.to_string()));
        }
        held.as_ref().map(|(_, t)| t.clone())
    }

    fn tools() -> Vec<Tool> {
        crate::engineer::tools()
            .iter()
            .map(|spec| {
                let schema = spec.input.as_object().cloned().unwrap_or_default();
                let annotations = match spec.effect {
                    Some(Effect::Read) => ToolAnnotations::new().read_only(true).destructive(false).open_world(false),
                    Some(Effect::External) => {
                        ToolAnnotations::new().read_only(false).destructive(false).open_world(true)
                    }
                    _ => ToolAnnotations::new().read_only(false).destructive(true).open_world(false),
                };
                let asks = match spec.effect {
                    Some(Effect::Read) => " Answers at once.",
                    None => " A write route asks the person first.",
                    _ => " Asks the person first; the call waits for the answer.",
                };
                let mut tool = Tool::new(spec.name, format!("{}{asks}", spec.description), Arc::new(schema));
                tool.annotations = Some(annotations);
                tool
            })
            .collect()
    }
}

impl ServerHandler for EngineerTools {
    fn get_info(&self) -> ServerConfig {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("autoapp-engineer", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "You are the engineer of the person's Autoapp apps. Read an app's workspace (source_list, source_read, source_search), change it (source_edit, source_write, source_delete), build a candidate (candidate_build), explain it, and try it in a preview on a copy of the data (candidate_preview, preview_call, preview_stop). Every change, build and preview is approved by the person first, unless they turned on their standing approval. For work of more than one step, write a plan first (plan_open, plan_task, plan_submit) and ask the person to start it (plan_start): while its run lasts, your edits, builds and previews of that app run without asking; mark tasks with plan_task_done and end it with plan_finish. You cannot activate a release: when a candidate is ready, tell the person, who activates it in the panel.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(EngineerTools::tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let client =
            context.peer.peer_info().map(|i| i.client_info.name.clone()).unwrap_or_else(|| "an MCP client".to_string());
        // Progress lines become notifications, in order, on a task of their own.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let forward = context.meta.get_progress_token().map(|token| {
            let peer = context.peer.clone();
            tokio::spawn(async move {
                let mut n = 0.0;
                while let Some(message) = rx.recv().await {
                    n += 1.0;
                    let note = ProgressNotificationParam::new(token.clone(), n).with_message(message);
                    if peer.notify_progress(note).await.is_err() {
                        break;
                    }
                }
            })
        });
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let mut answer = Err(anyhow::anyhow!("not sent"));
        // Twice at most: a session the launcher no longer knows (it restarted) is opened again.
        for _ in 0..2 {
            let session = self.session().await;
            let mut conn = match Client::connect(&self.root).await {
                Ok(c) => c,
                Err(e) => {
                    return Ok(tool_error(format!("{e:#}, and keep the panel open to approve changes")));
                }
            };
            let call = json!({
                "type": "engineer", "tool": request.name, "client": client,
                "arguments": arguments, "session": session,
            });
            // Cancelled by the client (or the client went away): the
            // connection closes, and the launcher drops the tool with its
            // question (a change not made yet is never made).
            answer = tokio::select! {
                answer = conn.request_with_progress(&call, |p| {
                    let _ = tx.send(p);
                }) => answer,
                () = context.ct.cancelled() => return Ok(tool_error(CANCELLED.to_string())),
            };
            let over = answer.as_ref().is_ok_and(|a| {
                a["ok"] == false
                    && a["error"]["message"].as_str().is_some_and(|m| m.contains("engineer session is over"))
            });
            if !over {
                break;
            }
            *self.session.lock().await = None;
        }
        drop(tx);
        if let Some(f) = forward {
            let _ = f.await;
        }
        Ok(tool_answer(answer, |out| match out.get("message").and_then(Value::as_str) {
            Some(m) if out.as_object().is_some_and(|o| o.len() <= 3) => m.to_string(),
            _ => serde_json::to_string_pretty(out).unwrap_or_default(),
        }))
    }
}

/// Serves the engineer's tools on stdin/stdout until the client goes away.
pub async fn serve_engineer(root: Root) -> anyhow::Result<()> {
    let running = EngineerTools { root, session: Arc::default() }
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| anyhow::anyhow!("the MCP session did not start: {e}"))?;
    running.waiting().await.map_err(|e| anyhow::anyhow!("the MCP session ended with an error: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn external_routes_are_not_tools_and_names_are_safe() {
        let m = crate::manifest::parse(
            r#"
[app]
id = "news"
name = "News"
version = "0.1.0"
[[route]]
name = "headlines.list"
effect = "read"
summary = "list"
[[route]]
name = "headlines.refresh"
effect = "external"
summary = "fetch"
[[route]]
name = "headlines.hide"
effect = "write"
summary = "hide"
[[route]]
name = "headlines_hide"
effect = "write"
summary = "hide again"
[capabilities]
network = ["https://example.com"]
"#,
            "t",
        )
        .unwrap();
        let (tools, routes) = tools_of(&m);
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(names, ["headlines_list", "headlines_hide", "headlines_hide_2"]);
        assert_eq!(routes["headlines_hide_2"], "headlines_hide");
        assert!(!routes.values().any(|r| r == "headlines.refresh"));
        let read = tools[0].annotations.as_ref().unwrap();
        assert_eq!((read.read_only_hint, read.destructive_hint), (Some(true), Some(false)));
        let write = tools[1].annotations.as_ref().unwrap();
        assert_eq!((write.read_only_hint, write.destructive_hint), (Some(false), Some(true)));
    }
}
