"""vllm-ascend's own PD + KV pool examples (examples/docs/kv-pool-*.yaml, the guide's commands pinned by
test_docs_examples.py) deployed on the simulated cluster (127.0.10.228-.233) with the `sim` launch profile: the
engines get the very command lines, env and config files the real profile renders, the deployment serves through
the proxy, the Prefill's blocks reach the pool, and the live state and topology snapshot (what the picture draws)
show them; with the memcache backend, whose blocks outlive the engine that put them, a restarted Prefill loads its
prompt's prefix from the pool (pool hits) instead of computing it. Stop leaves no process and no config file."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
import yaml

from tests.deployments.simdeploy import (
    REPO,
    cluster_fixture,
    import_inventory,
    pids_in,
    processes_mentioning,
    run_job_now,
)
from tests.telemetry.spanning_sim import PREFIX, complete

pytestmark = [pytest.mark.procs,
              pytest.mark.django_db(transaction=True), pytest.mark.timeout(300), pytest.mark.usefixtures("no_celery")]
FIRST = 228
sim = cluster_fixture(FIRST)
SIM_ONLY_MMC_KEYS = {"simcluster.ring", "simcluster.replicas"}  # the memcached ring standing in for MemCache


def docs_example_on_sim(name: str, run_dir: str) -> str:
    """The example as written, but for the sim profile: its own run dir and quick engine start-ups."""
    data = yaml.safe_load((REPO / "examples" / "docs" / f"{name}.yaml").read_text())
    data.update(launch_profile="sim", run_dir=run_dir)
    for inst in data["instances"]:
        inst["env"]["SIMCLUSTER_STARTUP_S"] = "0.2"
    return yaml.safe_dump(data, sort_keys=False)


def mmc_lines(text: str) -> dict[str, str]:
    return dict(line.split(" = ", 1) for line in text.splitlines())


def assert_sim_runs_the_real_rendering(name: str, spec, cluster) -> None:
    """The example exactly as the docs' test renders it (vllm-ascend profile, only the run dir moved), on these
    nodes, gives the same engine commands, env and files as the sim profile's, bar the sim's own start-up knob."""
    from apps.deployments.inventory_lookup import cluster_facts
    from apps.deployments.topology import build_plan, spec_from_yaml

    as_written = spec_from_yaml((REPO / "examples" / "docs" / f"{name}.yaml").read_text())
    real_spec = dataclasses.replace(as_written, run_dir=spec.run_dir)
    real = {p.key: p for p in build_plan(real_spec, cluster_facts(cluster, launch_profile="vllm-ascend")).processes}
    sim_plan = build_plan(spec, cluster_facts(cluster, launch_profile="sim"))
    engines = [p for p in sim_plan.processes if p.role in ("prefill", "decode")]
    assert [p.key for p in engines] == ["p0-dp0", "d0-dp0"]
    for p in engines:
        want = real[p.key].launch
        env = {k: v for k, v in p.launch.env.items() if k != "SIMCLUSTER_STARTUP_S"}
        assert p.launch.argv == want.argv and env == dict(want.env), p.key
        for got, expected in zip(p.launch.files, want.files, strict=True):
            assert got.path == expected.path and got.mode == expected.mode, p.key
            if got.path.name == "mmc-local.conf":  # the one thing added: where the memcached ring is
                extra = mmc_lines(got.content).items() - mmc_lines(expected.content).items()
                assert {k for k, _ in extra} == SIM_ONLY_MMC_KEYS, extra
                assert mmc_lines(expected.content).items() <= mmc_lines(got.content).items()
            else:
                assert got.content == expected.content, p.key


def prefill_pool_hits(snapshot_live: dict) -> float:
    return snapshot_live["instances"]["p0"]["connector_hits"] or 0.0


@pytest.mark.parametrize("backend", ["mooncake", "memcache"])
def test_the_docs_kv_pool_example_deploys_serves_and_fills_the_pool(sim, transactional_db, make_user, run_dir,
                                                                    backend):
    from apps.deployments.models import Process
    from apps.deployments.revision_plan import deployment_plan
    from apps.deployments.services import (
        deployment_create,
        deployment_deploy,
        deployment_restart,
        deployment_stop,
    )
    from apps.telemetry.services import deployment_scrape
    from apps.telemetry.topology_snapshot import topology_snapshot

    cluster = import_inventory(sim)
    operator = make_user("operator", "op")
    deployment = deployment_create(name=f"docs-{backend}", cluster=cluster, user=operator,
                                   yaml_text=docs_example_on_sim(f"kv-pool-{backend}", run_dir))
    spec, plan = deployment_plan(deployment)
    assert_sim_runs_the_real_rendering(f"kv-pool-{backend}", spec, cluster)
    config = Path(run_dir, "config", "mooncake.json" if backend == "mooncake" else "mmc-local.conf")

    job = run_job_now(deployment_deploy, deployment, operator)
    try:
        assert job.status == "successful", job.explanation
        keys = set(Process.objects.filter(deployment=deployment).values_list("key", flat=True))
        assert keys == {"kv-pool", "p0-dp0", "d0-dp0", "proxy"}
        assert config.stat().st_mode & 0o777 == 0o600

        def scrape():
            return deployment_scrape(deployment, list(Process.objects.filter(deployment=deployment,
                                                                             state="running")))

        proxy = Process.objects.get(deployment=deployment, key="proxy")
        url = f"http://{proxy.address}:{proxy.ports[0]}"
        scrape()
        complete(url, PREFIX + " first", model="qwen3")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # the Prefill puts its blocks after answering
            time.sleep(0.5)
            live = scrape()
            tier = live["pool"]["tiers"].get(backend) or {}
            if tier.get("backup"):
                break
        blocks_put = live["pool"]["tiers"][backend]["backup"]
        assert blocks_put > 0, live["pool"]
        if backend == "mooncake":
            master = live["services"]["kv-pool"]
            assert master["key_count"] > 0 and master["puts"] > 0, master
        complete(url, PREFIX + " again", model="qwen3")  # p0's own prefix cache holds it: no pool lookup needed
        live = scrape()
        assert live["instances"]["p0"]["prefix_hit_rate_total"] > 0
        hits_before_restart = prefill_pool_hits(live)

        restarted = run_job_now(deployment_restart, deployment, operator, instance="p0")
        assert restarted.status == "successful", restarted.explanation
        if backend == "mooncake":
            # The guide's prefer_alloc_in_same_node kept p0's blocks in p0's own segment, gone with it, while the
            # master lists them until client_ttl: under vLLM's default kv_load_failure_policy (fail) a request that
            # shares their prefix fails, as the plan's warning says (recompute would compute it again instead).
            assert any("load_failure_policy" in w for w in plan.warnings), plan.warnings
            # vLLM answers such a request with a bare 500 and says why only in its log (docs/real-engine.md).
            with pytest.raises(AssertionError, match=r"answered 502: .*Internal server error"):
                complete(url, PREFIX + " after the restart", model="qwen3")
            log = Path(run_dir, "logs", "p0-dp0.log").read_text()
            assert "due to KV load failure (failure_policy=fail" in log and "KV pool (mooncake) load failed" in log
        else:
            complete(url, PREFIX + " after the restart", model="qwen3")
        live = scrape()
        snap = topology_snapshot(deployment)
        pool_edges = [e for e in snap["edges"] if e["kind"] == "kv_pool"]
        assert {e["source"] for e in pool_edges} == {"inst:p0", "inst:d0"}, pool_edges
        if backend == "memcache":
            # The memcached ring kept p0's blocks: the restarted p0 loads the prefix from the pool.
            assert prefill_pool_hits(live) > hits_before_restart == 0, live["instances"]["p0"]
            assert snap["live"]["pool"]["hit_rate_total"] > 0
        print(f"\n{backend}: {blocks_put:.0f} blocks put by p0; after its restart, pool hits "
              f"{prefill_pool_hits(live):.0f} tokens")
    finally:
        stopped = run_job_now(deployment_stop, deployment, operator)
    assert stopped.status == "successful", stopped.explanation
    assert not processes_mentioning(run_dir) and not pids_in(run_dir)
    assert not config.exists(), "stop leaves the launch files behind"
