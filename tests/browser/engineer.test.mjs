// `autoapp mcp --engineer` driven by an MCP client we did not write (the
// official TypeScript SDK) as the agent, with the person answering in the
// panel in headless Chromium: one change from edit to activation.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { mkdtempSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startLauncher, control, browser, bin, autoapp } from "./harness.mjs";

let root, launcher, chrome, panel, engineer;

const LIST_ARM = `"entries.list" => json!({ "entries": entries(input["limit"].as_i64().unwrap_or(20))? }),`;
const EDITED_ARM = `"entries.list" => json!({ "entries": entries(input["limit"].as_i64().unwrap_or(20))?, "edited": "by the engineer" }), // <img src=x onerror=alert(1)>`;
const SLOW = { timeout: 600000, resetTimeoutOnProgress: true };

// Every client made, closed after the tests however they end: one left
// open (a failed assertion before its close) would keep this file running.
const clients = [];

async function mcp(...args) {
  const transport = new StdioClientTransport({ command: bin, args: ["--root", root, "mcp", ...args], stderr: "pipe" });
  const client = new Client({ name: "sdk-engineer", version: "1.0.0" });
  await client.connect(transport);
  clients.push(client);
  return client;
}

/// Calls a tool while the person answers the card in the panel with `button`.
async function answered(name, args, button, check) {
  const progress = [];
  const pending = engineer.callTool({ name, arguments: args }, undefined, { ...SLOW, onprogress: (p) => progress.push(p.message) });
  const card = panel.locator(".question").first();
  await card.waitFor();
  assert.match(await card.textContent(), new RegExp(`${args.app}: ${name}.*sdk-engineer on channel ai`));
  if (check) await check(card);
  await card.locator(`button.${button}`).click();
  const result = await pending;
  await card.waitFor({ state: "detached" });
  return { result, progress };
}

before(async () => {
  root = mkdtempSync(join(tmpdir(), "autoapp-engineer-"));
  writeFileSync(join(root, "config.toml"), `opener = "none"\napproval_window_secs = 300\n`);
  autoapp(root, "create", "web");
  const built = JSON.parse(autoapp(root, "build", "web", "--json"));
  autoapp(root, "activate", "web", built.release);
  launcher = await startLauncher(root);
  chrome = await browser();
  const answer = await (await control(root)).request({ type: "panel" });
  panel = await (await chrome.newContext()).newPage();
  await panel.goto(answer.url);
  await panel.locator('section[data-app="web"]').waitFor();
  engineer = await mcp("--engineer");
});

after(async () => {
  for (const c of clients) await c.close().catch(() => {});
  await chrome?.close();
  await launcher?.stop();
});

test("the tools are the design's table; none activates, grants, removes or sets the standing approval", async () => {
  const { tools } = await engineer.listTools();
  const names = tools.map((t) => t.name);
  assert.deepEqual(names.slice().sort(), ["apps_create", "apps_list", "candidate_build", "candidate_cycle", "candidate_explain",
    "candidate_preview", "logs_read", "plan_finish", "plan_open", "plan_read", "plan_start", "plan_submit", "plan_task",
    "plan_task_done", "preview_call", "preview_stop", "runs_read", "source_delete", "source_edit", "source_list",
    "source_read", "source_search", "source_write"]);
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  assert.equal(byName.source_read.annotations.readOnlyHint, true);
  assert.equal(byName.source_edit.annotations.destructiveHint, true);
  assert.equal(byName.apps_create.annotations.openWorldHint, true);
  assert.deepEqual(byName.apps_create.inputSchema.required, ["app"]);
  const r = await engineer.callTool({ name: "release_activate", arguments: { app: "web" } });
  assert.equal(r.isError, true);
  assert.match(r.content[0].text, /is not a tool of the engineer/);
});

test("one change from edit to activation, with the person answering in the panel", async () => {
  const read = await engineer.callTool({ name: "source_read", arguments: { app: "web", path: "src/lib.rs" } });
  assert.ok(read.structuredContent.text.includes(LIST_ARM));

  // The edit's card shows the change as a diff, drawn as text.
  const edit = await answered("source_edit", { app: "web", path: "src/lib.rs", old: LIST_ARM, new: EDITED_ARM }, "approve", async (card) => {
    const diff = await card.locator("pre.change").textContent();
    assert.match(diff, /^--- a\/src\/lib\.rs$/m);
    assert.ok(diff.includes(`-            ${LIST_ARM}`) && diff.includes(`+            ${EDITED_ARM}`), diff);
    assert.ok((await card.locator("pre.change").innerHTML()).includes("&lt;img"), "the diff is text, never markup");
    assert.equal(await card.locator("img").count(), 0);
    assert.equal(await card.locator("button.standing").count(), 1, "the third button is offered for an edit");
  });
  assert.ok(!edit.result.isError, JSON.stringify(edit.result));

  // A change that breaks the build: the compiler's messages are the answer.
  await answered("source_edit", { app: "web", path: "src/lib.rs", old: `"by the engineer"`, new: `by_the_engineer` }, "approve");
  const broken = await answered("candidate_build", { app: "web" }, "approve");
  assert.equal(broken.result.isError, true);
  assert.match(broken.result.content[0].text, /the build failed; nothing changed/);
  assert.match(broken.result.content[0].text, /src\/lib\.rs:\d+/);
  assert.ok(broken.progress.length > 0, "progress notifications came while it built");

  await answered("source_edit", { app: "web", path: "src/lib.rs", old: `by_the_engineer`, new: `"by the engineer"` }, "approve");
  const built = await answered("candidate_build", { app: "web" }, "approve");
  assert.ok(!built.result.isError, built.result.content[0].text);
  const candidate = built.result.structuredContent.release;
  assert.ok(built.progress.some((m) => /confined/.test(m)), built.progress.join("\n"));

  // "Allow, and stop asking": the preview is approved and the standing approval is on.
  await answered("candidate_preview", { app: "web" }, "standing");
  assert.equal(JSON.parse(autoapp(root, "standing", "status", "--json")).standing, true);
  const added = await engineer.callTool({ name: "preview_call", arguments: { app: "web", route: "entries.add", input: { text: "tried in the preview" } } });
  assert.ok(!added.isError, "a write in the preview, answered by the standing approval, with no card");
  const tried = await engineer.callTool({ name: "preview_call", arguments: { app: "web", route: "entries.list" } });
  assert.equal(tried.structuredContent.output.edited, "by the engineer");
  assert.equal(tried.structuredContent.output.entries.length, 1);
  const live = JSON.parse(autoapp(root, "call", "web", "entries.list"));
  assert.equal(live.edited, undefined);
  assert.equal(live.entries.length, 0, "the active app's data is untouched");
  const stopped = await engineer.callTool({ name: "preview_stop", arguments: { app: "web" } });
  assert.ok(!stopped.isError);

  // Creating an app still asks, standing approval or not; the person declines.
  const declined = await answered("apps_create", { app: "scratchpad" }, "deny", async (card) => {
    assert.equal(await card.locator("button.standing").count(), 0, "the standing approval never covers apps_create");
  });
  assert.equal(declined.result.isError, true);
  assert.equal(declined.result.content[0].text, "the person declined this call");
  assert.ok(!existsSync(join(root, "apps", "scratchpad")));

  // The person activates the candidate in the panel; the agent's route tools follow.
  const user = await mcp("web");
  const row = panel.locator(`section[data-app="web"] .candidate[data-release="${candidate}"]`);
  await panel.reload();
  await row.waitFor();
  panel.once("dialog", (d) => d.accept());
  await row.locator("button.activate-btn").click();
  for (let i = 0; ; i++) {
    const r = await user.callTool({ name: "entries_list", arguments: {} });
    if (JSON.parse(r.content[0].text).edited === "by the engineer") break;
    assert.ok(i < 100, "the route tools reflect the new release");
    await new Promise((res) => setTimeout(res, 100));
  }
  await user.close();

  // The record says who answered each.
  const rows = JSON.parse(autoapp(root, "runs", "web", "--json", "--limit", "200"));
  const by = (route) => rows.filter((r) => r.route === route).map((r) => r.answered_by);
  assert.ok(by("source_edit").length === 3 && by("source_edit").every((a) => a === "person"), JSON.stringify(by("source_edit")));
  assert.deepEqual(by("candidate_preview"), ["person"]);
  assert.deepEqual(by("preview_stop"), ["standing approval"]);
  assert.ok(rows.some((r) => r.route === "standing-on" && r.caller === "panel"));

  // The panel's switch turns it off again.
  await panel.reload();
  const sw = panel.locator("input.standing-switch");
  assert.equal(await sw.isChecked(), true);
  await sw.uncheck();
  for (let i = 0; existsSync(join(root, "standing.json")); i++) {
    assert.ok(i < 100, "off removes standing.json");
    await new Promise((res) => setTimeout(res, 100));
  }
});
