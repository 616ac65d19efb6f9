"""Reading results made elsewhere (issue 34, part 3, the reading half): a zipped output folder, a summary file, a
perf file, console output uploaded or pasted; unsafe zips and bad lines refused naming file, line and column. The
inputs are AISBench's own output (tests/evals/fixtures/record.py and fixtures/forms/record.py)."""

from __future__ import annotations

import io
import re
import shutil
import stat
import tempfile
import zipfile
from pathlib import Path

import pytest

from apps.evals.aisbench import zip_upload
from apps.evals.aisbench.output_parser import OutputError, parse_performance, read_pasted, read_upload

FIXTURES = Path(__file__).parent / "fixtures"
FORMS = FIXTURES / "forms"
TWO_MODELS = [("vllm-pd-a", "gsm8k", {"accuracy": 91.31}), ("vllm-pd-b", "gsm8k", {"accuracy": 88.75}),
              ("vllm-pd-a", "aime2025", {"accuracy": 26.67}), ("vllm-pd-b", "aime2025", {"accuracy": None})]
FOUR_DATASETS = ["aime2025", "gsm8k", "math500", "synthetic_1k"]


def zip_of(folder: Path, *, under: str = "", skip: tuple[str, ...] = ()) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and not any(s in path.name or s in path.parts for s in skip):
                archive.write(path, f"{under}{path.relative_to(folder).as_posix()}")
    return buffer.getvalue()


def zip_with(*members: tuple[zipfile.ZipInfo | str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for info, data in members:
            archive.writestr(info, data)
    return buffer.getvalue()


def scores(results) -> list[tuple]:
    return [(r.model, r.dataset, r.scores) for r in results.accuracy]


def summary_of(case: str, suffix: str) -> Path:
    (path,) = (FORMS / case / "work").glob(f"*/summary/summary_*.{suffix}")
    return path


@pytest.fixture(autouse=True)
def temp_root(tmp_path, monkeypatch):
    """Every temporary folder the reader makes goes here, to see that none is left."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    yield root
    assert list(root.iterdir()) == []


# --- zips ---------------------------------------------------------------------------------------------------------

def test_a_zipped_work_folder_reads_scores_samples_and_names_its_files():
    results = read_upload("cluster-b.zip", zip_of(FIXTURES / "accuracy_ok" / "work"))
    assert results.form == "AISBench output folder (zip)" and results.performance == []
    [accuracy] = results.accuracy
    assert (accuracy.model, accuracy.dataset, accuracy.score, len(accuracy.samples)) == ("mock-chat", "aime4", 75.0, 4)
    assert results.files == ["20261201_055812/summary/summary_20261201_055812.csv",
                             "20261201_055812/predictions/mock-chat/aime4.jsonl",
                             "20261201_055812/results/mock-chat/aime4.json"]


@pytest.mark.parametrize("under", ["", "20260315_101500/", "home/op/outputs/default/20260315_101500/"])
def test_a_zipped_timestamp_folder_reads_wherever_it_sits(under):
    run = next((FORMS / "two_models" / "work").iterdir())
    assert scores(read_upload("run.zip", zip_of(run, under=under))) == TWO_MODELS


def test_a_zipped_perf_folder_without_details_keeps_all_four_datasets():
    results = read_upload("perf.zip", zip_of(FORMS / "four_datasets" / "work", skip=("_details.jsonl", "db_data")))
    assert [(p.model, p.dataset) for p in results.performance] == [("vllm-pd", d) for d in FOUR_DATASETS]
    assert all(p.requests == [] and len(p.metrics) == 13 and len(p.distributions) == 7 for p in results.performance)
    assert not any("_details" in f for f in results.files)


def test_a_zipped_stable_stage_run_has_its_stage():
    [perf] = read_upload("stable.zip", zip_of(FORMS / "stable_p95" / "work")).performance
    assert (perf.headline_stage, perf.metrics["Total Requests"].value, len(perf.requests)) == ("stable", 12, 16)
    assert list(perf.distribution("E2EL").stats) == ["avg", "min", "max", "median", "p50", "p95"]


def test_several_timestamp_folders_are_all_read_and_the_later_wins(tmp_path):
    work = tmp_path / "work"
    shutil.copytree(FORMS / "two_models" / "work", work)
    shutil.copytree(FORMS / "stable_p95" / "work" / "20260315_101500", work / "20260316_090000")
    later = shutil.copytree(work / "20260315_101500" / "summary", work / "20260316_090000" / "summary")
    (csv,) = later.glob("*.csv")
    csv.write_text(csv.read_text().replace("26.67,-", "26.67,30.00"))
    results = read_upload("work.zip", zip_of(work))
    assert scores(results)[-1] == ("vllm-pd-b", "aime2025", {"accuracy": 30.0})
    assert len(results.accuracy) == 4 and [p.dataset for p in results.performance] == ["synthetic"]


def test_a_damaged_file_in_a_zip_is_named_by_its_member_path(tmp_path):
    shutil.copytree(FORMS / "two_models" / "work", tmp_path / "work")
    (csv,) = (tmp_path / "work").glob("*/summary/*.csv")
    csv.write_text(csv.read_text().replace("88.75", "eighty-eight"))
    with pytest.raises(OutputError) as caught:
        read_upload("work.zip", zip_of(tmp_path / "work"))
    assert str(caught.value) == ("work.zip/20260315_101500/summary/summary_20260315_101500.csv:line 2, "
                                 "column vllm-pd-b: 'eighty-eight' is not a number")


def symlink(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


@pytest.mark.parametrize(("members", "message"), [
    ([("../../etc/cron.d/evil", b"x")], "x.zip:../../etc/cron.d/evil: climbs out of the folder with '..': refused"),
    ([("20260315_101500/summary/../../../x", b"x")], "climbs out of the folder"),
    ([("/etc/passwd", b"x")], "x.zip:/etc/passwd: is an absolute path: refused"),
    ([("C:\\Windows\\x.csv", b"x")], "is an absolute path: refused"),
    ([(symlink("20260315_101500/summary/summary_1.csv"), b"/etc/shadow")], "summary_1.csv: is a symbolic link"),
    ([("a.csv", b"1"), ("./a.csv", b"2")], "x.zip:./a.csv: is in the zip twice: refused"),
    ([("a", b"1"), ("a/b.csv", b"2")], "x.zip:a/b.csv: cannot be unpacked (File exists)"),
], ids=["dot-dot", "inner dot-dot", "absolute", "drive", "symlink", "twice", "file and folder"])
@pytest.mark.filterwarnings("ignore:Duplicate name")
def test_unsafe_zip_members_are_refused_before_anything_is_read(members, message):
    with pytest.raises(OutputError, match=re.escape(message)):
        read_upload("x.zip", zip_with(*members))


def test_a_zip_that_unpacks_too_big_or_too_many_is_refused(monkeypatch):
    big = zip_with(("20260315_101500/summary/summary_1.csv", b"0" * 5000))
    monkeypatch.setattr(zip_upload, "MAX_TOTAL_BYTES", 4000)
    with pytest.raises(OutputError, match=r"^x\.zip: unpacks to more than 0 MB: refused$"):
        read_upload("x.zip", big)
    monkeypatch.setattr(zip_upload, "MAX_TOTAL_BYTES", 10_000)
    monkeypatch.setattr(zip_upload, "MAX_MEMBER_BYTES", 4000)
    with pytest.raises(OutputError, match=r"^x\.zip:20260315_101500/summary/summary_1\.csv: unpacks to more than 0 MB"):
        read_upload("x.zip", big)
    monkeypatch.setattr(zip_upload, "MAX_MEMBERS", 3)
    with pytest.raises(OutputError, match=r"^x\.zip: holds 4 files, more than 3$"):
        read_upload("x.zip", zip_with(*[(f"f{i}", b"") for i in range(4)]))


def test_a_zip_without_an_output_folder_or_not_a_zip_is_refused():
    with pytest.raises(OutputError, match=r"^x\.zip: holds no result: expected an AISBench output folder"):
        read_upload("x.zip", zip_with(("notes/readme.txt", b"hello")))
    with pytest.raises(OutputError, match=r"^y\.zip: is not a readable zip file"):
        read_upload("y.zip", b"PK\x03\x04 truncated")


# --- single files ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("suffix", "form"), [("csv", "csv"), ("md", "markdown"), ("txt", "text")])
def test_each_summary_file_reads_both_models(suffix, form):
    path = summary_of("two_models", suffix)
    results = read_upload(path.name, path.read_bytes())
    assert (scores(results), results.form, results.files) == (TWO_MODELS, f"accuracy summary ({form})", [path.name])


@pytest.mark.parametrize("suffix", ["csv", "md", "txt"])
def test_a_summary_with_total_count_keeps_counts_and_only_the_model(suffix):
    path = summary_of("total_count", suffix)
    results = read_upload(path.name, path.read_bytes())
    assert [(r.model, r.dataset, r.score, r.counts) for r in results.accuracy] == [
        ("vllm-pd", "bfcl_simple", 0.75, {"accuracy": (3, 4)}), ("vllm-pd", "bfcl_irrelevance", 1.0, {"accuracy": (4, 4)}),
        ("vllm-pd", "bfcl_live", None, {})]


def test_a_perf_json_or_csv_alone_reads_as_that_dataset():
    folder = FORMS / "stable_p95" / "work" / "20260315_101500" / "performances" / "vllm-pd"
    [metrics] = read_upload("synthetic.json", (folder / "synthetic.json").read_bytes()).performance
    assert (metrics.model, metrics.dataset, metrics.stages, metrics.metrics["Concurrency"].value) == (
        "unknown", "synthetic", ["stable"], 4)
    results = read_upload("synthetic.csv", (folder / "synthetic.csv").read_bytes())
    assert results.form == "performance distributions (<dataset>.csv)"
    assert results.performance[0].distribution("TTFT").stats["p95"] == 117.3


BAD_LINES = [
    ("two_models", "md", "88.75", "eighty", "line 3, column vllm-pd-b: 'eighty' is not a number"),
    ("two_models", "md", "| 625435 | accuracy | gen | 26.67 | - |", "| 625435 | accuracy | gen | 26.67 |",
     "line 4: has a different number of cells than the header"),
    ("two_models", "txt", "88.75", "eighty", "line 15, column vllm-pd-b: 'eighty' is not a number"),
    ("two_models", "txt", "dataset,version,metric,mode,", "dataset,version,metrics,mode,",
     "line 14: missing column(s) metric"),
    ("two_models", "csv", "26.67,-", "26.67,-,-", "line 3: has a different number of cells than the header"),
    ("total_count", "csv", "0.75 (3/4)", "0.75 (3 of 4)", "line 2, column vllm-pd: '0.75 (3 of 4)' is not a number"),
]


@pytest.mark.parametrize(("case", "suffix", "old", "new", "message"), BAD_LINES, ids=[f"{b[1]}: {b[4]}" for b in BAD_LINES])
def test_a_bad_summary_line_is_refused_naming_file_line_and_column(case, suffix, old, new, message):
    path = summary_of(case, suffix)
    text = path.read_text()
    assert old in text
    with pytest.raises(OutputError) as caught:
        read_upload(path.name, text.replace(old, new).encode())
    assert str(caught.value) == f"{path.name}:{message}"


# --- console output -------------------------------------------------------------------------------------------------

def test_a_pasted_accuracy_table_reads_both_models():
    results = read_pasted((FORMS / "two_models" / "console.txt").read_text())
    assert (scores(results), results.form, results.files) == (TWO_MODELS, "console output", ["pasted text"])


def test_pasted_perf_tables_read_every_task_with_its_name():
    pasted = read_pasted((FORMS / "four_datasets" / "console.txt").read_text()).performance
    from_files = {p.dataset: p for p in parse_performance(next((FORMS / "four_datasets" / "work").iterdir()))}
    assert [(p.model, p.dataset) for p in pasted] == [("vllm-pd", d) for d in ("gsm8k", "aime2025", "synthetic_1k",
                                                                                "math500")]
    for perf in pasted:
        assert perf.metrics_by_stage == from_files[perf.dataset].metrics_by_stage
        assert perf.distributions == from_files[perf.dataset].distributions  # "inf token/s" and "nan" included


def test_a_pasted_stable_stage_run_keeps_its_stage_and_percentiles():
    [perf] = read_pasted((FORMS / "stable_p95" / "console.txt").read_text()).performance
    assert (perf.model, perf.dataset, perf.headline_stage, perf.distribution("TTFT").stats["p95"]) == (
        "vllm-pd", "synthetic", "stable", 117.3)


def test_console_captured_stream_by_stream_names_tables_by_the_later_task_line():
    """record.py keeps stdout (the tables) before stderr (the log lines)."""
    [perf] = read_pasted((FIXTURES / "perf_ok" / "console.txt").read_text()).performance
    assert (perf.model, perf.dataset, perf.metrics["Request Throughput"].value) == ("mock-chat", "synthetic6", 45.3993)


def test_an_uploaded_console_log_reads_like_a_pasted_one():
    console = (FORMS / "two_models" / "console.txt").read_bytes()
    results = read_upload("ais_bench.log", console)
    assert (scores(results), results.form, results.files) == (TWO_MODELS, "console output", ["ais_bench.log"])


def test_tables_pasted_without_their_task_line_and_with_windows_line_ends():
    lines = (FORMS / "stable_p95" / "console.txt").read_text().splitlines()
    tables = [line for line in lines if line[:1] in "╒│╞├╘"]
    [perf] = read_pasted("\r\n".join(["\x1b[32mINFO\x1b[0m something", *tables, ""])).performance
    assert (perf.model, perf.dataset, perf.metrics["Total Requests"].value) == ("unknown", "unknown", 12)


def test_a_bad_pasted_cell_names_its_line_and_column():
    text = (FORMS / "stable_p95" / "console.txt").read_text()
    number = next(i for i, line in enumerate(text.split("\n"), 1) if "12.5244 req/s" in line)
    with pytest.raises(OutputError) as caught:
        read_pasted(text.replace("12.5244 req/s", "12,5244 req/s"))
    assert str(caught.value) == f"pasted text:line {number}, column Value: '12,5244 req/s' is not a number"


def test_pasted_text_without_a_table_is_refused_saying_what_was_expected():
    with pytest.raises(OutputError, match=r"^pasted text: holds no result: expected AISBench's console tables"):
        read_pasted("[2026-03-15 10:15:00] [ais_bench] [INFO] Starting inference tasks...\n")
