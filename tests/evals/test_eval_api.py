"""Evals over the REST API: runs (create, every bad setting named, cancel, resume, samples), the comparison,
sweeps, datasets (upload checked line by line), and roles. No Celery: apply_async is stopped."""

import json

import pytest

from apps.evals.models import EvalDataset, EvalRun, EvalSample, EvalSweep
from apps.jobs import tasks
from apps.jobs.models import Job
from tests.api_schema_check import field_errors
from tests.evals.test_aisbench_config_writer import MMENGINE_CODE

pytestmark = pytest.mark.django_db

MADE_UP = "catalogue:made-up-aime"
RUNS = "/api/evals/runs/"


@pytest.fixture
def queued(monkeypatch):
    """The (job id, queue) of every job sent to Celery."""
    sent = []
    monkeypatch.setattr(tasks.run_job_task, "apply_async", lambda args, queue: sent.append((args[0], queue)))
    return sent


@pytest.fixture
def operator(api_client_for):
    return api_client_for("operator")


@pytest.fixture
def viewer(api_client_for):
    return api_client_for("viewer")


@pytest.fixture
def run_of(deployment, queued, make_user):
    """A run created through the service (its job queued nowhere), then put in the given state."""
    from apps.evals.services import eval_run_create

    def make(status="pending", **fields):
        run = eval_run_create(deployment=deployment, user=make_user("operator", f"maker-{EvalRun.objects.count()}"),
                              settings={"dataset": MADE_UP})
        EvalRun.objects.filter(pk=run.pk).update(status=status, **fields)
        if status in ("succeeded", "failed", "canceled"):
            Job.objects.filter(pk=run.job_id).update(status={"succeeded": "successful"}.get(status, status))
        run.refresh_from_db()
        return run

    return make


def test_create_with_good_settings_is_202_and_queues_an_evaluate_job_on_the_evals_queue(
        operator, deployment, queued, settings, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = operator.post(RUNS, {"deployment": deployment.pk, "settings": {
            "dataset": MADE_UP, "concurrency": 2, "temperature": 0.0, "num_prompts": 5}}, format="json")
    assert response.status_code == 202, response.content
    body = response.json()
    run = EvalRun.objects.get()
    assert response["Location"] == f"/api/jobs/{run.job_id}/" == body["links"]["job"]
    assert body["id"] == run.pk and body["status"] == "pending" and body["job"] == run.job_id
    assert body["settings"]["dataset"] == MADE_UP and body["settings"]["concurrency"] == 2
    assert body["revision_number"] == 1 and body["endpoint_url"].endswith(":1999/")
    job = Job.objects.get()
    assert job.kind == "evaluate" and job.target_id == run.pk
    assert queued == [(job.pk, settings.PDCP_QUEUES["evals"])]


def test_every_bad_setting_is_named_and_nothing_is_created(operator, deployment, queued):
    response = operator.post(RUNS, {"deployment": deployment.pk, "settings": {
        "dataset": MADE_UP, "concurrency": 0, "temperature": 3, "colour": "red"}}, format="json")
    assert response.status_code == 400
    errors = field_errors(response)
    assert set(errors) == {"settings.concurrency", "settings.temperature", "settings.colour"}
    assert "1 to 1000" in errors["settings.concurrency"][0] and "0 to 2" in errors["settings.temperature"][0]
    assert "unknown setting" in errors["settings.colour"][0]

    response = operator.post(RUNS, {"deployment": deployment.pk, "settings": {"dataset": "catalogue:nope"}},
                             format="json")
    assert response.status_code == 400 and "nope" in field_errors(response)["settings.dataset"][0]

    response = operator.post(RUNS, {"deployment": deployment.pk, "settings": {"dataset": MADE_UP},
                                    "concurrency": 2}, format="json")
    assert response.status_code == 400 and "unknown field" in field_errors(response)["concurrency"][0]

    response = operator.post(RUNS, {"deployment": deployment.pk}, format="json")
    assert response.status_code == 400 and "settings" in field_errors(response)
    assert not EvalRun.objects.exists() and not Job.objects.exists() and not queued


def test_a_deployment_without_an_active_revision_is_named(operator, ref_cluster):
    from apps.deployments.models import Deployment

    empty = Deployment.objects.create(name="empty", cluster=ref_cluster)
    response = operator.post(RUNS, {"deployment": empty.pk, "settings": {"dataset": MADE_UP}}, format="json")
    assert response.status_code == 400
    assert "no active revision" in field_errors(response)["deployment"][0]
    response = operator.post(RUNS, {"deployment": 999999, "settings": {"dataset": MADE_UP}}, format="json")
    assert response.status_code == 400 and "deployment" in field_errors(response)


def test_performance_without_a_tokenizer_is_named(operator, deployment):
    response = operator.post(RUNS, {"deployment": deployment.pk, "settings": {
        "dataset": MADE_UP, "mode": "performance"}}, format="json")
    assert response.status_code == 400 and "tokenizer" in field_errors(response)["settings.tokenizer_path"][0]


# MMENGINE_CODE made the real ais_bench run code (tests/evals/test_aisbench_config_reload.py): mmengine substitutes
# {{$NAME:default}} in the text of the config ais_bench reloads, inside string literals too.
@pytest.mark.parametrize("served_name", ["m{{$PDCP_SECRETS_KEY:x}}", MMENGINE_CODE])
def test_an_operator_topology_whose_served_name_mmengine_would_substitute_cannot_be_evaluated(
        operator, ref_cluster, fixed_yaml, queued, served_name):
    yaml_text = fixed_yaml.replace("served_name: qwen3-235b", f"served_name: {json.dumps(served_name)}")
    assert yaml_text != fixed_yaml
    created = operator.post("/api/deployments/", {"name": "templated", "cluster": ref_cluster.pk,
                                                  "yaml_text": yaml_text}, format="json")
    assert created.status_code == 201, created.content
    from apps.deployments.models import Deployment

    deployment = Deployment.objects.get(name="templated")
    assert deployment.active_revision.spec["model"]["served_name"] == served_name
    response = operator.post(RUNS, {"deployment": deployment.pk, "settings": {"dataset": MADE_UP}}, format="json")
    assert response.status_code == 400, response.content
    message = field_errors(response)["deployment"][0]
    assert "model.served_name" in message and "'{{' or '}}'" in message
    response = operator.post("/api/evals/sweeps/", {"deployment": deployment.pk, "concurrencies": "1,2", "settings": {
        "dataset": MADE_UP, "tokenizer_path": "/opt/tok"}}, format="json")
    assert response.status_code == 400 and "model.served_name" in field_errors(response)["deployment"][0]
    assert not EvalRun.objects.exists() and not Job.objects.filter(kind="evaluate").exists() and not queued


@pytest.mark.parametrize("path", ["/opt/{{$PDCP_SECRETS_KEY:x}}", "/opt/{{ fileDirname }}", "/opt/../etc",
                                  "/opt//tok", "/opt/tok\t", "/"])
def test_a_tokenizer_path_the_config_writer_would_refuse_is_named_at_once(operator, deployment, queued, path):
    response = operator.post(RUNS, {"deployment": deployment.pk, "settings": {
        "dataset": MADE_UP, "mode": "performance", "tokenizer_path": path}}, format="json")
    assert response.status_code == 400, response.content
    assert "absolute directory path" in field_errors(response)["settings.tokenizer_path"][0]
    assert not EvalRun.objects.exists() and not queued


def test_a_run_stored_with_a_value_the_writer_refuses_fails_its_pass_naming_it(run_of):
    from apps.evals import execution
    from apps.jobs.context import JobFailed

    run = run_of()
    EvalRun.objects.filter(pk=run.pk).update(served_model="m{{$PDCP_SECRETS_KEY:x}}")
    run.refresh_from_db()
    with pytest.raises(JobFailed, match="accuracy: the AISBench config cannot be written: served_model: contains"):
        execution._config(run, "/tmp/run", "accuracy")


def test_viewer_reads_but_cannot_post_and_anonymous_is_refused(viewer, deployment, run_of, api_client_for):
    from rest_framework.test import APIClient

    run = run_of()
    assert viewer.post(RUNS, {"deployment": deployment.pk, "settings": {"dataset": MADE_UP}},
                       format="json").status_code == 403
    assert viewer.post(f"{RUNS}{run.pk}/cancel/").status_code == 403
    assert viewer.post(f"{RUNS}{run.pk}/resume/").status_code == 403
    assert viewer.post("/api/evals/sweeps/", {}, format="json").status_code == 403
    assert viewer.post("/api/evals/datasets/", {}).status_code == 403
    assert viewer.get(RUNS).status_code == 200
    for url in (RUNS, "/api/evals/datasets/", "/api/evals/sweeps/", f"/api/evals/compare/?runs={run.pk},{run.pk}"):
        assert APIClient().get(url).status_code == 401, url
        assert api_client_for(None).get(url).status_code == 403, url
    assert EvalRun.objects.count() == 1


def test_list_is_paged_and_filtered(viewer, run_of, deployment):
    pending, done = run_of(), run_of("succeeded", accuracy=80.0)
    body = viewer.get(RUNS).json()
    assert body["count"] == 2 and {r["id"] for r in body["results"]} == {pending.pk, done.pk}
    assert "perf_requests" not in body["results"][0]
    assert [r["id"] for r in viewer.get(RUNS, {"status": "succeeded"}).json()["results"]] == [done.pk]
    assert viewer.get(RUNS, {"mode": "performance"}).json()["count"] == 0
    assert viewer.get(RUNS, {"deployment": deployment.pk}).json()["count"] == 2
    assert viewer.get(RUNS, {"limit": 1}).json()["next"]


def test_detail_has_everything_stored_and_requests_only_when_asked(viewer, run_of):
    run = run_of("succeeded", accuracy=50.0, accuracy_detail={"correct": 1}, perf_summary={"request_throughput": 2},
                 perf_percentiles={"TTFT": {"avg": 10}}, perf_requests=[{"id": 0}], log_tail=["done"],
                 timestamps={"accuracy": "20261201_101500"}, phase="scoring", explanation="ok")
    body = viewer.get(f"{RUNS}{run.pk}/").json()
    for key in ("settings", "status", "phase", "progress_done", "progress_total", "percent", "explanation",
                "log_tail", "accuracy", "accuracy_detail", "perf_summary", "perf_percentiles", "timestamps", "job",
                "revision_spec", "links", "created", "started", "finished"):
        assert key in body, key
    assert body["accuracy"] == 50.0 and body["perf_percentiles"]["TTFT"]["avg"] == 10
    assert "perf_requests" not in body
    assert body["links"]["samples"] == f"/api/evals/runs/{run.pk}/samples/"
    assert body["links"]["job"] == f"/api/jobs/{run.job_id}/" and body["links"]["page"] == f"/evals/{run.pk}/"
    assert viewer.get(f"{RUNS}{run.pk}/", {"include": "requests"}).json()["perf_requests"] == [{"id": 0}]


def test_cancel_a_pending_run_ends_it_and_a_second_cancel_is_409(operator, run_of):
    run = run_of()
    response = operator.post(f"{RUNS}{run.pk}/cancel/")
    assert response.status_code == 202 and response.json()["status"] == "canceled"
    run.refresh_from_db()
    assert run.status == "canceled" and run.job.status == "canceled"
    again = operator.post(f"{RUNS}{run.pk}/cancel/")
    assert again.status_code == 409 and "already ended" in again.json()["detail"]


def test_resume_a_succeeded_run_is_409_and_a_failed_one_gets_a_new_job(operator, run_of, queued,
                                                                       django_capture_on_commit_callbacks):
    succeeded = run_of("succeeded")
    response = operator.post(f"{RUNS}{succeeded.pk}/resume/")
    assert response.status_code == 409 and "only a failed or canceled run" in response.json()["detail"]

    failed = run_of("failed", explanation="the proxy went away")
    first_job = failed.job_id
    with django_capture_on_commit_callbacks(execute=True):
        response = operator.post(f"{RUNS}{failed.pk}/resume/")
    assert response.status_code == 202
    body = response.json()
    assert body["status"] == "pending" and body["job"] != first_job and body["explanation"] == ""
    assert Job.objects.get(pk=body["job"]).params == {"resume": True}
    assert queued[-1][0] == body["job"]


def test_samples_are_paged_and_filtered_by_correct(viewer, run_of):
    run = run_of("succeeded")
    for i in range(4):
        EvalSample.objects.create(run=run, index=i, question=f"q{i}", prediction="\\boxed{1}", extracted="1",
                                  reference="1" if i % 2 else "2", correct=bool(i % 2))
    body = viewer.get(f"{RUNS}{run.pk}/samples/", {"correct": "false"}).json()
    assert body["count"] == 2 and [s["index"] for s in body["results"]] == [0, 2]
    assert body["results"][0]["reference"] == "2" and body["results"][0]["correct"] is False
    assert viewer.get(f"{RUNS}{run.pk}/samples/", {"correct": "true"}).json()["count"] == 2
    assert viewer.get(f"{RUNS}{run.pk}/samples/").json()["count"] == 4
    bad = viewer.get(f"{RUNS}{run.pk}/samples/", {"correct": "maybe"})
    assert bad.status_code == 400 and "correct" in field_errors(bad)


def test_compare_shows_regressions_and_the_topology_change(viewer, run_of, deployment, fixed_yaml):
    from apps.deployments.services import revision_create

    base = run_of("succeeded", accuracy=80.0, perf_summary={"request_throughput": 10.0},
                  perf_percentiles={"TTFT": {"avg": 100.0}})
    revision_create(deployment=deployment, user=None, activate=True,
                    yaml_text=fixed_yaml.replace("policy: least_conn", "policy: round_robin"))
    other = run_of("succeeded", accuracy=70.0, perf_summary={"request_throughput": 10.2},
                   perf_percentiles={"TTFT": {"avg": 150.0}})
    assert other.revision_number == 2

    response = viewer.get("/api/evals/compare/", {"runs": f"{base.pk},{other.pk}"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert [r["id"] for r in body["runs"]] == [base.pk, other.pk]
    rows = {r["key"]: r for r in body["rows"]}
    assert rows["accuracy"]["values"] == [80.0, 70.0] and rows["accuracy"]["regressions"] == [False, True]
    assert rows["TTFT.avg"]["regressions"] == [False, True] and rows["TTFT.avg"]["deltas"][1] == 50.0
    assert rows["request_throughput"]["regressions"] == [False, False]
    change = body["topology_changes"][0]
    assert change["run"] == other.pk and change["baseline"] == base.pk
    assert {"path": "proxy.policy", "old": "least_conn", "new": "round_robin"} in change["changes"]


def test_compare_names_bad_and_missing_ids(viewer, run_of):
    run = run_of()
    bad = viewer.get("/api/evals/compare/", {"runs": f"{run.pk},x"})
    assert bad.status_code == 400 and "x" in field_errors(bad)["runs"][0]
    assert viewer.get("/api/evals/compare/", {"runs": str(run.pk)}).status_code == 400
    assert viewer.get("/api/evals/compare/", {"runs": ",".join(["1"] * 11)}).status_code == 400
    missing = viewer.get("/api/evals/compare/", {"runs": f"{run.pk},999999"})
    assert missing.status_code == 404 and "999999" in missing.json()["detail"]


def test_a_sweep_creates_one_run_per_concurrency_and_starts_only_the_first(operator, deployment, queued,
                                                                             django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = operator.post("/api/evals/sweeps/", {
            "deployment": deployment.pk, "concurrencies": [4, 1, 2],
            "settings": {"dataset": MADE_UP, "tokenizer_path": "/opt/tok"}}, format="json")
    assert response.status_code == 202, response.content
    body = response.json()
    sweep = EvalSweep.objects.get()
    assert body["id"] == sweep.pk and body["concurrencies"] == [1, 2, 4]
    runs = list(sweep.runs.order_by("concurrency"))
    assert [r.concurrency for r in runs] == [1, 2, 4] and {r.mode for r in runs} == {"performance"}
    assert runs[0].job_id and not runs[1].job_id and not runs[2].job_id
    assert [job for job, _ in queued] == [runs[0].job_id]
    assert [p["concurrency"] for p in body["runs"]] == [1, 2, 4]

    EvalRun.objects.filter(pk=runs[0].pk).update(
        status="succeeded", perf_summary={"request_throughput": 3.0, "output_token_throughput": 90.0},
        perf_percentiles={"TTFT": {"avg": 20.0, "p99": 40.0}, "TPOT": {"avg": 5.0, "p95": 7.5}})
    detail = operator.get(f"/api/evals/sweeps/{sweep.pk}/").json()
    first = detail["runs"][0]
    assert first["status"] == "succeeded" and first["request_throughput"] == 3.0
    assert first["ttft"]["p99"] == 40.0 and first["tpot"]["avg"] == 5.0
    assert first["tpot"]["p95"] == 7.5 and first["tpot"]["p90"] is None  # the columns its file had
    assert detail["runs"][1]["status"] == "pending" and detail["runs"][1]["request_throughput"] is None
    assert operator.get("/api/evals/sweeps/").json()["count"] == 1
    assert operator.get(RUNS, {"sweep": sweep.pk}).json()["count"] == 3


def test_bad_sweeps_are_named(operator, deployment):
    response = operator.post("/api/evals/sweeps/", {"deployment": deployment.pk, "concurrencies": [1],
                                                    "settings": {"dataset": MADE_UP, "tokenizer_path": "/opt/tok"}},
                             format="json")
    assert response.status_code == 400 and "2 to 12" in field_errors(response)["concurrencies"][0]
    response = operator.post("/api/evals/sweeps/", {"deployment": deployment.pk, "concurrencies": "1,2",
                                                    "settings": {"dataset": MADE_UP}}, format="json")
    assert response.status_code == 400 and "settings.tokenizer_path" in field_errors(response)
    response = operator.post("/api/evals/sweeps/", {"deployment": deployment.pk, "concurrencies": "1,2",
                                                    "settings": {"dataset": MADE_UP, "concurrency": 3}},
                             format="json")
    assert response.status_code == 400 and "settings.concurrency" in field_errors(response)
    assert not EvalSweep.objects.exists() and not EvalRun.objects.exists()


def _jsonl(*items) -> bytes:
    return "".join(json.dumps(item) + "\n" for item in items).encode()


def test_datasets_list_the_catalogue(viewer, evals_dir):
    body = viewer.get("/api/evals/datasets/").json()
    made_up = next(d for d in body["results"] if d["key"] == MADE_UP)
    assert made_up["present"] and made_up["runnable"] and made_up["simulated_only"] and made_up["lines"] > 0
    gsm8k = next(d for d in body["results"] if d["key"] == "catalogue:gsm8k")
    assert not gsm8k["present"] and "not present" in gsm8k["problem"]
    assert set(made_up) == {"key", "name", "family", "title", "present", "lines", "runnable", "problem",
                            "simulated_only"}


def test_upload_a_good_dataset_then_it_is_listed(operator, evals_dir):
    from django.core.files.uploadedfile import SimpleUploadedFile

    data = _jsonl({"question": "1+1?", "answer": 2}, {"question": "2+2?", "answer": "4"})
    response = operator.post("/api/evals/datasets/", {
        "name": "tiny", "family": "aime", "description": "two sums",
        "file": SimpleUploadedFile("tiny.jsonl", data)}, format="multipart")
    assert response.status_code == 201, response.content
    assert response.json()["key"] == "upload:tiny" and response.json()["lines"] == 2
    listed = next(d for d in operator.get("/api/evals/datasets/").json()["results"] if d["key"] == "upload:tiny")
    assert listed["runnable"] and listed["title"] == "two sums"


def test_upload_with_a_bad_line_3_is_400_naming_it_and_stores_nothing(operator, evals_dir):
    from django.core.files.uploadedfile import SimpleUploadedFile

    data = _jsonl({"question": "a", "answer": 1}, {"question": "b", "answer": 2}) + b'{"question": "c"}\n'
    response = operator.post("/api/evals/datasets/", {
        "name": "broken", "family": "aime", "file": SimpleUploadedFile("broken.jsonl", data)}, format="multipart")
    assert response.status_code == 400
    assert "line 3" in field_errors(response)["file"][0]
    assert not EvalDataset.objects.exists()
    assert not (evals_dir / "uploads").exists() or not any((evals_dir / "uploads").iterdir())


def test_upload_checks_name_and_family(operator, evals_dir):
    from django.core.files.uploadedfile import SimpleUploadedFile

    response = operator.post("/api/evals/datasets/", {
        "name": "Bad Name", "family": "mmlu", "file": SimpleUploadedFile("x.jsonl", b"{}\n")}, format="multipart")
    assert response.status_code == 400 and {"name", "family"} <= set(field_errors(response))
    assert not EvalDataset.objects.exists()
