"""Real ais_bench against the simulated cluster's proxy (client -> proxy -> Prefill -> KV -> Decode).

One deployment for the module (addresses 127.0.10.190-.195), its rows restored before each test; every run is a real
evaluate job run in this process.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from simcluster.engine.answers import book_path, expected_correct, load_book
from tests.deployments.simdeploy import REPO, remove_run_dir

pytestmark = [pytest.mark.procs,
              pytest.mark.django_db(transaction=True), pytest.mark.timeout(600), pytest.mark.usefixtures("no_celery")]

PREFIX, FIRST = "127.0.10", 190
ACCURACY = 0.7
BOOK = load_book(book_path("made-up-aime"))


def _sim_spec() -> dict:
    from simcluster.spec import reference_spec

    spec = reference_spec(prefix=PREFIX)
    for i, node in enumerate(spec["nodes"]):
        node["address"] = f"{PREFIX}.{FIRST + i}"
    spec["services"] = {}
    return spec


def _topology(run_dir: str) -> str:
    data = yaml.safe_load((REPO / "examples" / "reference-topology-fixed.yaml").read_text())
    data.update(launch_profile="sim", run_dir=run_dir, bench_client={"node": "bench"},
                simulation={"answer_book": "made-up-aime", "accuracy": ACCURACY, "think": True})
    for inst in data["instances"]:
        inst.setdefault("env", {}).update(SIMCLUSTER_STARTUP_S="0.2", SIMCLUSTER_TIME_SCALE="0.1")
    return yaml.safe_dump(data, sort_keys=False)


@pytest.fixture(scope="module")
def sim():
    from simcluster import cluster

    state_dir = Path(tempfile.mkdtemp(prefix="pdcp-evals-sim-", dir="/tmp"))
    state_dir.chmod(0o755)
    try:
        yield cluster.up(_sim_spec(), state_dir)
    finally:
        cluster.down(state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def run_dir():
    from simcluster.rundirs import new_run_dir

    path = new_run_dir("evals")
    yield path
    remove_run_dir(path)


def _snapshot() -> str:
    """Every row of the database, as Django's test runner keeps them for `serialized_rollback`."""
    from django.apps import apps as django_apps
    from django.core import serializers

    models = [m for m in django_apps.get_models() if m._meta.managed and not m._meta.proxy]
    return serializers.serialize("json", (obj for m in models for obj in m._default_manager.order_by("pk")))


def _restore(snapshot: str) -> None:
    """The rows of `_snapshot` back after a test's flush (Postgres checks the foreign keys at commit)."""
    from django.core import serializers
    from django.db import transaction

    with transaction.atomic():
        for obj in serializers.deserialize("json", snapshot):
            obj.save()


def _flush(*, restoring: bool) -> None:
    """Empty every table as a transactional test's teardown does: sequences kept (the snapshot's rows keep their
    ids, new rows get others); content types and permissions made again unless the snapshot brings its own."""
    from django.core.management import call_command

    call_command("flush", interactive=False, verbosity=0, reset_sequences=False, inhibit_post_migrate=restoring)


@pytest.fixture(scope="module")
def deployed_once(sim, run_dir, django_db_setup, django_db_blocker):
    """The reference topology deployed once for the module, and a snapshot of the rows that describe it: each test
    gets them back after the previous test's flush, the processes keep running (saves a deploy and a stop per test)."""
    from django.contrib.auth import get_user_model

    from apps.accounts.roles import Role, set_role
    from apps.deployments.services import deployment_create, deployment_deploy, deployment_stop
    from apps.inventory.models import Cluster
    from apps.inventory.services import inventory_import
    from apps.jobs.models import Job
    from apps.jobs.runner import run_job

    with django_db_blocker.unblock():
        try:
            inventory_import(Path(sim["inventory"]).read_text(), allow_key_files=True)
            operator = get_user_model().objects.create_user(username="operator", password="s3cret-pass-word")
            set_role(operator, Role("operator"))
            deployment = deployment_create(name="ref", cluster=Cluster.objects.get(name="reference"), user=operator,
                                           yaml_text=_topology(run_dir))
            job = deployment_deploy(deployment=deployment, user=operator, params={"health_timeout": 60})
            run_job(job.pk)
            job = Job.objects.get(pk=job.pk)
            assert job.status == "successful", job.explanation
            snapshot = _snapshot()
        except BaseException:
            # rows written outside any test's transaction: left behind, the worker's next module would find this
            # deployment claiming the reference dies and ports (seen in a full run)
            _flush(restoring=False)
            raise
    yield snapshot, deployment.pk, operator.pk
    with django_db_blocker.unblock():
        _flush(restoring=True)
        _restore(snapshot)
        deployment.refresh_from_db()
        stop = deployment_stop(deployment=deployment, user=operator, params={"stop_grace": 3})
        run_job(stop.pk)
        _flush(restoring=False)


@pytest.fixture
def deployed(deployed_once, transactional_db, tmp_path, settings):
    """The module's deployment and its operator, their rows as the deploy left them."""
    from django.contrib.auth import get_user_model

    from apps.deployments.models import Deployment

    snapshot, deployment_pk, operator_pk = deployed_once
    settings.PDCP_EVALS_DIR = tmp_path / "evals"
    _flush(restoring=True)
    _restore(snapshot)
    return Deployment.objects.get(pk=deployment_pk), get_user_model().objects.get(pk=operator_pk)


def _evaluate(deployment, user, **settings):
    from apps.evals.models import EvalRun
    from apps.evals.services import eval_run_create
    from apps.jobs.runner import run_job

    run = eval_run_create(deployment=deployment, user=user,
                          settings={"dataset": "catalogue:made-up-aime", "max_out_len": 512, "concurrency": 4,
                                    "num_warmups": 0, "time_limit_s": 300, **settings})
    run_job(run.job_id)
    return EvalRun.objects.get(pk=run.pk)


def _proxy_metrics(address: str, port: int) -> str:
    return urllib.request.urlopen(f"http://{address}:{port}/metrics", timeout=10).read().decode()


def _decode_metrics(deployment) -> str:
    from apps.deployments.models import Process

    return "\n".join(_proxy_metrics(p.address, p.ports[0])
                     for p in Process.objects.filter(deployment=deployment, role="decode"))


def test_performance_run_counts_what_the_proxy_and_engines_counted(deployed):
    from apps.deployments.models import Process

    deployment, operator = deployed
    proxy = Process.objects.get(deployment=deployment, key="proxy")
    before, decode_before = _proxy_metrics(proxy.address, proxy.ports[0]), _decode_metrics(deployment)
    run = _evaluate(deployment, operator, mode="performance", num_prompts=8, max_out_len=64)
    assert run.status == "succeeded", (run.explanation, run.log_tail)
    # The proxy's page sums its workers' snapshots, and a worker too busy to answer within pdproxy's
    # SNAPSHOT_TIMEOUT_S gives its last one: on a loaded machine the counts arrive a round late, never wrong.
    deadline = time.monotonic() + 20
    while True:
        after, decode_after = _proxy_metrics(proxy.address, proxy.ports[0]), _decode_metrics(deployment)
        if _counter_delta(before, after, "pdproxy_requests_total") >= 8 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    summary = run.perf_summary
    assert summary["requests_total"] == 8 and summary["requests_failed"] == 0
    assert _counter_delta(before, after, "pdproxy_requests_total") == 8
    # AISBench's token counts (the sim tokenizer) = what the Prefill reported to the proxy and the Decodes generated
    assert summary["input_tokens_total"] == _counter_delta(before, after, "pdproxy_edge_prompt_tokens_total")
    assert summary["output_tokens_total"] == _counter_delta(decode_before, decode_after,
                                                            "vllm:generation_tokens_total")
    assert len(run.perf_requests) == 8
    assert summary["output_tokens_total"] == sum(r["output_tokens"] for r in run.perf_requests)
    assert run.perf_percentiles["TTFT"]["p90"] > 0 and run.perf_percentiles["TPOT"]["avg"] > 0


def _counter_delta(before: str, after: str, name: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    def total(text):
        return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
                   if s.name == name)

    return total(after) - total(before)


def test_an_endpoint_that_is_down_fails_the_run_although_ais_bench_exits_0(deployed):
    from apps.evals.models import EvalRun
    from apps.evals.services import eval_run_create
    from apps.jobs.runner import run_job

    deployment, operator = deployed
    run = eval_run_create(deployment=deployment, user=operator,
                          settings={"dataset": "catalogue:made-up-aime", "num_prompts": 2, "num_warmups": 0})
    EvalRun.objects.filter(pk=run.pk).update(endpoint_url=f"http://{PREFIX}.199:9/", client_node="")
    run_job(run.job_id)
    run = EvalRun.objects.get(pk=run.pk)
    assert run.status == "failed"
    assert "accuracy run failed" in run.explanation
    assert f"the endpoint {PREFIX}.199:9 refused the connection" in run.explanation
    assert run.log_tail


def test_a_canceled_accuracy_run_leaves_no_process_and_resumed_scores_what_the_model_knows(
        deployed, run_dir):
    """One accuracy run serves both: canceled mid-run, then resumed (`--reuse`), it must score exactly what a run
    straight through scores (saves an ais_bench run: three processes importing torch)."""
    from apps.evals.models import EvalRun
    from apps.evals.services import eval_cancel, eval_resume, eval_run_create
    from apps.jobs.runner import run_job

    deployment, operator = deployed
    run = eval_run_create(deployment=deployment, user=operator,
                          settings={"dataset": "catalogue:made-up-aime", "concurrency": 1, "num_warmups": 0,
                                    "mode": "accuracy"})
    def work():
        from django.db import connections

        try:
            run_job(run.job_id)
        finally:
            connections.close_all()

    worker = threading.Thread(target=work)
    worker.start()
    deadline = time.monotonic() + 120
    while EvalRun.objects.get(pk=run.pk).progress_done < 3 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _ais_bench_processes(run_dir), "the run's ais_bench is not running: nothing to cancel"
    eval_cancel(run=EvalRun.objects.get(pk=run.pk), user=operator)
    worker.join(60)
    run = EvalRun.objects.get(pk=run.pk)
    assert run.status == "canceled", run.explanation
    assert not _ais_bench_processes(run_dir), "ais_bench left running on the client host"

    eval_resume(run=run, user=operator)
    run_job(EvalRun.objects.get(pk=run.pk).job_id)
    run = EvalRun.objects.get(pk=run.pk)
    assert run.status == "succeeded", (run.explanation, "\n".join(run.log_tail))
    log = "\n".join(run.job.events.values_list("text", flat=True))
    assert "--reuse" in log
    assert run.client_node == "bench" and run.simulated
    right = expected_correct(BOOK, ACCURACY)
    assert run.accuracy == pytest.approx(100 * len(right) / len(BOOK), abs=0.01)
    samples = list(run.samples.all())
    assert len(samples) == len(BOOK)
    assert {s.question.split("\n")[0] for s in samples if s.correct} == {q.split("\n")[0] for q in right}
    wrong = next(s for s in samples if not s.correct)
    assert wrong.extracted and wrong.extracted != wrong.reference
    assert run.progress_done == run.progress_total == len(BOOK)
    # the output folder came home over SFTP
    from apps.evals.hosts import local_run_dir

    assert list((local_run_dir(run.pk) / "out-accuracy").glob("*/summary/summary_*.csv"))


def _ais_bench_processes(run_dir: str) -> list[str]:
    """This deployment's ais_bench processes: another worker's test may be running an eval of its own meanwhile."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "ais_bench" in cmd and "eval_config.py" in cmd and f"{run_dir}/" in cmd:
            found.append(cmd)
    return found

