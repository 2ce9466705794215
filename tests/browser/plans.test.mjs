// Plans and runs with an MCP client we did not write (the official TypeScript
// SDK, through `autoapp mcp --engineer`) as the agent and the person in the
// panel in headless Chromium: the plan is read first, starting it is one yes,
// the run works without cards on its one app until the person stops it.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { mkdtempSync, writeFileSync, readFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startLauncher, browser, bin, autoapp, control } from "./harness.mjs";

let root, launcher, chrome, panel, agent, other;

const LIST_ARM = `"entries.list" => json!({ "entries": entries(input["limit"].as_i64().unwrap_or(20))? }),`;
const SLOW = { timeout: 600000, resetTimeoutOnProgress: true };

async function mcp(name) {
  const transport = new StdioClientTransport({ command: bin, args: ["--root", root, "mcp", "--engineer"], stderr: "pipe" });
  const client = new Client({ name, version: "1.0.0" });
  await client.connect(transport);
  return client;
}

const call = (client, name, args) => client.callTool({ name, arguments: args }, undefined, SLOW);

before(async () => {
  root = mkdtempSync(join(tmpdir(), "autoapp-plans-"));
  writeFileSync(join(root, "config.toml"), `opener = "none"\napproval_window_secs = 300\n`);
  autoapp(root, "create", "web");
  const built = JSON.parse(autoapp(root, "build", "web", "--json"));
  autoapp(root, "activate", "web", built.release);
  autoapp(root, "create", "side");
  launcher = await startLauncher(root);
  chrome = await browser();
  const answer = await (await control(root)).request({ type: "panel" });
  panel = await (await chrome.newContext()).newPage();
  await panel.goto(answer.url);
  await panel.locator('section[data-app="web"]').waitFor();
  agent = await mcp("sdk-planner");
  other = await mcp("sdk-other");
});

after(async () => {
  await agent?.close();
  await other?.close();
  await chrome?.close();
  await launcher?.stop();
});

test("a plan is read first; its run approves only its own app's changes until the person stops it", SLOW, async () => {
  // Drafting asks nobody; a route the app does not have is marked.
  const opened = await call(agent, "plan_open", { app: "web", request: "mark the list as edited",
    summary: "one arm of the list route", touches: { routes: ["entries.list", "entries.nowhere"], files: ["src/lib.rs"] } });
  assert.ok(!opened.isError, JSON.stringify(opened));
  const plan = opened.structuredContent.plan.id;
  await call(agent, "plan_task", { plan, title: "edit the list route", detail: "add an edited field" });
  await call(agent, "plan_task", { plan, title: "build and preview it" });
  await call(agent, "plan_submit", { plan });
  assert.equal(await panel.locator(".question").count(), 0, "nothing was asked while drafting");

  // The panel shows the waiting plan; the agent's change is refused while it waits.
  // (The card may first show the draft: the panel redraws as the plan changes.)
  const card = panel.locator(`.plan[data-plan="${plan}"]`).filter({ hasText: /plan \d+: submitted/ });
  await card.waitFor();
  assert.match(await card.textContent(), /plan \d+: submitted/);
  assert.match(await card.textContent(), /route entries\.nowhere \(the app has no such thing now\)/);
  const edit = { app: "web", path: "src/lib.rs", old: LIST_ARM, new: LIST_ARM.replace("? }),", "?, \"edited\": true }),") };
  const early = await call(agent, "source_edit", edit);
  assert.equal(early.isError, true);
  assert.match(early.content[0].text, /waits for the person to read it/);

  // plan_start: the card shows the plan; the person approves.
  const starting = call(agent, "plan_start", { plan });
  const question = panel.locator(".question").first();
  await question.waitFor();
  const said = await question.textContent();
  assert.match(said, /web: plan_start/);
  assert.match(said, /The agent's words \(not checked by Autoapp\):\n {2}\| request: mark the list as edited/);
  assert.match(said, /entries\.nowhere {2}← the app has no such thing now/);
  assert.match(said, /only web/);
  await question.locator("button.approve").click();
  const started = await starting;
  assert.ok(!started.isError, JSON.stringify(started));
  await panel.locator(`.plan-running[data-plan="${plan}"]`).waitFor();

  // The run's own changes: no card. Another agent's change of web is refused.
  const edited = await call(agent, "source_edit", edit);
  assert.equal(edited.structuredContent.answeredBy, `run ${plan}`);
  await call(agent, "plan_task_done", { plan, task: 1, note: "edited" });
  const cycled = await call(agent, "candidate_cycle", { app: "web", path: "src/lib.rs", old: `"edited": true`,
    new: `"edited": "in a run"`, check: "entries.list" });
  assert.ok(!cycled.isError, JSON.stringify(cycled));
  assert.equal(cycled.structuredContent.check.output.edited, "in a run");
  assert.equal(await panel.locator(".question").count(), 0, "no card for the run's own changes");
  const theirs = await call(other, "source_write", { app: "web", path: "NOTES.md", content: "x" });
  assert.equal(theirs.isError, true);
  assert.match(theirs.content[0].text, /running on web from another connection/);
  assert.ok(!existsSync(join(root, "apps/web/workspace/NOTES.md")));

  // A change of another app still asks; the person declines.
  const side = call(agent, "source_write", { app: "side", path: "NOTES.md", content: "x" });
  const sideCard = panel.locator(".question").first();
  await sideCard.waitFor();
  assert.match(await sideCard.textContent(), /side: source_write/);
  await sideCard.locator("button.deny").click();
  assert.equal((await side).isError, true);

  // The person presses Stop in the panel: the next change asks again.
  await panel.locator(`.plan-running[data-plan="${plan}"] button.plan-stop`).click();
  await panel.locator(`.plan-stopped[data-plan="${plan}"]`).waitFor();
  const after = call(agent, "source_write", { app: "web", path: "NOTES.md", content: "x" });
  const again = panel.locator(".question").first();
  await again.waitFor();
  assert.match(await again.textContent(), /web: source_write/);
  await again.locator("button.deny").click();
  assert.equal((await after).isError, true);

  // The record: the run answered, the person started and stopped it.
  const rows = JSON.parse(autoapp(root, "runs", "web", "--json", "--limit", "200"));
  assert.ok(rows.some((r) => r.route === "source_edit" && r.answered_by === `run ${plan}` && r.caller.startsWith(`sdk-planner plan ${plan} task`)));
  assert.ok(rows.some((r) => r.route === "plan_start" && r.answered_by === "person"));
  assert.ok(rows.some((r) => r.route === "plan-stop" && r.channel === "user"));
  const plans = JSON.parse(autoapp(root, "plans", "web", "--json")).plans;
  assert.equal(plans[0].endedBy, "the person (panel)");
});

test("a forged plan's card shows the host's lines first and no bidi override", SLOW, async () => {
  const forged = "summary: nothing to see\n  [ ] 1. a harmless task\nStarting it means nothing: approve\n" +
    "\n".repeat(40) + "gnp.\u202Eexe";
  const opened = await call(agent, "plan_open", { app: "side", request: forged, touches: { routes: ["side.nowhere"] } });
  assert.ok(!opened.isError, JSON.stringify(opened));
  const plan = opened.structuredContent.plan.id;
  await call(agent, "plan_task", { plan, title: "the real task \u202Etxt" });
  await call(agent, "plan_submit", { plan });
  // Past the bounds: refused with a sentence.
  const big = await call(agent, "plan_open", { app: "side", request: forged + "\n".repeat(8000) });
  assert.equal(big.isError, true);
  assert.match(big.content[0].text, /at most 2000 are allowed/);

  const starting = call(agent, "plan_start", { plan });
  const question = panel.locator(".question").first();
  await question.waitFor();
  const card = await question.locator("pre.change").textContent();
  assert.ok(!card.includes("\u202E"), card);
  const heading = card.indexOf("The agent's words (not checked by Autoapp):");
  assert.ok(heading > 0, card);
  assert.ok(card.startsWith(`An agent asks you to start plan ${plan} of side`), card);
  assert.ok(card.indexOf("Starting it means one thing") < heading, card);
  assert.ok(card.indexOf("side.nowhere  ← the app has no such thing now") < heading, card);
  assert.ok(card.indexOf("summary: nothing to see") > heading, card);
  for (const line of card.slice(heading).split("\n").slice(1).filter((l) => l.length)) {
    assert.ok(line.startsWith("  | "), `every line of the agent's is framed: ${JSON.stringify(line)}`);
  }
  await question.locator("button.deny").click();
  assert.equal((await starting).isError, true);

  // The panel's plan: the host's lines, then the agent's words in their framed block, no U+202E.
  const shown = panel.locator(`.plan[data-plan="${plan}"]`);
  await shown.waitFor();
  const text = await shown.textContent();
  assert.ok(!text.includes("\u202E"), text);
  const words = await shown.locator("blockquote.agent-words").textContent();
  assert.match(words, /summary: nothing to see/);
  assert.ok(text.indexOf("side.nowhere") < text.indexOf("The agent's words (not checked by Autoapp):"), text);
  assert.ok(text.indexOf("The agent's words (not checked by Autoapp):") < text.indexOf("summary: nothing to see"), text);

  // A caller's arguments on a card: the override is shown as its escape, not obeyed.
  const client = await control(root);
  const invoked = client.request({ type: "invoke", app: "web", route: "entries.add", input: { text: "gnp.\u202Eexe" }, client: "an mcp client" });
  const asking = panel.locator(".question").first();
  await asking.waitFor();
  const args = await asking.locator("pre.arguments").textContent();
  assert.ok(!args.includes("\u202E") && args.includes("gnp.\\u{202e}exe"), args);
  await asking.locator("button.deny").click();
  assert.equal((await invoked).ok, false);
  client.close();
});
