// The panel: every app, its releases, previews, grants, record, and the
// approvals strip. Everything here is the person acting (channel user).
// Addresses of apps are never shown: Open asks the host to open the tab.
"use strict";

const root = document.getElementById("root");
const strip = document.getElementById("strip");
const status = el("p", { class: "status", role: "status" });
let waiting = 0;
let state = { apps: [], opener: true };

function setTitle() { document.title = (waiting ? `(${waiting}) ` : "") + "Autoapp"; }
function say(text, isError) { status.textContent = visible(text); status.classList.toggle("error", !!isError); }

async function act(label, path, body) {
  say(`${label}…`);
  try {
    const out = await api("POST", path, body);
    say(out && out.message ? out.message : `${label}: done`);
    await refresh();
    return out;
  } catch (e) { say(e.message, true); return null; }
}

function short(id) { return id ? id.slice(0, 12) : "none"; }

// A capability shown whole: what granting it gives (a folder's path and
// access, a program's path and argument pattern), marked when it reaches the
// person's keys or Autoapp's own files.
function askedText(a) {
  return `${a.name}: ${a.whole}${a.marked ? ` — MARKED: ${a.marked}; grant it only if you mean it` : ""}`;
}

function askedLine(a) {
  return el("li", { class: a.marked ? "status error marked" : "", text: askedText(a) });
}

function explainBox(e) {
  const box = el("div", { class: "card explain" },
    el("h4", { text: `What ${short(e.release)} asks for` }),
    el("table", {}, el("tbody", {}, ...e.routes.map((r) => el("tr", {},
      el("td", { text: r.name }), el("td", { text: r.effect }), el("td", { text: r.summary }),
      el("td", { class: "muted", text: r.can_use.length ? `can use ${r.can_use.join(", ")}` : "" }))))),
    e.asked.length ? el("ul", { class: "asked" }, ...e.asked.map(askedLine)) : el("p", { text: "Capabilities: none (it reaches nothing outside its own store)" }));
  if (e.not_granted.length) box.append(el("p", { class: "status error", text: `Not granted yet: ${e.not_granted.join(", ")}` }));
  if (e.workflows.length) {
    box.append(el("p", { text: "Workflows (run on a schedule by the launcher):" }), el("ul", {}, ...e.workflows.map((w) =>
      el("li", { text: `${w.name}: ${w.schedule}, route ${w.route} (${w.effect})${w.needs_approval ? " — asks at each run until you approve it" : ""}` }))));
  }
  if (e.changes) {
    const c = e.changes;
    const lines = [["routes added", c.routes_added], ["routes removed", c.routes_removed], ["effects changed", c.effects_changed],
      ["capabilities added", c.capabilities_added], ["capabilities removed", c.capabilities_removed], ["migrations added", c.migrations_added],
      ["workflows added", c.workflows_added], ["workflows removed", c.workflows_removed], ["workflows changed", c.workflows_changed]]
      .filter(([, v]) => v.length).map(([k, v]) => el("li", { text: `${k}: ${v.join(", ")}` }));
    box.append(el("p", { text: "Compared with the active release:" }), lines.length ? el("ul", {}, ...lines) : el("p", { class: "muted", text: "no change to routes, effects, capabilities, migrations or workflows" }));
  }
  return box;
}

// An engineer's plans of one app: drafts, the one waiting for the person
// (Reject), the running one with its tasks' progress (Stop), finished ones.
// What the host knows comes first (state, counts, the marks of what the app
// lacks, what ended it); every word of the agent's follows in a framed block
// under a heading saying so, drawn as text.
function plansBox(a) {
  const box = el("div", { class: "plans" }, el("h3", { text: "Plans" }));
  for (const p of a.plans) {
    const done = p.tasks.filter((t) => t.done).length;
    const head = el("div", { class: "row" },
      el("strong", { text: `plan ${p.id}: ${p.state}` }),
      el("span", { class: "muted", text: `by an agent calling itself "${p.client}", ${p.createdAt}; ${done} of ${p.tasks.length} tasks done` }));
    if (p.state === "running") {
      head.append(el("span", { class: "muted", text: `until ${p.endsBy} at the latest` }),
        el("button", { class: "danger plan-stop", text: "Stop", onclick: () => act(`stopping plan ${p.id}`, "/api/plan", { app: a.id, action: "stop", plan: p.id }) }));
    }
    if (p.state === "submitted" || p.state === "draft") {
      head.append(el("button", { class: "plan-reject", text: "Reject", onclick: () => act(`rejecting plan ${p.id}`, "/api/plan", { app: a.id, action: "reject", plan: p.id }) }));
    }
    const card = el("div", { class: `card plan plan-${p.state}`, "data-plan": String(p.id) }, head);
    if (p.touches.length) {
      card.append(el("p", { class: "touches", text: "It says it touches: " }, ...p.touches.map((t) =>
        el("span", { class: t.exists ? "touch" : "touch missing", text: `${t.kind} ${t.name}${t.exists ? "" : " (the app has no such thing now)"}; ` }))));
    }
    if (p.endedBy) card.append(el("p", { class: "muted", text: `Ended by ${p.endedBy} at ${p.endedAt}` }));
    const words = el("blockquote", { class: "agent-words" },
      el("p", { text: `Request: ${p.request}` }),
      p.summary ? el("p", { text: `Summary: ${p.summary}` }) : "",
      el("ol", {}, ...p.tasks.map((t) => el("li", { class: t.done ? "done" : "", text: `${t.done ? "✓ " : ""}${t.title}${t.detail ? ` — ${t.detail}` : ""}${t.note ? ` (done: ${t.note})` : ""}` }))));
    if (p.outcome) words.append(el("p", { text: `Outcome: ${p.outcome}` }));
    card.append(el("p", { class: "muted agent-words-head", text: "The agent's words (not checked by Autoapp):" }), words);
    box.append(card);
  }
  return box;
}

// Where an app comes from: its workspace, or a package and its publisher.
function sourceText(src) {
  if (!src || src.kind !== "package") return "From its workspace.";
  // The key's fingerprint first, the name the publisher chose after it, quoted.
  const who = src.publisher ? `published by fingerprint ${src.publisher.fingerprint} "${src.publisher.name}"` : "not signed: anyone could have made it";
  return `Installed from a package, ${who}.`;
}

// Where the app's calls run: its workers, processes of its own (text only).
function workersText(workers) {
  if (!workers.length) return "Its calls run in a confined process of its own, started at its next call.";
  return "Its calls run in confined processes of its own: " + workers.map((w) => {
    const what = w.side === "outer" ? "external routes" : "reads, writes, pages";
    const memory = w.memory_kib == null ? "" : `, ${(w.memory_kib / 1024).toFixed(1)} MiB`;
    const serves = w.serves_port == null ? "" : `, serves its page`;
    return `${what} — pid ${w.pid}, ${w.state}${memory}, ${w.confined}${serves}`;
  }).join("; ") + ".";
}

function appCard(a) {
  const card = el("section", { class: "section app", "data-app": a.id },
    el("h2", { text: `${a.name} ` }, el("span", { class: "muted", text: `(${a.id})` })),
    el("p", { text: a.active ? `Active: ${a.active.version} — ${short(a.active.id)}` : "No active release" }),
    el("p", { class: "muted source", text: sourceText(a.source) }),
    el("p", { class: "muted workers", text: workersText(a.workers || []) }));
  const openRow = el("div", { class: "row" });
  if (a.active) openRow.append(el("button", { class: "primary open", text: "Open", onclick: () => act(`opening ${a.id}`, "/api/open", { app: a.id }) }));
  card.append(openRow);

  if (a.candidates.length) {
    const list = el("div", { class: "candidates" }, el("h3", { text: "Candidates" }));
    for (const c of a.candidates) {
      const detail = el("div");
      list.append(el("div", { class: "card candidate", "data-release": c.id },
        el("div", { class: "row" },
          el("strong", { text: `${c.version} — ${short(c.id)}` }), el("span", { class: "muted", text: `built ${c.created_at}` }),
          el("button", { class: "explain-btn", text: "What it asks", onclick: async () => {
            try { detail.replaceChildren(explainBox(await api("GET", `/api/explain/${a.id}/${c.id}`))); } catch (e) { say(e.message, true); }
          } }),
          el("button", { class: "preview-btn", text: "Preview", onclick: () => act(`previewing ${short(c.id)}`, "/api/preview", { app: a.id, release: c.id }) }),
          el("button", { class: "primary activate-btn", text: "Activate", onclick: async () => {
            try {
              const e = await api("GET", `/api/explain/${a.id}/${c.id}`);
              const asks = e.asked.length ? `It asks for ${e.asked.map(askedText).join("; ")}.` : "It asks for no capability.";
              if (!confirm(`Activate ${a.id} ${e.version} (${short(c.id)})? ${asks}`)) return;
              act(`activating ${short(c.id)}`, "/api/activate", { app: a.id, release: c.id });
            } catch (err) { say(err.message, true); }
          } })),
        detail));
    }
    card.append(list);
  }

  if (a.previews.length) {
    card.append(el("h3", { text: "Previews" }), ...a.previews.map((p) => el("div", { class: "row preview" },
      el("span", { text: `${short(p.release)} since ${p.started_at} (on a copy of the data; external routes refused)` }),
      el("button", { text: "Open", onclick: () => act("opening the preview", "/api/open", { app: a.id, preview: p.release }) }),
      el("button", { text: "Stop", onclick: () => act("stopping the preview", "/api/preview-stop", { app: a.id, release: p.release }) }))));
  }

  if (a.secrets && a.secrets.length) {
    // The keys the app's requests carry: set here, never shown again.
    card.append(el("h3", { text: "Keys" }), ...a.secrets.map((k) => {
      const state = k.state === "set" ? `set on ${k.set_at}`
        : k.state === "rebound" ? `MARKED: would send your key \`${k.name}\` to ${k.binding} — it was set for ${k.set_for}; set it again to allow that`
        : k.state === "not declared" ? `set for ${k.set_for}, not declared by this release`
        : "not set: its requests go without it";
      const input = el("input", { type: "password", autocomplete: "off", class: "key-value", "aria-label": `the key ${k.name}`, placeholder: "paste the key" });
      const row = el("div", { class: "row key", "data-key": k.name },
        el("span", { class: k.state === "rebound" ? "status error marked" : "", text: `${k.name}${k.summary ? `: ${k.summary}` : ""}${k.binding ? ` — sent to ${k.binding}` : ""} — ${state}` }));
      if (k.binding) {
        row.append(input, el("button", { class: "key-set", text: k.state === "not set" ? "Set" : "Replace", onclick: () => {
          const value = input.value;
          input.value = "";
          act(`setting the key ${k.name}`, "/api/secret", { app: a.id, name: k.name, value });
        } }));
      }
      if (k.state !== "not set") {
        row.append(el("button", { class: "key-remove", text: "Remove", onclick: () => act(`removing the key ${k.name}`, "/api/secret", { app: a.id, name: k.name, remove: true }) }));
      }
      return row;
    }));
  }

  const grantable = a.asked.filter((cap) => !cap.startsWith("secret:"));
  if (grantable.length) {
    card.append(el("h3", { text: "Grants" }), ...grantable.map((cap) => {
      const granted = !a.not_granted.includes(cap);
      const whole = a.asked_whole.find((w) => w.name === cap);
      const as = granted && a.granted_as[cap] ? ` (${a.granted_as[cap]})` : "";
      const shown = whole ? askedText(whole) : cap;
      return el("div", { class: "row grant" }, el("span", { class: whole && whole.marked ? "status error marked" : "", text: `${shown} — ${granted ? `granted${as}` : "not granted"}` }),
        granted ? el("button", { text: "Revoke", onclick: () => act(`revoking ${cap}`, "/api/revoke", { app: a.id, capabilities: [cap] }) })
                : el("button", { text: "Grant", onclick: () => act(`granting ${cap}`, "/api/grant", { app: a.id, capabilities: [cap] }) }));
    }));
  }

  if (a.workflows.length) {
    card.append(el("h3", { text: "Workflows" }), ...a.workflows.map((w) => {
      const last = w.lastRun ? `last run ${w.lastRun.time}: ${w.lastRun.decision}, ${w.lastRun.outcome}${w.lastRun.reason ? ` (${w.lastRun.reason})` : ""}` : "no run yet";
      const approval = !w.needsApproval ? "runs without approval (a read)" : w.approved ? "approved for this release" : "not approved: each run asks you";
      const row = el("div", { class: "row workflow", "data-workflow": w.name },
        el("span", { text: `${w.name} — ${w.schedule}, route ${w.route} (${w.effect}); next run ${w.nextRun || "never"}; ${last}; ${approval}` }));
      if (w.needsApproval) {
        row.append(w.approved
          ? el("button", { class: "workflow-revoke", text: "Revoke", onclick: () => act(`revoking workflow ${w.name}`, "/api/workflow", { app: a.id, name: w.name, approve: false }) })
          : el("button", { class: "primary workflow-approve", text: "Approve", onclick: () => act(`approving workflow ${w.name}`, "/api/workflow", { app: a.id, name: w.name, approve: true }) }));
      }
      return row;
    }));
  }

  if (a.rollback) {
    const rb = el("div", { class: "row rollback" }, el("h3", { text: "Rollback" }));
    if (!a.rollback.written) {
      rb.append(el("button", { text: `Roll back to ${short(a.rollback.previous)} (nothing written yet: nothing lost)`, onclick: () => act("rolling back", "/api/rollback", { app: a.id, how: "plain" }) }));
    } else {
      rb.append(el("p", { text: `${a.id} has written data since its activation. Choose: a compatible downgrade (an older release that declares it reads the newer schema), a forward repair (build and activate a fix), or a restore that discards the writes since activation.` }),
        ...(a.rollback.downgrades || []).map((r) => el("button", { class: "downgrade-btn", text: `Downgrade to ${short(r)} (keeps the writes: it reads the newer data)`,
          onclick: () => act(`downgrading to ${short(r)}`, "/api/rollback", { app: a.id, how: "downgrade", release: r }) })),
        el("button", { class: "danger", text: "Restore the data from before the activation (discards writes)", onclick: () => {
          if (confirm("Discard every write since the activation? The data is set aside, not deleted.")) act("restoring", "/api/rollback", { app: a.id, how: "restore", yes: true });
        } }));
    }
    card.append(rb);
  }

  if (a.plans.length) card.append(plansBox(a));

  if (a.runs.length) {
    card.append(el("h3", { text: "Record: recent calls and actions" }), el("table", { class: "runs" },
      el("thead", {}, el("tr", {}, ...["time", "channel", "caller", "route or action", "effect", "decision", "answered by", "outcome", "reason"].map((h) => el("th", { text: h })))),
      el("tbody", {}, ...a.runs.map((r) => el("tr", {}, ...[r.time, r.channel, r.caller, r.route, r.effect, r.decision, r.answered_by, r.outcome, r.reason].map((c) => el("td", { text: c }))))))); 
  }

  card.append(keepBox(a));

  const r = a.removal;
  const moves = `Remove moves ${a.id}'s data (its store and its record) and its ${r.releases} release${r.releases === 1 ? "" : "s"} to ${r.trash}; nothing is deleted.`;
  const ws = !r.workspace ? "" : r.workspace_moves ? ` Its workspace (${r.workspace}) is inside the app's folder and moves with it.` : ` Its workspace stays where it is: ${r.workspace}.`;
  card.append(el("p", { class: "muted removal", text: moves + ws }));
  const confirmInput = el("input", { placeholder: `type ${a.id} to remove it`, class: "remove-confirm" });
  card.append(el("div", { class: "row remove" }, confirmInput,
    el("button", { class: "danger", text: "Remove", onclick: () => act(`removing ${a.id}`, "/api/remove", { app: a.id, confirm: confirmInput.value }) })));
  return card;
}

// What the person typed or was shown for one app's backup and prune,
// kept across the redraws events cause.
const backupTo = {};
const pruneShown = {};
let spaceShown = null;

function said(bytes) {
  const units = ["kB", "MB", "GB", "TB"];
  if (bytes < 1000) return `${bytes} bytes`;
  let v = bytes / 1000, u = 0;
  while (v >= 1000 && u < units.length - 1) { v /= 1000; u++; }
  return `${v.toFixed(1)} ${units[u]}`;
}

// An app's housekeeping: Backup (to a folder typed or chosen with the
// operating system's folder window), its last lines of log, and Prune (the
// list first; the id typed again removes exactly it).
function keepBox(a) {
  const box = el("div", { class: "keep" }, el("h3", { text: "Backup, log and space" }));
  const to = el("input", { class: "backup-to", "aria-label": `the folder a backup of ${a.id} goes to`, placeholder: "the folder the backup file goes to", value: backupTo[a.id] || "",
    oninput: (ev) => { backupTo[a.id] = ev.target.value; } });
  const choose = el("button", { class: "backup-choose", type: "button", text: "Choose…", onclick: async () => {
    say("a folder window is open: choose a folder there…");
    try {
      const o = await api("POST", "/api/choose-folder", { title: `Where should the backup of ${a.id} go?`, start: to.value || null });
      if (o.folder) { to.value = backupTo[a.id] = o.folder; say(`chosen: ${o.folder}`); } else say("no folder was chosen");
    } catch (e) { say(e.message, true); }
  } });
  const go = el("button", { class: "primary backup-btn", type: "button", text: "Back up", onclick: () => {
    if (!to.value.trim()) { say("choose the folder the backup goes to first", true); return; }
    act(`backing up ${a.id}`, "/api/backup", { app: a.id, to: to.value });
  } });
  const last = a.last_backup ? `Last backup: ${a.last_backup.taken_at} → ${a.last_backup.file} (${said(a.last_backup.bytes)})` : "Never backed up.";
  box.append(el("div", { class: "row backup" }, to, choose, go), el("p", { class: "muted last-backup", text: last }));

  box.append(el("h4", { text: "Log: the newest lines" }),
    a.log.length ? el("pre", { class: "log", text: a.log.join("\n") }) : el("p", { class: "muted log-empty", text: `${a.id} has written no log lines (\`autoapp logs ${a.id} --follow\` follows them).` }));

  // With the box ticked, the list holds the workspace's build output too
  // (`prune --builds`); the removal asks for the same list again.
  const pruneBuilds = el("input", { type: "checkbox", class: "prune-builds" });
  pruneBuilds.checked = Boolean(pruneShown[a.id] && pruneShown[a.id].builds);
  // With a day, the record's rows before it too (`prune --record-before`).
  const pruneRecord = el("input", { type: "date", class: "prune-record", "aria-label": "the record's rows before this day" });
  pruneRecord.value = (pruneShown[a.id] && pruneShown[a.id].record_before) || "";
  // Or to a size: its oldest rows, as its bounds let them go (`prune --record-to`).
  const pruneRecordTo = el("input", { type: "number", min: "1", class: "prune-record-to", "aria-label": "the record's rows, at most this many MiB" });
  pruneRecordTo.value = (pruneShown[a.id] && pruneShown[a.id].record_to_mib) || "";
  const pruneRow = el("div", { class: "row prune" }, el("button", { class: "prune-btn", type: "button", text: "What can be removed?", onclick: async () => {
    try {
      const builds = pruneBuilds.checked;
      const record_before = pruneRecord.value || undefined;
      const record_to_mib = Number(pruneRecordTo.value) > 0 ? Math.floor(Number(pruneRecordTo.value)) : undefined;
      pruneShown[a.id] = { ...(await api("POST", "/api/prune", { app: a.id, builds, record_before, record_to_mib })), builds, record_before, record_to_mib };
      say(`${pruneShown[a.id].items.length} things of ${a.id} can be removed`);
      refresh();
    } catch (e) { say(e.message, true); }
  } }), el("label", { class: "muted" }, pruneBuilds, " and the workspace's build output (target/), which a build makes again"),
  el("label", { class: "muted" }, " and the record's rows before ", pruneRecord, " (your own actions and answers too)"),
  el("label", { class: "muted" }, " or its oldest rows until they take ", pruneRecordTo, " MiB (their counts stay in `autoapp runs --summary`)"));
  box.append(pruneRow);
  const plan = pruneShown[a.id];
  if (plan) {
    const list = el("div", { class: "card prune-list" },
      el("ul", {}, ...plan.items.map((i) => el("li", { class: "prune-item", text: `remove ${i.what} (${said(i.bytes)})` })),
        ...plan.kept.map((k) => el("li", { class: "muted", text: `keep ${k.kind} ${k.name}: ${k.why}` }))));
    if (plan.items.length) {
      const confirmPrune = el("input", { class: "prune-confirm", placeholder: `type ${a.id} to remove these`, "aria-label": `type ${a.id} to remove these` });
      list.append(el("p", { text: `${plan.items.length} to remove, freeing ${said(plan.bytes)}.` }),
        el("div", { class: "row" }, confirmPrune, el("button", { class: "danger prune-go", type: "button", text: "Remove these", onclick: async () => {
          const out = await act(`pruning ${a.id}`, "/api/prune", { app: a.id, confirm: confirmPrune.value, plan: plan.items, builds: plan.builds, record_before: plan.record_before, record_to_mib: plan.record_to_mib });
          if (out) { delete pruneShown[a.id]; refresh(); }
        } })));
    } else list.append(el("p", { text: "Nothing to remove." }));
    box.append(list);
  }
  return box;
}

// The disk: what each app holds, measured when asked.
function spaceBox() {
  const box = el("div", { class: "card space" }, el("h3", { text: "Disk space" }),
    el("button", { class: "space-btn", type: "button", text: "Measure", onclick: async () => {
      try { spaceShown = await api("GET", "/api/space"); refresh(); } catch (e) { say(e.message, true); }
    } }));
  if (spaceShown) {
    const cols = ["data", "snapshots", "releases", "compiled", "previews", "logs", "workspace", "trash", "other", "total"];
    box.append(el("table", { class: "space-table" },
      el("thead", {}, el("tr", {}, el("th", { text: "app" }), ...cols.map((c) => el("th", { text: c })))),
      el("tbody", {}, ...spaceShown.apps.map((s) => el("tr", { "data-app": s.app }, el("td", { text: s.app }), ...cols.map((c) => el("td", { text: said(s[c]) })))))),
    el("p", { class: "muted", text: `Trash of removed apps: ${said(spaceShown.trash_of_removed_apps)}; compiled code no release uses: ${said(spaceShown.compiled_unused)}; everything: ${said(spaceShown.root_total)}.` }));
  }
  return box;
}

// Create: a name and where its workspace goes, typed or picked with the
// operating system's own folder window (the page never lists folders). Made
// once, so what the person typed survives every refresh.
const createForm = (function () {
  const name = el("input", { class: "create-app", "aria-label": "the new app's id", placeholder: "app id: lowercase letters, digits, -" });
  const location = el("input", { class: "create-location", "aria-label": "where its workspace goes", placeholder: "where its workspace goes (empty: inside Autoapp's folder)" });
  const choose = el("button", { class: "create-choose", type: "button", text: "Choose…", onclick: async () => {
    say("a folder window is open: choose a folder there…");
    try {
      const o = await api("POST", "/api/choose-folder", { title: `Where should ${name.value || "the new app"} live?`, start: location.value || null });
      if (o.folder) { location.value = o.folder; say(`chosen: ${o.folder}`); } else say("no folder was chosen");
    } catch (e) { say(e.message, true); }
  } });
  const create = el("button", { class: "primary create-btn", type: "submit", text: "Create" });
  const form = el("form", { class: "card create" }, el("h3", { text: "Create an app" }),
    el("div", { class: "row" }, name, location, choose, create));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const out = await act(`creating ${name.value}`, "/api/create", { app: name.value, location: location.value || null });
    if (out) { name.value = ""; location.value = ""; }
  });
  return form;
})();

// Install: a package file (typed, or picked with the operating system's own
// file window) or a registry reference. The check's result and what the new
// candidate asks for are shown; activation stays the person's click on the
// candidate. Made once, so what the person typed survives every refresh.
const installForm = (function () {
  const source = el("input", { class: "install-source", "aria-label": "a package file or a registry reference", placeholder: "a package file (/…/notes-1.0.wasm) or registry/repository:tag" });
  const choose = el("button", { class: "install-choose", type: "button", text: "Choose…", onclick: async () => {
    say("a file window is open: choose a package there…");
    try {
      const o = await api("POST", "/api/choose-package", { title: "Which package should Autoapp install?", start: null });
      if (o.file) { source.value = o.file; say(`chosen: ${o.file}`); } else say("no file was chosen");
    } catch (e) { say(e.message, true); }
  } });
  const unsigned = el("input", { type: "checkbox", class: "install-unsigned" });
  const go = el("button", { class: "primary install-btn", type: "submit", text: "Install" });
  const result = el("div", { class: "install-result" });
  const form = el("form", { class: "card install" }, el("h3", { text: "Install an app from someone else" }),
    el("div", { class: "row" }, source, choose, go),
    el("label", { class: "row muted" }, unsigned, el("span", { text: "Install it even if nobody signed it (anyone could have made it)" })),
    result);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    result.replaceChildren();
    const out = await act(`checking ${source.value} before placing anything`, "/api/install", { source: source.value, unsigned: unsigned.checked });
    if (!out || !out.installed) return;
    const i = out.installed;
    result.append(el("p", { class: "install-said", text: out.message }));
    try {
      result.append(explainBox(await api("GET", `/api/explain/${encodeURIComponent(i.app)}/${encodeURIComponent(i.release)}`)));
    } catch (e) { say(e.message, true); }
    source.value = ""; unsigned.checked = false;
  });
  return form;
})();

async function refresh() {
  try {
    state = await api("GET", "/api/state");
  } catch (e) { say(e.message, true); return; }
  const note = state.opener ? null : el("p", { class: "muted", text: "No browser opener was found: addresses of tabs are printed in the launcher's terminal." });
  const quit = el("button", { class: "danger quit", text: "Quit Autoapp", onclick: () => {
    if (!confirm("Quit Autoapp? Every app's page stops answering; the calls in flight finish first.")) return;
    api("POST", "/api/quit", {}).then((o) => say(o.message), (e) => say(e.message, true));
  } });
  // The engineer's standing approval: one switch for the whole launcher.
  const on = state.standing != null;
  const standing = el("div", { class: "card engineer" }, el("h3", { text: "The engineer" }),
    el("label", { class: "row" },
      el("input", { type: "checkbox", class: "standing-switch", ...(on ? { checked: "" } : {}), onchange: (ev) =>
        act(ev.target.checked ? "letting the engineer work without asking" : "asking again", "/api/standing", { on: ev.target.checked }) }),
      el("span", { text: "Work without asking" })),
    el("p", { class: "muted standing-said", text: on
      ? `On since ${new Date(state.standing).toLocaleString()}: the engineer's edits, builds and previews run without a question (creating an app still asks). Each is recorded as answered by the standing approval.`
      : "Off: every edit, build and preview of the engineer (`autoapp mcp --engineer`) asks you here first." }));
  root.replaceChildren(el("div", { class: "row" }, el("h1", { text: "Autoapp" }), quit), note || "", status, standing, createForm, installForm, spaceBox(),
    ...(state.apps.length ? state.apps.map(appCard) : [el("p", { text: "No apps yet: create one above (or with `autoapp create <app>`)." })]));
}

(function start() {
  const approvals = Approvals(strip, (n) => { waiting = n; setTitle(); });
  listen({
    hello: (d) => approvals.reset(d.questions),
    asked: (d) => approvals.asked(d.question),
    answered: (d) => { approvals.answered(d.request_id); refresh(); },
    activated: () => refresh(),
    changed: () => refresh(),
  });
  setTitle();
  refresh();
})();
