// Shared by the app renderer and the panel: DOM helpers that only ever set
// text (never HTML), the JSON API, and the approvals strip.
"use strict";

// What a page shows of any text: the invisible format characters removed
// (bidi overrides, embeddings, isolates and marks; zero-width characters;
// tags; fillers; line and paragraph separators), as elsewhere::text's
// is_format lists them, so no text can reorder or hide what follows it. A
// zero-width joiner inside an emoji sequence stays (it only joins glyphs).
const INVISIBLE = /[\u00AD\u0600-\u0605\u061C\u06DD\u070F\u0890\u0891\u08E2\u115F\u1160\u180E\u200B\u200C\u200E\u200F\u2028\u2029\u202A-\u202E\u2060-\u2064\u2066-\u206F\u3164\uFEFF\uFFA0\uFFF9-\uFFFB\u{110BD}\u{110CD}\u{13430}-\u{1343F}\u{1BCA0}-\u{1BCA3}\u{1D173}-\u{1D17A}\u{E0001}\u{E0020}-\u{E007F}]|(?<!\p{Extended_Pictographic}\uFE0F?)\u200D|\u200D(?!\p{Extended_Pictographic})/gu;
function visible(text) { return String(text).replace(INVISIBLE, ""); }

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = visible(v);
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) if (k !== null && k !== undefined) e.append(k instanceof Node ? k : document.createTextNode(visible(k)));
  return e;
}

async function api(method, path, body) {
  const opts = { method, headers: {} };
  if (body !== undefined) { opts.headers["Content-Type"] = "application/json"; opts.body = JSON.stringify(body); }
  const res = await fetch(path, opts);
  let data = null;
  try { data = await res.json(); } catch (_) { data = null; }
  if (!res.ok) {
    const msg = data && data.error ? data.error.message : `the request failed (${res.status})`;
    const err = new Error(msg);
    err.kind = data && data.error ? data.error.kind : "internal";
    throw err;
  }
  return data;
}

// The approvals strip: one row per waiting question, with time left (amber
// under a minute) and Approve / Deny. `onCount` gets the number waiting.
// The same characters shown as visible escapes instead of removed, for what
// the page draws of a caller's arguments as they are (the host stores them
// unchanged, since the person approves exactly them).
function escaped(text) { return String(text).replace(INVISIBLE, (c) => `\\u{${c.codePointAt(0).toString(16)}}`); }

function Approvals(container, onCount) {
  const questions = new Map();
  const render = () => {
    container.replaceChildren();
    for (const q of questions.values()) {
      const left = el("span", { class: "left" });
      const tick = () => {
        const s = Math.max(0, Math.round((Date.parse(q.expiresAt) - Date.now()) / 1000));
        left.textContent = `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")} left`;
        left.classList.toggle("amber", s < 60);
      };
      tick();
      q._timer && clearInterval(q._timer);
      q._timer = setInterval(tick, 1000);
      const answer = (approve, standing) => async () => {
        try {
          await api("POST", "/api/answer", { requestId: q.requestId, releaseId: q.releaseId, argumentsHash: q.argumentsHash, approve, standing: !!standing });
        } catch (e) { alert(e.message); }
      };
      // An edit shows what it changes (a unified diff, as text); anything
      // else shows its arguments.
      const shown = q.change != null
        ? el("pre", { class: "change", text: q.change })
        : el("pre", { class: "arguments", text: escaped(JSON.stringify(q.arguments, null, 2)) });
      container.append(el("div", { class: "question", "data-request": q.requestId },
        el("div", { class: "what" },
          el("strong", { text: `${q.appId}: ${q.route}` }), " ",
          el("span", { class: "muted", text: `(${q.effect}) asked by ${q.caller} on channel ${q.channel}` }),
          (q.keys && q.keys.length) ? el("div", { class: "keys", text: `uses your keys: ${q.keys.join("; ")}` }) : null,
          shown),
        left,
        el("button", { class: "primary approve", onclick: answer(true), text: "Approve" }),
        el("button", { class: "danger deny", onclick: answer(false), text: "Deny" }),
        q.standingCovers ? el("button", { class: "standing", onclick: answer(true, true), text: "Allow, and stop asking",
          title: "Approve this, and let the engineer's edits, builds and previews run without asking from now on (turn it off in the panel or with `autoapp standing off`)" }) : null));
    }
    onCount(questions.size);
  };
  // A desktop notification for a new question, only where the person already
  // allowed notifications for this origin: the page never asks for the
  // permission by itself.
  const notify = (q) => {
    if (typeof Notification === "undefined" || Notification.permission !== "granted") return;
    try { new Notification(`${q.appId}: ${q.route} waits for you`, { body: `${q.effect} asked by ${q.caller} on channel ${q.channel}`, tag: q.requestId }); } catch (_) {}
  };
  return {
    asked(q) { const fresh = !questions.has(q.requestId); questions.set(q.requestId, q); render(); if (fresh) notify(q); },
    answered(id) { const q = questions.get(id); if (q) { clearInterval(q._timer); questions.delete(id); render(); } },
    reset(list) { for (const q of questions.values()) clearInterval(q._timer); questions.clear(); for (const q of list) questions.set(q.requestId, q); render(); },
  };
}

// Live updates. The open connection is what tells the gate somebody is here.
function listen(handlers) {
  const src = new EventSource("/api/events");
  for (const [name, fn] of Object.entries(handlers)) src.addEventListener(name, (e) => fn(JSON.parse(e.data)));
  return src;
}
