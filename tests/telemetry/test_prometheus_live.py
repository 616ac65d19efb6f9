"""Issue 12's "done when" for Prometheus: Debian's stock /usr/bin/prometheus, given the scrape config of
docs/prometheus.md with a viewer's token, lists every target of a topology deployed on the simulated cluster
(127.0.10.55-.59) with the control plane's labels and scrapes them all, and scrapes the control plane's own /metrics;
it listens on loopback only.

Whole stack (tests/e2e/conftest.py live_stack): run under `flock /tmp/pdcp-e2e.lock` with PDCP_E2E_REDIS_DB set.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.deployments.simdeploy import import_inventory, run_job_now, sim_spec, topology_yaml
from tests.e2e.conftest import free_port, live_stack  # noqa: F401  (a fixture)

pytestmark = [pytest.mark.procs,
              pytest.mark.e2e, pytest.mark.django_db(transaction=True), pytest.mark.timeout(300),
              pytest.mark.usefixtures("no_celery")]

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = "/usr/bin/prometheus"
FIRST = 55  # node0 .55, node1 .56, node2 .57, node3 .58, proxy .59: no bench node
WAIT_S = 60


@pytest.fixture(scope="module")
def sim():
    import shutil
    import tempfile

    from simcluster import cluster

    spec = sim_spec(FIRST)
    spec["nodes"] = [n for n in spec["nodes"] if n["name"] != "bench"]
    state_dir = Path(tempfile.mkdtemp(prefix="pdcp-prom-sim-", dir="/tmp"))
    state_dir.chmod(0o755)
    try:
        yield cluster.up(spec, state_dir)
    finally:
        try:
            cluster.down(state_dir)
        finally:
            shutil.rmtree(state_dir, ignore_errors=True)


def small_topology(data: dict) -> None:
    """p0 (TP16) and d0 (TP4 x DP2: two API servers), the Mooncake master and the proxy; no bench client."""
    instances = {i["name"]: i for i in data["instances"]}
    instances["d0"]["dp"] = 2
    data["instances"] = [instances["p0"], instances["d0"]]
    data.pop("bench_client", None)


def docs_scrape_config(base_url: str, token_file: Path) -> dict:
    text = (ROOT / "docs" / "prometheus.md").read_text()
    block = re.search(r"```yaml\n(scrape_configs:.*?)```", text, re.S).group(1)
    host = base_url.removeprefix("http://")
    config = yaml.safe_load(block.replace("pdcp.example:8000", host)
                            .replace("/etc/prometheus/pdcp.token", str(token_file)))
    for job in config["scrape_configs"]:  # the docs' intervals, shortened for a test
        job["scrape_interval"] = "1s"
        job["scrape_timeout"] = "1s"
        for sd in job.get("http_sd_configs", []):
            sd["refresh_interval"] = "1s"
    return config


def listening_addresses(pid: int) -> set[str]:
    out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, timeout=10).stdout
    return {line.split()[3] for line in out.splitlines() if f"pid={pid}," in line}


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


def dashboard_queries_run(series, path: Path) -> None:
    """Every query of the Grafana dashboard parses and runs on this Prometheus (its variables filled in), and the
    gauges it draws exist under these names."""
    dashboard = json.loads(path.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(exprs) > 20
    for expr in exprs:
        filled = (expr.replace("$deployment", "prom-live").replace("$instance", ".*").replace("$cluster", ".*")
                  .replace("$__rate_interval", "1m"))
        series(filled)  # a query Prometheus cannot parse is a 400: urlopen raises
    for name in ("vllm:num_requests_running", "vllm:kv_cache_usage_perc", "pdproxy_backend_inflight",
                 "pdproxy_backend_healthy", "master_key_count", "master_total_capacity_bytes", "pdcp_jobs",
                 "pdcp_workers", "pdcp_redis_up"):
        assert f"{name}{{" in "".join(exprs) and series(f'{name}{{deployment=~"prom-live|"}}'), name


def test_stock_prometheus_lists_and_scrapes_every_deployed_target(sim, live_stack, make_user, run_dir,  # noqa: F811
                                                                   tmp_path):
    from rest_framework.authtoken.models import Token

    from apps.deployments.models import Process
    from apps.deployments.services import deployment_create, deployment_deploy, deployment_stop

    cluster = import_inventory(sim)
    operator = make_user("operator", "op")
    deployment = deployment_create(name="prom-live", cluster=cluster, user=operator,
                                   yaml_text=topology_yaml(run_dir, edit=small_topology))
    token_file = tmp_path / "pdcp.token"
    token_file.write_text(Token.objects.create(user=make_user("viewer", "prometheus")).key)
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(docs_scrape_config(live_stack, token_file)))
    port = free_port()
    log = tmp_path / "prometheus.log"
    prometheus = None
    try:
        job = run_job_now(deployment_deploy, deployment, operator)
        assert job.status == "successful", job.explanation
        running = {p.key: p for p in Process.objects.filter(deployment=deployment, state="running")}
        expected = {key for key, p in running.items() if p.ports and p.role != "store"}
        assert {running[k].role for k in expected} == {"prefill", "decode", "proxy", "kv_pool"}
        assert {"d0-dp0", "d0-dp1"} <= expected
        # A store server as a memcache-backed sim deployment has them: listed with exporter="none", which the
        # docs' relabel rule drops (the row goes before the stop job, which would look for its pid file).
        proxy = running["proxy"]
        Process.objects.create(deployment=deployment, revision=proxy.revision, node=proxy.node,
                               node_name=proxy.node_name, role="store", key="store-0", address=proxy.address,
                               ports=[11299], state="running", command="memcached", fingerprint="-", log_path="-",
                               pid_file="-")

        prometheus = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h", "--log.level=warn"],
            stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
        api = f"http://127.0.0.1:{port}/api/v1"
        started = time.monotonic()
        deadline, active = started + WAIT_S, []
        while time.monotonic() < deadline:
            assert prometheus.poll() is None, log.read_text()[-3000:]
            try:
                active = get_json(f"{api}/targets?state=active")["data"]["activeTargets"]
            except OSError:
                time.sleep(0.3)
                continue
            deployed = [t for t in active if t["labels"]["job"] == "pdcp-deployed"]
            if ({t["labels"].get("process") for t in deployed} == expected and all(t["health"] == "up" for t in active)
                    and any(t["labels"]["job"] == "pdcp-control-plane" for t in active)):
                break
            time.sleep(0.5)
        print(f"\nprometheus: {len(active)} targets listed and up {time.monotonic() - started:.1f} s after its start")
        summary = [(t["labels"].get("process"), t["scrapeUrl"], t["health"], t["lastError"]) for t in active]
        deployed = {t["labels"]["process"]: t for t in active if t["labels"]["job"] == "pdcp-deployed"}
        assert set(deployed) == expected, summary
        assert all(t["health"] == "up" for t in active), summary

        revision = str(deployment.active_revision.number)
        for key, target in deployed.items():
            p = running[key]
            metrics_port = p.ports[1] if p.role == "kv_pool" else p.ports[0]
            assert target["scrapeUrl"] == f"http://{p.address}:{metrics_port}/metrics"
            assert {k: target["labels"][k] for k in ("cluster", "deployment", "revision", "role", "instance",
                                                     "node")} == {
                "cluster": "reference", "deployment": "prom-live", "revision": revision, "role": p.role,
                "instance": p.instance or p.key, "node": p.node_name}

        # The scraped series carry the labels: vLLM's, the proxy's and the master's, per instance and role.
        def series(query: str) -> list[dict]:
            return get_json(f"{api}/query?query={urllib.parse.quote(query)}")["data"]["result"]

        engines = series('vllm:num_requests_running{deployment="prom-live"}')
        assert {(s["metric"]["instance"], s["metric"]["role"]) for s in engines} >= {("p0", "prefill"),
                                                                                    ("d0", "decode")}
        assert series('up{job="pdcp-deployed",role="proxy"}')[0]["value"][1] == "1"
        assert series('up{job="pdcp-deployed",role="kv_pool"}')[0]["value"][1] == "1"
        deploys = series('pdcp_jobs{kind="deploy",status="successful"}')
        assert deploys and deploys[0]["value"][1] == "1", deploys

        dropped = get_json(f"{api}/targets?state=dropped")["data"]["droppedTargets"]
        assert [(t["discoveredLabels"]["__address__"], t["discoveredLabels"]["role"],
                 t["discoveredLabels"]["exporter"]) for t in dropped] == [(f"{proxy.address}:11299", "store", "none")]

        dashboard_queries_run(series, (ROOT / "docs" / "grafana" / "pd-control-plane.json"))

        assert listening_addresses(prometheus.pid) == {f"127.0.0.1:{port}"}, "prometheus must bind loopback only"
    finally:
        Process.objects.filter(deployment=deployment, key="store-0").delete()
        if prometheus is not None:
            prometheus.terminate()
            try:
                prometheus.wait(timeout=15)
            except subprocess.TimeoutExpired:
                prometheus.kill()
                prometheus.wait(timeout=5)
        stopped = run_job_now(deployment_stop, deployment, operator)
        assert stopped.status == "successful", stopped.explanation
