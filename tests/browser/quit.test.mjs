// Quit in the panel: the same clean stop as Ctrl+C (its own launcher, since
// it ends it).
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { makeRoot, startLauncher, browser } from "./harness.mjs";

let chrome, launcher;

after(async () => {
  await chrome?.close();
  if (launcher && launcher.child.exitCode === null) await launcher.stop();
});

test("Quit in the panel stops the launcher cleanly and removes launcher.json", async () => {
  const root = makeRoot();
  launcher = await startLauncher(root);
  chrome = await browser();
  const page = await (await chrome.newContext()).newPage();
  await page.goto(launcher.panel);
  await page.locator('section[data-app="notes"]').waitFor();
  assert.ok(existsSync(join(root, "launcher.json")));
  page.once("dialog", (d) => d.accept());
  const exited = new Promise((r) => launcher.child.once("exit", (code) => r(code)));
  await page.locator("button.quit").click();
  assert.equal(await exited, 0, "a clean exit");
  assert.ok(!existsSync(join(root, "launcher.json")), "launcher.json is removed");
});
