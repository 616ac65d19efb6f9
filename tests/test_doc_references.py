"""Comments, docstrings and docs cite files that exist in this repository (a renamed module must take its
citations with it). Paths in another project's tree are written with that project's prefix (VA:`docs/...`) and
are not checked."""

from __future__ import annotations

import io
import re
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOP = ("apps", "controlplane", "sshexec", "pdproxy", "simcluster", "plainyaml", "docs", "tests", "bench", "scripts",
       "static", "templates", "examples")
CITATION = re.compile(r"(?<![\w/.:-])(?<!:`)((?:" + "|".join(TOP) + r")/[A-Za-z0-9_./*<>{}-]*[A-Za-z0-9_/])")
SKIP_DIRS = {".venv", ".git", "data", "node_modules", "vendor", "__pycache__"}


def python_prose(text: str) -> list[tuple[int, str]]:
    """Comments and docstrings (strings that are whole statements) of a Python file, with their line numbers."""
    out, previous = [], tokenize.NEWLINE
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            out.append((tok.start[0], tok.string))
        elif tok.type == tokenize.STRING and previous in (tokenize.NEWLINE, tokenize.NL, tokenize.INDENT,
                                                         tokenize.DEDENT):
            out.extend((tok.start[0] + i, line) for i, line in enumerate(tok.string.splitlines()))
        if tok.type not in (tokenize.COMMENT, tokenize.NL):
            previous = tok.type
    return out


def cited_files():
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        if SKIP_DIRS & set(rel.parts) or not path.is_file():
            continue
        if path.suffix == ".py":
            yield rel, python_prose(path.read_text())
        elif path.suffix in (".md", ".html", ".sh") or path.name in ("Makefile", "Dockerfile"):
            yield rel, list(enumerate(path.read_text(errors="replace").splitlines(), 1))


def missing_citations() -> list[str]:
    missing = []
    for rel, lines in cited_files():
        for number, line in lines:
            for match in CITATION.finditer(line):
                cited = match.group(1).rstrip("/.")
                if not any(c in cited for c in "*<>{}") and not (ROOT / cited).exists():
                    missing.append(f"{rel}:{number}: {cited}")
    return missing


def test_every_cited_file_exists():
    assert missing_citations() == []


def test_a_citation_of_a_missing_file_is_found(tmp_path, monkeypatch):
    (tmp_path / "apps").mkdir()
    (tmp_path / "apps" / "here.py").write_text('"""See apps/here.py and apps/gone.py."""\n# and docs/nowhere.md\n'
                                               'x = "apps/data-not-a-citation.py"\n')
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert missing_citations() == ["apps/here.py:1: apps/gone.py", "apps/here.py:2: docs/nowhere.md"]
