"""The part of Go's text/template that `--format` strings use with docker and podman: `{{json .}}`, `{{json .A.B}}`,
`{{.A.B}}`, `{{index .A "k"}}`, `{{.Label "k"}}` (ps), and `\\t` / `\\n` escapes; anything else is refused (exit 64,
docker's code for a template error)."""

from __future__ import annotations

import json
import re

from simcluster.containers.flavors import Refusal

ACTION = re.compile(r"{{-?\s*(.*?)\s*-?}}")
INDEX = re.compile(r'^index\s+(\.[\w.]*)\s+"([^"]*)"$')
LABEL = re.compile(r'^\.Label\s+"([^"]*)"$')
NO_VALUE = object()


def go_json(value) -> str:
    """encoding/json's compact form, with its HTML escaping of <, > and &."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def go_print(value) -> str:
    if value is NO_VALUE:
        return "<no value>"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{go_print(v)}" for k, v in sorted(value.items())) + "]"
    if isinstance(value, list):
        return "[" + " ".join(go_print(v) for v in value) + "]"
    return str(value)


def lookup(data, path: str):
    value = data
    for part in [p for p in path.split(".") if p]:
        if not isinstance(value, dict) or part not in value:
            return NO_VALUE
        value = value[part]
    return value


def is_json(fmt: str) -> bool:
    return fmt.strip() in ("json", "{{json .}}", "{{ json . }}")


def render(fmt: str, data: dict, labels: dict | None = None) -> str:
    fmt = fmt.replace("\\t", "\t").replace("\\n", "\n")
    if fmt.strip() == "json":
        return go_json(data)

    def action(match: re.Match) -> str:
        expr = match.group(1)
        if expr.startswith("json "):
            value = lookup(data, expr[5:].strip())
            return "null" if value is NO_VALUE else go_json(value)
        if m := INDEX.match(expr):
            container = lookup(data, m.group(1))
            return go_print(container.get(m.group(2), "") if isinstance(container, dict) else NO_VALUE)
        if (m := LABEL.match(expr)) and labels is not None:
            return labels.get(m.group(1), "")
        if re.fullmatch(r"\.[\w.]*", expr):
            return go_print(lookup(data, expr))
        raise Refusal(f"simcluster: the template action {{{{{expr}}}}} is not simulated (known: json PATH, .PATH, "
                      f'index .PATH "key", .Label "key")', 64)

    return ACTION.sub(action, fmt)
