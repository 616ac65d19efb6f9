"""Issue 16 (playground) on the simulated cluster (127.0.10.90-.94, no bench node): a chat and a completion go
through the deployed proxy; the events stream in order and name the Prefill and Decode that served; the API answers
whole; the audit has token counts and no text; once stopped, the deployment refuses with a clear message."""

from __future__ import annotations

import json
import re

import pytest
from asgiref.sync import async_to_sync

from tests.deployments.simdeploy import (
    import_inventory,
    run_job_now,
    running_cluster,
    topology_yaml,
)

pytestmark = [pytest.mark.procs,
              pytest.mark.django_db(transaction=True), pytest.mark.timeout(300), pytest.mark.usefixtures("no_celery")]
FIRST = 90


@pytest.fixture(scope="module")
def sim():
    with running_cluster(FIRST, without=("bench",)) as state:  # .90-.94: this suite's addresses
        yield state


def no_bench(data: dict) -> None:
    data.pop("bench_client", None)


def sse(raw: bytes) -> list[tuple[str, dict]]:
    out = []
    for block in raw.decode().split("\n\n"):
        m = re.match(r"event: (\w+)\ndata: (.*)", block, re.S)
        if m:
            out.append((m.group(1), json.loads(m.group(2))))
    return out


async def collect(chunks) -> bytes:
    return b"".join([c async for c in chunks])


def test_chat_streams_with_p_and_d_names_the_api_answers_whole_audit_has_no_text(sim, make_user, api_client_for,
                                                                                  client, run_dir):
    from apps.audit.models import AuditAction, AuditEntry
    from apps.deployments.models import Process
    from apps.deployments.services import deployment_create, deployment_deploy, deployment_stop

    cluster = import_inventory(sim)
    operator = make_user("operator", "op")
    deployment = deployment_create(name="playground", cluster=cluster, user=operator,
                                   yaml_text=topology_yaml(run_dir, edit=no_bench))
    job = run_job_now(deployment_deploy, deployment, operator)
    assert job.status == "successful", job.explanation if hasattr(job, "explanation") else job.status
    engines = {f"{p.address}:{p.ports[0]}": p for p in Process.objects.filter(deployment=deployment,
                                                                               role__in=("prefill", "decode"))}

    client.force_login(operator)
    secret = "Tell me about the playground, secret words"
    r = client.post(f"/deployments/{deployment.pk}/playground/",
                    json.dumps({"kind": "chat", "messages": [{"role": "user", "content": secret}],
                                "max_tokens": 12, "stream": True}), content_type="application/json")
    assert r.status_code == 200 and r["Content-Type"] == "text/event-stream"
    events = sse(async_to_sync(collect)(r.streaming_content))
    names = [n for n, _ in events]
    assert names[0] == "meta" and names[-1] == "done" and names.count("delta") >= 2, names
    assert set(names[1:-1]) == {"delta"}
    meta, done = events[0][1], events[-1][1]
    p = engines[meta["prefill"]["address"]]
    d = engines[meta["decode"]["address"]]
    assert (p.role, meta["prefill"]["key"], meta["prefill"]["instance"]) == ("prefill", p.key, p.instance)
    assert (d.role, meta["decode"]["key"]) == ("decode", d.key)
    assert meta["request_id"].startswith("playground-")
    assert done["ttft_ms"] > 0 and done["itl_p50_ms"] is not None and done["itl_mean_ms"] > 0
    assert done["tokens_out"] == 12 and done["tokens_in"] > 0
    assert "".join(e["text"] for n, e in events if n == "delta")
    assert "curl" in meta["request"]["curl"] and meta["request"]["body"]["max_tokens"] == 12

    api = api_client_for("operator")
    r = api.post(f"/api/deployments/{deployment.pk}/playground/",
                 {"kind": "completion", "prompt": "Once upon a time", "max_tokens": 6}, format="json")
    answer = r.json()
    assert r.status_code == 200 and answer["status"] == "ok", answer
    assert answer["text"] and answer["stats"]["tokens_out"] == 6 and answer["decode"]["key"] in {
        x.key for x in engines.values()}

    entries = list(AuditEntry.objects.filter(action=AuditAction.PLAYGROUND).order_by("id"))
    assert len(entries) == 2
    chat = entries[0].changes
    assert chat["request_id"] == [None, meta["request_id"]] and chat["status"] == [None, "ok"]
    assert chat["completion_tokens"] == [None, 12] and chat["prompt_tokens"][1] > 0
    assert chat["prefill"] == [None, p.key] and chat["decode"] == [None, d.key]
    assert entries[0].username == "op" and entries[1].username == api.user.username
    assert "secret" not in json.dumps([e.changes for e in entries]) and "Once upon" not in json.dumps(
        [e.changes for e in entries])

    job = run_job_now(deployment_stop, deployment, operator)
    assert job.status == "successful"
    r = api.post(f"/api/deployments/{deployment.pk}/playground/",
                 {"kind": "completion", "prompt": "again", "max_tokens": 3}, format="json")
    assert r.status_code == 409 and "not running" in r.json()["detail"], r.json()
