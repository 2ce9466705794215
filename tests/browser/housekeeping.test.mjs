// The panel's housekeeping: Backup to a folder chosen with the operating
// system's folder window (a stand-in `zenity` on PATH) and the time of the
// last backup, the newest log lines, Disk space, and Prune (the list, then
// the id typed again removes exactly it).
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync, readFileSync, readdirSync, mkdirSync, copyFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startLauncher, browser, autoapp, repo, shots, standInWindow, notesComponent } from "./harness.mjs";

let chrome, launcher;

after(async () => {
  await chrome?.close();
  if (launcher && launcher.child.exitCode === null) await launcher.stop();
});

/// Notes made of the notes component, activated three times (so two old
/// snapshots are there to prune), with one note written.
function notesRoot() {
  const component = notesComponent();
  const root = mkdtempSync(join(tmpdir(), "autoapp-browser-"));
  writeFileSync(join(root, "config.toml"), 'opener = "none"\n');
  const ws = mkdtempSync(join(tmpdir(), "autoapp-ws-"));
  const manifest = readFileSync(join(repo, "guests", "notes", "autoapp.toml"), "utf8");
  writeFileSync(join(ws, "autoapp.toml"), manifest);
  mkdirSync(join(ws, "migrations"));
  copyFileSync(join(repo, "guests", "notes", "migrations", "0001_init.sql"), join(ws, "migrations", "0001_init.sql"));
  autoapp(root, "create", "notes", "--at", ws);
  for (const v of ["0.1.0", "0.1.1", "0.1.2"]) {
    writeFileSync(join(ws, "autoapp.toml"), manifest.replace('version = "0.1.0"', `version = "${v}"`));
    const built = JSON.parse(autoapp(root, "build", "notes", "--component", component, "--json"));
    autoapp(root, "activate", "notes", built.release);
  }
  autoapp(root, "call", "notes", "notes.add", JSON.stringify({ title: "kept safe" }));
  return { root, ws };
}

test("Backup, the log, Disk space and Prune in the panel", async () => {
  const { root, ws } = notesRoot();
  const shelf = mkdtempSync(join(tmpdir(), "backups-"));
  const window = standInWindow(shelf);
  launcher = await startLauncher(root, window.env);
  chrome = await browser();
  const page = await (await chrome.newContext()).newPage();
  await page.goto(launcher.panel);
  const app = page.locator('section[data-app="notes"]');
  await app.locator("p.last-backup", { hasText: "Never backed up." }).waitFor();
  // The log: the line the call wrote, drawn as text.
  assert.match(await app.locator("pre.log").textContent(), /info notes\.add: added note 1/);

  // Backup: Choose… asks the folder window, Back up writes the file there.
  await app.locator("button.backup-choose").click();
  await page.waitForFunction(() => document.querySelector('section[data-app="notes"] input.backup-to').value !== "");
  assert.equal(await app.locator("input.backup-to").inputValue(), shelf);
  assert.ok(window.args().includes("--title=Autoapp: Where should the backup of notes go?\n"));
  await app.locator("button.backup-btn").click();
  await page.locator("p.status", { hasText: "backed up notes to" }).waitFor();
  const files = readdirSync(shelf);
  assert.equal(files.length, 1, files.join(", "));
  assert.match(files[0], /^notes-\d{8}T\d{6}Z\.autoapp-backup$/);
  await app.locator("p.last-backup", { hasText: files[0] }).waitFor();
  await page.screenshot({ path: join(shots, "housekeeping-backup.png"), fullPage: true });

  // The file restores beside the app, while the launcher serves.
  const said = autoapp(root, "restore", join(shelf, files[0]), "--as", "notes-copy");
  assert.match(said, /restored notes-copy from a backup of notes/);
  assert.equal(JSON.parse(autoapp(root, "call", "notes-copy", "notes.list"))["notes"][0]["title"], "kept safe");

  // Disk space, measured when asked.
  await page.locator("button.space-btn").click();
  const row = page.locator('table.space-table tr[data-app="notes"]');
  await row.waitFor();
  assert.match(await row.textContent(), /kB|MB/);
  await page.locator('table.space-table tr[data-app="notes-copy"]').waitFor();

  // Prune: the list first (two old snapshots; the last activation's kept).
  const before = readdirSync(join(root, "apps", "notes")).filter((n) => n.startsWith("data-prev-"));
  assert.equal(before.length, 3);
  await app.locator("button.prune-btn").click();
  const list = app.locator(".prune-list");
  await list.waitFor();
  const items = await list.locator("li.prune-item").allTextContents();
  assert.equal(items.length, 2, items.join("\n"));
  assert.ok(items.every((i) => i.startsWith("remove data-prev-")), items.join("\n"));
  assert.match(await list.textContent(), /a rollback of the last activation puts it back/);
  await page.screenshot({ path: join(shots, "housekeeping-prune.png"), fullPage: true });
  // The id typed wrong: refused, nothing removed.
  await list.locator("input.prune-confirm").fill("note");
  await list.locator("button.prune-go").click();
  await page.locator("p.status.error", { hasText: "type the app's id, notes, to prune it" }).waitFor();
  assert.equal(readdirSync(join(root, "apps", "notes")).filter((n) => n.startsWith("data-prev-")).length, 3);
  await list.locator("input.prune-confirm").fill("notes");
  await list.locator("button.prune-go").click();
  await page.locator("p.status", { hasText: "removed 2 snapshots of notes" }).waitFor();
  const left = readdirSync(join(root, "apps", "notes")).filter((n) => n.startsWith("data-prev-"));
  assert.deepEqual(left, [before.sort()[2]]);
  const record = JSON.parse(autoapp(root, "runs", "notes", "--json", "--limit", "5"));
  const prune = record.find((r) => r.route === "prune");
  assert.ok(prune && prune.channel === "user" && /removed 2 snapshots/.test(prune.reason), JSON.stringify(record));

  // The workspace's build output, only with the box ticked.
  mkdirSync(join(ws, "target", "release"), { recursive: true });
  writeFileSync(join(ws, "target", "release", ".cargo-lock"), "");
  writeFileSync(join(ws, "target", "release", "notes.wasm"), "x".repeat(5000));
  await app.locator("button.prune-btn").click();
  await app.locator(".prune-list", { hasText: "Nothing to remove." }).waitFor();
  await app.locator("input.prune-builds").check();
  await app.locator("button.prune-btn").click();
  const builds = app.locator(".prune-list li.prune-item", { hasText: "the workspace's build output" });
  await builds.waitFor();
  assert.equal(await app.locator(".prune-list li.prune-item").count(), 1);
  assert.ok(await app.locator("input.prune-builds").isChecked(), "the box stays ticked with its list");
  await app.locator(".prune-list input.prune-confirm").fill("notes");
  await app.locator(".prune-list button.prune-go").click();
  await page.locator("p.status", { hasText: "removed 1 workspace build folder of notes" }).waitFor();
  assert.ok(!readdirSync(ws).includes("target"), readdirSync(ws).join(", "));
  // The record's rows before a day, only with a day given (issue 76): the
  // writes since the last activation stay, and the summary counts the rest.
  await app.locator("input.prune-builds").uncheck();
  const tomorrow = new Date(Date.now() + 86400000).toISOString().slice(0, 10);
  await app.locator("input.prune-record").fill(tomorrow);
  await app.locator("button.prune-btn").click();
  const rows = app.locator(".prune-list li.prune-item", { hasText: `the record's rows before ${tomorrow}` });
  await rows.waitFor();
  assert.equal(await app.locator(".prune-list li.prune-item").count(), 1);
  await app.locator(".prune-list input.prune-confirm").fill("notes");
  await app.locator(".prune-list button.prune-go").click();
  await page.locator("p.status", { hasText: "removed 1 record's old rows of notes" }).waitFor();
  const kept = JSON.parse(autoapp(root, "runs", "notes", "--json", "--limit", "1000"));
  // (A read since — a page the launcher rendered — may follow.)
  assert.ok(kept.every((r) => r.effect === "write" || r.effect === "read" || r.route === "prune"), JSON.stringify(kept));
  assert.ok(!kept.some((r) => r.route === "activate"), JSON.stringify(kept));
  assert.match(autoapp(root, "runs", "notes"), /older rows were let go/);
  // And the rollback of the last activation still works.
  await launcher.stop();
  autoapp(root, "rollback", "notes", "--restore", "--yes");
});
