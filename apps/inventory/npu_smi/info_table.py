"""`npu-smi info`: the die table (910B/A2 and A3 layouts) and the process table below it."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .values import NpuDie, NpuProcess, NpuSmiInfo, NpuSmiParseError

_SEPARATOR = re.compile(r"^\+[-=+]*$")
_VERSION = re.compile(r"npu-smi\s+(\S+)\s+Version:\s*(\S+)")
_ROW1_ID_NAME = re.compile(r"^(\d+)\s+(\S.*)$")
_ROW1_METRICS = re.compile(r"^(\S+)\s+(\S+)\s+(\S+)\s*/\s*(\S+)$")
_ROW2_METRICS = re.compile(r"^(\S+)\s+(\S+)\s*/\s*(\S+)\s+(\S+)\s*/\s*(\S+)$")
_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")
_NO_PROCESS = re.compile(r"^No running processes found in NPU (\d+)$")
_NPU_CHIP = re.compile(r"^(\d+)\s+(\d+)$")

_ROW2_EXPECTED = "'Chip | Bus-Id | AICore Memory HBM' row"
# Bounds of what the inventory stores (Npu: positive 32-bit integers, a name of 64 characters); npu-smi never
# prints more, so a value past them is garbled output.
_MAX_INT = 2**31 - 1
_MAX_NAME = 64


@dataclass(frozen=True)
class _Line:
    number: int
    text: str

    def cells(self) -> list[str]:
        return [c.strip() for c in self.text.strip()[1:-1].split("|")]


class _Lines:
    """The table rows of the output, numbered as in the original text; blank lines skipped."""

    def __init__(self, text: str):
        self._lines = [_Line(i, t.rstrip()) for i, t in enumerate(text.splitlines(), 1) if t.strip()]
        self._pos = 0
        self.last_number = len(text.splitlines())

    def peek(self) -> _Line | None:
        return self._lines[self._pos] if self._pos < len(self._lines) else None

    def take(self) -> _Line | None:
        line = self.peek()
        if line is not None:
            self._pos += 1
        return line

    def skip_separators(self) -> None:
        while (line := self.peek()) is not None and _SEPARATOR.match(line.text.strip()):
            self._pos += 1


def _fail(line: _Line | None, lines: _Lines, expected: str) -> NpuSmiParseError:
    if line is None:
        return NpuSmiParseError(lines.last_number + 1, expected, None)
    return NpuSmiParseError(line.number, expected, line.text.strip())


def _row(line: _Line | None, lines: _Lines, n_cells: int, expected: str) -> list[str]:
    """The cells of a `| a | b | c |` row, or a parse error naming what was expected."""
    if line is None:
        raise _fail(None, lines, expected)
    stripped = line.text.strip()
    if not stripped.startswith("|"):
        raise _fail(line, lines, expected)
    if not stripped.endswith("|") or len(stripped) < 2:
        raise _fail(line, lines, f"{expected} ending in '|' (the line is cut off)")
    cells = line.cells()
    if len(cells) != n_cells:
        raise _fail(line, lines, f"{expected} with {n_cells} cells")
    return cells


def _int(value: str, line: _Line, lines: _Lines, what: str) -> int:
    if not value.isdecimal():
        raise _fail(line, lines, f"an integer {what} (not {value!r})")
    if len(value) > 10 or int(value) > _MAX_INT:
        raise _fail(line, lines, f"an integer {what} up to {_MAX_INT} (not {value[:40]!r})")
    return int(value)


def _float_or_dash(value: str, line: _Line, lines: _Lines, what: str) -> float | None:
    if value == "-":
        return None
    try:
        return float(value)
    except ValueError:
        raise _fail(line, lines, f"a number or '-' for {what} (not {value!r})") from None


def npu_smi_parse_info(text: str) -> NpuSmiInfo:
    """Parse the summary table printed by `npu-smi info` (die rows, then the process section)."""
    lines = _Lines(text)
    if lines.peek() is None:
        raise NpuSmiParseError(None, "the `npu-smi info` table", "empty output")
    lines.skip_separators()
    version = None
    first = lines.peek()
    if first is not None and _VERSION.search(first.text):
        version = _VERSION.search(first.text).group(2)
        lines.take()
        lines.skip_separators()

    head1 = lines.take()
    cells = _row(head1, lines, 3, "header row 'NPU Name | Health | Power(W) Temp(C) Hugepages-Usage(page)'")
    if not (cells[0].split()[:2] == ["NPU", "Name"] and cells[1] == "Health"):
        raise _fail(head1, lines, "header row 'NPU Name | Health | Power(W) Temp(C) Hugepages-Usage(page)'")
    head2 = lines.take()
    cells = _row(head2, lines, 3, "header row 'Chip [Phy-ID] | Bus-Id | AICore(%) Memory-Usage(MB) HBM-Usage(MB)'")
    if not (cells[0].startswith("Chip") and cells[1] == "Bus-Id" and "HBM-Usage" in cells[2]):
        raise _fail(head2, lines, "header row 'Chip [Phy-ID] | Bus-Id | AICore(%) Memory-Usage(MB) HBM-Usage(MB)'")
    has_phy = cells[0].split() == ["Chip", "Phy-ID"]

    dies: list[NpuDie] = []
    while True:
        lines.skip_separators()
        line = lines.peek()
        if line is None or "Process id" in line.text:
            break
        dies.append(_parse_die(lines, has_phy))
    if not dies:
        raise _fail(lines.peek(), lines, "at least one NPU row after the header")

    processes: tuple[NpuProcess, ...] = ()
    idle: tuple[int, ...] = ()
    if lines.peek() is not None:
        processes, idle = _parse_processes(lines)
    return NpuSmiInfo(version=version, dies=tuple(dies), processes=processes, idle_npu_ids=idle)


def _parse_die(lines: _Lines, has_phy: bool) -> NpuDie:
    row1_expected = "'NPU Name | Health | Power Temp Hugepages' row"
    line1 = lines.take()
    c1 = _row(line1, lines, 3, row1_expected)
    m = _ROW1_ID_NAME.match(c1[0])
    if not m:
        raise _fail(line1, lines, f"{row1_expected} starting with an NPU id")
    npu_id, name = _int(m.group(1), line1, lines, "NPU id"), m.group(2).strip()
    if len(name) > _MAX_NAME:
        raise _fail(line1, lines, f"an NPU name of at most {_MAX_NAME} characters")
    if not c1[1]:
        raise _fail(line1, lines, f"a health value in NPU {npu_id}'s first row")
    m = _ROW1_METRICS.match(c1[2])
    if not m:
        raise _fail(line1, lines, "'<power> <temp> <used> / <total>' in the third cell")
    power = _float_or_dash(m.group(1), line1, lines, "power")
    temp = _int(m.group(2), line1, lines, "temperature")
    huge_used = _int(m.group(3), line1, lines, "hugepages used")
    huge_total = _int(m.group(4), line1, lines, "hugepages total")

    expected2 = f"{_ROW2_EXPECTED} after NPU {npu_id}'s first row"
    line2 = lines.take()
    if line2 is not None and _SEPARATOR.match(line2.text.strip()):
        raise _fail(line2, lines, expected2)
    c2 = _row(line2, lines, 3, expected2)
    chip_cell = c2[0].split()
    if len(chip_cell) != (2 if has_phy else 1) or not all(v.isdecimal() for v in chip_cell):
        raise _fail(line2, lines, f"{expected2}, first cell 'Chip{' Phy-ID' if has_phy else ''}'")
    chip_id = _int(chip_cell[0], line2, lines, "chip id")
    phy_id = _int(chip_cell[1], line2, lines, "Phy-ID") if has_phy else None
    if not _BUS_ID.match(c2[1]):
        raise _fail(line2, lines, f"a PCI bus id like 0000:C1:00.0 in NPU {npu_id}'s second row")
    m = _ROW2_METRICS.match(c2[2])
    if not m:
        raise _fail(line2, lines, "'<aicore> <used> / <total> <hbm used> / <hbm total>' in the third cell")
    return NpuDie(
        npu_id=npu_id, name=name, health=c1[1], power_w=power, temp_c=temp,
        hugepages_used=huge_used, hugepages_total=huge_total,
        chip_id=chip_id, phy_id=phy_id, bus_id=c2[1],
        aicore_percent=_int(m.group(1), line2, lines, "AICore %"),
        memory_used_mb=_int(m.group(2), line2, lines, "memory used"),
        memory_total_mb=_int(m.group(3), line2, lines, "memory total"),
        hbm_used_mb=_int(m.group(4), line2, lines, "HBM used"),
        hbm_total_mb=_int(m.group(5), line2, lines, "HBM total"),
    )


def npu_smi_parse_processes(text: str) -> tuple[tuple[NpuProcess, ...], tuple[int, ...]]:
    """Parse the process section alone (header `NPU Chip | Process id | ...`): (processes, idle NPU ids)."""
    lines = _Lines(text)
    lines.skip_separators()
    if lines.peek() is None:
        raise NpuSmiParseError(None, "the `npu-smi info` process section", "empty output")
    return _parse_processes(lines)


def _parse_processes(lines: _Lines) -> tuple[tuple[NpuProcess, ...], tuple[int, ...]]:
    header_line = lines.take()
    expected = "process header 'NPU Chip | Process id | Process name | Process memory(MB) ...'"
    if header_line is None or not header_line.text.strip().startswith("|"):
        raise _fail(header_line, lines, expected)
    header = header_line.cells()
    columns = {name: i for i, name in enumerate(header)}
    needed = ("Process id", "Process name", "Process memory(MB)")
    if header[0].split() != ["NPU", "Chip"] or any(n not in columns for n in needed):
        raise _fail(header_line, lines, expected)
    container_col = columns.get("Process id in container")

    processes: list[NpuProcess] = []
    idle: list[int] = []
    while True:
        lines.skip_separators()
        line = lines.take()
        if line is None:
            break
        stripped = line.text.strip()
        if stripped.startswith("|") and (m := _NO_PROCESS.match(stripped.strip("|").strip())):
            idle.append(_int(m.group(1), line, lines, "NPU id"))
            continue
        cells = _row(line, lines, len(header), "a process row or 'No running processes found in NPU n'")
        m = _NPU_CHIP.match(cells[0])
        if not m:
            raise _fail(line, lines, "'<npu> <chip>' in the first cell of a process row")
        container_pid = None
        if container_col is not None and cells[container_col] != "NA":
            container_pid = _int(cells[container_col], line, lines, "container pid")
        processes.append(NpuProcess(
            npu_id=_int(m.group(1), line, lines, "NPU id"), chip_id=_int(m.group(2), line, lines, "chip id"),
            pid=_int(cells[columns["Process id"]], line, lines, "process id"),
            name=cells[columns["Process name"]],
            memory_mb=_int(cells[columns["Process memory(MB)"]], line, lines, "process memory"),
            container_pid=container_pid,
        ))
    return tuple(processes), tuple(idle)
