"""YAML for files people send us: safe types only, and no aliases.

An alias (`*name`) repeats a node without repeating its text, so a few hundred bytes of nested aliases
expand to billions of values ("billion laughs"): every walk, repr or JSON dump of the result then takes
minutes and gigabytes. No file this project reads needs aliases, so they are refused where they appear,
with the line and column, as a `yaml.MarkedYAMLError` (callers already report those). So are the other
inputs PyYAML itself fails on with a bare exception (nesting deeper than MAX_DEPTH: RecursionError; an integer
of more than 4300 digits or a date like 2001-13-45: ValueError) and a key given twice in one mapping (PyYAML
keeps the last one silently). Used by the Django apps, `pdproxy` and `simcluster` alike, so it imports
nothing but PyYAML.
"""

from __future__ import annotations

import reprlib

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError

__all__ = ["MAX_DEPTH", "NoAliasSafeLoader", "load", "refuse_duplicate_keys", "short_repr"]

MAX_DEPTH = 64  # nested lists and mappings; the deepest file the project reads nests 5

_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxdict, _SHORT.maxlist, _SHORT.maxstring, _SHORT.maxother = 2, 4, 4, 50, 50


class NoAliasSafeLoader(yaml.SafeLoader):
    """SafeLoader that refuses aliases (merge keys `<<: *x` included), deep nesting and duplicate keys."""

    _depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise ComposerError(None, None, f"aliases are not accepted (*{event.anchor}): write the value out",
                                event.start_mark)
        if self._depth >= MAX_DEPTH:
            raise ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", self.peek_event().start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep)
        except ValueError as exc:
            raise ConstructorError(None, None, f"cannot read this value: {str(exc)[:120]}", node.start_mark) from None

    def construct_mapping(self, node, deep=False):
        refuse_duplicate_keys(node)
        return super().construct_mapping(node, deep)


def refuse_duplicate_keys(node) -> None:
    """A ConstructorError at the second spelling of a plain key in one mapping node."""
    first_line: dict = {}
    for key_node, _ in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
            key = (key_node.tag, key_node.value)
            if key in first_line:
                raise ConstructorError(None, None, f"duplicate key {key_node.value[:60]!r} (first on line "
                                                   f"{first_line[key]})", key_node.start_mark)
            first_line[key] = key_node.start_mark.line + 1


def load(stream):
    """yaml.safe_load without aliases."""
    return yaml.load(stream, Loader=NoAliasSafeLoader)  # noqa: S506 - a SafeLoader subclass


def short_repr(value) -> str:
    """A loaded value quoted in an error message: bounded in length, and in the work to build it."""
    return _SHORT.repr(value)
