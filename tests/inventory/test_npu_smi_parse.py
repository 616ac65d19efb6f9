"""The npu-smi parser against verbatim and faithfully built outputs, and against damaged ones."""

from pathlib import Path

import pytest

from apps.inventory.npu_smi import (
    NpuSmiParseError,
    npu_smi_parse_health,
    npu_smi_parse_info,
    npu_smi_parse_list,
    npu_smi_parse_map,
    npu_smi_parse_processes,
)

SAMPLES = Path(__file__).parent / "samples"


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def lines_of(name: str) -> list[str]:
    return sample(name).splitlines()


def parse_error(parser, text: str) -> NpuSmiParseError:
    with pytest.raises(NpuSmiParseError) as caught:
        parser(text)
    return caught.value


# --- verbatim samples (docs/ascend-pd-launch-facts.md §6) --------------------------------------------------------

def test_verbatim_910b_table():
    info = npu_smi_parse_info(sample("ref_910b_info.txt"))
    assert info.version == "24.1.0.3"
    (die,) = info.dies
    assert (die.npu_id, die.name, die.health, die.power_w, die.temp_c) == (0, "910B2", "OK", 96.4, 37)
    assert (die.hugepages_used, die.hugepages_total) == (0, 0)
    assert (die.chip_id, die.phy_id, die.bus_id, die.aicore_percent) == (0, None, "0000:C1:00.0", 0)
    assert (die.memory_used_mb, die.memory_total_mb, die.hbm_used_mb, die.hbm_total_mb) == (0, 0, 3397, 65536)
    assert die.logical_id == 0
    assert info.processes == () and info.idle_npu_ids == ()


def test_verbatim_a3_rows_take_phy_id_as_logical_id_and_dash_power_as_none():
    info = npu_smi_parse_info(sample("ref_a3_info.txt"))
    assert info.version is None  # the verbatim excerpt starts at the header
    first, second = info.dies
    assert (first.npu_id, first.chip_id, first.phy_id, first.power_w) == (0, 0, 0, 178.8)
    assert (second.npu_id, second.chip_id, second.phy_id, second.power_w) == (0, 1, 1, None)
    assert (second.bus_id, second.hbm_used_mb, second.hbm_total_mb) == ("0000:9F:00.0", 3186, 65536)
    assert [d.logical_id for d in info.dies] == [0, 1]


def test_verbatim_process_section():
    processes, idle = npu_smi_parse_processes(sample("ref_process_section.txt"))
    (proc,) = processes
    assert (proc.npu_id, proc.chip_id, proc.pid, proc.name, proc.memory_mb) == (0, 0, 6277, "python", 56485)
    assert proc.container_pid is None
    assert idle == (4,)


# --- full tables built in the same layout ---------------------------------------------------------------

def test_full_a3_table_has_16_dies_with_logical_ids_0_to_15():
    info = npu_smi_parse_info(sample("full_a3_16die_info.txt"))
    assert info.version == "25.0.rc1.1"
    assert len(info.dies) == 16
    assert [d.logical_id for d in info.dies] == list(range(16))
    assert [d.npu_id for d in info.dies] == [n for n in range(8) for _ in (0, 1)]
    assert all(d.power_w is None for d in info.dies if d.chip_id == 1)
    assert all(d.power_w is not None for d in info.dies if d.chip_id == 0)
    busy = info.die_by_logical_id(7)
    assert (busy.npu_id, busy.chip_id, busy.hbm_used_mb, busy.aicore_percent) == (3, 1, 60124, 41)
    assert [(p.npu_id, p.chip_id, p.pid) for p in info.processes] == [(3, 0, 2290156), (3, 1, 2290157)]
    assert info.idle_npu_ids == (0, 1, 2, 4, 5, 6, 7)


def test_full_910b_table_has_8_npus_and_reads_hbm_without_space_before_slash():
    info = npu_smi_parse_info(sample("full_910b_8npu_info.txt"))
    assert [d.logical_id for d in info.dies] == list(range(8))
    assert all(d.phy_id is None for d in info.dies)
    assert info.dies[2].hbm_used_mb == 59784 and info.dies[5].hbm_used_mb == 61234
    assert info.dies[7].health == "Warning"
    assert [(p.npu_id, p.memory_mb) for p in info.processes] == [(2, 56485), (5, 57900)]
    assert info.idle_npu_ids == (0, 1, 3, 4, 6, 7)


def test_process_id_in_container_column():
    info = npu_smi_parse_info(sample("container_pid_910b_info.txt"))
    assert info.dies[1].hbm_used_mb == 29034
    assert [(p.pid, p.name, p.memory_mb, p.container_pid) for p in info.processes] == [
        (485946, "pytest", 5175, None), (485950, "python", 20480, 101)]
    assert info.idle_npu_ids == (0,)


# --- damaged output: every error names the line ------------------------------------------------------

def test_empty_output_is_a_clear_error():
    err = parse_error(npu_smi_parse_info, "  \n")
    assert "empty output" in str(err)


def test_missing_second_row_names_the_line_and_the_npu():
    lines = lines_of("full_910b_8npu_info.txt")
    del lines[13]  # NPU 2's second row (line 14); the separator below it moves up to line 14
    err = parse_error(npu_smi_parse_info, "\n".join(lines))
    assert err.line == 14
    assert str(err).startswith("line 14: expected 'Chip | Bus-Id | AICore Memory HBM' row after NPU 2's first row")
    assert "got '+===" in str(err)


def test_truncated_mid_row():
    text = sample("full_a3_16die_info.txt")
    cut = text[: text.index("| 0     4 ") + 40]  # inside NPU 2 die 0's second row
    err = parse_error(npu_smi_parse_info, cut)
    assert err.line == 20
    assert "cut off" in str(err)


def test_truncated_after_a_first_row():
    lines = lines_of("ref_910b_info.txt")[:7]
    err = parse_error(npu_smi_parse_info, "\n".join(lines))
    assert err.line == 8
    assert "after NPU 0's first row, got end of output" in str(err)


def test_non_numeric_hbm():
    text = sample("full_910b_8npu_info.txt").replace("59784/ 65536", "5x784/ 65536")
    err = parse_error(npu_smi_parse_info, text)
    assert err.line == 14
    assert "integer HBM used (not '5x784')" in str(err)


def test_garbage_power():
    text = sample("ref_910b_info.txt").replace("96.4 ", "9?.4 ")
    err = parse_error(npu_smi_parse_info, text)
    assert err.line == 7 and "power" in str(err)


def test_wrong_header():
    text = sample("ref_910b_info.txt").replace("| Chip                      | Bus-Id ", "| Chip                      | Bus-ID ")
    err = parse_error(npu_smi_parse_info, text)
    assert err.line == 5 and "header row 'Chip [Phy-ID] | Bus-Id" in str(err)


def test_missing_header():
    lines = lines_of("ref_910b_info.txt")
    del lines[3:5]
    err = parse_error(npu_smi_parse_info, "\n".join(lines))
    assert err.line == 5 and "header row 'NPU Name | Health" in str(err)


def test_driver_error_text_instead_of_a_table():
    err = parse_error(npu_smi_parse_info, "dcmi model initialized failed, because the device is used. ret is -8020\n")
    assert err.line == 1


def test_a3_row_missing_its_phy_id():
    text = sample("ref_a3_info.txt").replace("| 1     1                   |", "| 1                         |")
    err = parse_error(npu_smi_parse_info, text)
    assert err.line == 8 and "Chip Phy-ID" in str(err)


def test_header_without_rows():
    err = parse_error(npu_smi_parse_info, "\n".join(lines_of("ref_910b_info.txt")[:6]))
    assert err.line == 7 and "at least one NPU row" in str(err)


def test_damaged_process_row():
    text = sample("full_910b_8npu_info.txt").replace("| 3812901       |", "| 38129x1       |")
    err = parse_error(npu_smi_parse_info, text)
    assert err.line == 38 and "process id" in str(err)


# --- npu-smi info -m / -l / -t health ----------------------------------------------------------------

def test_map_a3_logic_and_phy_ids_and_mcu_rows():
    rows = npu_smi_parse_map(sample("map_a3.txt"))
    compute = [r for r in rows if r.is_compute]
    assert [r.logic_id for r in compute] == list(range(16))
    assert [r.phy_id for r in compute] == list(range(16))
    mcu = [r for r in rows if not r.is_compute]
    assert len(mcu) == 8 and all(r.chip_name == "Mcu" and r.phy_id is None for r in mcu)
    assert (compute[15].npu_id, compute[15].chip_id) == (7, 1)


def test_map_910b_keeps_chip_names_with_spaces():
    rows = npu_smi_parse_map(sample("map_910b.txt"))
    assert rows[0].chip_name == "Ascend 910B2" and rows[0].phy_id is None
    assert [r.logic_id for r in rows if r.is_compute] == list(range(8))


def test_map_vllm_ascend_fixture_shape():
    rows = npu_smi_parse_map("NPU ID  Chip ID  Chip Logic ID  Chip Name\n0 0 0 Ascend\n0 1 - Mcu\n1 0 1 Ascend")
    assert [(r.npu_id, r.chip_id, r.logic_id, r.chip_name) for r in rows] == [
        (0, 0, 0, "Ascend"), (0, 1, None, "Mcu"), (1, 0, 1, "Ascend")]


def test_map_errors():
    assert parse_error(npu_smi_parse_map, "NPU ID Chip Name\n0 Ascend").line == 1
    assert parse_error(npu_smi_parse_map, "NPU ID  Chip ID  Chip Logic ID  Chip Name\n0 x 0 Ascend").line == 2
    err = parse_error(npu_smi_parse_map, "NPU ID  Chip ID  Chip Logic ID  Chip Name\n0 0 0 Ascend\n1 0\n")
    assert err.line == 3 and "3 ids and a chip name" in str(err)
    assert "empty output" in str(parse_error(npu_smi_parse_map, ""))


def test_list_a3():
    cards = npu_smi_parse_list(sample("list_a3.txt"))
    assert [c.npu_id for c in cards] == list(range(8))
    assert all(c.chip_count == 2 and c.product_name == "IT21PDDA01" for c in cards)
    assert cards[3].serial_number == "102343353453"


def test_list_errors():
    text = sample("list_a3.txt")
    err = parse_error(npu_smi_parse_list, text.replace("Total Count                    : 8", "Total Count : 9"))
    assert err.line == 1 and "match the 8 NPU ID blocks" in str(err)
    err = parse_error(npu_smi_parse_list, text.replace("NPU ID                         : 2", "NPU ID : two"))
    assert err.line == 13
    assert "empty output" in str(parse_error(npu_smi_parse_list, "\n"))


def test_health_values():
    assert npu_smi_parse_health(sample("health_ok.txt")) == "OK"
    assert npu_smi_parse_health(sample("health_alarm.txt")) == "Alarm"
    assert npu_smi_parse_health("Health : Critical\n") == "Critical"


def test_health_errors():
    assert "empty output" in str(parse_error(npu_smi_parse_health, ""))
    assert "Health" in str(parse_error(npu_smi_parse_health, "\tError Code : NA\n"))
    assert parse_error(npu_smi_parse_health, "\tError Code : NA\n\tHealth Status :   \n").line == 2
