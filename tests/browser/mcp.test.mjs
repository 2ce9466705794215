// `autoapp mcp <app>` driven by a real MCP client we did not write (the
// official TypeScript SDK), with the person answering in the panel in
// headless Chromium.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import { mkdtempSync, writeFileSync, readFileSync, mkdirSync, copyFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { makeRoot, startLauncher, control, browser, bin, autoapp, repo } from "./harness.mjs";

let root, launcher, chrome, panel;

async function mcpClient(app) {
  const transport = new StdioClientTransport({ command: bin, args: ["--root", root, "mcp", app], stderr: "pipe" });
  const client = new Client({ name: "sdk-test-agent", version: "1.0.0" });
  await client.connect(transport);
  clients.push(client);
  return client;
}

// Every client made, closed after the tests however they end: one left
// open (a failed assertion before its close) would keep this file running.
const clients = [];

before(async () => {
  root = makeRoot("approval_window_secs = 30\n");
  launcher = await startLauncher(root);
  chrome = await browser();
  const answer = await (await control(root)).request({ type: "panel" });
  panel = await (await chrome.newContext()).newPage();
  await panel.goto(answer.url);
  await panel.locator('section[data-app="notes"]').waitFor();
});

after(async () => {
  for (const c of clients) await c.close().catch(() => {});
  await chrome?.close();
  await launcher?.stop();
});

test("the tools are the read and write routes, with their schemas and annotations; external routes are absent", async () => {
  const notes = await mcpClient("notes");
  const { tools } = await notes.listTools();
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  assert.deepEqual(Object.keys(byName).sort(), ["notes_add", "notes_delete", "notes_list", "notes_tag"]);
  assert.deepEqual(byName.notes_add.inputSchema.required, ["title"]);
  assert.equal(byName.notes_add.inputSchema.properties.title.type, "string");
  assert.equal(byName.notes_list.annotations.readOnlyHint, true);
  assert.equal(byName.notes_add.annotations.readOnlyHint, false);
  assert.equal(byName.notes_add.annotations.destructiveHint, true);
  await notes.close();

  const hostile = await mcpClient("hostile");
  const names = (await hostile.listTools()).tools.map((t) => t.name);
  for (const external of ["http_get", "spawn_run", "files_read", "files_write", "spin_external", "socket_connect-external"]) {
    assert.ok(!names.includes(external), `${external} is external and not offered`);
  }
  assert.ok(names.includes("count") && names.includes("mark"));
  const r = await hostile.callTool({ name: "http_get", arguments: { url: "https://example.com/" } });
  assert.equal(r.isError, true, "an external route cannot be called by name either");
  await hostile.close();
});

test("a read answers at once; a write waits for the person; Approve runs it, Deny is a tool error", async () => {
  const agent = await mcpClient("notes");
  const read = await agent.callTool({ name: "notes_list", arguments: {} });
  assert.ok(!read.isError);
  assert.ok(Array.isArray(JSON.parse(read.content[0].text).notes));

  const pending = agent.callTool({ name: "notes_add", arguments: { title: "written by an agent" } });
  await panel.locator(".question").waitFor();
  assert.match(await panel.textContent(".question"), /sdk-test-agent on channel mcp/);
  await panel.locator(".question button.approve").click();
  const done = await pending;
  assert.ok(!done.isError, JSON.stringify(done));
  assert.ok(JSON.parse(done.content[0].text).id > 0);

  const refused = agent.callTool({ name: "notes_add", arguments: { title: "not this one" } });
  await panel.locator(".question").waitFor();
  await panel.locator(".question button.deny").click();
  const denial = await refused;
  assert.equal(denial.isError, true);
  assert.equal(denial.content[0].text, "the person declined this call");

  const bad = await agent.callTool({ name: "notes_add", arguments: { title: "" } });
  assert.equal(bad.isError, true, "input outside the schema is a tool error, not a protocol failure");
  assert.match(bad.content[0].text, /does not fit route `notes.add`/);
  await agent.close();
});

test("when the person activates another release the tools change and the client is told; an external route never becomes a tool", async () => {
  // An app made of the notes component, so that its manifest can change.
  const ws = mkdtempSync(join(tmpdir(), "autoapp-ws-"));
  const manifest = readFileSync(join(repo, "guests", "notes", "autoapp.toml"), "utf8").replace('id = "notes"', 'id = "jotter"');
  writeFileSync(join(ws, "autoapp.toml"), manifest);
  mkdirSync(join(ws, "migrations"));
  copyFileSync(join(repo, "guests", "notes", "migrations", "0001_init.sql"), join(ws, "migrations", "0001_init.sql"));
  const wasm = join(repo, "target", "guests", "wasm32-wasip2", "release", "notes.wasm");
  autoapp(root, "create", "jotter", "--at", ws);
  const v1 = JSON.parse(autoapp(root, "build", "jotter", "--component", wasm, "--json")).release;
  autoapp(root, "activate", "jotter", v1);

  const agent = await mcpClient("jotter");
  assert.ok(agent.getServerCapabilities().tools.listChanged, "the server says its tools can change");
  let told = 0;
  agent.setNotificationHandler(ToolListChangedNotificationSchema, () => { told += 1; });
  assert.ok(!(await agent.listTools()).tools.some((t) => t.name === "notes_pin"));

  // v2: a new write route, and an external one that must not become a tool.
  writeFileSync(join(ws, "autoapp.toml"), manifest.replace('version = "0.1.0"', 'version = "0.2.0"') + `
[[route]]
name = "notes.pin"
effect = "write"
summary = "Pin a note"

[[route]]
name = "notes.share"
effect = "external"
summary = "Share a note"

[capabilities]
network = ["https://example.com"]
`);
  const v2 = JSON.parse(autoapp(root, "build", "jotter", "--component", wasm, "--json")).release;
  autoapp(root, "grant", "jotter", "--all-asked");
  autoapp(root, "activate", "jotter", v2);
  for (let i = 0; told === 0; i++) {
    assert.ok(i < 100, "notifications/tools/list_changed arrives after the activation");
    await new Promise((r) => setTimeout(r, 100));
  }
  const names = (await agent.listTools()).tools.map((t) => t.name);
  assert.ok(names.includes("notes_pin"), names.join(", "));
  assert.ok(!names.includes("notes_share"), "an external route is never a tool");
  const r = await agent.callTool({ name: "notes_share", arguments: {} });
  assert.equal(r.isError, true);
  await agent.close();
});

test("with no page open a write is refused with the reason, and a read still runs", async () => {
  await panel.close();
  // The launcher notices a closed page within about a second (its events
  // stream writes a comment every second); wait until it says none is open.
  const c = await control(root);
  for (let i = 0; (await c.request({ type: "status" })).pagesOpen !== 0; i++) {
    assert.ok(i < 100, "the closed panel stops counting as an open page");
    await new Promise((r) => setTimeout(r, 100));
  }
  c.close();
  const agent = await mcpClient("notes");
  const write = await agent.callTool({ name: "notes_add", arguments: { title: "nobody home" } });
  assert.equal(write.isError, true);
  assert.match(write.content[0].text, /nobody could be asked/);
  const read = await agent.callTool({ name: "notes_list", arguments: {} });
  assert.ok(!read.isError);
  await agent.close();
});

test("with no launcher running the server says how to start one", async () => {
  await launcher.stop();
  launcher = null;
  const agent = await mcpClient("notes");
  const r = await agent.callTool({ name: "notes_list", arguments: {} });
  assert.equal(r.isError, true);
  assert.match(r.content[0].text, /no launcher is running .* start one with `autoapp open`/);
  await agent.close();
});
