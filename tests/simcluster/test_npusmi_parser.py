"""The control plane's npu-smi parser (apps/inventory/npu_smi/) reads every layout the emulator prints."""

import os
import subprocess
import sys

import pytest

from simcluster import nodestate
from tests.simcluster.simtest_helpers import sim_env

pytestmark = pytest.mark.procs  # every test here starts processes or servers

parser = pytest.importorskip("apps.inventory.npu_smi")


def smi(node_dir, *args):
    out = subprocess.run([sys.executable, "-m", "simcluster.npusmi", *args], capture_output=True, text=True,
                         env=sim_env(SIMCLUSTER_NODE_DIR=node_dir), timeout=20, check=True)
    return out.stdout


@pytest.mark.parametrize("hardware,dies", [("A3", 16), ("910B", 8)])
def test_parser_reads_emulated_output(state_root, hardware, dies):
    nodestate.write_json(state_root / "node.json", {"name": "n", "hardware": hardware})
    (state_root / "engines").mkdir()
    nodestate.register_engine(state_root, {"pid": os.getpid(), "devices": [2, 3], "hbm_mb": 50000, "load": 0.4})
    nodestate.set_fault(state_root, "npu_alarm", 3, True)
    info = parser.npu_smi_parse_info(smi(state_root, "info"))
    assert len(info.dies) == dies
    assert info.die_by_logical_id(2).hbm_used_mb > 50000
    assert info.die_by_logical_id(3).health == "Alarm"
    assert {p.pid for p in info.processes} == {os.getpid()}
    assert len(parser.npu_smi_parse_list(smi(state_root, "info", "-l"))) == 8
    compute = [m for m in parser.npu_smi_parse_map(smi(state_root, "info", "-m")) if m.is_compute]
    assert [m.logic_id for m in compute] == list(range(dies))
    npu_of_die3 = 1 if hardware == "A3" else 3
    assert parser.npu_smi_parse_health(smi(state_root, "info", "-t", "health", "-i", str(npu_of_die3))) == "Alarm"
    assert parser.npu_smi_parse_health(smi(state_root, "info", "-t", "health", "-i", "0")) == "OK"
