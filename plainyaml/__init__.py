"""YAML for files people send us: safe types only, and no aliases.

An alias (`*name`) repeats a node without repeating its text, so a few hundred bytes of nested aliases
expand to billions of values ("billion laughs"): every walk, repr or JSON dump of the result then takes
minutes and gigabytes. No file this project reads needs aliases, so they are refused where they appear,
with the line and column, as a `yaml.MarkedYAMLError` (callers already report those). Used by the Django
apps, `pdproxy` and `simcluster` alike, so it imports nothing but PyYAML.
"""

from __future__ import annotations

import reprlib

import yaml
from yaml.composer import ComposerError

__all__ = ["NoAliasSafeLoader", "load", "short_repr"]

_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxdict, _SHORT.maxlist, _SHORT.maxstring, _SHORT.maxother = 2, 4, 4, 50, 50


class NoAliasSafeLoader(yaml.SafeLoader):
    """SafeLoader that refuses aliases (merge keys `<<: *x` included)."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise ComposerError(None, None, f"aliases are not accepted (*{event.anchor}): write the value out",
                                event.start_mark)
        return super().compose_node(parent, index)


def load(stream):
    """yaml.safe_load without aliases."""
    return yaml.load(stream, Loader=NoAliasSafeLoader)  # noqa: S506 - a SafeLoader subclass


def short_repr(value) -> str:
    """A loaded value quoted in an error message: bounded in length, and in the work to build it."""
    return _SHORT.repr(value)
