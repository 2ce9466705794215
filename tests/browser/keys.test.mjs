// Keys in the panel (issue 52): an app made from the starter template and
// the docs alone (docs/manifest.md's [[capabilities.secret]], docs/authoring.md's
// Rust call) reaches a key-protected service on 127.0.0.1 with a key the
// person set in the panel's password field; the app never holds it, the page
// never shows it again, and Remove takes it away.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync, readFileSync, readdirSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import http from "node:http";
import { spawnSync, spawn } from "node:child_process";
import { startLauncher, browser, bin, repo } from "./harness.mjs";

let chrome, launcher, service;

after(async () => {
  await chrome?.close();
  if (launcher && launcher.child.exitCode === null) await launcher.stop();
  service?.close();
});

const KEY = "wk_live_3Jq8/Pz+Rt5v";

function everyFile(dir, out = []) {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    const s = statSync(p);
    if (s.isDirectory()) everyFile(p, out);
    else out.push(p);
  }
  return out;
}

test("a key set in the panel reaches its service from an app made from the template; the app and the page never hold it", async () => {
  // The service: answers only `Authorization: Bearer <KEY>`, and echoes the key.
  service = http.createServer((req, res) => {
    const ok = req.headers.authorization === `Bearer ${KEY}`;
    res.writeHead(ok ? 200 : 401, { "content-type": "application/json" });
    res.end(ok ? JSON.stringify({ temp: 21, echo: req.headers.authorization }) : '{"error":"who are you?"}');
  });
  await new Promise((r) => service.listen(0, "127.0.0.1", r));
  const port = service.address().port;
  const origin = `http://127.0.0.1:${port}`;

  const root = mkdtempSync(join(tmpdir(), "autoapp-browser-"));
  const xdg = mkdtempSync(join(tmpdir(), "autoapp-xdg-"));
  writeFileSync(join(root, "config.toml"), 'opener = "none"\nsecrets_kept_in = "file"\n');
  const env = { ...process.env, XDG_CONFIG_HOME: xdg, CARGO_TARGET_DIR: join(repo, "target", "guests"), AUTOAPP_LOG: "warn" };
  const run = (...args) => {
    const r = spawnSync(bin, ["--root", root, ...args], { env, encoding: "utf8" });
    if (r.status !== 0) throw new Error(`autoapp ${args.join(" ")} failed (${r.status}): ${r.stderr}`);
    return r.stdout;
  };
  // A call while the service (in this process) answers: not spawnSync,
  // which would hold this process's event loop.
  const call = (route) => new Promise((resolve, reject) => {
    const child = spawn(bin, ["--root", root, "call", "weather", route], { env });
    let out = "", err = "";
    child.stdout.on("data", (c) => { out += c; });
    child.stderr.on("data", (c) => { err += c; });
    child.on("exit", (code) => code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`autoapp call ${route} failed (${code}): ${err}`)));
  });

  // The starter template, and what the docs say to add.
  const ws = join(mkdtempSync(join(tmpdir(), "autoapp-ws-")), "weather");
  run("create", "weather", "--at", ws);
  writeFileSync(join(ws, "autoapp.toml"), readFileSync(join(ws, "autoapp.toml"), "utf8") + `
[[route]]
name = "weather.now"
effect = "external"
summary = "Today's weather, fetched"

[capabilities]
network = ["${origin}"]

[[capabilities.secret]]
name = "weather"
origin = "${origin}"
header = "Authorization"
format = "Bearer {}"
summary = "Your key for the weather service"
`);
  const lib = readFileSync(join(ws, "src", "lib.rs"), "utf8");
  const arm = `"weather.now" => {
                use wasi::http::outgoing_handler;
                use wasi::http::types::{Fields, OutgoingRequest, Scheme};
                let request = OutgoingRequest::new(Fields::new()); // no Authorization: the host adds it
                request.set_scheme(Some(&Scheme::Http)).unwrap();
                request.set_authority(Some("127.0.0.1:${port}")).unwrap();
                request.set_path_with_query(Some("/v1/now")).unwrap();
                let pending = outgoing_handler::handle(request, None).map_err(|e| AppError::Internal(format!("{e:?}")))?;
                pending.subscribe().block();
                let response = pending.get().unwrap().unwrap().map_err(|e| AppError::Internal(format!("{e:?}")))?;
                let body = response.consume().unwrap();
                let stream = body.stream().unwrap();
                let mut bytes = Vec::new();
                while let Ok(chunk) = stream.blocking_read(65536) {
                    bytes.extend_from_slice(&chunk);
                }
                json!({ "status": response.status(), "body": String::from_utf8_lossy(&bytes) })
            }
            `;
  const at = lib.indexOf('"entries.list" =>');
  assert.ok(at > 0, "the template's first route arm");
  writeFileSync(join(ws, "src", "lib.rs"), lib.slice(0, at) + arm + lib.slice(at));
  const built = JSON.parse(run("build", "weather", "--json"));
  run("grant", "weather", `network:${origin}`);
  run("activate", "weather", built.release);

  launcher = await startLauncher(root, { XDG_CONFIG_HOME: xdg });
  chrome = await browser();
  const page = await (await chrome.newContext()).newPage();
  await page.goto(launcher.panel);
  const row = page.locator('section[data-app="weather"] div.row.key[data-key="weather"]');
  await row.waitFor();
  assert.match(await row.textContent(), new RegExp(`weather: Your key for the weather service — sent to ${origin.replace(/[.]/g, "\\.")}, header Authorization as "Bearer \\{\\}" — not set`));
  // Not set: the request goes without it.
  assert.equal((await call("weather.now")).status, 401);

  await row.locator("input.key-value").fill(KEY);
  await row.locator("button.key-set").click();
  await page.locator("p.status", { hasText: `set weather: sent only to ${origin}` }).waitFor();
  await page.locator('section[data-app="weather"] div.row.key[data-key="weather"]', { hasText: "set on" }).waitFor();
  assert.equal(await page.locator("input.key-value").first().inputValue(), "", "the field is emptied");
  assert.ok(!(await page.content()).includes(KEY), "the page never shows the key");

  // The app reaches the service; what the service echoed reads [secret weather].
  const answer = (await call("weather.now"));
  assert.equal(answer.status, 200, JSON.stringify(answer));
  assert.match(answer.body, /"temp":21/);
  assert.match(answer.body, /Bearer \[secret weather\]/);
  for (const f of everyFile(root)) {
    assert.ok(!readFileSync(f).includes(KEY), `${f} holds the key`);
  }

  // Remove: the requests go without it from the next call on.
  await page.locator('section[data-app="weather"] div.row.key[data-key="weather"] button.key-remove').click();
  await page.locator("p.status", { hasText: "removed the key weather" }).waitFor();
  assert.equal((await call("weather.now")).status, 401);
  const rows = JSON.parse(run("runs", "weather", "--json"));
  assert.ok(rows.some((r) => r.route === "secret set" && r.channel === "user"), JSON.stringify(rows.slice(-5)));
  assert.ok(!JSON.stringify(rows).includes(KEY));
});
