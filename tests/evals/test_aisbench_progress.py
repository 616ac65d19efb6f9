"""N of M while a run goes on: the Python count and the remote shell snippet agree on the same folders."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from apps.evals.aisbench.progress import (
    PROGRESS_SHELL,
    count_finished,
    parse_progress_output,
    progress_command,
)

FIXTURES = Path(__file__).parent / "fixtures"


def shell_count(work_dir: Path) -> int:
    done = subprocess.run(["sh", "-c", PROGRESS_SHELL, "aisbench-progress", str(work_dir)], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return parse_progress_output(done.stdout)


def lines(path: Path, count: int, newline_at_end: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(f'{{"id": {i}}}\n' for i in range(count))
    path.write_text(text if newline_at_end else text.rstrip("\n"))


@pytest.mark.procs
def test_every_recorded_run_counts_the_same_both_ways():
    expected = {"accuracy_ok": 4, "accuracy_failed_requests": 4, "endpoint_down": 0, "perf_ok": 6,
                "perf_all_failed": 4, "perf_no_tokenizer": 4}
    for case, count in expected.items():
        work = FIXTURES / case / "work"
        assert (count_finished(work), shell_count(work)) == (count, count), case


@pytest.mark.procs
def test_a_running_accuracy_task_counts_its_live_temp_file(tmp_path):
    run = tmp_path / "work" / "20261201_101500" / "predictions" / "m1"
    lines(run / "tmp" / "tmp_ab12cd34.jsonl", 7)
    (run / "tmp" / "tmp_ab12cd34.db").write_bytes(b"")
    lines(run / "tmp" / "tmp_ffff0000.jsonl", 2, newline_at_end=False)  # a batch being written
    (run / "tmp" / "tmp_ffff0000.db").write_bytes(b"")
    assert count_finished(tmp_path / "work") == shell_count(tmp_path / "work") == 8


@pytest.mark.procs
def test_a_finished_task_that_kept_its_temp_file_is_not_counted_twice(tmp_path):
    run = tmp_path / "w" / "20261201_101500"
    lines(run / "predictions" / "m1" / "tmp" / "tmp_ab12cd34.jsonl", 30)  # kept for debugging: no .db beside it
    lines(run / "predictions" / "m1" / "aime.jsonl", 26)
    lines(run / "predictions" / "m1" / "aime_failed.jsonl", 4)
    assert count_finished(tmp_path / "w") == shell_count(tmp_path / "w") == 30


@pytest.mark.procs
def test_perf_counts_details_with_their_failures_and_live_temp_files(tmp_path):
    run = tmp_path / "w" / "20261201_101500" / "performances"
    lines(run / "m1" / "tmp" / "tmp_11111111.jsonl", 5)
    (run / "m1" / "tmp" / "tmp_11111111.db").write_bytes(b"")
    lines(run / "m1" / "tmp" / "tmp_22222222.jsonl", 9)  # a finished worker's kept file
    lines(run / "m1" / "ds_details.jsonl", 9)
    lines(run / "m1" / "ds_failed.jsonl", 3)  # already among the details
    (run / "m1" / "ds.json").write_text("{}\n")
    lines(run / "m2" / "ds_details.jsonl", 2)
    assert count_finished(tmp_path / "w") == shell_count(tmp_path / "w") == 16


@pytest.mark.procs
def test_only_the_newest_run_folder_counts(tmp_path):
    work = tmp_path / "it's a work dir"  # the path is passed as $1, never pasted into the script
    lines(work / "20261201_101500" / "predictions" / "m" / "d.jsonl", 10)
    lines(work / "20261201_101501" / "predictions" / "m" / "d.jsonl", 3)
    lines(work / "20261201_999999x" / "predictions" / "m" / "d.jsonl", 50)
    lines(work / "tmp" / "predictions" / "m" / "d.jsonl", 50)
    (work / "20991231_235959").write_text("a file, not a run folder")
    assert count_finished(work) == shell_count(work) == 3
    done = subprocess.run(progress_command(str(work)), shell=True, capture_output=True, text=True, timeout=30)
    assert parse_progress_output(done.stdout) == 3


@pytest.mark.procs
def test_before_the_run_folder_exists_the_count_is_zero(tmp_path):
    assert count_finished(tmp_path / "missing") == shell_count(tmp_path / "missing") == 0
    assert count_finished(tmp_path) == shell_count(tmp_path) == 0


def test_the_snippet_is_fixed_text():
    assert "$1" in PROGRESS_SHELL and "{" not in PROGRESS_SHELL.replace("${d##*/}", "").replace("${f%.jsonl}", "")


@pytest.mark.parametrize("output", ["", "AISBENCH_PROGRESS", "AISBENCH_PROGRESS x", "sh: 1: wc: not found\n"])
def test_output_without_a_count_is_an_error(output):
    with pytest.raises(ValueError, match="AISBENCH_PROGRESS"):
        parse_progress_output(output)


def test_the_last_count_line_wins_over_noise():
    assert parse_progress_output("Last login: today\nAISBENCH_PROGRESS 4\nAISBENCH_PROGRESS 12\n") == 12
