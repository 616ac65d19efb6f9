"""`--workers N`: N real worker processes behind one port behave as one proxy to clients and to the admin API:
health and ejection, drains, added instances and rate limits are one truth; /metrics sums every worker; a dead
worker is started again; stopping the supervisor stops them all."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.pdproxy.proxy_procs import completion, request, wait_until


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found += [int(p) for p in text]
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def fresh_requests(proxy, n: int, **body) -> list[int]:
    """n requests, each on a new connection, so the kernel spreads them over the workers."""
    return [proxy.post("/v1/completions", completion(max_tokens=2, **body))[0] for _ in range(n)]


def per_worker(proxy) -> dict[str, float]:
    out = {}
    for line in proxy.metrics().splitlines():
        if line.startswith("pdproxy_worker_requests_total{"):
            out[line.split('"')[1]] = float(line.rsplit(" ", 1)[1])
    return out


@pytest.mark.procs
def test_two_workers_serve_one_port_and_metrics_sum_over_them(cluster):
    p, d = cluster.backend("p0"), cluster.backend("d0")
    proxy = cluster.proxy([p], [d], "--workers", "2")
    assert len(children(proxy.proc.pid)) == 2
    assert fresh_requests(proxy, 40) == [200] * 40
    counts = per_worker(proxy)
    assert sorted(counts) == ["0", "1"]
    assert all(n > 0 for n in counts.values()), counts  # both took connections
    assert proxy.metric("pdproxy_requests_total", endpoint="/v1/completions", code="200") == 40
    assert proxy.metric("pdproxy_backend_requests_total", role="prefill", outcome="ok") == 40
    assert proxy.metric("pdproxy_workers", state="serving") == 2
    assert p.stats()["counts"]["prefill"] == 40
    # the admin listing carries every worker's counts too
    status, listing = proxy.admin("GET", "/instances")
    assert status == 200 and listing["prefill"][0]["requests"] == 40


@pytest.mark.procs
def test_one_workers_5xx_ejects_the_instance_for_every_worker(cluster):
    bad, good, d = cluster.backend("p-bad"), cluster.backend("p-good"), cluster.backend("d0")
    proxy = cluster.proxy([bad, good], [d], "--workers", "2", "--policy", "round_robin", "--eject-after-5xx", "1",
                          "--health-interval", "60")
    bad.fault("500", legs=["prefill"])
    assert wait_until(lambda: fresh_requests(proxy, 1) == [200] and proxy.admin("GET", "/instances")[1]
                      ["prefill"][0]["state"] == "ejected", timeout=10)
    before = bad.stats()["counts"]["prefill"]
    assert fresh_requests(proxy, 30) == [200] * 30
    assert bad.stats()["counts"]["prefill"] == before  # no worker sent it anything more
    assert all(n > 0 for n in per_worker(proxy).values())


@pytest.mark.procs
def test_admin_drain_and_add_reach_every_worker_before_the_answer(cluster):
    p0, p1, d = cluster.backend("p0"), cluster.backend("p1"), cluster.backend("d0")
    proxy = cluster.proxy([p0, p1], [d], "--workers", "2", "--policy", "round_robin")
    status, _ = proxy.admin("POST", f"/instances/prefill/{p1.addr}/drain")
    assert status == 200
    assert fresh_requests(proxy, 20) == [200] * 20  # at once: the answer came after every worker had the drain
    assert p1.stats()["counts"]["prefill"] == 0 and p0.stats()["counts"]["prefill"] == 20
    p2 = cluster.backend("p2")
    status, payload = proxy.admin("POST", "/instances", {"role": "prefill", "address": p2.addr})
    assert status == 201 and payload["added"][0]["state"] == "healthy"
    assert fresh_requests(proxy, 20) == [200] * 20
    # round robin over p0 and p2 in each worker (each with its own turn): about half, from both workers
    took = p2.stats()["counts"]["prefill"]
    assert 7 <= took <= 13, took
    status, _ = proxy.admin("DELETE", f"/instances/prefill/{p2.addr}")
    assert status == 200
    assert fresh_requests(proxy, 10) == [200] * 10
    assert p2.stats()["counts"]["prefill"] == took


@pytest.mark.procs
def test_the_rate_limit_is_global_across_workers(cluster):
    p, d = cluster.backend("p0"), cluster.backend("d0")
    proxy = cluster.proxy([p], [d], "--workers", "2", "--rate-limit", "2", "--rate-burst", "6")
    t0 = time.monotonic()
    statuses = fresh_requests(proxy, 30)
    elapsed = time.monotonic() - t0
    admitted = statuses.count(200)
    # one bucket: 6 at once, then 2 a second; a bucket per worker would admit about twice that
    assert 6 <= admitted <= 6 + 2 * elapsed + 1, (admitted, elapsed)
    assert statuses.count(429) == 30 - admitted
    assert all(n > 0 for n in per_worker(proxy).values())
    assert proxy.metric("pdproxy_rate_limited_total", scope="global") == 30 - admitted


@pytest.mark.procs
def test_a_dead_worker_is_started_again_and_its_counts_are_kept(cluster):
    p, d = cluster.backend("p0"), cluster.backend("d0")
    proxy = cluster.proxy([p], [d], "--workers", "2")
    assert fresh_requests(proxy, 10) == [200] * 10
    assert proxy.metric("pdproxy_requests_total") == 10  # the scrape keeps each worker's counts
    victim = children(proxy.proc.pid)[0]
    os.kill(victim, signal.SIGKILL)
    assert wait_until(lambda: len([c for c in children(proxy.proc.pid) if c != victim and alive(c)]) == 2,
                      timeout=15)
    assert wait_until(lambda: proxy.metric("pdproxy_workers", state="serving") == 2, timeout=10)
    assert fresh_requests(proxy, 10) == [200] * 10
    assert proxy.metric("pdproxy_worker_restarts_total") == 1
    assert proxy.metric("pdproxy_requests_total") == 20


@pytest.mark.procs
def test_stopping_the_supervisor_stops_every_worker(cluster):
    p, d = cluster.backend("p0"), cluster.backend("d0")
    proxy = cluster.proxy([p], [d], "--workers", "2")
    workers = children(proxy.proc.pid)
    proxy.proc.send_signal(signal.SIGTERM)
    assert proxy.proc.wait(20) == 0
    assert wait_until(lambda: not any(alive(w) for w in workers), timeout=10)


@pytest.mark.procs
def test_workers_end_when_the_supervisor_is_killed(cluster):
    p, d = cluster.backend("p0"), cluster.backend("d0")
    proxy = cluster.proxy([p], [d], "--workers", "2")
    workers = children(proxy.proc.pid)
    os.kill(proxy.proc.pid, signal.SIGKILL)
    assert wait_until(lambda: not any(alive(w) for w in workers), timeout=15)
    try:
        status = request("GET", proxy.url + "/health", timeout=2)[0]
    except OSError:
        status = None
    assert status is None  # nobody listens any more


@pytest.mark.procs
def test_admin_listener_of_its_own_is_served_by_the_supervisor(cluster):
    p, d = cluster.backend("p0"), cluster.backend("d0")
    proxy = cluster.proxy([p], [d], "--workers", "2", "--admin-host", "127.0.0.1", "--admin-port", "0")
    assert proxy.admin_port
    url = f"http://127.0.0.1:{proxy.admin_port}/admin/instances/prefill/{p.addr}/drain"
    status, _, _ = request("POST", url, b"", {"Authorization": "Bearer s3cret"})
    assert status == 200
    status, _, body = request("POST", proxy.url + "/v1/completions", completion())
    assert status == 503 and b"draining" in body
    assert request("GET", proxy.url + "/admin/instances", headers={"Authorization": "Bearer s3cret"})[0] == 404


@pytest.mark.procs
def test_bad_worker_counts_are_refused_by_name(cluster):
    import subprocess
    import sys

    for bad in ("0", "many", "300"):
        out = subprocess.run([sys.executable, "-m", "pdproxy", "--workers", bad, "--port", "0"],
                             capture_output=True, text=True, timeout=20)
        assert out.returncode == 2 and "workers" in out.stderr, (bad, out.stderr)


@pytest.mark.procs
def test_cache_aware_workers_share_one_view_of_the_caches(cluster):
    docs = {name: f"[{name}] " + f"the {name} document says something long " * 40
            for name in ("alpha", "beta", "gamma", "delta", "epsilon", "zeta")}
    ps = [cluster.backend(f"p{i}") for i in range(3)]
    d = cluster.backend("d0")
    proxy = cluster.proxy(ps, [d], "--workers", "2", "--prefill-policy", "cache_aware", "--decode-policy",
                          "least_conn")
    for i in range(4):
        for doc in docs.values():  # each on a new connection: the documents' requests land on both workers
            assert proxy.post("/v1/completions", completion(prompt=doc + f" question {i}", max_tokens=2))[0] == 200
        time.sleep(0.1)  # picks reach the other worker within 20 ms
    served = {}
    for p in ps:
        for r in p.stats()["requests"]:
            served.setdefault(r["prompt"].split("]")[0] + "]", set()).add(p.name)
    assert all(len(names) == 1 for names in served.values()), served
    assert all(n > 0 for n in per_worker(proxy).values())
    assert proxy.metric("pdproxy_cache_aware_picks_total", role="prefill", reason="cache") == 18


def test_metrics_scrapes_at_once_share_one_round_of_worker_snapshots():
    """/metrics is on the client-facing port without a token, and with workers each page costs the supervisor a
    snapshot from every worker (the process that also routes metaserver calls and runs the health checks). Scrapes
    that come while one is rendered share it: 50 at once cost one round; the next scrape after it makes a new one."""
    import asyncio

    from pdproxy.app import ProxyApp
    from pdproxy.config import Config
    from pdproxy.supervisor import Supervisor

    async def main():
        cfg = Config(workers=2).validate()
        supervisor = Supervisor(cfg, [])
        supervisor.app = ProxyApp(cfg, routes_requests=False)
        rounds, started, release = [], asyncio.Event(), asyncio.Event()

        async def gather_counts():
            rounds.append(len(rounds) + 1)
            started.set()
            await release.wait()
            return [], 0

        supervisor.gather_counts = gather_counts
        scrapes = [asyncio.ensure_future(supervisor.render_metrics()) for _ in range(50)]
        await asyncio.wait_for(started.wait(), 10)
        release.set()
        pages = await asyncio.wait_for(asyncio.gather(*scrapes), 10)
        assert rounds == [1] and len(set(pages)) == 1 and b"pdproxy_workers" in pages[0]
        await asyncio.wait_for(supervisor.render_metrics(), 10)
        assert rounds == [1, 2]

    asyncio.run(main())


def test_a_forwarded_metaserver_call_goes_to_the_worker_its_token_names_alone():
    """Anyone may post any token to /v1/metaserver/<token> with a body up to --max-body-bytes: the supervisor hands a
    call to the one worker its token names, never to every worker; a token naming the caller's worker, or none that
    serves, is a 404 without asking anyone."""
    import asyncio

    from pdproxy.config import Config
    from pdproxy.supervisor import Supervisor

    class FakeChannel:
        def __init__(self, index):
            self.index, self.asked, self.replies = index, [], []

        async def call(self, message, timeout):
            self.asked.append(message)
            return {"status": 403, "body": "{}", "content_type": "application/json", "headers": []}

        def reply(self, message, **fields):
            self.replies.append(fields)

    class FakeWorker:
        def __init__(self, index):
            self.index, self.channel = index, FakeChannel(index)

    async def main():
        supervisor = Supervisor(Config(workers=4).validate(), [])
        workers = supervisor.workers = {i: FakeWorker(i) for i in range(4)}
        big = "x" * 100_000
        call = {"op": "metaserver", "id": 7, "worker": 2, "token": "2.abc", "caller": "127.0.0.9", "body": big}
        await supervisor._route_metaserver(workers[0], call)
        assert [len(w.channel.asked) for w in workers.values()] == [0, 0, 1, 0]
        assert {k: workers[2].channel.asked[0][k] for k in ("token", "caller", "body")} == {
            "token": "2.abc", "caller": "127.0.0.9", "body": big}
        assert workers[0].channel.replies[-1]["status"] == 403  # the holder's answer, passed back
        for named in (0, 9, None):  # the caller's own worker, one that does not serve, none
            await supervisor._route_metaserver(workers[0], {**call, "worker": named})
            assert workers[0].channel.replies[-1]["status"] == 404
        assert [len(w.channel.asked) for w in workers.values()] == [0, 0, 1, 0]

    asyncio.run(main())
