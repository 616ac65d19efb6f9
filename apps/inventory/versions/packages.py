"""Python package versions on a node (vllm, vllm-ascend), read by our own probe rather than `pip show` or
vllm-ascend's collect_env.py: pip may be missing from an image, and collect_env prints `Could not collect`.

The probe (python_packages_probe) runs importlib.metadata in the node's python3 and prints one line per package:

    vllm==0.10.2
    vllm-ascend==0.10.2rc2.dev5+g88ca8a051
    mindie-llm not installed

The version is printed whole, local part (`+g88ca8a051`) included: two different builds are a mismatch.
"""

from __future__ import annotations

import re
import shlex
from types import MappingProxyType

from .values import VersionsParseError

DEFAULT_PACKAGES = ("vllm", "vllm-ascend")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\Z")
_INSTALLED = re.compile(r"^(\S+)==(\S+)$")
_MISSING = re.compile(r"^(\S+) not installed$")

PROBE_CODE = """import importlib.metadata as m
for n in {names!r}:
    try:
        print(n + "==" + m.version(n))
    except m.PackageNotFoundError:
        print(n + " not installed")
"""


def _checked(names: tuple[str, ...]) -> tuple[str, ...]:
    for name in names:
        if not _NAME.match(name):
            raise ValueError(f"not a Python package name: {name!r}")
    return names


def python_packages_probe(names: tuple[str, ...] = DEFAULT_PACKAGES, python: str = "python3") -> str:
    """The shell line that prints each package's version as python_packages_parse reads it."""
    return f"{shlex.quote(python)} -c {shlex.quote(PROBE_CODE.format(names=_checked(names)))}"


def python_packages_parse(stdout: str, names: tuple[str, ...] = DEFAULT_PACKAGES) -> MappingProxyType[str, str | None]:
    """name -> version (None = not installed), exactly one line for each name the probe asked about."""
    found: dict[str, str | None] = {}
    last = 0
    for number, raw in enumerate(stdout.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        last = number
        match = _INSTALLED.match(line) or _MISSING.match(line)
        if not match:
            raise VersionsParseError(number, "'<name>==<version>' or '<name> not installed'", line)
        name = match.group(1)
        if name not in names or name in found:
            raise VersionsParseError(number, f"one line for each of {', '.join(names)}", line)
        found[name] = match.group(2) if match.re is _INSTALLED else None
    missing = [name for name in names if name not in found]
    if missing:
        raise VersionsParseError(last + 1, f"a line for {missing[0]}", None)
    return MappingProxyType({name: found[name] for name in names})
