"""`npu-smi info -t board -i N` (docs/readiness-facts.md §3.1): `Key : value` lines, indented by a TAB or spaces."""

from __future__ import annotations

from types import MappingProxyType

from .values import BoardInfo, VersionsParseError

_MISSING_CARD = "Invalid card id."  # npu-smi's answer for a card that does not exist, then its usage text


def npu_smi_parse_board(text: str) -> BoardInfo:
    """NPU ID, Software Version (the driver) and Firmware Version are required; the rest is kept by name."""
    fields: dict[str, str] = {}
    lines: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line == _MISSING_CARD:
            raise VersionsParseError(number, "board 'Key : value' lines (npu-smi says the card id does not exist)",
                                     line)
        key, sep, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise VersionsParseError(number, "a board 'Key : value' line", line)
        if key in fields:
            raise VersionsParseError(number, f"{key} once (first on line {lines[key]})", line)
        fields[key], lines[key] = value, number
    if not fields:
        raise VersionsParseError(None, "board 'Key : value' lines", "empty output")
    end = len(text.splitlines()) + 1
    for key in ("NPU ID", "Software Version", "Firmware Version"):
        if key not in fields:
            raise VersionsParseError(end, f"a '{key} : ...' line", None)
    if not fields["NPU ID"].isdecimal():
        raise VersionsParseError(lines["NPU ID"], "an integer after 'NPU ID :'", fields["NPU ID"])
    return BoardInfo(npu_id=int(fields["NPU ID"]), software_version=fields["Software Version"],
                     firmware_version=fields["Firmware Version"], compatibility=fields.get("Compatibility"),
                     board_id=fields.get("Board ID"), product_name=fields.get("Product Name"),
                     serial_number=fields.get("Serial Number"), fields=MappingProxyType(fields))
