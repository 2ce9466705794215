"""Greetings: an Autoapp app written in Python, built with componentize-py.

Build it (from this folder):

    autoapp wit --out wit
    componentize-py -d wit -w app componentize app -o app.wasm
    autoapp build python-hello --component app.wasm

The host checks every route's input against autoapp.toml before `handle` runs,
and gives a `read` route a read-only store, whatever language the app is in.
"""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import log, store
from wit_world.imports.autoapp_app_types import AppError_Denied, AppError_InvalidInput, AppError_NotFound
from wit_world.imports.store import Value_Integer, Value_Text


def _value(v):
    return getattr(v, "value", None)


def _greetings(limit):
    rows = store.query("SELECT id, name FROM greetings ORDER BY id DESC LIMIT ?1", [Value_Integer(limit)])
    return [{"id": _value(r[0]), "name": _value(r[1])} for r in rows.rows]


class Routes(exports.Routes):
    def handle(self, route: str, input: str) -> str:
        data = json.loads(input)
        if route == "greetings.list":
            return json.dumps({"greetings": _greetings(data.get("limit", 20))})
        if route == "greetings.add":
            name = data["name"].strip()
            if not name:
                raise Err(AppError_InvalidInput("a greeting needs a name"))
            rows = store.query("INSERT INTO greetings (name) VALUES (?1) RETURNING id", [Value_Text(name)])
            log.write(log.Level.INFO, f"greeted {name}")
            return json.dumps({"id": _value(rows.rows[0][0]), "text": f"Hello, {name}!"})
        if route == "greetings.sneak":
            # A read route that tries to write: the host answers with `denied`.
            try:
                store.execute("INSERT INTO greetings (name) VALUES ('sneaked')", [])
                return json.dumps({"wrote": True})
            except Err as e:
                kind = type(e.value).__name__.removeprefix("AppError_").lower()
                return json.dumps({"error": f"{kind}: {e.value.value}"})
        raise Err(AppError_NotFound(f"no route {route}"))


class Views(exports.Views):
    def render(self, page: str, query: str) -> str:
        if page != "index":
            raise Err(AppError_NotFound(f"no page {page}"))
        items = [{"type": "text", "text": f"Hello, {g['name']}!"} for g in _greetings(50)]
        return json.dumps({
            "title": "Greetings",
            "children": [
                {"type": "heading", "text": "Greetings", "level": 1},
                {"type": "form", "route": "greetings.add", "submit": "Greet",
                 "fields": [{"name": "name", "label": "Name", "kind": "text"}]},
                {"type": "section", "title": "So far", "children": items},
            ],
        })
