"""Seams of the UI that stay in one place, read from the sources (nothing is started): a status's colour lives on
its choice (apps/coloured_choices.py); an edge id is built by apps/telemetry/edge_ids.py and static/js/edge-ids.js;
a page's websocket is opened (and opened again) by static/js/live-socket.js; every list pages with
templates/_pager.html; styles live in static/css, and no link holds a button; no script grows past a few hundred
lines (the topology picture is a folder of modules, static/js/topology/)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLOURS = {"green", "amber", "red", "blue", "grey", "purple"}
COLOUR_WORD = "|".join(sorted(COLOURS))


def files(folder: str, suffix: str) -> list[Path]:
    return sorted(p for p in (ROOT / folder).rglob(f"*{suffix}") if "migrations" not in p.parts and "vendor" not in p.parts)


def shown(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _is_colour(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value in COLOURS


def test_no_status_colour_map_outside_the_choices():
    """A dict of colours, or a colour picked by a condition, in Python; a colour picked by {% if %} in a template;
    an object of colours in JS: each is a second place a status's colour is decided."""
    found = []
    for path in files("apps", ".py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Dict) and len(node.values) > 1 and all(map(_is_colour, node.values)):
                found.append(f"{shown(path)}:{node.lineno}: a dict of colours")
            elif isinstance(node, ast.IfExp) and (_is_colour(node.body) or _is_colour(node.orelse)):
                found.append(f"{shown(path)}:{node.lineno}: a colour picked by a condition")
    picked = re.compile(r"\{%\s*(?:if|elif|else)\b[^%]*%\}\s*(?:" + COLOUR_WORD + r")\s*\{%")
    for path in files("templates", ".html"):
        found += [f"{shown(path)}: a colour picked by {{% if %}}: {m.group(0)}" for m in picked.finditer(path.read_text())]
    keyed = re.compile(r"[{,]\s*[\"']?[\w-]+[\"']?\s*:\s*[\"'](?:" + COLOUR_WORD + r")[\"']")
    for path in files("static/js", ".js"):
        found += [f"{shown(path)}: an object of colours: {m.group(0)}" for m in keyed.finditer(path.read_text())]
    assert not found, "a status's colour belongs to its choice (apps/coloured_choices.py):\n" + "\n".join(found)


EDGE_HELPERS = {"apps/telemetry/edge_ids.py", "static/js/edge-ids.js"}
# "kv_transfer:" spelled out, or "->" joined to an interpolated end ({x}->, ->{x}, ->${x}): an edge id built by hand.
HAND_BUILT_EDGE = re.compile(r"""["'`/]kv_transfer:|\}->|->\$?\{""")


def test_edge_ids_are_built_only_by_the_helpers():
    found = [f"{shown(path)}:{n}: {line.strip()}"
             for path in files("apps", ".py") + files("static/js", ".js") + files("templates", ".html")
             if shown(path) not in EDGE_HELPERS
             for n, line in enumerate(path.read_text().splitlines(), 1) if HAND_BUILT_EDGE.search(line)]
    assert not found, "build an edge id with apps/telemetry/edge_ids.py or static/js/edge-ids.js:\n" + "\n".join(found)


def test_websockets_are_opened_only_by_the_reconnect_module():
    found = [f"{shown(path)}:{n}" for path in files("static/js", ".js") + files("templates", ".html")
             if shown(path) != "static/js/live-socket.js"
             for n, line in enumerate(path.read_text().splitlines(), 1) if "new WebSocket(" in line]
    assert not found, "open a page's websocket with static/js/live-socket.js (it reconnects):\n" + "\n".join(found)


MAX_SCRIPT_LINES = 300


def test_scripts_stay_small():
    big = [f"{shown(path)}: {n} lines" for path in files("static/js", ".js")
           if (n := len(path.read_text().splitlines())) > MAX_SCRIPT_LINES]
    assert not big, f"split a script over {MAX_SCRIPT_LINES} lines by what it draws:\n" + "\n".join(big)


PAGER = "templates/_pager.html"


def test_one_pager_template():
    """Links to the previous or next page are written in templates/_pager.html only, which every list includes."""
    found = [shown(path) for path in files("templates", ".html") if shown(path) != PAGER
             and ("pager" in path.name or re.search(r"previous_page_number|next_page_number", path.read_text()))]
    assert not found, f"include {PAGER} instead of another pager:\n" + "\n".join(found)


def test_no_style_block_in_templates():
    found = [shown(path) for path in files("templates", ".html") if re.search(r"<style\b", path.read_text(), re.I)]
    assert not found, "move the CSS into a file of static/css and link it:\n" + "\n".join(found)


def test_no_link_holds_a_button():
    """<a><button> is invalid HTML (interactive content inside a link): a link styled as one (a.button), or a form."""
    nested = re.compile(r"<a\b[^>]*>(?:(?!</a>).)*?<button\b", re.S | re.I)
    found = [f"{shown(path)}: {m.group(0)[:100]}" for path in files("templates", ".html")
             for m in nested.finditer(path.read_text())]
    assert not found, "use <a class=\"button\"> or a form's button:\n" + "\n".join(found)
