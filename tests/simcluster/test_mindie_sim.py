"""The simulated MindIE end to end over SSH, as the control plane drives it (docs/mindie.md §1): user_config.json
over SFTP, deploy_ac_job.py, the coordinator's ready line via kubectl logs, kubectl get pods, requests to the
coordinator going P then D, delete.sh. Nodes on 127.0.10.65-.67 only."""

import json
import os
import shutil
import signal
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from simcluster import cluster, rundirs
from simcluster.sshnode import pid_alive
from tests.simcluster.mindie_helpers import (
    READY,
    SCRIPTS,
    coordinator_log,
    delete,
    deploy,
    pods,
    put_config,
    user_config,
    wait_ready,
)
from tests.simcluster.simtest_helpers import metric, post, ssh_connect, ssh_run

pytestmark = pytest.mark.procs  # every test here starts processes or servers

CTL, A3N0, A3N1 = "127.0.10.65", "127.0.10.66", "127.0.10.67"
SPEC = {"name": "mindie-t", "nodes": [
    {"name": "ctl", "address": CTL, "hardware": "", "role": "proxy", "ssh_port": 22, "labels": {}},
    {"name": "a3n0", "address": A3N0, "hardware": "A3", "role": "prefill", "ssh_port": 22, "labels": {}},
    {"name": "a3n1", "address": A3N1, "hardware": "A3", "role": "decode", "ssh_port": 22, "labels": {}}],
    "services": {}}


@pytest.fixture(scope="module")
def sim():
    root = Path(tempfile.mkdtemp(prefix="mindie-sim-", dir="/tmp"))
    root.chmod(0o755)
    sdir = root / "state"
    state = cluster.up(SPEC, sdir)
    client = ssh_connect(CTL, 22, state["nodes"]["ctl"]["host_key"], sdir / "id_ed25519")
    run_dir = rundirs.new_run_dir("mindie")
    try:
        yield {"client": client, "state_dir": sdir, "run_dir": run_dir}
    finally:
        ssh_run(client, f"rm -rf {run_dir}")
        client.close()
        cluster.down(sdir)
        shutil.rmtree(root, ignore_errors=True)


def _pids(items: dict) -> list[int]:
    return [int(i["metadata"]["annotations"]["sim.pdcp.dev/pid"]) for i in items.values()
            if i["metadata"]["annotations"]["sim.pdcp.dev/pid"]]


def _wait_gone(pids, timeout=10.0):
    deadline = time.monotonic() + timeout
    while [p for p in pids if pid_alive(p)] and time.monotonic() < deadline:
        time.sleep(0.1)
    return [p for p in pids if pid_alive(p)]


def _sse(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    events = urllib.request.urlopen(req, timeout=30).read().decode().split("\n\n")
    return [e for e in events if e]


def test_deploy_serves_chat_through_p_then_d_and_delete_stops_every_pod(sim):
    client = sim["client"]
    path = put_config(client, sim["run_dir"], user_config("pdjob"))
    t0 = time.monotonic()
    rc, out, err = deploy(client, path)
    assert rc == 0, out + err
    assert "pod/mindie-server-2-worker-0 created" in out and time.monotonic() - t0 < 10
    try:
        log = wait_ready(client, "pdjob")
        ready_s = time.monotonic() - t0
        assert log.count(READY) == 1
        items = pods(client, "pdjob")
        assert len(items) == 6
        apps = {n: i["metadata"]["labels"]["app"] for n, i in items.items()}
        assert apps["pdjob-coordinator-master-0"] == "mindie-ms-coordinator"
        assert apps["pdjob-controller-master-0"] == "mindie-ms-controller"
        servers = {n: i for n, i in items.items() if apps[n] == "mindie-ms-server"}
        assert sorted(servers) == ["mindie-server-0-master-0", "mindie-server-1-master-0",
                                   "mindie-server-2-master-0", "mindie-server-2-worker-0"]
        for item in items.values():
            assert item["metadata"]["namespace"] == "pdjob"
            assert item["status"]["phase"] == "Running" and item["status"]["containerStatuses"][0]["ready"]
            assert item["status"]["podIP"] == item["status"]["hostIP"]
        coord = items["pdjob-coordinator-master-0"]
        assert coord["spec"]["nodeName"] == "ctl" and coord["status"]["podIP"] == CTL
        # First fit in node order: both 8-NPU P pods on a3n0, the D instance's two pods on a3n1.
        assert [servers[f"mindie-server-{i}-master-0"]["spec"]["nodeName"] for i in (0, 1)] == ["a3n0", "a3n0"]
        assert {servers[n]["spec"]["nodeName"] for n in ("mindie-server-2-master-0", "mindie-server-2-worker-0")} \
            == {"a3n1"}
        devices = [servers[n]["metadata"]["annotations"]["sim.pdcp.dev/npu-devices"] for n in sorted(servers)]
        assert devices == ["0,1,2,3,4,5,6,7", "8,9,10,11,12,13,14,15"] * 2
        rc, out, _ = ssh_run(client, "kubectl logs -n pdjob mindie-server-0-master-0")
        assert rc == 0 and "serving deepseek_r1 (kv_producer)" in out and "dies [0, 1, 2, 3, 4, 5, 6, 7]" in out
        rc, out, _ = ssh_run(client, "kubectl logs -n pdjob -l app=mindie-ms-server --tail=1")
        assert rc == 0 and len(out.splitlines()) == 4
        rc, wide, _ = ssh_run(client, "kubectl get pods -n pdjob -o wide")
        assert rc == 0 and "mindie-server-2-worker-0" in wide and A3N1 in wide and "Running" in wide

        url = f"http://{CTL}:1025"
        chat = {"model": "deepseek_r1", "messages": [{"role": "user", "content": "what moves between P and D?"}],
                "max_tokens": 6}
        answer = post(url + "/v1/chat/completions", chat)
        assert answer["usage"]["completion_tokens"] == 6 and answer["usage"]["prompt_tokens"] > 0
        assert answer["choices"][0]["message"]["content"].startswith("[simulated]")
        events = _sse(url + "/v1/chat/completions",
                      dict(chat, stream=True, stream_options={"include_usage": True}))
        assert events[-1] == "data: [DONE]"
        assert json.loads(events[-2][6:])["usage"]["completion_tokens"] == 6
        events = _sse(url + "/v1/completions", {"model": "deepseek_r1", "prompt": "hello", "max_tokens": 3,
                                                "stream": True})
        assert events[-1] == "data: [DONE]" and all('"usage": {' not in e for e in events)

        ports = {n: servers[n]["spec"]["containers"][0]["ports"][0]["containerPort"] for n in servers}
        assert [ports[n] for n in sorted(servers)] == [1025, 1125, 1025, 1125]  # MindIE Server's 1025, then +100
        p_urls = [f"http://{A3N0}:{ports[f'mindie-server-{i}-master-0']}" for i in (0, 1)]
        d_urls = [f"http://{A3N1}:{ports[n]}" for n in ("mindie-server-2-master-0", "mindie-server-2-worker-0")]
        sent = [metric(u, "simcluster:kv_transfers_total", direction="send", outcome="ok") for u in p_urls]
        received = [metric(u, "simcluster:kv_transfers_total", direction="recv", outcome="ok") for u in d_urls]
        assert sum(sent) == 3 and sum(received) == 3
        assert min(sent) >= 1 and min(received) >= 1  # least outstanding, ties by fewest served: both used
        # P ran each request as a one-token prefill; D decoded all of every answer with the pulled KV.
        assert sum(metric(u, "vllm:generation_tokens_total") for u in p_urls) == 3
        assert sum(metric(u, "vllm:generation_tokens_total") for u in d_urls) == 6 + 6 + 3
        coordinator_metrics = f"http://{CTL}:1026/metrics"
        assert metric(coordinator_metrics, "request_success_total") == 3
        assert metric(coordinator_metrics, "request_generation_tokens_sum") == 15
        status = json.loads(urllib.request.urlopen(f"http://{CTL}:1026/v1/status", timeout=5).read())
        assert status["ready"] and [i["role"] for i in status["instances"]] == ["prefill", "prefill", "decode"]
        models = json.loads(urllib.request.urlopen(url + "/v1/models", timeout=5).read())
        assert models["data"][0]["id"] == "deepseek_r1"
        print(f"deploy -> ready in {ready_s:.2f} s")
    finally:
        before = pods(client, "pdjob")
        rc, out, err = delete(client, "pdjob")
    assert rc == 0, err
    assert out.count("deleted (pid") == 6 and 'namespace "pdjob" deleted' in out
    assert not _wait_gone(_pids(before))
    assert pods(client, "pdjob") == {}
    rc, again, _ = delete(client, "pdjob")
    assert rc == 0 and "No resources found in pdjob namespace." in again


def test_bad_user_config_names_the_field_and_starts_nothing(sim):
    client = sim["client"]
    bad = user_config("badjob")
    bad["deploy_config"]["p_pod_npu_num"] = 32
    rc, out, err = deploy(client, put_config(client, sim["run_dir"], bad))
    assert rc != 0 and "deploy_config.p_pod_npu_num must be an integer from 1 to 16, got 32" in err
    bad = user_config("badjob")
    bad["mindie_server_decode_config"]["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]["moe_ep"] = 3
    rc, out, err = deploy(client, put_config(client, sim["run_dir"], bad))
    assert rc != 0 and "mindie_server_decode_config.BackendConfig.ModelDeployConfig.ModelConfig.0.moe_ep" in err
    bad = user_config("Bad_Job")
    rc, out, err = deploy(client, put_config(client, sim["run_dir"], bad))
    assert rc != 0 and "deploy_config.job_id" in err
    bad = user_config("badjob")
    del bad["mindie_ms_coordinator_config"]["http_config"]["predict_port"]
    rc, out, err = deploy(client, put_config(client, sim["run_dir"], bad))
    assert rc != 0 and "mindie_ms_coordinator_config.http_config.predict_port is missing" in err
    assert pods(client, "badjob") == {} and not (sim["state_dir"] / "kube" / "badjob").exists()
    rc, _, err = ssh_run(client, "kubectl get deployments -n badjob")
    assert rc == 1 and err.startswith("error: unknown command")


def test_not_enough_npus_leaves_a_pod_pending_and_the_coordinator_never_ready(sim):
    client = sim["client"]
    doc = user_config("pendjob", p=(1, 1, 16), d=(1, 2, 16), p_tp=16, d_tp=1)
    rc, out, err = deploy(client, put_config(client, sim["run_dir"], doc))
    assert rc == 0, err
    assert "pod mindie-server-1-worker-0 stays Pending: 0/3 nodes are available" in out
    try:
        time.sleep(3)  # the other pods are up long before this (they take well under a second)
        items = pods(client, "pendjob")
        pending = items["mindie-server-1-worker-0"]
        assert pending["status"]["phase"] == "Pending" and "podIP" not in pending["status"]
        assert "nodeName" not in pending["spec"] and not pending["status"]["containerStatuses"][0]["ready"]
        assert items["mindie-server-1-master-0"]["status"]["phase"] == "Running"
        log = coordinator_log(client, "pendjob")
        assert READY not in log and "mindie-server-1-worker-0" in log
        with pytest.raises(urllib.error.HTTPError) as refused:
            post(f"http://{CTL}:1025/v1/completions", {"model": "deepseek_r1", "prompt": "hi", "max_tokens": 2})
        assert refused.value.code == 503
        rc, _, err = ssh_run(client, "kubectl logs -n pendjob mindie-server-1-worker-0")
        assert rc == 1 and "ContainerCreating" in err
        controller = int(items["pendjob-controller-master-0"]["metadata"]["annotations"]["sim.pdcp.dev/pid"])
        os.kill(controller, signal.SIGKILL)
        assert not _wait_gone([controller])
        assert pods(client, "pendjob")["pendjob-controller-master-0"]["status"]["phase"] == "Failed"
    finally:
        before = pods(client, "pendjob")
        rc, out, err = delete(client, "pendjob")
    assert rc == 0 and out.count("deleted (pid") == 3, out
    assert "pendjob-controller-master-0\" deleted (already gone)" in out and "deleted (no process)" in out
    assert not _wait_gone(_pids(before))


def test_log_sh_and_scripts_are_published_read_only(sim):
    client = sim["client"]
    rc, out, _ = ssh_run(client, f"ls {SCRIPTS}; test -w {SCRIPTS}/delete.sh && echo writable; "
                                 f"stat -c %U {SCRIPTS}/deploy_ac_job.py")
    assert rc == 0 and out.split() == ["delete.sh", "deploy_ac_job.py", "log.sh", "user_config.json", "root"]
    rc, out, err = ssh_run(client, f"cd {SCRIPTS} && bash log.sh nosuchjob")
    assert rc == 0 and "Stdout Log From MindIE-MS Coordinator" in out and "No resources found" in err
