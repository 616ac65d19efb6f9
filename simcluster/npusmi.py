"""`npu-smi` emulator: the real output layouts (docs/ascend-pd-launch-facts.md §6) with values from the node's engines.

Supported: `npu-smi info`, `info -l`, `info -m`, `info -t health -i N [-c CHIP]`, `info -t board -i N [-c CHIP]`
(simcluster/npusmi_board.py).
Hardware "A3" (Atlas 800I A3): 8 NPU ids x 2 dies, die logic id = Phy-ID = 2*npu + chip, name
Ascend910. Hardware "910B" (Atlas 800I A2): 8 NPU ids x 1 die, name 910B2. `ASCEND_RT_VISIBLE_DEVICES`
counts logic ids, so an engine registered on dies [2, 3] shows on NPU 1 chips 0 and 1 (A3).
Values: HBM used = idle baseline + the HBM of every engine on that die; AICore % and power follow the
engines' load; health is Alarm for dies named in faults.json "npu_alarm". A process not ours (faults.json
"npu_foreign_process") shows in the process table and holds HBM like an engine. The version in the header is the
node's driver version (node.json "versions").
"""

from __future__ import annotations

import sys
import zlib

from simcluster import nodestate, npusmi_board
from simcluster.spec import DEFAULT_VERSIONS

HBM_TOTAL_MB = 65536
SEP = "+" + "-" * 96 + "+"
COLS = "+" + "-" * 27 + "+" + "-" * 15 + "+" + "-" * 52 + "+"
EQ = "+" + "=" * 27 + "+" + "=" * 15 + "+" + "=" * 52 + "+"
FOREIGN_NAME = "python3"  # someone else's job: the table truncates names, so a name alone tells little


def layout(hardware: str) -> tuple[int, int, str]:
    """(NPU ids, dies per NPU id, chip name)."""
    return (8, 2, "Ascend910") if hardware == "A3" else (8, 1, "910B2")


def die_state(hardware: str, engines: list[dict], alarms: set[int], foreign: dict | None = None) -> list[dict]:
    """foreign: faults.json "npu_foreign_process", {"<logic id>": {"pid", "mb"}}."""
    npus, chips, name = layout(hardware)
    dies = []
    for logic in range(npus * chips):
        npu, chip = divmod(logic, chips)
        on_die = [e for e in engines if logic in e.get("devices", [])]
        # Deterministic per-die jitter so two dies never print identical idle values.
        jitter = zlib.crc32(f"{hardware}{logic}".encode()) % 200
        load = max((e.get("load", 0.0) for e in on_die), default=0.0)
        procs = [(e["pid"], int(e.get("hbm_mb", 0))) for e in on_die]
        if str(logic) in (foreign or {}):
            procs.append((foreign[str(logic)]["pid"], int(foreign[str(logic)]["mb"]), FOREIGN_NAME))
        dies.append({
            "logic": logic, "npu": npu, "chip": chip, "name": name,
            "health": "Alarm" if logic in alarms else "OK",
            "power": "-" if chip == 1 else f"{95.0 + jitter / 20 + 240 * load:.1f}",
            "temp": 35 + jitter % 4 + int(15 * load),
            "aicore": int(round(100 * load)),
            "hbm_used": 3186 + jitter + sum(p[1] for p in procs),
            "bus": f"0000:{0x9D + 2 * logic:02X}:00.0" if hardware == "A3" else f"0000:{0xC1 + logic:02X}:00.0",
            "procs": procs,
        })
    return dies


def row_pair(die: dict, hardware: str) -> list[str]:
    first = f" {die['npu']:<6}{die['name']:<20}"
    chip = f" {die['chip']:<6}{die['logic']:<20}" if hardware == "A3" else f" {die['chip']:<26}"
    usage = f" {die['power']:<12}{die['temp']:<18}{0:<5}/ {0:<14}"
    mem = f" {die['aicore']:<12}{0:<5}/ {0:<11}{die['hbm_used']:<5}/ {HBM_TOTAL_MB:<14}"
    return [f"|{first}| {die['health']:<14}|{usage}|", f"|{chip}| {die['bus']:<14}|{mem}|"]


def render_info(hardware: str, dies: list[dict], driver: str = DEFAULT_VERSIONS["driver"]) -> str:
    second = "Chip  Phy-ID" if hardware == "A3" else "Chip"
    out = [SEP, f"| {'npu-smi ' + driver:<33}{'Version: ' + driver:<62}|", COLS,
           f"| {'NPU   Name':<26}| {'Health':<14}| {'Power(W)    Temp(C)           Hugepages-Usage(page)':<51}|",
           f"| {second:<26}| {'Bus-Id':<14}| {'AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)':<51}|", EQ]
    for die in dies:
        out += row_pair(die, hardware)
        out.append(SEP if hardware == "A3" and die["chip"] == 0 else EQ)
    out += [COLS.replace("+" + "-" * 52 + "+", "+" + "-" * 26 + "+" + "-" * 25 + "+"),
            f"| {'NPU     Chip':<26}| {'Process id':<14}| {'Process name':<25}| {'Process memory(MB)':<24}|",
            EQ.replace("+" + "=" * 52 + "+", "+" + "=" * 26 + "+" + "=" * 25 + "+")]
    npus = sorted({d["npu"] for d in dies})
    for npu in npus:
        procs = [(d, *p) for d in dies if d["npu"] == npu for p in d["procs"]]
        if not procs:
            out.append(f"| {'No running processes found in NPU ' + str(npu):<95}|")
        for die, pid, mb, *name in procs:
            out.append(f"| {die['npu']:<8}{die['chip']:<18}| {pid:<14}| {(name or ['python'])[0]:<25}| {mb:<24}|")
        out.append(COLS.replace("+" + "-" * 52 + "+", "+" + "-" * 26 + "+" + "-" * 25 + "+"))
    return "\n".join(out) + "\n"


def kv(key: str, value) -> str:
    return f"\t{key:<31}: {value}"


def render_list(hardware: str) -> str:
    npus, chips, _ = layout(hardware)
    out = [kv("Total Count", npus), ""]
    for npu in range(npus):
        out += [kv("NPU ID", npu), kv("Product Name", npusmi_board.BOARD[hardware]["product"]),
                kv("Serial Number", npusmi_board.serial_number(hardware, npu)), kv("Chip Count", chips), ""]
    return "\n".join(out) + "\n"


def render_map(hardware: str) -> str:
    npus, chips, name = layout(hardware)
    heads = ["NPU ID", "Chip ID", "Chip Logic ID"] + (["Chip Phy-ID"] if hardware == "A3" else []) + ["Chip Name"]
    out = ["\t" + "".join(f"{h:<31}" for h in heads).rstrip()]
    for npu in range(npus):
        for chip in range(chips + 1):  # the extra chip is the board's MCU, which has no logic id
            logic = "-" if chip == chips else str(npu * chips + chip)
            cells = [npu, chip, logic] + ([logic] if hardware == "A3" else []) + ["Mcu" if chip == chips else name]
            out.append("\t" + "".join(f"{c!s:<31}" for c in cells).rstrip())
    return "\n".join(out) + "\n"


def render_health(dies: list[dict], npu: int, chip: int | None) -> str:
    mine = [d for d in dies if d["npu"] == npu and (chip is None or d["chip"] == chip)]
    if not mine:
        raise ValueError(f"The npu id {npu} is invalid.")
    bad = [d for d in mine if d["health"] != "OK"]
    lines = [kv("Health Status", "Alarm" if bad else "OK")]
    lines.append(kv("Error Code", "80E01801" if bad else "NA"))
    lines.append(kv("Error Information", f"HBM ECC multi-bit error on chip {bad[0]['chip']}" if bad else "NA"))
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    directory = nodestate.node_dir()
    config = nodestate.node_config(directory)
    hardware = config.get("hardware", "A3")
    if not hardware:
        print("npu-smi: no NPU on this node", file=sys.stderr)
        return 127  # what a shell says when npu-smi is absent
    current = nodestate.faults(directory)
    versions = config.get("versions", DEFAULT_VERSIONS)
    dies = die_state(hardware, nodestate.running_engines(directory), set(current.get("npu_alarm", [])),
                     current.get("npu_foreign_process"))
    args = list(argv)
    if not args or args[0] != "info":
        print("Usage: npu-smi info [-l | -m | -t health|board -i ID [-c CHIP]]", file=sys.stderr)
        return 2
    rest = args[1:]
    if not rest:
        sys.stdout.write(render_info(hardware, dies, versions["driver"]))
    elif rest == ["-l"]:
        sys.stdout.write(render_list(hardware))
    elif rest == ["-m"]:
        sys.stdout.write(render_map(hardware))
    elif rest[:2] == ["-t", "board"]:
        return npusmi_board.board_command(hardware, dies, versions, rest[2:])
    elif rest[:2] == ["-t", "health"] and "-i" in rest:
        npu = int(rest[rest.index("-i") + 1])
        chip = int(rest[rest.index("-c") + 1]) if "-c" in rest else None
        try:
            sys.stdout.write(render_health(dies, npu, chip))
        except ValueError as exc:
            print(exc, file=sys.stderr)
            return 1
    else:
        print(f"npu-smi: unsupported arguments in the simulator: {' '.join(rest)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
