"""Prints the table of reliability figures (docs/reliability.md) from what the last runs of the cases wrote to
$PDCP_DATA_DIR/reliability/*.json (tests/reliability/figures.py)."""

import json
import os
import sys
from pathlib import Path


def cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def main() -> int:
    folder = Path(os.environ.get("PDCP_DATA_DIR", "data")) / "reliability"
    rows = []
    for path in sorted(folder.glob("*.json")):
        try:
            rows.append(json.loads(path.read_text()))
        except (OSError, ValueError) as exc:
            print(f"{path}: unreadable ({exc})", file=sys.stderr)
    if not rows:
        print(f"no figures in {folder}: run `make reliability` (and `make test`) first", file=sys.stderr)
        return 1
    print("| case | what held | figure | measured | command |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {cell(r['case'])} | {cell(r['held'])} | {cell(r['figure'])} | {cell(r['when'])} "
              f"| `{cell(r['command'])}` |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
