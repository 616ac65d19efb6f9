"""A simulated node's state directory (SIMCLUSTER_NODE_DIR): its config, running engines, faults.

Layout:
  node.json             written by `up`: name, address, hardware ("A3" | "910B" | ""), role, container engine and
                        images (spec.node_containers), on NPU nodes `versions` {driver, firmware, cann} and `hccn`
                        (the NPU address plan, simcluster/hccn_plan.py; `hccn_tool -ip -s` rewrites an entry)
  lookup_rpc_port_*     the AscendStoreConnector lookup sockets of the node's engines (engine/lookup.py)
  engines/<pid>.json    written by each engine while it runs: dies, HBM per die, load
  faults.json           {"npu_alarm": [logic ids], "hang": [pids], "corrupt_kv": [pids], "kv_events_gap": [pids],
                         "hccn_no_ip", "hccn_link_down", "hccn_ping_loss": [physical ids],
                         "npu_foreign_process": {"<logic id>": {"pid": n, "mb": n}}}
Files are replaced atomically (write + rename) because npu-smi reads them while engines write.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from simcluster.sshnode import pid_alive


def node_dir() -> Path | None:
    value = os.environ.get("SIMCLUSTER_NODE_DIR")
    return Path(value) if value else None


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    tmp.chmod(0o666)  # root (`up`, fault CLI) and the login user both rewrite these files
    os.replace(tmp, path)


def read_json(path: Path, default: dict | None = None) -> dict:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return dict(default or {})


def node_config(directory: Path | None) -> dict:
    return read_json(directory / "node.json") if directory else {}


def faults(directory: Path | None) -> dict:
    return read_json(directory / "faults.json") if directory else {}


def set_fault(directory: Path, kind: str, value: int, on: bool) -> dict:
    current = faults(directory)
    values = set(current.get(kind, []))
    (values.add if on else values.discard)(value)
    current[kind] = sorted(values)
    write_json(directory / "faults.json", current)
    return current


def set_foreign_process(directory: Path, die: int, pid: int, mb: int, on: bool) -> dict:
    current = faults(directory)
    procs = current.get("npu_foreign_process", {})
    if on:
        procs[str(die)] = {"pid": pid, "mb": mb}
    else:
        procs.pop(str(die), None)
    current["npu_foreign_process"] = procs
    write_json(directory / "faults.json", current)
    return current


def register_engine(directory: Path, info: dict) -> Path:
    engines = directory / "engines"
    engines.mkdir(exist_ok=True)
    path = engines / f"{info['pid']}.json"
    write_json(path, info)
    return path


def running_engines(directory: Path | None) -> list[dict]:
    """Registrations whose process still runs (a killed engine leaves a stale file behind)."""
    if not directory or not (directory / "engines").is_dir():
        return []
    found = []
    for path in sorted((directory / "engines").glob("*.json")):
        info = read_json(path)
        if info.get("pid") and pid_alive(int(info["pid"])):
            found.append(info)
    return found
