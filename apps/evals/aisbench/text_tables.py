"""The tables in a text, as AISBench prints and writes them with tabulate or by hand (docs/aisbench-facts.md,
"Summary formats" and "Console tables"):

  simple (tabulate's default; the accuracy table on the console and in summary_<ts>.txt):
      dataset    version    metric    mode      mock-chat
      ---------  ---------  --------  ------  -----------
      aime4      4835d7     accuracy  gen           75.00
  markdown (summary_<ts>.md, printed after "The markdown format results is as below:"):
      | dataset | version | metric | mode | mock-chat |
      |----- | ----- | ----- | ----- | -----|
  grid, fancy_grid, psql (the perf tables on the console; HarborSummarizer's summary .txt):
      ╒════════╤═══════╕      +--------+-------+
      │ Stage  │ Value │      | Stage  | Value |
      ╞════════╪═══════╡      +========+=======+

Each table keeps its cells as written, with line numbers of the text (1-based)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from apps.evals.aisbench.output_files import OutputError, Records, strip_ansi

SIMPLE_RULE = re.compile(r"^-+(?:  -+)+$")  # two columns at least
MARKDOWN_RULE = re.compile(r"^\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?$")
GRID_RULE = re.compile(r"^(?:\+[-=+:]+\+|\|[-+:]+\||[╒╞├╘][═─╤╪┼╧]+[╕╡┤╛])$")
GRID_ROW = re.compile(r"^[|│].*[|│]$")


@dataclass
class TextTable:
    header: list[str]
    header_line: int
    rows: list[tuple[int, list[str]]]

    def records(self, path: str | Path, required: tuple[str, ...]) -> Records:
        """Rows as {column: cell}, like output_files.read_csv."""
        missing = [c for c in required if c not in self.header]
        if missing:
            raise OutputError(path, f"line {self.header_line}", f"missing column(s) {', '.join(missing)}")
        for number, cells in self.rows:
            if len(cells) != len(self.header):
                raise OutputError(path, f"line {number}", "has a different number of cells than the header")
            yield number, dict(zip(self.header, cells, strict=True))


def text_lines(text: str) -> list[str]:
    """The lines of pasted or written text without ANSI codes; a line rewritten with \\r (tqdm) keeps its last
    state, so that line numbers are those an editor shows."""
    return [strip_ansi(line.rstrip("\r")).rsplit("\r", 1)[-1].rstrip() for line in text.split("\n")]


def find_tables(lines: list[str]) -> list[TextTable]:
    tables, i = [], 0
    while i < len(lines):
        line = lines[i]
        following = lines[i + 1] if i + 1 < len(lines) else ""
        if GRID_RULE.match(line.strip()):
            table, i = _grid(lines, i)
        elif line.lstrip().startswith("|") and MARKDOWN_RULE.match(following.strip()) and "-" in following:
            table, i = _markdown(lines, i)
        elif line.strip() and SIMPLE_RULE.match(following.strip()):
            table, i = _simple(lines, i)
        else:
            table, i = None, i + 1
        if table is not None:
            tables.append(table)
    return tables


def _pipe_cells(line: str) -> list[str]:
    inner = line.strip()
    inner = inner[1:] if inner[:1] in "|│" else inner
    inner = inner[:-1] if inner[-1:] in "|│" else inner
    return [cell.strip() for cell in re.split(r"[|│]", inner)]


def _grid(lines: list[str], start: int) -> tuple[TextTable | None, int]:
    """Up to its bottom rule: "╘...╛", or a rule followed by another (the next table's top, printed right after)."""
    i, data = start, []
    while i < len(lines) and (GRID_RULE.match(lines[i].strip()) or GRID_ROW.match(lines[i].strip())):
        line = lines[i].strip()
        if GRID_ROW.match(line):
            data.append((i + 1, _pipe_cells(line)))
        elif i > start and GRID_RULE.match(lines[i - 1].strip()):
            break
        i += 1
        if line.startswith("╘"):
            break
    if not data:
        return None, i
    (header_line, header), rows = data[0], data[1:]
    return TextTable(header, header_line, rows), i


def _markdown(lines: list[str], start: int) -> tuple[TextTable, int]:
    header, i, rows = _pipe_cells(lines[start]), start + 2, []
    while i < len(lines) and lines[i].lstrip().startswith("|"):
        rows.append((i + 1, _pipe_cells(lines[i])))
        i += 1
    return TextTable(header, start + 1, rows), i


def _simple(lines: list[str], start: int) -> tuple[TextTable, int]:
    """Columns are where the rule's dashes are; a row ends the table when it is wider than the rule or has text
    in the gaps between columns (a log line printed right after the table)."""
    rule = lines[start + 1]
    spans = [m.span() for m in re.finditer(r"-+", rule)]
    gaps = [p for (_, end), (begin, _) in zip(spans, spans[1:], strict=False) for p in range(end, begin)]
    i, rows = start + 2, []
    while i < len(lines) and lines[i].strip() and len(lines[i]) <= len(rule) and all(
            p >= len(lines[i]) or lines[i][p] == " " for p in gaps):
        rows.append((i + 1, _slice(lines[i], spans)))
        i += 1
    return TextTable(_slice(lines[start], spans), start + 1, rows), i


def _slice(line: str, spans: list[tuple[int, int]]) -> list[str]:
    return [line[begin:end].strip() for begin, end in spans]
