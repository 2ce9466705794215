// Greetings: an Autoapp app written in JavaScript, built with jco componentize.
//
// Build it (from this folder):
//
//     autoapp wit --out wit
//     npm ci                       # jco, pinned in package.json
//     npx jco componentize app.js --wit wit --world-name app --out app.wasm
//     autoapp build js-hello --component app.wasm
//
// The host checks every route's input against autoapp.toml before `handle`
// runs, and gives a `read` route a read-only store, whatever language the app
// is in.
//
// How jco maps the WIT: an import is a module named by its interface
// (`autoapp:app/store@0.1.0`); a variant is `{ tag, val }`; an s64 is a
// BigInt; a function that returns `result` returns its ok value and throws
// its error (an imported function throws an Error whose `payload` is the
// error; an exported one throws the error value itself).
import { execute, query } from "autoapp:app/store@0.1.0";
import { write } from "autoapp:app/log@0.1.0";

function greetings(limit) {
  const r = query("SELECT id, name FROM greetings ORDER BY id DESC LIMIT ?1", [{ tag: "integer", val: BigInt(limit) }]);
  return r.rows.map((row) => ({ id: Number(row[0].val), name: row[1].val }));
}

export const routes = {
  handle(route, input) {
    const data = JSON.parse(input);
    switch (route) {
      case "greetings.list":
        return JSON.stringify({ greetings: greetings(data.limit ?? 20) });
      case "greetings.add": {
        const name = data.name.trim();
        if (!name) throw { tag: "invalid-input", val: "a greeting needs a name" };
        const r = query("INSERT INTO greetings (name) VALUES (?1) RETURNING id", [{ tag: "text", val: name }]);
        write("info", `greeted ${name}`);
        return JSON.stringify({ id: Number(r.rows[0][0].val), text: `Hello, ${name}!` });
      }
      case "greetings.sneak":
        // A read route that tries to write: the host answers with `denied`.
        try {
          execute("INSERT INTO greetings (name) VALUES ('sneaked')", []);
          return JSON.stringify({ wrote: true });
        } catch (e) {
          return JSON.stringify({ error: `${e.payload.tag}: ${e.payload.val}` });
        }
      default:
        throw { tag: "not-found", val: `no route ${route}` };
    }
  },
};

export const views = {
  render(page, _query) {
    if (page !== "index") throw { tag: "not-found", val: `no page ${page}` };
    const items = greetings(50).map((g) => ({ type: "text", text: `Hello, ${g.name}!` }));
    return JSON.stringify({
      title: "Greetings",
      children: [
        { type: "heading", text: "Greetings", level: 1 },
        { type: "form", route: "greetings.add", submit: "Greet", fields: [{ name: "name", label: "Name", kind: "text" }] },
        { type: "section", title: "So far", children: items },
      ],
    });
  },
};
