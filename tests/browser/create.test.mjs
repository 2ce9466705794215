// Create in the panel: a name, a folder picked with the operating system's
// folder window (a stand-in `zenity` on PATH), and the new app's tab opening.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startLauncher, browser, standInWindow } from "./harness.mjs";

let chrome, launcher;

after(async () => {
  await chrome?.close();
  if (launcher && launcher.child.exitCode === null) await launcher.stop();
});

test("Create in the panel: Choose… fills the folder from the folder window, Create makes the app and opens its tab", async () => {
  const root = mkdtempSync(join(tmpdir(), "autoapp-browser-"));
  writeFileSync(join(root, "config.toml"), 'opener = "none"\n');
  const chosen = join(mkdtempSync(join(tmpdir(), "places-")), "shelf-ws");
  const window = standInWindow(chosen);
  launcher = await startLauncher(root, window.env);
  chrome = await browser();
  const page = await (await chrome.newContext()).newPage();
  await page.goto(launcher.panel);
  await page.locator("form.create").waitFor();
  await page.locator("input.create-app").fill("shelf");
  await page.locator("button.create-choose").click();
  await page.waitForFunction(() => document.querySelector("input.create-location").value !== "");
  assert.equal(await page.locator("input.create-location").inputValue(), chosen);
  await page.screenshot({ path: join(process.cwd(), "..", "..", "target", "screenshots", "create-panel.png") });
  const args = window.args();
  assert.ok(args.includes("--title=Autoapp: Where should shelf live?\n"), args);

  const tabAddress = launcher.next("shelf");
  await page.locator("button.create-btn").click();
  const { url } = await tabAddress;
  assert.ok(existsSync(join(chosen, "autoapp.toml")), "the starter is in the chosen folder");
  await page.locator('section[data-app="shelf"]').waitFor();
  const tab = await page.context().newPage();
  await tab.goto(url);
  await tab.locator("p.no-release", { hasText: "shelf has no active release yet" }).waitFor();
  await tab.screenshot({ path: join(process.cwd(), "..", "..", "target", "screenshots", "create-new-tab.png") });
});
