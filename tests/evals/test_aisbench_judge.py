"""The verdict on recorded runs: success from the files, never from the exit code; failures in plain words."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from apps.evals.aisbench.output_parser import judge

FIXTURES = Path(__file__).parent / "fixtures"


def recorded(case: str, mode: str, with_console: bool = True):
    console = (FIXTURES / case / "console.txt").read_text() if with_console else ""
    return judge(FIXTURES / case / "work", mode, console)


@pytest.mark.parametrize(("case", "mode"), [("accuracy_ok", "accuracy"), ("perf_ok", "performance")])
def test_good_runs_pass_with_nothing_to_say(case, mode):
    verdict = recorded(case, mode)
    assert (verdict.ok, verdict.reasons, verdict.log_tail) == (True, [], [])


def test_the_endpoint_down_run_exited_0_but_failed():
    assert (FIXTURES / "endpoint_down" / "exit_code").read_text().strip() == "0"
    verdict = recorded("endpoint_down", "accuracy", with_console=False)
    assert not verdict.ok
    assert verdict.reasons[0].startswith("the endpoint 127.0.0.1:") and "refused the connection" in verdict.reasons[0]
    assert "the warmup request failed, so AISBench stopped before sending the benchmark" in verdict.reasons
    assert "mock-chat/aime4: no score (its infer or eval task failed)" in verdict.reasons
    assert "--- logs/infer/mock-chat/aime4.out ---" in verdict.log_tail
    assert any("TINFER-RUNTIME-001" in line for line in verdict.log_tail)
    assert not any("\x1b" in line for line in verdict.log_tail)
    with_console = recorded("endpoint_down", "accuracy")
    assert any(r.startswith("AISBench logged an error: [RUNNER-TASK-001]task failed.") for r in with_console.reasons)


def test_some_failed_requests_fail_the_run_and_say_how_many():
    verdict = recorded("accuracy_failed_requests", "accuracy")
    assert not verdict.ok
    assert verdict.reasons == ["mock-chat/aime4: 2 of 4 requests failed: Internal Server Error x2; "
                               "failed requests count as wrong answers"]
    assert any("Internal Server Error" in line for line in verdict.log_tail)


def test_every_failed_request_is_said_so():
    verdict = recorded("perf_all_failed", "performance")
    assert not verdict.ok
    assert "mock-chat/aime4: every request failed (4 of 4): Internal Server Error x4" in verdict.reasons
    assert "mock-chat/aime4: no performance summary (aime4.json) was written" in verdict.reasons


def test_a_missing_tokenizer_is_told_from_the_console():
    verdict = recorded("perf_no_tokenizer", "performance")
    assert not verdict.ok and (FIXTURES / "perf_no_tokenizer" / "exit_code").read_text().strip() == "1"
    assert verdict.reasons[0] == ("performance mode needs the served model's tokenizer directory on this machine; "
                                  "'' does not exist")
    assert not recorded("perf_no_tokenizer", "performance", with_console=False).ok


def test_no_run_folder_at_all(tmp_path):
    console = "\x1b[31mAISBenchConfigError\x1b[0m: [TMAN-CFG-001] invaild syntax\nFileNotFoundError: [Errno 2] " \
              "No such file or directory: '/data/x.jsonl'\n"
    verdict = judge(tmp_path, "accuracy", console)
    assert not verdict.ok
    assert verdict.reasons[0].startswith("AISBench made no run folder in ")
    assert "a file is missing: /data/x.jsonl" in verdict.reasons
    assert verdict.log_tail[0] == "AISBenchConfigError: [TMAN-CFG-001] invaild syntax"


def test_a_damaged_output_file_is_a_reason_not_an_exception(tmp_path):
    shutil.copytree(FIXTURES / "accuracy_ok" / "work", tmp_path / "work")
    (csv,) = (tmp_path / "work").glob("*/summary/*.csv")
    csv.write_text("dataset,version\n")
    verdict = judge(tmp_path / "work", "accuracy")
    assert not verdict.ok and verdict.reasons == [f"{csv}:line 1: missing column(s) metric, mode"]
    assert verdict.log_tail  # still the logs, to see what happened


def test_an_error_line_fails_an_otherwise_good_run(tmp_path):
    shutil.copytree(FIXTURES / "perf_ok" / "work", tmp_path / "work")
    (log,) = (tmp_path / "work").glob("*/logs/infer/*/*.out")
    log.write_text(log.read_text() + "[2026-12-01 05:50:00,000] [ais_bench] [\x1b[31mERROR\x1b[0m] disk full | "
                                     "Visit https://example.invalid/x for further help.\n")
    verdict = judge(tmp_path / "work", "performance")
    assert (verdict.ok, verdict.reasons) == (False, ["AISBench logged an error: disk full"])


def test_the_mode_is_checked(tmp_path):
    with pytest.raises(ValueError, match="^mode:"):
        judge(tmp_path, "perf")
