"""Field checks shared by the typed inputs: each failure is a ValueError that starts with the field's name."""

from __future__ import annotations

import math
import os
import re

CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# mmengine's markers: ais_bench dumps the config it loaded and reloads the dump with Config.fromfile, which replaces
# {{$NAME:default}} (an environment variable), {{ fileDirname }} and {{_base_.x}} in the file's TEXT before it runs
# it, inside string literals too: a value holding one could read the environment or close its literal and run code.
TEMPLATE = re.compile(r"\{\{|\}\}")
ABBR = re.compile(r"[a-z0-9_-]{1,64}")


def fail(field: str, problem: str) -> ValueError:
    return ValueError(f"{field}: {problem}")


def integer(field: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(field, f"must be an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise fail(field, f"must be between {low} and {high}, got {value}")
    return value


def number(field: str, value: object, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise fail(field, f"must be a number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or not low <= value <= high:
        raise fail(field, f"must be between {low:g} and {high:g}, got {value!r}")
    return value


def boolean(field: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise fail(field, f"must be true or false, got {type(value).__name__}")
    return value


def text(field: str, value: object, *, empty_ok: bool = False, max_len: int = 512) -> str:
    if not isinstance(value, str):
        raise fail(field, f"must be a string, got {type(value).__name__}")
    if not value and not empty_ok:
        raise fail(field, "must not be empty")
    if len(value) > max_len:
        raise fail(field, f"longer than {max_len} characters")
    if CONTROL.search(value):
        raise fail(field, "contains a control character (newline, tab, NUL...)")
    if TEMPLATE.search(value):
        raise fail(field, "contains '{{' or '}}', which AISBench's config loader (mmengine) would replace with an "
                          "environment variable or code")
    return value


def abbr(field: str, value: object) -> str:
    if not isinstance(value, str) or not ABBR.fullmatch(value):
        raise fail(field, f"must be 1-64 characters of a-z, 0-9, '_' or '-', got {value!r}")
    return value


def absolute_path(field: str, value: object, *, empty_ok: bool = False) -> str:
    value = text(field, value, empty_ok=empty_ok, max_len=4096)
    if value and (not os.path.isabs(value) or os.path.normpath(value) != value.rstrip("/") or value == "/"):
        raise fail(field, f"must be a normalised absolute path, got {value!r}")
    return value


def one_of(field: str, value: object, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise fail(field, f"must be one of {', '.join(choices)}, got {value!r}")
    return value  # type: ignore[return-value]
