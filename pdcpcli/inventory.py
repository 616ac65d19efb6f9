"""`pdcp import`: the API reads no key files on the server (only `manage.py import_inventory` does), so a
credential's `private_key_file: PATH` is read here, on the operator's machine, and sent as `private_key`. The
line is replaced in place by a one-line quoted string, so the line numbers the server names stay the file's."""

from __future__ import annotations

import json
import re
from pathlib import Path

from .api import CliError

KEY_FILE_LINE = re.compile(r"^(?P<lead>\s*(?:-\s+)?)private_key_file:(?P<value>.*)$")


def _scalar(raw: str) -> str:
    """The value of a one-line YAML scalar: "double", 'single' or plain (a trailing # comment dropped)."""
    raw = raw.strip()
    if raw.startswith('"'):
        end = raw.rfind('"')
        return json.loads(raw[:end + 1]) if end > 0 else raw
    if raw.startswith("'"):
        end = raw.rfind("'")
        return raw[1:end].replace("''", "'") if end > 0 else raw
    return re.split(r"\s+#", raw, maxsplit=1)[0].strip()


def inline_key_files(text: str, base_dir: Path) -> tuple[str, list[str]]:
    """The text with each private_key_file line turned into a private_key line; and the files read."""
    if not re.search(r"^\s*(?:-\s+)?private_key_file:", text, re.MULTILINE):
        return text, []
    lines, read = text.splitlines(keepends=True), []
    for i, line in enumerate(lines):
        body = line.rstrip("\r\n")
        match = KEY_FILE_LINE.match(body)
        if not match:
            continue
        name = _scalar(match["value"])
        if not name:
            continue
        path = Path(name).expanduser()
        path = path if path.is_absolute() else base_dir / path
        try:
            key = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise CliError(f"line {i + 1}: cannot read the key file {path}: "
                           f"{getattr(exc, 'strerror', None) or exc}") from None
        read.append(str(path))
        lines[i] = f"{match['lead']}private_key: {json.dumps(key)}" + line[len(body):]
    return "".join(lines), read
