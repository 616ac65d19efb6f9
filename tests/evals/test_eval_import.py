"""Importing AISBench results made elsewhere (issue 34, part 3): a zipped output folder, a summary file or pasted
console output becomes a run marked imported, tied to a deployment revision or an outside system, readable in the
list, the run page and compare; a bad file is refused naming file, line and column, and nothing is stored. The
inputs are runs recorded from the real AISBench (tests/evals/fixtures/record.py)."""

import base64
import io
import re
import zipfile
from pathlib import Path

import pytest

from apps.evals.models import EvalRun, EvalSample

pytestmark = pytest.mark.django_db

FIXTURES = Path(__file__).parent / "fixtures"
ACCURACY_WORK = FIXTURES / "accuracy_ok" / "work"
PERF_WORK = FIXTURES / "perf_ok" / "work"
IMPORT = "/api/evals/import/"


def zip_of(folder: Path, *, under: str = "") -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                archive.write(path, f"{under}{path.relative_to(folder)}")
    return buffer.getvalue()


def summary_file(suffix: str) -> Path:
    return next(ACCURACY_WORK.glob(f"*/summary/summary_*.{suffix}"))


@pytest.fixture
def operator(api_client_for, evals_dir):
    return api_client_for("operator")


def post_file(client, name: str, data: bytes, **fields):
    return client.post(IMPORT, {"name": name, "content_base64": base64.b64encode(data).decode(), **fields},
                       format="json")


def test_a_zipped_output_folder_tied_to_a_deployment_is_a_run_marked_imported(operator, deployment):
    response = post_file(operator, "cluster-b-aime.zip", zip_of(ACCURACY_WORK), deployment=deployment.pk,
                         note="from the B cluster")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["source"] == "imported" and body["status"] == "succeeded" and body["mode"] == "accuracy"
    assert body["deployment"] == deployment.pk and body["revision_number"] == deployment.active_revision.number
    assert body["imported_from"].startswith("cluster-b-aime.zip (") and body["note"] == "from the B cluster"
    [entry] = body["results"]
    assert (entry["model"], entry["dataset"]) == ("mock-chat", "aime4")
    assert entry["accuracy"]["score"] == 75.0 and body["accuracy"] == 75.0 and entry["performance"] is None
    run = EvalRun.objects.get(pk=body["id"])
    assert run.revision_spec == deployment.active_revision.spec  # compare shows the topology it ran on
    samples = EvalSample.objects.filter(run=run)
    assert samples.count() == 4 and {(s.model, s.dataset) for s in samples} == {("mock-chat", "aime4")}
    assert samples.filter(correct=True).count() == 3
    listed = operator.get("/api/evals/runs/").json()["results"]
    assert [(r["id"], r["source"]) for r in listed] == [(run.pk, "imported")]


def test_a_perf_folder_reads_its_load_from_what_aisbench_measured(operator):
    [ts] = list(PERF_WORK.iterdir())
    response = post_file(operator, "perf.zip", zip_of(ts, under=f"{ts.name}/"), label="cluster-b")
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["deployment"], body["deployment_name"], body["revision_number"]) == (None, "cluster-b", 0)
    assert body["mode"] == "performance" and body["concurrency"] == 2  # the file's Max Concurrency
    [entry] = body["results"]
    perf = entry["performance"]
    assert perf["headline_stage"] == "total" and perf["summary"]["total"]["output_token_throughput"] == 363.1942
    assert perf["metrics"]["total"]["Prefill Token Throughput"] == {"value": 535.1275, "unit": "token/s"}
    assert body["perf_summary"]["request_throughput"] == 45.3993 and "TTFT" in body["perf_percentiles"]
    run = EvalRun.objects.get(pk=body["id"])
    assert run.max_out_len == round(perf["percentiles"]["total"]["OutputTokens"]["max"]) > 0
    assert len(run.perf_requests) == 6  # the details file came along: the histograms and timeline draw


@pytest.mark.parametrize("suffix", ["md", "txt", "csv"])
def test_each_summary_file_form_imports_with_its_score(operator, suffix):
    path = summary_file(suffix)
    response = post_file(operator, path.name, path.read_bytes())
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["deployment_name"] == "external" and body["results"][0]["accuracy"]["score"] == 75.0


def test_pasted_console_output_imports(operator):
    console = (FIXTURES / "accuracy_ok" / "console.txt").read_text()
    response = operator.post(IMPORT, {"text": console, "label": "pasted-run"}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["results"][0]["accuracy"]["score"] == 75.0


def test_a_bad_summary_is_refused_naming_file_line_and_column_and_nothing_is_stored(operator):
    text = summary_file("csv").read_text().replace("75.00", "seventy-five")
    before = EvalRun.objects.count()
    response = post_file(operator, "summary_bad.csv", text.encode())
    assert response.status_code == 400, response.content
    message = str(response.json())
    assert "summary_bad.csv" in message and "line 2" in message and "mock-chat" in message, message
    assert EvalRun.objects.count() == before


@pytest.mark.parametrize("fields, field, words", [
    ({"revision": 99}, "revision", "no revision r99"),
    ({"label": "cluster-b"}, "label", "not both"),
])
def test_a_bad_tie_is_refused_naming_its_field(operator, deployment, fields, field, words):
    path = summary_file("csv")
    response = post_file(operator, path.name, path.read_bytes(), deployment=deployment.pk, **fields)
    assert response.status_code == 400
    assert words in str(response.json()) and field in str(response.json())
    assert not EvalRun.objects.exists()


def test_viewers_cannot_import(api_client_for, evals_dir):
    path = summary_file("csv")
    assert post_file(api_client_for("viewer"), path.name, path.read_bytes()).status_code == 403


def test_the_page_imports_and_the_run_shows_marked_imported(client, make_user, evals_dir):
    operator = make_user("operator", "page-importer")
    client.force_login(operator)
    path = summary_file("md")
    with path.open("rb") as upload:
        response = client.post("/evals/import/", {"file": upload, "label": "cluster-b", "note": "nightly"})
    assert response.status_code == 302, response.content.decode()[:2000]
    run = EvalRun.objects.get()
    html = client.get(response["Location"]).content.decode()
    assert 'id="imported-badge"' in html and path.name in html and "cluster-b" in html and "nightly" in html
    assert 'id="progress-count"' not in html and "imported (zip)" in html  # nothing ran here: no progress
    accuracy = re.search(r'id="accuracy-table">(.*?)</table>', html, re.S).group(1)
    assert "mock-chat" in accuracy and "aime4" in accuracy and "75" in accuracy
    listing = client.get("/evals/").content.decode()
    assert f'data-run="{run.pk}"' in listing and ">imported</span>" in listing
    download = client.get(f"/evals/{run.pk}/download/")
    assert download.status_code == 200
    archive = zipfile.ZipFile(io.BytesIO(b"".join(download.streaming_content)))
    assert archive.read(f"eval-{run.pk}/{path.name}") == path.read_bytes()  # the original, as uploaded


def test_the_page_keeps_what_was_typed_and_names_the_bad_field(client, make_user, evals_dir):
    client.force_login(make_user("operator", "page-importer"))
    response = client.post("/evals/import/", {"text": "no table in here", "label": "cluster-b", "concurrency": "x"})
    assert response.status_code == 400
    html = response.content.decode()
    assert 'id="import-errors"' in html and "not a whole number" in html and 'value="cluster-b"' in html
    assert not EvalRun.objects.exists()


def test_an_imported_summary_shows_in_compare_beside_a_run_of_ours(operator, deployment, client):
    from apps.evals.aisbench.output_parser import DatasetAccuracy
    from apps.evals.results import store_accuracy

    revision = deployment.active_revision
    ours = EvalRun.objects.create(
        deployment=deployment, deployment_name=deployment.name, revision=revision, revision_number=revision.number,
        revision_spec=revision.spec, endpoint_url="http://127.0.10.234:1999/", served_model="qwen3", mode="accuracy",
        dataset_key="upload:aime4", dataset_abbr="aime4", dataset_family="aime", status="succeeded")
    store_accuracy(ours, [DatasetAccuracy("pdcp", "aime4", {"accuracy": 50.0})])
    path = summary_file("md")
    imported = post_file(operator, path.name, path.read_bytes(), label="cluster-b").json()["id"]

    body = operator.get(f"/api/evals/compare/?runs={ours.pk},{imported}").json()
    [table] = body["tables"]
    assert table["dataset"] == "aime4"
    assert [(c["run"], c["model"], c["imported"]) for c in table["columns"]] == [
        (ours.pk, "pdcp", False), (imported, "mock-chat", True)]
    accuracy = next(row for row in table["rows"] if row["key"] == "accuracy")
    assert accuracy["values"] == [50.0, 75.0]

    client.force_login(operator.user)
    html = client.get(f"/evals/compare/?runs={ours.pk},{imported}").content.decode()
    compared = re.search(r'id="compare-table-1">(.*?)</table>', html, re.S).group(1)
    assert "mock-chat" in compared and "imported" in compared and f"from {path.name}" in compared
    assert "no topology recorded (external)" in html


def test_an_imported_perf_run_tied_to_a_deployment_counts_in_the_advisor(operator, deployment):
    [ts] = list(PERF_WORK.iterdir())
    response = post_file(operator, "perf.zip", zip_of(ts), deployment=deployment.pk,
                         dataset="catalogue:made-up-aime", max_out_len=512)
    assert response.status_code == 201, response.content
    run = response.json()
    assert (run["dataset_key"], run["settings"]["max_out_len"]) == ("catalogue:made-up-aime", 512)
    advice = operator.get("/api/evals/advisor/", {"group": "qwen3-235b|catalogue:made-up-aime|512",
                                                  "ttft_ms": "1000", "stat": "p90"}).json()
    assert [r["run"] for layout in advice["layouts"] for r in layout["runs"]] == [run["id"]]
    bad = post_file(operator, "perf.zip", zip_of(ts), dataset="catalogue:no-such-set")
    assert bad.status_code == 400 and "unknown dataset" in str(bad.json())


def test_samples_of_several_models_say_whose_they_are(operator, client, tmp_path):
    """The recorded accuracy run, with its model's files copied under a second model's name."""
    import shutil

    work = tmp_path / "work"
    shutil.copytree(ACCURACY_WORK, work)
    [ts] = list(work.iterdir())
    for part in ("results", "predictions"):
        shutil.copytree(ts / part / "mock-chat", ts / part / "mock-chat-b")
    summary = next((ts / "summary").glob("*.csv"))
    summary.write_text(summary.read_text().replace("mock-chat", "mock-chat,mock-chat-b").replace("75.00", "75.00,50.00"))
    for other in (ts / "summary").glob("summary_*.[mt][dx]*"):
        other.unlink()
    run = post_file(operator, "two.zip", zip_of(work)).json()["id"]
    samples = operator.get(f"/api/evals/runs/{run}/samples/").json()["results"]
    assert {(s["model"], s["dataset"]) for s in samples} == {("mock-chat", "aime4"), ("mock-chat-b", "aime4")}
    assert len(samples) == 8
    client.force_login(operator.user)
    html = client.get(f"/evals/{run}/").content.decode()
    table = re.search(r'id="samples-table">(.*?)</table>', html, re.S).group(1)
    assert "<th>Model</th><th>Dataset</th>" in table and "<td>mock-chat-b</td><td>aime4</td>" in table


def test_a_big_zip_goes_as_pdcp_sends_it_and_a_big_json_body_is_a_413(operator):
    """pdcp posts the file as multipart (pdcpcli.api.multipart): Django takes it past DATA_UPLOAD_MAX_MEMORY_SIZE,
    which a JSON body hits with a 413 naming the way out, not a 500."""
    from pdcpcli.api import multipart

    buffer = io.BytesIO(zip_of(ACCURACY_WORK))
    with zipfile.ZipFile(buffer, "a") as archive:  # incompressible bytes beside the results: a 3.5 MB zip
        archive.writestr("extra/padding.bin", bytes(range(256)) * 14_000, compress_type=zipfile.ZIP_STORED)
    data = buffer.getvalue()
    body, kind = multipart({"label": "cluster-b", "ignore_eos": "false"}, "big run.zip", data)
    response = operator.generic("POST", IMPORT, body, content_type=kind)
    assert response.status_code == 201, response.content[:500]
    assert response.json()["imported_from"].startswith("big run.zip (")
    too_big = post_file(operator, "big.zip", data)
    assert too_big.status_code == 413 and "multipart/form-data" in too_big.json()["detail"]
