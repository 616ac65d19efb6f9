"""`npu-smi info -t board`: docs/readiness-facts.md §3.1's layout, with the versions node.json carries (spec
`versions`), and the driver version in `npu-smi info`'s header."""

import re

import pytest

from simcluster import npusmi
from simcluster.spec import DEFAULT_VERSIONS, node_versions
from tests.simcluster.npu_node_helpers import make_cluster, run_tool

# readiness-facts §5 "Versions"
SOFTWARE = re.compile(r"^\s*Software Version\s*:\s*(\S+)", re.M)
FIRMWARE = re.compile(r"^\s*Firmware Version\s*:\s*(\S+)", re.M)
LINE = re.compile(r"^\t(\S.{30}): (\S.*)$")  # a TAB, the key padded to 31, ": ", the value (the 23.0.5 fixture)
KEYS_25 = ["NPU ID", "Product Name", "Model", "Manufacturer", "Serial Number", "Software Version",
           "Firmware Version", "Compatibility", "Board ID", "PCB ID"]  # the 25.2.0 capture, cut after PCB ID
KEYS_23 = ["NPU ID", "Software Version", "Firmware Version", "Compatibility", "Board ID", "PCB ID", "BOM ID",
           "PCIe Bus Info"]  # the 23.0.5 fixture


@pytest.fixture
def smi(monkeypatch, capsys, tmp_path):
    nodes = make_cluster(tmp_path)

    def run(node, *argv):
        return run_tool(monkeypatch, capsys, npusmi.main, nodes[node], *argv)
    return run


def fields(text):
    return [LINE.match(line).groups() for line in text.splitlines()]


def test_a3_board_has_the_newer_drivers_fields_and_the_default_versions(smi):
    out, err, code = smi("node0", "info", "-t", "board", "-i", "3")
    assert (err, code) == ("", 0)
    rows = fields(out)
    assert [key.strip() for key, _ in rows][:len(KEYS_25)] == KEYS_25
    assert [key.strip() for key, _ in rows][len(KEYS_25):] == ["BOM ID", "PCIe Bus Info"]
    assert SOFTWARE.search(out).group(1) == DEFAULT_VERSIONS["driver"] == "25.2.0"
    assert FIRMWARE.search(out).group(1) == DEFAULT_VERSIONS["firmware"]
    assert re.search(r"^\s*Compatibility\s*:\s*OK$", out, re.M)
    assert dict((k.strip(), v) for k, v in rows)["NPU ID"] == "3"


def test_the_chip_option_names_the_die_whose_bus_is_printed(smi):
    info = smi("node0", "info")[0]
    buses = re.findall(r"^\| [01]     ([23])\s+\| (\S+)", info, re.M)  # NPU 1's dies: "Chip Phy-ID | Bus-Id"
    board = {c: dict((k.strip(), v) for k, v in fields(smi("node0", "info", "-t", "board", "-i", "1", "-c", c)[0]))
             for c in ("0", "1")}
    assert [(phy, bus) for phy, bus in buses] == [("2", board["0"]["PCIe Bus Info"]),
                                                  ("3", board["1"]["PCIe Bus Info"])]


def test_a_node_with_an_older_driver_prints_the_older_layout(smi):
    out, _, code = smi("node2", "info", "-t", "board", "-i", "0")
    assert code == 0
    assert [key.strip() for key, _ in fields(out)] == KEYS_23
    assert SOFTWARE.search(out).group(1) == "23.0.5"
    assert FIRMWARE.search(out).group(1) == DEFAULT_VERSIONS["firmware"]
    header = smi("node2", "info")[0].splitlines()[1]
    assert re.search(r"npu-smi\s+(\S+)\s+Version:\s*(\S+)", header).groups() == ("23.0.5", "23.0.5")


def test_a_card_the_node_lacks(smi):
    assert smi("node2", "info", "-t", "board", "-i", "8") == (
        "", "Invalid card id.\nError parameter of -i\nUsage: npu-smi info <watch|proc|-h|-m|-l|-t type> [Options...]\n",
        1)


def test_versions_come_from_the_spec_cluster_wide_or_per_node():
    spec = {"versions": {"driver": "24.1.0", "cann": "8.3.RC2"}}
    assert node_versions(spec, {"name": "a"}) == {"driver": "24.1.0", "firmware": "7.7.0.6.236", "cann": "8.3.RC2"}
    assert node_versions(spec, {"name": "a", "versions": {"cann": "8.5.0"}})["cann"] == "8.5.0"
    with pytest.raises(ValueError, match="versions keys"):
        node_versions({}, {"name": "a", "versions": {"toolkit": "8.5.0"}})
