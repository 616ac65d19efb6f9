"""Comments, docstrings and docs cite files that exist in this repository (a renamed module must take its
citations with it). Paths in another project's tree are written with that project's prefix (VA:`docs/...`) and
are not checked. Relative markdown links and images in every `.md` file (`[x](<path>)`, `![x](<path>)`,
`(../README.md#anchor)`) point at files that exist and, for an anchor into a markdown file, at one of its headings."""

from __future__ import annotations

import io
import os
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


FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?!`).+?(?<!`)\1(?!`)", re.S)
# [text](target) or ![alt](target), the text possibly over several lines; an optional "title" after the target.
LINK = re.compile(r"\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s<>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:|^//")
HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$", re.M)


def _blank(match: re.Match) -> str:
    """Code keeps its line breaks (so line numbers hold) and loses everything a link could be read from."""
    return re.sub(r"[^\n]", " ", match.group(0))


def markdown_prose(text: str) -> str:
    return CODE_SPAN.sub(_blank, FENCE.sub(_blank, text))


def heading_anchors(text: str) -> set[str]:
    """The anchors GitHub gives a file's headings: lower case, markup and punctuation dropped, spaces to '-',
    a repeated one suffixed -1, -2..."""
    anchors, seen = set(), {}
    for match in HEADING.finditer(FENCE.sub(_blank, text)):
        title = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", match.group(1))
        slug = re.sub(r"[^\w\- ]", "", title.replace("`", "").replace("*", "").lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def broken_links() -> list[str]:
    broken = []
    for path in sorted(ROOT.rglob("*.md")):
        rel = path.relative_to(ROOT)
        if SKIP_DIRS & set(rel.parts) or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        prose = markdown_prose(text)
        for match in LINK.finditer(prose):
            target = match.group(1)
            if SCHEME.match(target):
                continue
            number = prose.count("\n", 0, match.start(1)) + 1
            file_part, _, anchor = target.partition("#")
            file_part = file_part.partition("?")[0]
            resolved = Path(os.path.normpath(path.parent / file_part)) if file_part else path
            if ROOT not in (resolved, *resolved.parents):
                broken.append(f"{rel}:{number}: {target} (outside the repository)")
            elif not resolved.exists():
                broken.append(f"{rel}:{number}: {target} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor.lower() not in heading_anchors(
                    resolved.read_text(errors="replace")):
                broken.append(f"{rel}:{number}: {target} (no such heading)")
    return broken


def test_every_relative_markdown_link_resolves():
    assert broken_links() == []


def test_a_broken_markdown_link_is_found(tmp_path, monkeypatch):
    (tmp_path / "docs" / "img").mkdir(parents=True)
    (tmp_path / "docs" / "img" / "shot.png").write_bytes(b"")
    (tmp_path / "README.md").write_text(
        "# The project\n\n![a picture\nover two lines](docs/img/shot.png)\n"
        "[here](docs/here.md) and [gone](docs/gone.md) and [web](https://example.com/x.md)\n"
        "[a heading](docs/here.md#what-it-does) and [no heading](docs/here.md#nowhere)\n"
        "`[in code](docs/code-span.md)`\n\n```md\n[in a fence](docs/fenced.md)\n```\n"
        "[outside](../elsewhere.md) [this file](#the-project) [not here](#gone)\n")
    (tmp_path / "docs" / "here.md").write_text(
        "# Here\n\n## What it *does*\n\nBack to [the README](../README.md#the-project), "
        "[missing](../MISSING.md#x) and [the picture](img/shot.png \"title\").\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert broken_links() == [
        "README.md:5: docs/gone.md (no such file)",
        "README.md:6: docs/here.md#nowhere (no such heading)",
        "README.md:12: ../elsewhere.md (outside the repository)",
        "README.md:12: #gone (no such heading)",
        "docs/here.md:5: ../MISSING.md#x (no such file)",
    ]
