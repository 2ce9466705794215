// The panel's Install (issue 30): a package chosen with the operating
// system's file window (a stand-in `zenity` on PATH), checked, placed as a
// candidate whose explain card is shown; the app's row names its publisher;
// activation stays the person's click. A file that is no package is a
// sentence, and nothing is placed.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync, mkdirSync, copyFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { startLauncher, browser, bin, repo, shots, standInWindow, notesComponent } from "./harness.mjs";

let chrome, launcher;

after(async () => {
  await chrome?.close();
  if (launcher && launcher.child.exitCode === null) await launcher.stop();
});

function run(root, xdg, ...args) {
  const r = spawnSync(bin, ["--root", root, ...args], {
    env: { ...process.env, XDG_CONFIG_HOME: xdg, CARGO_TARGET_DIR: join(repo, "target", "guests"), AUTOAPP_LOG: "warn" }, encoding: "utf8" });
  if (r.status !== 0) throw new Error(`autoapp ${args.join(" ")} failed (${r.status}): ${r.stderr}`);
  return r.stdout;
}

/// A signed package of notes, made on a publisher's root of its own: [file, fingerprint].
function signedNotes() {
  const component = notesComponent();
  const root = mkdtempSync(join(tmpdir(), "autoapp-publisher-"));
  const xdg = mkdtempSync(join(tmpdir(), "autoapp-xdg-"));
  const ws = mkdtempSync(join(tmpdir(), "autoapp-ws-"));
  copyFileSync(join(repo, "guests", "notes", "autoapp.toml"), join(ws, "autoapp.toml"));
  mkdirSync(join(ws, "migrations"));
  copyFileSync(join(repo, "guests", "notes", "migrations", "0001_init.sql"), join(ws, "migrations", "0001_init.sql"));
  run(root, xdg, "create", "notes", "--at", ws);
  const built = JSON.parse(run(root, xdg, "build", "notes", "--component", component, "--json"));
  run(root, xdg, "activate", "notes", built.release);
  const key = JSON.parse(run(root, xdg, "key", "new", "--name", "Ada's Apps", "--json"));
  const shelf = mkdtempSync(join(tmpdir(), "packages-"));
  const packed = JSON.parse(run(root, xdg, "pack", "notes", "--sign", "--to", shelf, "--json"));
  return [packed.file, key.fingerprint, built.release];
}

test("Install in the panel: a chosen package becomes a candidate, its publisher named", async () => {
  const [file, fingerprint, release] = signedNotes();
  const root = mkdtempSync(join(tmpdir(), "autoapp-browser-"));
  writeFileSync(join(root, "config.toml"), 'opener = "none"\n');
  const window = standInWindow(file);
  launcher = await startLauncher(root, window.env);
  chrome = await browser();
  const page = await (await chrome.newContext()).newPage();
  await page.goto(launcher.panel);

  // A file that is no package: a sentence, nothing placed.
  const garbage = join(mkdtempSync(join(tmpdir(), "garbage-")), "notes.wasm");
  writeFileSync(garbage, "not a component at all");
  await page.locator("input.install-source").fill(garbage);
  await page.locator("button.install-btn").click();
  await page.locator("p.status.error", { hasText: "not a WebAssembly component" }).waitFor();
  assert.equal(existsSync(join(root, "apps", "notes")), false, "nothing is placed");

  // Choose… asks the file window; Install checks and places a candidate.
  await page.locator("button.install-choose").click();
  // (The garbage's path ends in .wasm too: wait for the chosen file itself.)
  await page.waitForFunction((chosen) => document.querySelector("input.install-source").value === chosen, file);
  assert.equal(await page.locator("input.install-source").inputValue(), file);
  const args = window.args().split("\n");
  assert.ok(args.includes("--file-selection") && !args.includes("--directory"), args.join(" "));
  await page.locator("button.install-btn").click();
  const said = page.locator("p.install-said");
  await said.waitFor();
  assert.match(await said.textContent(), new RegExp(`installed notes as a new app: candidate ${release.slice(0, 12)}, published by fingerprint ${fingerprint} "Ada's Apps": the first time`));
  // What it asks, before anything runs.
  const card = page.locator("div.install-result div.explain");
  await card.waitFor();
  assert.match(await card.textContent(), /notes\.add/);
  // The app's row: a candidate, nothing active, its source named.
  const app = page.locator('section[data-app="notes"]');
  await app.locator("p.source", { hasText: `Installed from a package, published by fingerprint ${fingerprint} "Ada's Apps".` }).waitFor();
  assert.match(await app.textContent(), /No active release/);
  await app.locator(`div.candidate[data-release="${release}"]`).waitFor();
  await page.screenshot({ path: join(shots, "install.png"), fullPage: true });
});
