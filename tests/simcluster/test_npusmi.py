"""npu-smi output: the verbatim rows of docs/ascend-pd-launch-facts.md §6, and values that follow the node's engines."""

import os
import re
import subprocess
import sys

import pytest

from simcluster import nodestate, npusmi
from tests.simcluster.simtest_helpers import sim_env

A3_ROWS = [  # docs/ascend-pd-launch-facts.md §6, Atlas 800 A3, verbatim
    "| 0     Ascend910           | OK            | 178.8       36                0    / 0             |",
    "| 0     0                   | 0000:9D:00.0  | 0           0    / 0          3397 / 65536         |",
]
B_ROW2 = "| 0                         | 0000:C1:00.0  | 0           0    / 0          3397 / 65536         |"
PROC_ROW = "| 0       0                 | 6277          | python                   | 56485                   |"


def test_rows_match_the_reference_layout_byte_for_byte():
    die = {"npu": 0, "chip": 0, "logic": 0, "name": "Ascend910", "health": "OK", "power": "178.8", "temp": 36,
           "aicore": 0, "hbm_used": 3397, "bus": "0000:9D:00.0", "procs": []}
    assert npusmi.row_pair(die, "A3") == A3_ROWS
    b = dict(die, name="910B2", bus="0000:C1:00.0")
    assert npusmi.row_pair(b, "910B")[1] == B_ROW2
    die["procs"] = [(6277, 56485)]
    assert PROC_ROW in npusmi.render_info("A3", [die])


def run_smi(node_dir, *args):
    out = subprocess.run([sys.executable, "-m", "simcluster.npusmi", *args], capture_output=True, text=True,
                         env=sim_env(SIMCLUSTER_NODE_DIR=node_dir), timeout=20)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.procs
def test_engine_dies_hbm_processes_and_alarm_show_up(state_root):
    nodestate.write_json(state_root / "node.json", {"name": "n", "hardware": "A3"})
    (state_root / "engines").mkdir()
    # Our own pid stands in for an engine on dies 2 and 3 (= NPU 1, chips 0 and 1 on A3).
    nodestate.register_engine(state_root, {"pid": os.getpid(), "devices": [2, 3], "hbm_mb": 55000, "load": 0.5})
    nodestate.set_fault(state_root, "npu_alarm", 3, True)
    text = run_smi(state_root, "info")
    rows = [line for line in text.splitlines() if "0000:" in line]
    assert len(rows) == 16
    # HBM "used / total" may lack the space before "/" (docs/ascend-pd-launch-facts.md §6 parsing rule).
    hbm = {int(r.split("|")[1].split()[1]): int(re.findall(r"(\d+)\s*/\s*\d+", r)[-1]) for r in rows}
    assert hbm[2] > 55000 and hbm[3] > 55000 and hbm[0] < 4000
    aicore = {int(r.split("|")[1].split()[1]): int(r.split("|")[3].split()[0]) for r in rows}
    assert aicore[2] == 50 and aicore[0] == 0
    assert f"| 1       0                 | {os.getpid():<14}|" in text
    assert "No running processes found in NPU 0" in text
    assert "Alarm" in run_smi(state_root, "info", "-t", "health", "-i", "1")
    assert ": OK" in run_smi(state_root, "info", "-t", "health", "-i", "0")
    assert "Total Count                    : 8" in run_smi(state_root, "info", "-l")
    mapping = run_smi(state_root, "info", "-m").splitlines()
    assert mapping[0].split() == ["NPU", "ID", "Chip", "ID", "Chip", "Logic", "ID", "Chip", "Phy-ID", "Chip", "Name"]
    assert mapping[1].split() == ["0", "0", "0", "0", "Ascend910"]
    assert mapping[3].split() == ["0", "2", "-", "-", "Mcu"]


@pytest.mark.procs
def test_910b_has_one_die_per_npu(state_root):
    nodestate.write_json(state_root / "node.json", {"name": "n", "hardware": "910B"})
    text = run_smi(state_root, "info")
    assert sum("0000:" in line for line in text.splitlines()) == 8
    assert "Chip Phy-ID" not in run_smi(state_root, "info", "-m")
