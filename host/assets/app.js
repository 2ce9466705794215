// The pinned renderer: draws the view spec an app's `views.render` returned.
// Every string is set as text; no markup and no script from the app is ever
// interpreted. Calls go to this app's own server as the person (channel user).
"use strict";

const root = document.getElementById("root");
const strip = document.getElementById("strip");
const status = el("p", { class: "status", role: "status" });
let info = { app: "", name: "" };
let current = { page: "index", query: {} };
let waiting = 0;

function setTitle(t) { document.title = (waiting ? `(${waiting}) ` : "") + t; }

function say(text, isError) { status.textContent = visible(text); status.classList.toggle("error", !!isError); }

function go(page, query) {
  current = { page, query: query || {} };
  const q = encodeURIComponent(JSON.stringify(current.query));
  history.replaceState(null, "", `#${encodeURIComponent(page)}:${q}`);
  draw();
}

async function call(route, input) {
  say(`calling ${route}…`);
  try {
    const out = await api("POST", `/api/call/${encodeURIComponent(route)}`, input);
    say(`${route}: ${JSON.stringify(out)}`);
    await draw(true);
  } catch (e) { say(e.message, true); }
}

function node(n) {
  switch (n.type) {
    case "heading": return el(`h${n.level || 2}`, { text: n.text });
    case "text": return el("p", { text: n.text });
    case "section": return el("section", { class: "section" }, n.title ? el("h3", { text: n.title }) : null, ...n.children.map(node));
    case "list": return el("ul", {}, ...n.items.map((i) => el("li", {}, node(i))));
    case "link": return el("a", { text: n.text, onclick: (ev) => { ev.preventDefault(); go(n.page, n.query); } });
    case "table": return el("table", {},
      el("thead", {}, el("tr", {}, ...n.columns.map((c) => el("th", { text: c })))),
      el("tbody", {}, ...n.rows.map((r) => el("tr", {}, ...r.map((c) => el("td", { text: c === null ? "" : String(c) }))))));
    case "button": return el("button", { text: n.label, onclick: () => call(n.route, n.input || {}) });
    case "chart": return chart(n);
    case "form": return form(n);
    default: return el("p", { class: "muted", text: `(a ${n.type} node)` });
  }
}

function form(n) {
  const inputs = [];
  const f = el("form", { class: "form", "data-route": n.route });
  for (const field of n.fields) {
    let input;
    if (field.kind === "textarea") input = el("textarea", { name: field.name });
    else if (field.kind === "select") input = el("select", { name: field.name }, ...field.options.map((o) => el("option", { value: o, text: o })));
    else if (field.kind === "checkbox") input = el("input", { type: "checkbox", name: field.name });
    else input = el("input", { type: field.kind === "number" ? "number" : field.kind === "date" ? "date" : "text", name: field.name });
    if (field.value !== undefined) {
      if (field.kind === "checkbox") input.checked = !!field.value; else input.value = String(field.value);
    }
    inputs.push([field, input]);
    f.append(el("label", { text: field.label }, input));
  }
  f.append(el("div", { class: "row" }, el("button", { class: "primary", type: "submit", text: n.submit })));
  f.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const body = {};
    for (const [field, input] of inputs) {
      if (field.kind === "checkbox") body[field.name] = input.checked;
      else if (field.kind === "number") { if (input.value !== "") body[field.name] = Number(input.value); }
      else if (input.value !== "") body[field.name] = input.value;
    }
    call(n.route, body);
  });
  return f;
}

function chart(n) {
  const max = Math.max(1, ...n.series.flatMap((s) => s.values));
  const box = el("div", { class: "chart", role: "img", "aria-label": `${n.kind} chart` });
  n.labels.forEach((label, i) => {
    const bar = el("div", { class: "bar" });
    for (const s of n.series) {
      const fill = el("div", { class: "fill", title: `${s.name}: ${s.values[i]}` });
      fill.style.height = `${(100 * s.values[i]) / max}%`;
      bar.append(fill);
    }
    bar.append(el("span", { class: "label", text: label }));
    box.append(bar);
  });
  return box;
}

async function draw(keepStatus) {
  if (!keepStatus) say("");
  if (!info.release && !info.preview) {
    // A new app: nothing to draw until a release of it is active.
    setTitle(info.app);
    root.replaceChildren(status, el("h1", { text: info.app }),
      el("p", { class: "no-release", text: `${info.app} has no active release yet. Edit its workspace, build it (\`autoapp build ${info.app}\`), then activate the candidate in the Autoapp panel: this tab shows it as soon as it is active.` }));
    return;
  }
  const q = encodeURIComponent(JSON.stringify(current.query));
  try {
    const view = await api("GET", `/api/view/${encodeURIComponent(current.page)}?query=${q}`);
    setTitle(view.title);
    const crumbs = current.page === "index" ? null : el("nav", { class: "crumbs" }, el("a", { text: "← first page", onclick: () => go("index", {}) }));
    root.replaceChildren(crumbs || "", status, ...view.children.map(node));
  } catch (e) {
    root.replaceChildren(status);
    say(e.message, true);
  }
}

/// The mark in every app tab: back to the panel (the launcher opens it).
function mark() {
  const back = el("button", { class: "to-panel", text: "← Autoapp panel", onclick: async () => {
    try { const o = await api("POST", "/api/panel", {}); say(o.message); } catch (e) { say(e.message, true); }
  } });
  document.body.prepend(el("nav", { class: "mark" }, back));
}

(async function start() {
  mark();
  try { info = await api("GET", "/api/info"); } catch (e) { say(e.message, true); }
  if (location.hash.length > 1) {
    const [page, q] = location.hash.slice(1).split(":");
    try { current = { page: decodeURIComponent(page), query: JSON.parse(decodeURIComponent(q || "%7B%7D")) }; } catch (_) {}
  }
  const approvals = Approvals(strip, (n) => { waiting = n; setTitle(document.title.replace(/^\(\d+\) /, "")); });
  listen({
    hello: (d) => approvals.reset(d.questions),
    asked: (d) => approvals.asked(d.question),
    answered: (d) => approvals.answered(d.request_id),
    activated: async () => { try { info = await api("GET", "/api/info"); } catch (_) {} draw(); },
  });
  draw();
})();
