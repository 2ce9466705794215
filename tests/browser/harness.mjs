// What the browser tests share: a root with the example apps installed, the
// real launcher (`autoapp open`, opener "none" so addresses are printed), a
// client of its control connection, and headless Chromium.
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync, mkdirSync, existsSync, chmodSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import net from "node:net";
import { chromium } from "playwright-core";

export const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const bin = process.env.AUTOAPP_BIN || join(repo, "target", "debug", "autoapp");
export const shots = join(repo, "target", "screenshots");
mkdirSync(shots, { recursive: true });

const env = { ...process.env, CARGO_TARGET_DIR: join(repo, "target", "guests"), AUTOAPP_LOG: "warn" };

export function autoapp(root, ...args) {
  const r = spawnSync(bin, ["--root", root, ...args], { env, encoding: "utf8" });
  if (r.status !== 0) throw new Error(`autoapp ${args.join(" ")} failed (${r.status}): ${r.stderr}`);
  return r.stdout;
}

/// A stand-in `zenity` (the system's folder and file window) that answers
/// `answer` and writes the arguments it was given to `<dir>/args`: start the
/// launcher with `env` to have the panel use it.
export function standInWindow(answer) {
  const dir = mkdtempSync(join(tmpdir(), "standin-"));
  writeFileSync(join(dir, "zenity"), `#!/bin/sh\nprintf '%s\\n' "$@" > '${dir}/args'\nprintf '%s\\n' '${answer}'\n`);
  chmodSync(join(dir, "zenity"), 0o755);
  return { args: () => readFileSync(join(dir, "args"), "utf8"), env: { PATH: `${dir}:${process.env.PATH}` } };
}

/// The notes component, built from guests/notes now: other tests build
/// changed copies of notes into the same target folder.
export function notesComponent() {
  const r = spawnSync("cargo", ["build", "--release", "--target", "wasm32-wasip2"], {
    cwd: join(repo, "guests", "notes"), env: { ...process.env, CARGO_TARGET_DIR: join(repo, "target", "guests") }, encoding: "utf8" });
  if (r.status !== 0) throw new Error(`guests/notes does not build: ${r.stderr}`);
  return join(repo, "target", "guests", "wasm32-wasip2", "release", "notes.wasm");
}

/// A root with notes, hostile and news active, tabs printed rather than opened.
export function makeRoot(config = "") {
  const root = mkdtempSync(join(tmpdir(), "autoapp-browser-"));
  // The example guests read the checkout's WIT folder, which a person's
  // build reads only when the configuration names it.
  writeFileSync(join(root, "config.toml"), `opener = "none"\nbuild_read = [${JSON.stringify(join(repo, "wit"))}]\n${config}`);
  for (const app of ["notes", "hostile", "news"]) {
    autoapp(root, "create", app, "--at", join(repo, "guests", app));
    const built = JSON.parse(autoapp(root, "build", app, "--json"));
    // Each capability named, as a person does after reading explain:
    // --all-asked never grants a marked folder (hostile's /tmp holds this root).
    if (app !== "notes") {
      const asked = JSON.parse(autoapp(root, "explain", app, "--json")).capabilities;
      if (asked.length) autoapp(root, "grant", app, ...asked);
    }
    autoapp(root, "activate", app, built.release);
  }
  return root;
}

/// The launcher, with the addresses it prints (`extraEnv` added to its environment).
export async function startLauncher(root, extraEnv = {}) {
  const child = spawn(bin, ["--root", root, "open"], { env: { ...env, ...extraEnv }, stdio: ["ignore", "pipe", "pipe"] });
  const lines = [];
  const waiters = [];
  let buffered = "";
  child.stdout.on("data", (chunk) => {
    buffered += chunk.toString();
    let i;
    while ((i = buffered.indexOf("\n")) >= 0) {
      const line = buffered.slice(0, i);
      buffered = buffered.slice(i + 1);
      lines.push(line);
      for (const w of [...waiters]) w();
    }
  });
  let stderr = "";
  child.stderr.on("data", (c) => { stderr += c.toString(); });
  // The next printed address for `what` (e.g. "the Autoapp panel", "notes").
  const address = (what, after = 0) => new Promise((resolve, reject) => {
    const look = () => {
      for (let k = after; k < lines.length; k++) {
        const m = lines[k].match(/^Open (.+?): (http:\/\/127\.0\.0\.1:\d+\/launch\?token=[0-9a-f]+)$/);
        if (m && m[1] === what) { waiters.splice(waiters.indexOf(look), 1); clearTimeout(timer); resolve({ url: m[2], index: k }); return; }
      }
    };
    const timer = setTimeout(() => reject(new Error(`no address for ${what}; stderr: ${stderr}`)), 20000);
    waiters.push(look);
    look();
  });
  const panel = await address("the Autoapp panel");
  return {
    child, lines, panel: panel.url,
    next: (what) => address(what, lines.length),
    async stop() {
      child.kill("SIGTERM");
      await new Promise((r) => child.once("exit", r));
    },
  };
}

/// A client of the launcher's control connection (what `autoapp mcp` uses).
export async function control(root) {
  const info = JSON.parse(readFileSync(join(root, "launcher.json"), "utf8"));
  const socket = net.connect(info.port, "127.0.0.1");
  await new Promise((r, j) => { socket.once("connect", r); socket.once("error", j); });
  let buffered = "";
  const pending = [];
  socket.on("data", (c) => {
    buffered += c.toString();
    let i;
    while ((i = buffered.indexOf("\n")) >= 0) {
      const line = buffered.slice(0, i);
      buffered = buffered.slice(i + 1);
      pending.shift()(JSON.parse(line));
    }
  });
  const request = (obj) => new Promise((resolve) => { pending.push(resolve); socket.write(JSON.stringify(obj) + "\n"); });
  const auth = await request({ type: "auth", secret: info.secret });
  if (!auth.ok) throw new Error("the launcher refused the secret");
  return { request, close: () => socket.end() };
}

export async function browser() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
  });
}

export function chromiumAvailable() {
  return existsSync(process.env.CHROMIUM || "/usr/bin/chromium");
}
