"""`npu-smi info -t board -i N [-c CHIP]`: board facts and the node's driver and firmware versions.

Layout: docs/readiness-facts.md §3.1. Its 25.2.0 capture (910B2C) runs from `NPU ID` to `PCB ID`, where the author cut
it; `BOM ID` and `PCIe Bus Info` follow there in the 23.0.5 fixture, whose lines start with a TAB. Drivers from 25.x on
print `Product Name`, `Model`, `Manufacturer`, `Serial Number` before the versions, older ones do not. No A3 board
capture exists: the A3 product name and board id below are the simulator's own.
"""

from __future__ import annotations

import sys

BOARD = {"A3": {"product": "IT21PMAA", "board_id": "0xb0"}, "910B": {"product": "IT21HMDB02-B2", "board_id": "0x65"}}
CARD_ERROR = ("Invalid card id.\nError parameter of -i\n"  # the fixture's lines for a card the node lacks
              "Usage: npu-smi info <watch|proc|-h|-m|-l|-t type> [Options...]\n")


def kv(key: str, value) -> str:
    return f"\t{key:<31}: {value}"


def serial_number(hardware: str, npu: int) -> str:
    return f"SIM{hardware}{npu:04d}"  # `npu-smi info -l` prints the same


def render_board(hardware: str, die: dict, versions: dict) -> str:
    lines = [kv("NPU ID", die["npu"])]
    if int(versions["driver"].split(".")[0]) >= 25:
        lines += [kv("Product Name", BOARD[hardware]["product"]), kv("Model", "NA"), kv("Manufacturer", "Huawei"),
                  kv("Serial Number", serial_number(hardware, die["npu"]))]
    lines += [kv("Software Version", versions["driver"]), kv("Firmware Version", versions["firmware"]),
              kv("Compatibility", "OK"), kv("Board ID", BOARD[hardware]["board_id"]), kv("PCB ID", "A"),
              kv("BOM ID", 1), kv("PCIe Bus Info", die["bus"])]
    return "\n".join(lines) + "\n"


def _option(args: list[str], flag: str) -> int | None:
    if flag not in args:
        return None
    value = args[args.index(flag) + 1] if args.index(flag) + 1 < len(args) else ""
    return int(value) if value.isdecimal() else -1


def board_command(hardware: str, dies: list[dict], versions: dict, args: list[str]) -> int:
    npu, chip = _option(args, "-i"), _option(args, "-c")
    if npu is None:
        print("Usage: npu-smi info -t board -i ID [-c CHIP]", file=sys.stderr)
        return 2
    card = [d for d in dies if d["npu"] == npu]
    if not card:
        sys.stderr.write(CARD_ERROR)
        return 1
    mine = [d for d in card if d["chip"] == (chip or 0)]
    if not mine:
        print("Invalid chip id.\nError parameter of -c", file=sys.stderr)  # by analogy with -i; no sample exists
        return 1
    sys.stdout.write(render_board(hardware, mine[0], versions))
    return 0
