"""Issue 17's command-line client on the whole stack: examples/pdcp-demo.sh, which uses only `pdcp`, logs in,
imports the simulated reference cluster's inventory, creates the deployment, adds and activates a revision,
deploys it with --wait (a progress bar per node), checks the exit code and stops it (12 s on a quiet machine; stopped at 120 s)."""

import pytest

from tests.deployments.simdeploy import processes_mentioning, topology_yaml
from tests.e2e.pdcp_demo import make_admin, pdcp_env, run_demo

pytestmark = [pytest.mark.procs, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_the_demo_script_deploys_and_stops_the_reference_topology(live_stack, sim, run_dir, tmp_path):
    from apps.deployments.models import Deployment
    from apps.jobs.models import Job

    make_admin()
    spec = tmp_path / "reference-sim.yaml"
    spec.write_text(topology_yaml(run_dir))
    result = run_demo(pdcp_env(live_stack, tmp_path), sim["inventory"], spec, "reference-sim", tmp_path, timeout=120)
    out = result.stdout

    assert "logged in to " + live_stack + " as admin" in out
    assert (tmp_path / "pdcp" / "config.toml").stat().st_mode & 0o777 == 0o600
    assert "imported: 1 credentials, 1 clusters, 6 nodes created" in out
    assert "created deployment reference-sim" in out and "reference-sim: revision 2 created and active" in out
    deploy = Job.objects.get(kind="deploy")
    stop = Job.objects.get(kind="stop")
    refresh = Job.objects.get(kind="refresh")
    assert (deploy.status, stop.status) == ("successful", "successful"), (deploy.explanation, stop.explanation)
    assert refresh.status == "successful" and " running; 0 rows changed" in refresh.explanation, refresh.explanation
    # the progress: one line per change (not a terminal), each node's bar filling up
    nodes = list(deploy.node_summaries.values_list("node", flat=True))
    assert len(nodes) >= 5
    for node in nodes:
        assert any(line.split()[:2] == [node, "[####################]"] for line in out.splitlines()), node
    assert f"job {deploy.pk} deploy {deploy.target_label} successful in " in out
    assert f"job {refresh.pk} refresh {refresh.target_label} successful in " in out
    assert f"job {stop.pk} stop {stop.target_label} successful in " in out
    assert "done: reference-sim was deployed and stopped" in out
    assert "Traceback" not in result.stderr

    deployment = Deployment.objects.get(name="reference-sim")
    assert deployment.revisions.get(is_active=True).number == 2
    assert processes_mentioning(run_dir) == []
    # No timed assertion: run_demo keeps the time in demo.log (tests/e2e/pdcp_demo.py).
