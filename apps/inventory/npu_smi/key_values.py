"""`npu-smi info -l`, `npu-smi info -m` and `npu-smi info -t health -i N`: their `Key : value` and column
layouts."""

from __future__ import annotations

from collections.abc import Iterator

from .values import NpuCard, NpuChipMapping, NpuSmiParseError


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
