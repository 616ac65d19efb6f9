"""Issue 17's command-line client on the whole stack: examples/pdcp-demo.sh, which uses only `pdcp`, logs in,
imports the simulated reference cluster's inventory, creates the deployment, adds and activates a revision,
deploys it with --wait (a progress bar per node), checks the exit code and stops it (12 s on a quiet machine; stopped at 120 s)."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.deployments.simdeploy import processes_mentioning, topology_yaml

pytestmark = [pytest.mark.procs, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "e2e-admin-password-123"


def test_the_demo_script_deploys_and_stops_the_reference_topology(live_stack, sim, run_dir, tmp_path):
    from django.contrib.auth import get_user_model

    from apps.accounts.roles import Role, set_role
    from apps.deployments.models import Deployment
    from apps.jobs.models import Job

    admin = get_user_model().objects.create_user("admin", password=PASSWORD)
    set_role(admin, Role.ADMIN)
    spec = tmp_path / "reference-sim.yaml"
    spec.write_text(topology_yaml(run_dir))
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "pdcp").exists(), "the pdcp entry point is missing: pip install -e '.[dev]' (make venv)"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PDCP_")}
    env.update(PATH=f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}", PDCP_URL=live_stack,
               PDCP_USER="admin", PDCP_PASSWORD=PASSWORD, PDCP_CONFIG=str(tmp_path / "pdcp" / "config.toml"))

    started = time.monotonic()
    result = subprocess.run(["bash", str(ROOT / "examples" / "pdcp-demo.sh"), sim["inventory"], str(spec),
                             "reference-sim"], env=env, cwd=tmp_path, capture_output=True, text=True,
                            stdin=subprocess.DEVNULL, timeout=120)
    took = time.monotonic() - started
    (tmp_path / "demo.log").write_text(f"took {took:.1f} s\n" + result.stdout + "\n--- stderr\n" + result.stderr)
    assert result.returncode == 0, result.stdout[-5000:] + "\n--- stderr\n" + result.stderr[-3000:]
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
    # No timed assertion (a loaded machine took 78 s): the run is bounded by the subprocess timeout above, and
    # its time is in demo.log for whoever measures it.
