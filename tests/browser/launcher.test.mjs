// The launcher in real headless Chromium: launch tokens, the fence, the
// pinned renderer, approvals in the panel and the app's tab, and the CSP.
// Screenshots go to target/screenshots/.
import { test, before, after } from "node:test";
import { mkdtempSync, readFileSync, writeFileSync, mkdirSync, copyFileSync } from "node:fs";
import { tmpdir } from "node:os";
import assert from "node:assert/strict";
import http from "node:http";
import { join } from "node:path";
import { makeRoot, startLauncher, control, browser, shots, autoapp, repo } from "./harness.mjs";

let root, launcher, chrome, shared;

before(async () => {
  root = makeRoot("approval_window_secs = 6\n");
  launcher = await startLauncher(root);
  chrome = await browser();
  // One more panel address, asked over the control connection as `autoapp open` does.
  const answer = await (await control(root)).request({ type: "panel" });
  assert.equal(answer.ok, true, JSON.stringify(answer));
  shared = await (await chrome.newContext()).newPage();
  await shared.goto(answer.url);
  await shared.locator('section[data-app="notes"]').waitFor();
});

after(async () => {
  await chrome?.close();
  await launcher?.stop();
});

/// A fresh tab of `what` opened from the panel's Open button.
async function openFromPanel(panelPage, app) {
  const next = launcher.next(app);
  await panelPage.locator(`section[data-app="${app}"] button.open`).click();
  const { url } = await next;
  const page = await panelPage.context().newPage();
  await page.goto(url);
  return page;
}

/// The panel (one session, shared by the tests), reloaded.
async function panel() {
  await shared.reload();
  await shared.locator('section[data-app="notes"]').waitFor();
  return shared;
}

function raw(port, path, headers) {
  return new Promise((resolve) => {
    const req = http.request({ host: "127.0.0.1", port, path, method: "GET", headers }, (res) => {
      let body = "";
      res.on("data", (c) => { body += c; });
      res.on("end", () => resolve({ status: res.statusCode, body }));
    });
    req.end();
  });
}

test("the panel opens through a launch token, and the token does not work twice", async () => {
  const ctx = await chrome.newContext();
  const page = await ctx.newPage();
  const res = await page.goto(launcher.panel);
  assert.equal(res.status(), 200);
  assert.equal(new URL(page.url()).search, "", "redirected to a clean address");
  await page.locator('section[data-app="notes"]').waitFor();
  await page.screenshot({ path: join(shots, "panel.png"), fullPage: true });
  const again = await (await chrome.newContext()).newPage();
  const second = await again.goto(launcher.panel);
  assert.equal(second.status(), 403);
  assert.match(await again.textContent("body"), /not open to this request/);
});

test("a same-site request and a foreign Host are refused with the same sentence", async () => {
  const page = await panel();
  const app = await openFromPanel(page, "notes");
  const port = new URL(app.url()).port;
  const cookies = await app.context().cookies(app.url());
  const cookie = cookies.map((c) => `${c.name}=${c.value}`).join("; ");
  const ok = await raw(port, "/api/info", { Host: `127.0.0.1:${port}`, Cookie: cookie, "Sec-Fetch-Site": "same-origin" });
  assert.equal(ok.status, 200, ok.body);
  const sameSite = await raw(port, "/api/info", { Host: `127.0.0.1:${port}`, Cookie: cookie, "Sec-Fetch-Site": "same-site" });
  const foreign = await raw(port, "/api/info", { Host: `attacker.example:${port}`, Cookie: cookie });
  const noSession = await raw(port, "/api/info", { Host: `127.0.0.1:${port}` });
  for (const r of [sameSite, foreign, noSession]) assert.equal(r.status, 403);
  assert.equal(sameSite.body, foreign.body);
  assert.equal(foreign.body, noSession.body);
  // Another port of this host (the panel) reaching the app is same-site, and refused.
  const status = await page.evaluate(async (u) => {
    try { return (await fetch(u, { credentials: "include", mode: "no-cors" })).status; } catch (e) { return "blocked"; }
  }, `http://127.0.0.1:${port}/api/info`);
  assert.notEqual(status, 200);
});

test("an app's view renders, and a form submits a write route whose result the page shows", async () => {
  const page = await panel();
  const app = await openFromPanel(page, "notes");
  await app.locator("h1", { hasText: "Notes" }).waitFor();
  await app.locator('form[data-route="notes.add"] input[name="title"]').fill("Bought in the browser");
  await app.locator('form[data-route="notes.add"] textarea[name="body"]').fill("<b>not bold</b>");
  await app.locator('form[data-route="notes.add"] button[type="submit"]').click();
  await app.locator("a", { hasText: "Bought in the browser" }).waitFor();
  assert.match(await app.textContent(".status"), /notes\.add/);
  await app.locator("a", { hasText: "Bought in the browser" }).click();
  await app.locator("p", { hasText: "<b>not bold</b>" }).waitFor();
  assert.equal(await app.locator("b").count(), 0, "text stays text");
  await app.screenshot({ path: join(shots, "notes.png"), fullPage: true });
});

test("a write on channel mcp waits in the strip and the tab's card; Approve runs it once, Deny refuses it", async () => {
  const page = await panel();
  const app = await openFromPanel(page, "notes");
  await app.locator("h1", { hasText: "Notes" }).waitFor();

  const agent = await control(root);
  const approved = agent.request({ type: "invoke", app: "notes", route: "notes.add", input: { title: "from the agent" }, client: "browser test agent" });
  await page.locator(".question").waitFor();
  await app.locator(".question").waitFor();
  assert.match(await page.textContent(".question"), /notes: notes\.add/);
  assert.match(await page.textContent(".question"), /from the agent/);
  assert.match(await page.textContent(".question"), /browser test agent on channel mcp/);
  assert.match(await page.title(), /^\(1\) /, "the title counts waiting questions");
  await page.screenshot({ path: join(shots, "approvals-strip.png"), fullPage: true });
  await app.screenshot({ path: join(shots, "approval-card.png"), fullPage: true });
  await page.locator(".question button.approve").click();
  const result = await approved;
  assert.equal(result.ok, true, JSON.stringify(result));
  await page.locator(".question").waitFor({ state: "detached" });
  const listed = await (await control(root)).request({ type: "invoke", app: "notes", route: "notes.list", input: {}, client: "check" });
  assert.equal(listed.output.notes.filter((n) => n.title === "from the agent").length, 1, "it ran exactly once");

  const denied = (await control(root)).request({ type: "invoke", app: "notes", route: "notes.add", input: { title: "refused" }, client: "agent" });
  await app.locator(".question button.deny").click();
  const refusal = await denied;
  assert.equal(refusal.ok, false);
  assert.equal(refusal.error.message, "the person declined this call");
});

test("an unanswered question expires and says it was not answered", async () => {
  const page = await panel();
  const asked = (await control(root)).request({ type: "invoke", app: "notes", route: "notes.add", input: { title: "late" }, client: "agent" });
  await page.locator(".question").waitFor();
  const r = await asked;
  assert.equal(r.ok, false);
  assert.equal(r.error.message, "not answered within 1 minute; nobody declined it");
  await page.locator(".question").waitFor({ state: "detached" });
});

test("a view spec carrying <script> shows as text and no script runs", async () => {
  const page = await panel();
  const app = await openFromPanel(page, "hostile");
  let dialogs = 0;
  app.on("dialog", (d) => { dialogs++; d.dismiss(); });
  await app.locator("p", { hasText: "<script>alert(1)</script>" }).waitFor();
  assert.equal(await app.locator("script").count(), 1, "only the pinned renderer");
  const blocked = await app.evaluate(async () => {
    const violations = [];
    document.addEventListener("securitypolicyviolation", (e) => violations.push(e.violatedDirective));
    const s = document.createElement("script");
    s.textContent = "window.pwned = true";
    document.body.append(s);
    await new Promise((r) => setTimeout(r, 200));
    return { pwned: window.pwned === true, violations };
  });
  assert.equal(blocked.pwned, false, "an injected inline script did not run");
  assert.ok(blocked.violations.some((v) => v.startsWith("script-src")), JSON.stringify(blocked));
  assert.equal(dialogs, 0);
  await app.screenshot({ path: join(shots, "hostile-text.png"), fullPage: true });
});

test("an app's workflow shows in the panel, and Approve approves it for the active release only", async () => {
  const page = await panel();
  const row = page.locator('section[data-app="news"] .workflow[data-workflow="refresh"]');
  await row.waitFor();
  assert.match(await row.textContent(), /every 15m, route headlines\.refresh \(external\).*not approved: each run asks you/);
  await row.locator("button.workflow-approve").click();
  await page.locator('section[data-app="news"] .workflow[data-workflow="refresh"] button.workflow-revoke').waitFor();
  assert.match(await page.locator('section[data-app="news"] .workflow[data-workflow="refresh"]').textContent(), /approved for this release/);
  await page.screenshot({ path: join(shots, "panel-workflows.png"), fullPage: true });
  const status = JSON.parse(autoapp(root, "workflows", "news", "--json"));
  assert.equal(status[0].approved, true);
  await page.locator('section[data-app="news"] .workflow[data-workflow="refresh"] button.workflow-revoke').click();
  await page.locator('section[data-app="news"] .workflow[data-workflow="refresh"] button.workflow-approve').waitFor();
  assert.equal(JSON.parse(autoapp(root, "workflows", "news", "--json"))[0].approved, false);
});

test("an app tab's mark leads back to the panel; Remove says what moves and what stays; a preview that is not running cannot be opened", async () => {
  const page = await panel();
  const app = await openFromPanel(page, "notes");
  await app.locator("h1", { hasText: "Notes" }).waitFor();
  // The panel rate limit allows one address per 2 s; the shared panel may just have had one.
  await new Promise((r) => setTimeout(r, 2100));
  const next = launcher.next("the Autoapp panel");
  await app.locator("nav.mark button.to-panel").click();
  const { url } = await next;
  assert.match(url, /\/launch\?token=/);
  // Removal says what will move and what stays, beside its confirm field.
  const removal = await page.locator('section[data-app="notes"] p.removal').textContent();
  assert.match(removal, /Remove moves notes's data \(its store and its record\) and its 1 release to .*trash; nothing is deleted\. Its workspace stays where it is: .*guests\/notes\./);
  // The panel API refuses a tab of a preview nobody started.
  const answer = await page.evaluate(async () => {
    const r = await fetch("/api/open", { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ app: "notes", preview: "0".repeat(64) }) });
    return { status: r.status, body: await r.json() };
  });
  assert.equal(answer.status, 409, JSON.stringify(answer));
  assert.match(answer.body.error.message, /notes has no running preview of 000000000000/);
});

test("activating a candidate in the panel opens the app's tab", async () => {
  // A second app made of the notes component, built but not active.
  const ws = mkdtempSync(join(tmpdir(), "autoapp-ws-"));
  writeFileSync(join(ws, "autoapp.toml"), readFileSync(join(repo, "guests", "notes", "autoapp.toml"), "utf8").replace('id = "notes"', 'id = "jotter"'));
  mkdirSync(join(ws, "migrations"));
  copyFileSync(join(repo, "guests", "notes", "migrations", "0001_init.sql"), join(ws, "migrations", "0001_init.sql"));
  autoapp(root, "create", "jotter", "--at", ws);
  const built = JSON.parse(autoapp(root, "build", "jotter", "--component", join(repo, "target", "guests", "wasm32-wasip2", "release", "notes.wasm"), "--json"));
  const page = await panel();
  await page.reload();
  const candidate = page.locator(`section[data-app="jotter"] .candidate[data-release="${built.release}"]`);
  await candidate.waitFor();
  const next = launcher.next("jotter");
  page.once("dialog", (d) => d.accept());
  await candidate.locator("button.activate-btn").click();
  const { url } = await next;
  const tab = await page.context().newPage();
  await tab.goto(url);
  await tab.locator("h1", { hasText: "Notes" }).waitFor();
});

test("a question shows amber under a minute, counts in the app tab's title, and notifies only where notifications were allowed", async () => {
  // An app tab whose page may notify (the person allowed it), and the panel, which may not.
  const allowed = await chrome.newContext();
  await allowed.grantPermissions(["notifications"]);
  const record = () => {
    window.__made = [];
    window.__asked = 0;
    const Real = window.Notification;
    class Stub { constructor(title, opts) { window.__made.push({ title, body: opts && opts.body }); } }
    Stub.permission = Real ? Real.permission : "default";
    Stub.requestPermission = async () => { window.__asked += 1; return Stub.permission; };
    window.Notification = Stub;
  };
  await allowed.addInitScript(record);
  const page = await panel();
  const next = launcher.next("notes");
  await page.locator('section[data-app="notes"] button.open').click();
  const { url } = await next;
  const app = await allowed.newPage();
  await app.goto(url);
  await app.locator("h1", { hasText: "Notes" }).waitFor();
  await page.context().addInitScript(record);
  await page.reload();
  await page.locator('section[data-app="notes"]').waitFor();

  const asked = (await control(root)).request({ type: "invoke", app: "notes", route: "notes.add", input: { title: "notify me" }, client: "agent" });
  await app.locator(".question .left.amber").waitFor();
  await page.locator(".question .left.amber").waitFor();
  assert.match(await app.title(), /^\(1\) /, "the app tab's title counts waiting questions");
  const made = await app.evaluate(() => window.__made);
  assert.equal(made.length, 1, JSON.stringify(made));
  assert.equal(made[0].title, "notes: notes.add waits for you");
  assert.deepEqual(await page.evaluate(() => window.__made), [], "no notification where none was allowed");
  assert.equal(await page.evaluate(() => window.__asked) + await app.evaluate(() => window.__asked), 0, "never asks for the permission");
  await app.screenshot({ path: join(shots, "approval-amber.png"), fullPage: true });
  await app.locator(".question button.deny").click();
  assert.equal((await asked).ok, false);
  await app.locator(".question").waitFor({ state: "detached" });
  assert.doesNotMatch(await app.title(), /^\(/);
});
