"""Fixed output length (ignore_eos): read and checked by run_settings, refused for accuracy, given to the
performance pass only (execution._config renders it into generation_kwargs), stored and returned by the API for
runs and sweeps. No Celery: apply_async is stopped."""

import pytest
import yaml

from apps.evals.execution import _config
from apps.evals.models import EvalRun, EvalSweep
from apps.evals.run_settings import FIXED_LENGTH_ACCURACY, BadRunSettings, RunSettings
from apps.jobs import tasks
from tests.api_schema_check import field_errors
from tests.evals.test_aisbench_config_writer import loaded

MADE_UP = "catalogue:made-up-aime"
RUNS = "/api/evals/runs/"
SWEEPS = "/api/evals/sweeps/"


def generation_kwargs(run: EvalRun, pass_name: str) -> dict:
    (model,) = loaded(_config(run, "/work/run", pass_name))["models"]
    return model["generation_kwargs"]


def unsaved_run(**fields) -> EvalRun:
    values = {"endpoint_url": "http://127.0.0.1:1999/", "served_model": "m", "mode": "both",
              "dataset_key": MADE_UP, "dataset_abbr": "made_up_aime", "dataset_family": "aime",
              "max_out_len": 1500, "tokenizer_path": "/opt/tok"}
    return EvalRun(**{**values, **fields})


@pytest.mark.parametrize("raw, expected", [(True, True), ("on", True), ("TRUE", True), ("1", True),
                                           (False, False), ("off", False), ("0", False)])
def test_ignore_eos_is_read_like_stream(raw, expected):
    settings = RunSettings.from_dict({"dataset": MADE_UP, "mode": "performance", "ignore_eos": raw})
    assert settings.ignore_eos is expected
    assert RunSettings.from_dict({"dataset": MADE_UP}).ignore_eos is False


@pytest.mark.parametrize("raw", ["yes please", 2, None, [True]])
def test_a_bad_ignore_eos_is_named(raw):
    with pytest.raises(BadRunSettings) as caught:
        RunSettings.from_dict({"dataset": MADE_UP, "mode": "performance", "ignore_eos": raw})
    assert caught.value.errors == {"ignore_eos": "expected true or false"}


def test_a_fixed_output_length_is_refused_for_accuracy_only():
    for data in ({"ignore_eos": True}, {"ignore_eos": "on", "mode": "accuracy"}):
        with pytest.raises(BadRunSettings) as caught:
            RunSettings.from_dict({"dataset": MADE_UP, **data})
        assert caught.value.errors == {"ignore_eos": FIXED_LENGTH_ACCURACY}
        assert "an accuracy answer must end where the model ends it" in str(caught.value)
    assert RunSettings.from_dict({"dataset": MADE_UP, "mode": "accuracy", "ignore_eos": False}).ignore_eos is False
    with pytest.raises(BadRunSettings) as caught:  # a bad mode is named alone: it is not an accuracy run
        RunSettings.from_dict({"dataset": MADE_UP, "mode": "speed", "ignore_eos": True})
    assert set(caught.value.errors) == {"mode"}
    assert RunSettings.from_dict({"dataset": MADE_UP, "mode": "both", "ignore_eos": True}).ignore_eos is True


def test_the_performance_pass_gets_ignore_eos_and_the_accuracy_pass_of_a_both_run_does_not():
    fixed = unsaved_run(mode="both", ignore_eos=True)
    assert generation_kwargs(fixed, "performance") == {"temperature": 0.6, "ignore_eos": True}
    assert generation_kwargs(fixed, "accuracy") == {"temperature": 0.6}
    natural = unsaved_run(mode="performance", ignore_eos=False)
    assert generation_kwargs(natural, "performance") == {"temperature": 0.6}
    (model,) = loaded(_config(fixed, "/work/run", "performance"))["models"]
    assert model["max_out_len"] == 1500  # the length every answer is held to


@pytest.fixture
def queued(monkeypatch):
    sent = []
    monkeypatch.setattr(tasks.run_job_task, "apply_async", lambda args, queue: sent.append(args[0]))
    return sent


@pytest.mark.django_db
def test_the_api_stores_and_returns_ignore_eos(api_client_for, deployment, queued):
    operator = api_client_for("operator")
    response = operator.post(RUNS, {"deployment": deployment.pk, "settings": {
        "dataset": MADE_UP, "mode": "both", "ignore_eos": True, "max_out_len": 1500,
        "tokenizer_path": "/opt/tok"}}, format="json")
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["settings"]["ignore_eos"] is True and body["ignore_eos"] is True
    run = EvalRun.objects.get(pk=body["id"])
    assert run.ignore_eos and run.max_out_len == 1500
    detail = operator.get(f"{RUNS}{run.pk}/").json()
    assert detail["settings"]["ignore_eos"] is True
    assert operator.get(RUNS).json()["results"][0]["ignore_eos"] is True
    plain = operator.post(RUNS, {"deployment": deployment.pk, "settings": {"dataset": MADE_UP}}, format="json")
    assert plain.status_code == 202 and plain.json()["settings"]["ignore_eos"] is False


@pytest.mark.django_db
def test_the_api_names_ignore_eos_when_it_is_bad_or_asked_for_accuracy(api_client_for, deployment, queued):
    operator = api_client_for("operator")
    response = operator.post(RUNS, {"deployment": deployment.pk, "settings": {
        "dataset": MADE_UP, "ignore_eos": True}}, format="json")
    assert response.status_code == 400
    assert field_errors(response) == {"settings.ignore_eos": [FIXED_LENGTH_ACCURACY]}
    response = operator.post(RUNS, {"deployment": deployment.pk, "settings": {
        "dataset": MADE_UP, "mode": "performance", "tokenizer_path": "/opt/tok", "ignore_eos": "maybe"}},
                             format="json")
    assert response.status_code == 400
    assert field_errors(response) == {"settings.ignore_eos": ["expected true or false"]}
    assert not EvalRun.objects.exists() and not queued


@pytest.mark.django_db
def test_a_sweep_gives_every_run_its_output_length_and_returns_it(api_client_for, deployment, queued):
    operator = api_client_for("operator")
    response = operator.post(SWEEPS, {"deployment": deployment.pk, "concurrencies": [1, 2], "settings": {
        "dataset": MADE_UP, "tokenizer_path": "/opt/tok", "ignore_eos": True, "max_out_len": 256}}, format="json")
    assert response.status_code == 202, response.content
    sweep = EvalSweep.objects.get()
    assert [(r.ignore_eos, r.max_out_len) for r in sweep.runs.order_by("concurrency")] == [(True, 256), (True, 256)]
    points = operator.get(f"{SWEEPS}{sweep.pk}/").json()["runs"]
    assert [(p["ignore_eos"], p["max_out_len"]) for p in points] == [(True, 256), (True, 256)]
    default = operator.post(SWEEPS, {"deployment": deployment.pk, "concurrencies": "1,2", "settings": {
        "dataset": MADE_UP, "tokenizer_path": "/opt/tok"}}, format="json")
    assert default.status_code == 202 and {p["ignore_eos"] for p in default.json()["runs"]} == {False}


@pytest.mark.django_db
def test_the_schema_documents_ignore_eos_for_runs_and_sweeps(api_client_for):
    schema = yaml.safe_load(api_client_for("viewer").get("/api/schema/").content)["components"]["schemas"]
    for name in ("RunSettingsRequest", "SweepSettingsRequest", "RunSettingsOut", "SweepPoint", "EvalRun"):
        field = schema[name]["properties"]["ignore_eos"]
        assert field["type"] == "boolean" and field.get("description"), name
    assert "refused with mode accuracy" in schema["RunSettingsRequest"]["properties"]["ignore_eos"]["description"]
