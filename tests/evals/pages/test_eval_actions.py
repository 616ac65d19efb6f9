"""What operators do on the eval pages (launch, sweep, cancel, resume, upload) and viewers may not; field errors
with the values kept; CSRF on every POST; the raw output folder as a zip without symlinks."""

import io
import os
import re
import zipfile

import pytest

from apps.evals.models import EvalDataset, EvalRun, EvalSweep

pytestmark = pytest.mark.django_db

LAUNCH = {"dataset": "catalogue:made-up-aime", "mode": "accuracy", "api_style": "chat", "stream": "on",
          "max_out_len": "512", "concurrency": "2", "request_rate": "0", "temperature": "0.6", "num_prompts": "5",
          "num_warmups": "0", "tokenizer_path": "", "time_limit_s": "600"}


def field_error(html: str, name: str) -> str:
    match = re.search(rf'<span class="field-error" id="err_{name}">(.*?)</span>', html, re.S)
    return match.group(1) if match else ""


def test_the_launch_form_starts_a_run_and_leads_to_its_page(browser_for, sim_deployment):
    client = browser_for("operator")
    form = client.get(f"/evals/new/?deployment={sim_deployment.pk}").content.decode()
    assert f'<option value="{sim_deployment.pk}" selected>' in form and "csrfmiddlewaretoken" in form
    assert 'value="catalogue:aime2025" disabled' in form  # its file is not there
    response = client.post("/evals/new/", {**LAUNCH, "deployment": sim_deployment.pk})
    run = EvalRun.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/evals/{run.pk}/"
    assert (run.mode, run.concurrency, run.max_out_len, run.num_prompts, run.stream) == ("accuracy", 2, 512, 5, True)
    assert run.job is not None and run.status == "pending" and run.simulated


def test_launch_errors_sit_on_their_fields_and_keep_the_values(browser_for, sim_deployment):
    page = browser_for("operator").post("/evals/new/", {
        **LAUNCH, "deployment": sim_deployment.pk, "concurrency": "0", "temperature": "hot", "stream": ""})
    assert page.status_code == 400
    html = page.content.decode()
    assert field_error(html, "concurrency") == "expected a whole number from 1 to 1000"
    assert field_error(html, "temperature") == "expected a number from 0 to 2"
    assert field_error(html, "max_out_len") == ""
    assert re.search(r'<input name="concurrency" id="id_concurrency" value="0"[^>]* class="invalid"', html)
    assert 'name="temperature" id="id_temperature" value="hot"' in html and 'value="512"' in html
    assert 'name="stream" id="id_stream">' in html  # unticked stays unticked
    assert f'<option value="{sim_deployment.pk}" selected>' in html
    assert not EvalRun.objects.exists()


def test_a_performance_run_on_a_real_deployment_needs_a_tokenizer(browser_for, deployment):
    page = browser_for("operator").post("/evals/new/", {**LAUNCH, "deployment": deployment.pk, "mode": "performance"})
    assert page.status_code == 400
    assert "tokenizer directory" in field_error(page.content.decode(), "tokenizer_path")


def test_the_launch_form_without_a_deployment_says_so_with_the_other_errors(browser_for):
    html = browser_for("operator").post("/evals/new/", {**LAUNCH, "num_warmups": "-1"}).content.decode()
    assert field_error(html, "deployment") == "choose the deployment to evaluate"
    assert field_error(html, "num_warmups") == "expected a whole number from 0 to 100"


def test_a_sweep_makes_one_run_per_concurrency(browser_for, sim_deployment):
    client = browser_for("operator")
    form = client.get(f"/evals/sweeps/new/?deployment={sim_deployment.pk}").content.decode()
    assert 'value="1,2,4,8"' in form and 'name="mode"' not in form
    data = {k: v for k, v in LAUNCH.items() if k not in ("mode", "concurrency")}
    response = client.post("/evals/sweeps/new/", {**data, "deployment": sim_deployment.pk, "concurrencies": "4,1"})
    sweep = EvalSweep.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/evals/sweeps/{sweep.pk}/"
    assert list(sweep.runs.order_by("concurrency").values_list("concurrency", "mode")) == [
        (1, "performance"), (4, "performance")]


def test_sweep_errors_come_all_at_once(browser_for, sim_deployment):
    page = browser_for("operator").post("/evals/sweeps/new/", {
        **LAUNCH, "deployment": sim_deployment.pk, "concurrencies": "3", "max_out_len": "0"})
    html = page.content.decode()
    assert page.status_code == 400 and "give 2 to 12 different values" in field_error(html, "concurrencies")
    assert field_error(html, "max_out_len") == "expected a whole number from 1 to 1000000"
    assert 'name="concurrencies" id="id_concurrencies" value="3"' in html and not EvalSweep.objects.exists()


@pytest.mark.parametrize("method, path", [
    ("get", "/evals/new/"), ("post", "/evals/new/"), ("get", "/evals/sweeps/new/"), ("post", "/evals/sweeps/new/"),
    ("post", "/evals/{run}/cancel/"), ("post", "/evals/{run}/resume/"), ("post", "/evals/datasets/upload/"),
])
def test_viewers_may_not_act(browser_for, make_run, method, path):
    run = make_run(status="failed")
    response = getattr(browser_for("viewer"), method)(path.format(run=run.pk))
    assert response.status_code == 403 and "operator role" in response.content.decode()
    run.refresh_from_db()
    assert run.status == "failed" and run.job is None


def test_anonymous_users_are_sent_to_log_in(client):
    assert client.get("/evals/").status_code == 302 and client.get("/evals/").url.startswith("/login/")


def test_every_post_needs_its_csrf_token(browser_for, make_run):
    run = make_run(status="failed")
    client = browser_for("operator", enforce_csrf_checks=True)
    for path in (f"/evals/{run.pk}/resume/", f"/evals/{run.pk}/cancel/", "/evals/new/", "/evals/sweeps/new/",
                 "/evals/datasets/upload/"):
        assert client.post(path, {}).status_code == 403, path


def test_operators_cancel_a_pending_run_and_resume_it(browser_for, sim_deployment):
    from apps.evals.services import eval_run_create

    client = browser_for("operator")
    run = eval_run_create(deployment=sim_deployment, user=None, settings={"dataset": "catalogue:made-up-aime"})
    canceled = client.post(f"/evals/{run.pk}/cancel/")
    run.refresh_from_db()
    assert canceled.status_code == 302 and canceled["Location"] == f"/evals/{run.pk}/"
    assert run.status == "canceled" and run.job.status == "canceled"
    first_job = run.job_id
    assert client.post(f"/evals/{run.pk}/resume/").status_code == 302
    run.refresh_from_db()
    assert run.status == "pending" and run.job_id != first_job and run.job.params == {"resume": True}
    again = client.post(f"/evals/{run.pk}/resume/", follow=True).content.decode()
    assert "only a failed or canceled run can be resumed" in again


def test_an_upload_is_stored_or_its_bad_line_named(browser_for, settings):
    client = browser_for("operator")
    good = io.BytesIO(b'{"question": "1+1?", "answer": 2}\n{"question": "2+2?", "answer": "4"}\n')
    good.name = "mine.jsonl"
    response = client.post("/evals/datasets/upload/", {"name": "mine", "family": "aime", "file": good})
    assert response.status_code == 302 and EvalDataset.objects.get().lines == 2
    listed = client.get("/evals/datasets/").content.decode()
    assert '<tr data-key="upload:mine">' in listed and 'id="upload-form"' in listed

    bad = io.BytesIO(b'{"question": "1+1?", "answer": 2}\n{"question": "x", "answer": "two"}\n')
    bad.name = "bad.jsonl"
    page = client.post("/evals/datasets/upload/", {"name": "other", "family": "aime", "description": "d", "file": bad})
    html = page.content.decode()
    assert page.status_code == 400 and field_error(html, "file").startswith("line 2: ")
    assert 'name="name" id="id_name" value="other"' in html and 'value="d"' in html
    assert EvalDataset.objects.count() == 1

    page = client.post("/evals/datasets/upload/", {"name": "Bad Name", "family": "mmlu"})
    html = page.content.decode()
    assert field_error(html, "name").startswith("lowercase letters") and field_error(html, "family")
    assert field_error(html, "file").startswith("choose a JSONL file")


def test_the_download_is_the_run_folder_without_its_symlinks(browser_for, finished_run, settings, tmp_path):
    root = settings.PDCP_EVALS_DIR / "runs" / str(finished_run.pk)
    (root / "out-accuracy" / "20261201_101500" / "predictions").mkdir(parents=True)
    (root / "eval_config.py").write_text("api_key = ''\n")
    (root / "out-accuracy" / "20261201_101500" / "predictions" / "made_up_aime.json").write_bytes(b"x" * 200_000)
    secret = tmp_path / "outside.txt"
    secret.write_text("not yours")
    os.symlink(secret, root / "leak.txt")
    os.symlink(tmp_path, root / "leak-dir")
    response = browser_for("viewer").get(f"/evals/{finished_run.pk}/download/")
    assert response.status_code == 200 and response["Content-Type"] == "application/zip"
    assert response["Content-Disposition"] == f'attachment; filename="eval-{finished_run.pk}.zip"'
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    top = f"eval-{finished_run.pk}"
    assert sorted(archive.namelist()) == [f"{top}/SKIPPED.txt", f"{top}/eval_config.py",
                                          f"{top}/out-accuracy/20261201_101500/predictions/made_up_aime.json"]
    assert archive.read(f"{top}/out-accuracy/20261201_101500/predictions/made_up_aime.json") == b"x" * 200_000
    skipped = archive.read(f"{top}/SKIPPED.txt").decode()
    assert "leak.txt: symlink" in skipped and "leak-dir: symlink" in skipped and "not yours" not in skipped
    assert 'id="download-link"' in browser_for("viewer").get(f"/evals/{finished_run.pk}/").content.decode()


def test_a_run_without_an_output_folder_has_no_download(browser_for, finished_run):
    assert browser_for("viewer").get(f"/evals/{finished_run.pk}/download/").status_code == 404
    assert 'id="download-link"' not in browser_for("viewer").get(f"/evals/{finished_run.pk}/").content.decode()
