"""The version parsers against the verbatim samples of docs/readiness-facts.md §3, damaged inputs naming their
line, the probe and its parser agreeing, and the cross-node comparison."""

import contextlib
import io

import pytest

from apps.inventory.versions import (
    PROBE_CODE,
    Versions,
    VersionsParseError,
    ascend_parse_version_info,
    cann_parse_install_info,
    mindie_parse_version_info,
    npu_smi_parse_board,
    python_packages_parse,
    python_packages_probe,
    version_mismatches,
    versions_collect,
)


def error_of(parser, text: str) -> VersionsParseError:
    with pytest.raises(VersionsParseError) as caught:
        parser(text)
    return caught.value


# §3.1 [FIXTURE] MC npu_info_before.txt:114-122 (910A): lines start with a TAB; the echoed command line left out.
BOARD_910A = ("\tNPU ID                         : 0\n\tSoftware Version               : 23.0.5\n"
              "\tFirmware Version               : 7.1.0.7.220\n\tCompatibility                  : OK\n"
              "\tBoard ID                       : 0x02\n\tPCB ID                         : A\n"
              "\tBOM ID                         : 1\n\tPCIe Bus Info                  : 0000:61:00.0\n")
# §3.1 [CAPTURED] 910B2C (Atlas 800I A2), index id 52692884719; truncated by its author after `PCB ID`.
BOARD_910B2C = """NPU ID                         : 2
Product Name                   : IT21HMDB02-B2
Model                          : NA
Manufacturer                   : Huawei
Serial Number                  : 102376734799
Software Version               : 25.2.0
Firmware Version               : 7.7.0.6.236
Compatibility                  : OK
Board ID                       : 0x65
PCB ID                         : A
"""


def test_board_910a_fixture():
    board = npu_smi_parse_board(BOARD_910A)
    assert (board.npu_id, board.software_version, board.firmware_version) == (0, "23.0.5", "7.1.0.7.220")
    assert (board.compatibility, board.board_id, board.product_name) == ("OK", "0x02", None)
    assert board.fields["PCIe Bus Info"] == "0000:61:00.0"


def test_board_910b2c_capture_has_the_newer_leading_fields():
    board = npu_smi_parse_board(BOARD_910B2C)
    assert (board.npu_id, board.software_version, board.firmware_version) == (2, "25.2.0", "7.7.0.6.236")
    assert (board.product_name, board.serial_number, board.board_id) == ("IT21HMDB02-B2", "102376734799", "0x65")


@pytest.mark.parametrize(("text", "line", "expected"), [
    # §1.8 [FIXTURE] MC npu_info_after.txt:24-27, npu-smi on a missing card
    ("Invalid card id.\nError parameter of -i\nUsage: npu-smi info <watch|proc|-h|-m|-l|-t type> [Options...]\n",
     1, "does not exist"),
    (BOARD_910B2C.replace("Software Version               : 25.2.0\n", ""), 10, "Software Version"),
    (BOARD_910B2C.replace("Board ID                       : 0x65", "Board ID"), 9, "'Key : value'"),
    (BOARD_910B2C + "NPU ID : 3\n", 11, "NPU ID once"),
    (BOARD_910B2C.replace("NPU ID                         : 2", "NPU ID : two"), 1, "integer"),
])
def test_board_malformed_names_the_line(text, line, expected):
    error = error_of(npu_smi_parse_board, text)
    assert error.line == line and expected in error.expected


# §3.2 [CAPTURED] Atlas 800I A2 / 910B4, index id 59117260790 (the shell prompt line left out).
DRIVER = """Version=25.0.rc1.1
ascendhal_version=7.35.23
aicpu_version=1.0
tdt_version=1.0
log_version=1.0
prof_version=2.0
dvppkernels_version=1.1
tsfw_version=1.0
Innerversion=V100R001C21SPC002B220
compatible_version=[V100R001C17],[V100R001C18],[V100R001C19],[V100R001C20],[V100R001C21]
compatible_version_fw=[7.0.0,7.7.99]
package_version=25.0.rc1.1
"""
FIRMWARE = """Version=7.7.0.1.231
firmware_version=1.0
package_version=25.0.rc1.1
compatible_version_drv=[23.0.0,23.0.0.],[24.0,24.0.],[24.1,24.1.],[25.0,25.0.]
"""


def test_driver_and_firmware_version_info():
    driver = ascend_parse_version_info(DRIVER)
    assert (driver.version, driver.package_version, driver.inner_version) == \
        ("25.0.rc1.1", "25.0.rc1.1", "V100R001C21SPC002B220")
    firmware = ascend_parse_version_info(FIRMWARE)
    assert (firmware.version, firmware.inner_version) == ("7.7.0.1.231", None)
    assert firmware.fields["compatible_version_drv"].startswith("[23.0.0,")
    # §3.2: some 24.1 builds have no package_version line
    assert ascend_parse_version_info("Version=24.1.rc1\n").package_version is None


def test_version_info_malformed():
    assert error_of(ascend_parse_version_info, DRIVER.replace("tdt_version=1.0", "tdt_version")).line == 4
    assert error_of(ascend_parse_version_info, DRIVER.replace("Version=25.0.rc1.1\n", "")).line == 12
    assert error_of(ascend_parse_version_info, DRIVER + "Version=25.0.rc1\n").line == 13
    assert error_of(ascend_parse_version_info, "").line is None


# §3.3 [CAPTURED] vllm-ascend issue #4621 and [DOC] MC 03_collecting_logs.md (CANN 8.5 layout)
CANN_83 = """package_name=Ascend-cann-toolkit
version=8.3.RC2
innerversion=V100R001C23SPC002B210
compatible_version=[V100R001C15],[V100R001C18],[V100R001C19],[V100R001C20],[V100R001C21],[V100R001C23]
arch=x86_64
os=linux
path=/usr/local/Ascend/ascend-toolkit/8.3.RC2/x86_64-linux
"""


def test_cann_install_info():
    cann = cann_parse_install_info(CANN_83)
    assert (cann.version, cann.arch, cann.inner_version) == ("8.3.RC2", "x86_64", "V100R001C23SPC002B210")
    assert cann.path == "/usr/local/Ascend/ascend-toolkit/8.3.RC2/x86_64-linux"
    cann_85 = cann_parse_install_info(CANN_83.replace("8.3.RC2", "8.5.0").replace("x86_64", "aarch64"))
    assert (cann_85.version, cann_85.arch) == ("8.5.0", "aarch64")


def test_cann_without_version_or_arch_is_an_error():
    # `compatible_version=` must not be taken for `version=`
    error = error_of(cann_parse_install_info, CANN_83.replace("version=8.3.RC2\n", ""))
    assert error.line == 7 and "version=" in error.expected
    assert "arch=" in error_of(cann_parse_install_info, CANN_83.replace("arch=x86_64\n", "")).expected


# §3.5 [CAPTURED] index id 59117260790 (image mindie:2.1.RC1-800I-A2-py311-openeuler24.03-lts)
MINDIE = """Ascend-mindie : MindIE 2.1.RC1.B152
mindie-rt: 2.1.RC1.B152
mindie-torch: 2.1.RC1.B152
mindie-service: 2.1.RC1.B152
mindie-llm: 2.1.RC1.B152
mindie-sd:2.1.RC1.B152
Platform : aarch64
"""


def test_mindie_version_info():
    mindie = mindie_parse_version_info(MINDIE)
    assert (mindie.version, mindie.platform) == ("2.1.RC1.B152", "aarch64")
    assert mindie.components["mindie-sd"] == "2.1.RC1.B152" and len(mindie.components) == 5


def test_mindie_malformed():
    assert error_of(mindie_parse_version_info, MINDIE.replace("MindIE 2.1", "2.1")).line == 1
    assert error_of(mindie_parse_version_info, MINDIE.replace("mindie-rt: ", "mindie-rt ")).line == 2


# --- the Python package probe (our own format: apps/inventory/versions/packages.py) -----------------------------

def test_probe_output_is_what_the_parser_reads():
    """The probe's code run in this interpreter (no process): an installed and a missing package."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(PROBE_CODE.format(names=("pytest", "no-such-package-here")), {})
    found = python_packages_parse(out.getvalue(), names=("pytest", "no-such-package-here"))
    assert found["pytest"] == pytest.__version__ and found["no-such-package-here"] is None
    assert python_packages_probe().startswith("python3 -c 'import importlib.metadata as m")


def test_packages_parse_and_its_errors():
    text = "vllm==0.10.2\nvllm-ascend==0.10.2rc2.dev5+g88ca8a051\n"
    assert dict(python_packages_parse(text)) == {"vllm": "0.10.2", "vllm-ascend": "0.10.2rc2.dev5+g88ca8a051"}
    assert error_of(python_packages_parse, "vllm==0.10.2\n").line == 2
    assert error_of(python_packages_parse, text + "vllm==0.11.0\n").line == 3
    assert error_of(python_packages_parse, "Name: vllm\n").line == 1
    with pytest.raises(ValueError, match="package name"):
        python_packages_probe(("vllm; rm -rf /",))


# --- across nodes -----------------------------------------------------------------------------------------------

def test_mismatches_name_the_nodes_and_versions():
    same = dict(driver="25.0.rc1.1", firmware="7.7.0.1.231", vllm="0.10.2")
    nodes = {"node0": Versions(cann="8.2.RC1", **same), "node1": Versions(cann="8.2.RC1", **same),
             "node2": Versions(cann="8.1.RC1", **same), "node3": Versions(cann="8.2.RC1", **{**same, "vllm": None})}
    found = {m.component: m.message for m in version_mismatches(nodes)}
    assert found == {"cann": "CANN 8.2.RC1 on node0, node1, node3; 8.1.RC1 on node2",
                     "vllm": "vLLM 0.10.2 on node0, node1, node2; none found on node3"}
    assert version_mismatches({"a": Versions(cann="8.2.RC1"), "b": Versions(cann="8.2.RC1")}) == ()


def test_collect_prefers_the_version_files_over_the_board():
    board = npu_smi_parse_board(BOARD_910B2C)
    versions = versions_collect(board=board, firmware=ascend_parse_version_info(FIRMWARE),
                                cann=cann_parse_install_info(CANN_83), mindie=mindie_parse_version_info(MINDIE),
                                packages={"vllm": "0.10.2", "vllm-ascend": None})
    assert versions == Versions(driver="25.2.0", firmware="7.7.0.1.231", cann="8.3.RC2", mindie="2.1.RC1.B152",
                                vllm="0.10.2", vllm_ascend=None)
