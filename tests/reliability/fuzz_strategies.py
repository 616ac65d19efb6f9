"""Hypothesis strategies that break valid documents: structured changes to parsed data (wrong types, missing and
unknown keys, huge numbers, unicode) and text changes to the written form (lines dropped, repeated or swapped,
truncation, raw YAML tokens PyYAML itself trips on, duplicate keys, anchors and aliases, deep nesting, garbage)."""

from __future__ import annotations

import copy
import re

import yaml
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

LIGHT_EXAMPLES = 40
HEAVY_EXAMPLES = 600


def fuzz_settings(examples: int):
    """Reproducible in CI: the same examples on every run, no example database, no per-example deadline."""
    return settings(max_examples=examples, derandomize=True, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))


HOSTILE_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=2**31, max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
    st.sampled_from(["", " ", "\x00", "\u202e", "é✓", "9" * 5000, "2001-13-45", "-1", "--flag", "$(id)", "~", "x" * 300]),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)

# Written into YAML text as they are: each is one thing a naive loader or a naive reader of its result fails on.
RAW_YAML_TOKENS = ["9" * 5000, "2001-13-45", ".nan", "-.inf", "0x_", "!!binary AAAA", "!!python/object:os.system",
                   "&a x", "*a", "<<: *a", "[" * 200, "{" * 50 + "}" * 50, "? [a, b]", "!!set {a}", "|-", "'unclosed",
                   "\"\\x\"", "@", "`", "%YAML 1.1", "---", "...", "\t", "\x85", "\ufeff", "!!timestamp 2001-02-30"]


def paths_of(doc, prefix=()) -> list[tuple]:
    """Every path into a tree of dicts and lists, the root's () included."""
    out = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += paths_of(value, prefix + (key,))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            out += paths_of(value, prefix + (i,))
    return out


def _at(doc, path):
    for key in path:
        doc = doc[key]
    return doc


@st.composite
def mutated_data(draw, doc, max_changes: int = 3):
    """A deep copy of `doc` with 1 to `max_changes` structural changes."""
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(1, max_changes))):
        path = draw(st.sampled_from(paths_of(doc)))
        if not path:
            if draw(st.integers(0, 9)) == 0:
                doc = draw(HOSTILE_SCALARS)  # the whole document is something else
            continue
        parent, key = _at(doc, path[:-1]), path[-1]
        op = draw(st.sampled_from(["replace", "replace", "delete", "unknown", "wrap", "copy"]))
        if op == "replace":
            parent[key] = draw(HOSTILE_SCALARS)
        elif op == "delete":
            del parent[key]
        elif op == "unknown" and isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=8))] = draw(HOSTILE_SCALARS)
        elif op == "wrap":
            parent[key] = draw(st.sampled_from([[parent[key]], {"x": parent[key]}]))
        elif op == "copy" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[key]))  # a second item of the same name
        if not paths_of(doc):
            break
    return doc


_SCALAR_AFTER_KEY = re.compile(r"^(\s*-?\s*[\w.-]+:) (\S.*)$")


@st.composite
def mutated_text(draw, text: str):
    """`text` with one to three line-level changes (for YAML, CSV, JSON lines, tables and exposition alike)."""
    lines = text.split("\n")
    for _ in range(draw(st.integers(1, 3))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["drop", "repeat", "swap", "truncate", "token", "garbage", "number", "indent"]))
        if op == "drop":
            del lines[i]
        elif op == "repeat":
            lines.insert(i, lines[i])  # in YAML: a duplicate key
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "truncate":
            lines[i] = lines[i][:draw(st.integers(0, max(0, len(lines[i]) - 1)))]
            del lines[i + 1:]
        elif op == "token":
            token = draw(st.sampled_from(RAW_YAML_TOKENS))
            m = _SCALAR_AFTER_KEY.match(lines[i])
            lines[i] = f"{m.group(1)} {token}" if m else lines[i] + token
        elif op == "garbage":
            at = draw(st.integers(0, len(lines[i])))
            junk = draw(st.text(st.characters(codec="utf-8"), min_size=1, max_size=6))
            lines[i] = lines[i][:at] + junk + lines[i][at:]
        elif op == "number":
            number = draw(st.sampled_from(["99999999999999999999", "-1", "1e999", "NaN", "0.5", "٣", "²", "1_0",
                                           "9" * 5000, "", "-"]))
            lines[i] = re.sub(r"\d+(\.\d+)?", number, lines[i], count=draw(st.integers(1, 3)))
        elif op == "indent":
            lines[i] = draw(st.sampled_from(["  ", "\t", " "])) + lines[i]
    return "\n".join(lines)


@st.composite
def broken_yaml(draw, doc):
    """A valid document, changed as data, written as YAML, and maybe changed again as text."""
    data = draw(mutated_data(doc)) if draw(st.integers(0, 3)) else copy.deepcopy(doc)
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=draw(st.booleans()))
    if draw(st.booleans()):
        text = draw(mutated_text(text))
    return text
