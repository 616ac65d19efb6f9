"""The npu-foreign-process fault: a process that is not ours holds HBM on a die and shows in `npu-smi info`'s
process table, which the control plane's parser (apps/inventory/npu_smi/) reads."""

import os

import pytest

from simcluster import nodestate, npusmi
from tests.simcluster.npu_node_helpers import fault, make_cluster, run_tool

parser = pytest.importorskip("apps.inventory.npu_smi")


@pytest.fixture
def nodes(tmp_path):
    return make_cluster(tmp_path)


def info(monkeypatch, capsys, node_dir):
    out, err, code = run_tool(monkeypatch, capsys, npusmi.main, node_dir, "info")
    assert (err, code) == ("", 0)
    return out


def test_a_foreign_process_shows_beside_our_engine_and_goes_away(monkeypatch, capsys, tmp_path, nodes):
    # Our own pid stands in for an engine on dies 2 and 3 (NPU 1, chips 0 and 1).
    nodestate.register_engine(nodes["node0"], {"pid": os.getpid(), "devices": [2, 3], "hbm_mb": 30000})
    assert fault(capsys, tmp_path, "npu-foreign-process", "--node", "node0", "--die", "3") == (
        "node0 die 3 foreign process 800003 (20000 MB) on\n")
    fault(capsys, tmp_path, "npu-foreign-process", "--node", "node0", "--die", "9", "--mb", "1234", "--pid", "4242")
    text = info(monkeypatch, capsys, nodes["node0"])
    parsed = parser.npu_smi_parse_info(text)
    rows = {(p.npu_id, p.chip_id, p.pid): (p.name, p.memory_mb) for p in parsed.processes}
    assert rows == {(1, 0, os.getpid()): ("python", 30000), (1, 1, os.getpid()): ("python", 30000),
                    (1, 1, 800003): ("python3", 20000), (4, 1, 4242): ("python3", 1234)}
    assert parsed.die_by_logical_id(3).hbm_used_mb > 50000  # the engine's and the foreign process's HBM
    assert 20000 < parsed.die_by_logical_id(2).hbm_used_mb - 3000 < 31000
    assert 4 not in parsed.idle_npu_ids and 0 in parsed.idle_npu_ids
    # Rows of one NPU follow each other with no separator (readiness-facts §4).
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if "800003" in line)
    assert lines[first - 1].startswith("| 1       ") and lines[first + 1].startswith("+")

    fault(capsys, tmp_path, "npu-foreign-process", "--node", "node0", "--die", "3", "--off")
    parsed = parser.npu_smi_parse_info(info(monkeypatch, capsys, nodes["node0"]))
    assert {p.pid for p in parsed.processes} == {os.getpid(), 4242}


def test_a_910b_die_is_its_npu(monkeypatch, capsys, tmp_path, nodes):
    fault(capsys, tmp_path, "npu-foreign-process", "--node", "node2", "--die", "5", "--mb", "700")
    parsed = parser.npu_smi_parse_info(info(monkeypatch, capsys, nodes["node2"]))
    assert [(p.npu_id, p.chip_id, p.memory_mb) for p in parsed.processes] == [(5, 0, 700)]
    assert parsed.idle_npu_ids == (0, 1, 2, 3, 4, 6, 7)
