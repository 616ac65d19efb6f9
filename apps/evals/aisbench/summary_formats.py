"""The rows of an accuracy summary, whichever of AISBench's forms holds it (docs/aisbench-facts.md, "Summary
formats"):
  summary_<ts>.csv   plain CSV (DefaultSummarizer._output_to_file); HarborSummarizer's is a tabulate "simple"
                     table (tabulate has no "csv" format and falls back to it);
  summary_<ts>.md    a markdown table;
  summary_<ts>.txt   DefaultSummarizer: a time stamp, then blocks "tabulate format", "csv format", "markdown format",
                     "raw format", each between a line of 128 "^" and one of 128 "$" (the csv block is read: its cells
                     are as written); HarborSummarizer: a tabulate "grid" table."""

from __future__ import annotations

from pathlib import Path

from apps.evals.aisbench.output_files import OutputError, Records, csv_rows
from apps.evals.aisbench.text_tables import TextTable, find_tables, text_lines

SUMMARY_COLUMNS = ("dataset", "version", "metric", "mode")
BLOCK_START, BLOCK_END = "^" * 128, "$" * 128


def is_summary_table(table: TextTable) -> bool:
    return tuple(table.header[:len(SUMMARY_COLUMNS)]) == SUMMARY_COLUMNS


def summary_records(text: str, path: str | Path) -> tuple[int, Records]:
    """The line of the summary table's header, and its rows as (line number, {column: cell})."""
    lines = text_lines(text)
    if block := csv_block(lines):
        first_line, block_lines = block
        return first_line, csv_rows("\n".join(block_lines), path, SUMMARY_COLUMNS, first_line)
    if "," in next((line for line in lines if line.strip()), ""):
        return 1, csv_rows(text, path, SUMMARY_COLUMNS)
    table = next((t for t in find_tables(lines) if is_summary_table(t)), None)
    if table is None:
        raise OutputError(path, "", f"holds no accuracy summary table (columns {', '.join(SUMMARY_COLUMNS)}, "
                                    "then one per model)")
    return table.header_line, table.records(path, SUMMARY_COLUMNS)


def csv_block(lines: list[str]) -> tuple[int, list[str]] | None:
    """(line number of its first line, its lines) of the "csv format" block of a summary .txt."""
    for i, line in enumerate(lines[:-1]):
        if line.strip() == "csv format" and lines[i + 1] == BLOCK_START:
            end = next((j for j in range(i + 2, len(lines)) if lines[j] == BLOCK_END), len(lines))
            return i + 3, lines[i + 2:end]
    return None
