"""Parse real `npu-smi` output (910B/A2 and A3 layouts) into typed values; no Django import here.

Every parser is strict: output it does not recognise raises NpuSmiParseError naming the line and what
was expected, because a silently half-parsed table would put wrong NPU ids into the inventory.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = [
    "NPU_HEALTH_VALUES",
    "NpuCard",
    "NpuChipMapping",
    "NpuDie",
    "NpuProcess",
    "NpuSmiInfo",
    "NpuSmiParseError",
    "npu_smi_parse_health",
    "npu_smi_parse_info",
    "npu_smi_parse_list",
    "npu_smi_parse_map",
    "npu_smi_parse_processes",
]

# Values npu-smi prints for health; others are passed through (newer drivers may add some).
NPU_HEALTH_VALUES = ("OK", "Warning", "Alarm", "Critical")


def npu_smi_missing(node_name: str) -> str:
    return (f"`npu-smi` is not installed or not on PATH on {node_name} "
            "(install the Ascend driver, or add its bin directory to the login PATH)")


class NpuSmiParseError(ValueError):
    """Output that does not have the layout we know. `line` is 1-based, None when the text is empty."""

    def __init__(self, line: int | None, expected: str, got: str | None):
        self.line = line
        self.expected = expected
        self.got = got
        where = f"line {line}: " if line is not None else ""
        seen = "end of output" if got is None else repr(got)
        super().__init__(f"{where}expected {expected}, got {seen}")


@dataclass(frozen=True)
class NpuDie:
    """One row pair of the `npu-smi info` summary table: a chip (910B) or one die of an A3 NPU."""

    npu_id: int
    name: str
    health: str
    power_w: float | None  # "-" on the second die of an A3 NPU: power is reported per NPU
    temp_c: int
    hugepages_used: int
    hugepages_total: int
    chip_id: int
    phy_id: int | None  # only the A3 layout has the `Chip  Phy-ID` column
    bus_id: str
    aicore_percent: int
    memory_used_mb: int
    memory_total_mb: int
    hbm_used_mb: int
    hbm_total_mb: int

    @property
    def logical_id(self) -> int:
        """The index ASCEND_RT_VISIBLE_DEVICES counts: the Phy-ID (0-15) on A3, the NPU id on 910B.

        `npu-smi info -m` (Chip Logic ID) is the authority when the two ever disagree.
        """
        return self.phy_id if self.phy_id is not None else self.npu_id


@dataclass(frozen=True)
class NpuProcess:
    npu_id: int
    chip_id: int
    pid: int
    name: str
    memory_mb: int
    container_pid: int | None = None  # newer drivers: `Process id in container` ("NA" -> None)


@dataclass(frozen=True)
class NpuSmiInfo:
    version: str | None
    dies: tuple[NpuDie, ...]
    processes: tuple[NpuProcess, ...]
    idle_npu_ids: tuple[int, ...]  # from "No running processes found in NPU n"

    def die_by_logical_id(self, logical_id: int) -> NpuDie:
        for die in self.dies:
            if die.logical_id == logical_id:
                return die
        raise KeyError(logical_id)


@dataclass(frozen=True)
class NpuCard:
    """One card of `npu-smi info -l`."""

    npu_id: int
    product_name: str
    serial_number: str
    chip_count: int | None


@dataclass(frozen=True)
class NpuChipMapping:
    """One row of `npu-smi info -m`. Mcu rows have no logic id and are not compute devices."""

    npu_id: int
    chip_id: int
    logic_id: int | None
    phy_id: int | None
    chip_name: str

    @property
    def is_compute(self) -> bool:
        return self.logic_id is not None


# ---------------------------------------------------------------------------------------------------
# `npu-smi info`

_SEPARATOR = re.compile(r"^\+[-=+]*$")
_VERSION = re.compile(r"npu-smi\s+(\S+)\s+Version:\s*(\S+)")
_ROW1_ID_NAME = re.compile(r"^(\d+)\s+(\S.*)$")
_ROW1_METRICS = re.compile(r"^(\S+)\s+(\S+)\s+(\S+)\s*/\s*(\S+)$")
_ROW2_METRICS = re.compile(r"^(\S+)\s+(\S+)\s*/\s*(\S+)\s+(\S+)\s*/\s*(\S+)$")
_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")
_NO_PROCESS = re.compile(r"^No running processes found in NPU (\d+)$")
_NPU_CHIP = re.compile(r"^(\d+)\s+(\d+)$")

_ROW2_EXPECTED = "'Chip | Bus-Id | AICore Memory HBM' row"


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
    npu_id, name = int(m.group(1)), m.group(2).strip()
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
    chip_id = int(chip_cell[0])
    phy_id = int(chip_cell[1]) if has_phy else None
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
            idle.append(int(m.group(1)))
            continue
        cells = _row(line, lines, len(header), "a process row or 'No running processes found in NPU n'")
        m = _NPU_CHIP.match(cells[0])
        if not m:
            raise _fail(line, lines, "'<npu> <chip>' in the first cell of a process row")
        container_pid = None
        if container_col is not None and cells[container_col] != "NA":
            container_pid = _int(cells[container_col], line, lines, "container pid")
        processes.append(NpuProcess(
            npu_id=int(m.group(1)), chip_id=int(m.group(2)),
            pid=_int(cells[columns["Process id"]], line, lines, "process id"),
            name=cells[columns["Process name"]],
            memory_mb=_int(cells[columns["Process memory(MB)"]], line, lines, "process memory"),
            container_pid=container_pid,
        ))
    return tuple(processes), tuple(idle)


# ---------------------------------------------------------------------------------------------------
# `npu-smi info -l`, `npu-smi info -m`, `npu-smi info -t health -i N`

def _key_values(text: str) -> Iterator[tuple[int, str, str]]:
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        key, sep, value = raw.partition(":")
        if not sep:
            raise NpuSmiParseError(number, "a 'Key : value' line", raw.strip())
        yield number, key.strip(), value.strip()


def npu_smi_parse_list(text: str) -> tuple[NpuCard, ...]:
    """Parse `npu-smi info -l`: `Total Count : N`, then one block per card starting at `NPU ID : n`."""
    if not text.strip():
        raise NpuSmiParseError(None, "the `npu-smi info -l` listing", "empty output")
    total: int | None = None
    total_line = 0
    cards: list[dict] = []
    for number, key, value in _key_values(text):
        if key == "Total Count":
            if not value.isdecimal():
                raise NpuSmiParseError(number, "an integer after 'Total Count :'", value)
            total, total_line = int(value), number
        elif key == "NPU ID":
            if not value.isdecimal():
                raise NpuSmiParseError(number, "an integer after 'NPU ID :'", value)
            cards.append({"npu_id": int(value), "product_name": "", "serial_number": "", "chip_count": None})
        elif not cards:
            raise NpuSmiParseError(number, "'Total Count' or 'NPU ID' before card fields", f"{key} : {value}")
        elif key == "Product Name":
            cards[-1]["product_name"] = value
        elif key == "Serial Number":
            cards[-1]["serial_number"] = value
        elif key == "Chip Count":
            if not value.isdecimal():
                raise NpuSmiParseError(number, "an integer after 'Chip Count :'", value)
            cards[-1]["chip_count"] = int(value)
    if total is None:
        raise NpuSmiParseError(None, "a 'Total Count : N' line", "none")
    if total != len(cards):
        raise NpuSmiParseError(total_line, f"'Total Count' to match the {len(cards)} NPU ID blocks",
                               f"Total Count : {total}")
    return tuple(NpuCard(**card) for card in cards)


_MAP_COLUMNS = ("NPU ID", "Chip ID", "Chip Logic ID", "Chip Phy-ID")


def npu_smi_parse_map(text: str) -> tuple[NpuChipMapping, ...]:
    """Parse `npu-smi info -m`: header `NPU ID  Chip ID  Chip Logic ID  [Chip Phy-ID]  Chip Name`."""
    numbered = [(n, t.strip()) for n, t in enumerate(text.splitlines(), 1) if t.strip()]
    if not numbered:
        raise NpuSmiParseError(None, "the `npu-smi info -m` table", "empty output")
    header_no, header = numbered[0]
    positions = {c: header.find(c) for c in _MAP_COLUMNS if c in header}
    name_at = header.find("Chip Name")
    required = ("NPU ID", "Chip ID", "Chip Logic ID")
    if any(c not in positions for c in required) or name_at < max(positions.values(), default=0):
        raise NpuSmiParseError(header_no, "header 'NPU ID  Chip ID  Chip Logic ID  [Chip Phy-ID]  Chip Name'",
                               header)
    order = sorted(positions, key=positions.get)
    rows: list[NpuChipMapping] = []
    for number, line in numbered[1:]:
        words = line.split()
        if len(words) <= len(order):
            raise NpuSmiParseError(number, f"{len(order)} ids and a chip name", line)
        values: dict[str, int | None] = {}
        for column, word in zip(order, words, strict=False):
            dash_ok = column in ("Chip Logic ID", "Chip Phy-ID")
            if word == "-" and dash_ok:
                values[column] = None
            elif word.isdecimal():
                values[column] = int(word)
            else:
                raise NpuSmiParseError(number, f"an integer{' or -' if dash_ok else ''} for {column}", line)
        rows.append(NpuChipMapping(
            npu_id=values["NPU ID"], chip_id=values["Chip ID"], logic_id=values["Chip Logic ID"],
            phy_id=values.get("Chip Phy-ID"), chip_name=" ".join(words[len(order):]),
        ))
    if not rows:
        raise NpuSmiParseError(header_no + 1, "at least one chip row after the header", None)
    return tuple(rows)


def npu_smi_parse_health(text: str) -> str:
    """The value of the first `... Health ... : <value>` line of `npu-smi info -t health -i N`.

    Same rule as vllm-ascend's worker health check; the caller decides what non-"OK" means.
    """
    if not text.strip():
        raise NpuSmiParseError(None, "a 'Health : <value>' line", "empty output")
    for number, raw in enumerate(text.splitlines(), 1):
        key, sep, value = raw.partition(":")
        if "Health" in key and sep:
            if not value.strip():
                raise NpuSmiParseError(number, "a value after 'Health :'", raw.strip())
            return value.strip()
    raise NpuSmiParseError(None, "a 'Health : <value>' line", f"{len(text.splitlines())} lines without one")
