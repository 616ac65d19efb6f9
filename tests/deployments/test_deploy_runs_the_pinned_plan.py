"""The plan a deploy job runs is the plan the golden tests pin: render_plan (what DeploymentRun and the plan
page use) adds the database-level checks and nothing else to the pure core's build_plan."""

from __future__ import annotations

import pytest

from apps.deployments.inventory_lookup import cluster_facts
from apps.deployments.revision_checks import RevisionInvalid
from apps.deployments.revision_plan import deployment_plan, render_plan, revision_spec, start_line
from apps.deployments.topology import build_plan, detached_start_command

pytestmark = pytest.mark.django_db


def test_a_saved_revisions_job_plan_is_build_plan_byte_for_byte(deployment):
    spec, plan = deployment_plan(deployment)
    pinned = build_plan(spec, cluster_facts(deployment.cluster, launch_profile=spec.launch_profile))
    assert [start_line(p) for p in plan.processes] == [detached_start_command(p.launch) for p in pinned.processes]
    assert plan == pinned
    proxy = plan.stages[-1].processes[0].launch.argv
    assert proxy[-2:] == ("--admin-token-file", "/var/lib/pdcp/reference/secrets/proxy-admin.token")


def test_render_plan_for_the_job_equals_build_plan_under_the_sim_profile(deployment, fixed_yaml):
    from apps.deployments.services import revision_create

    sim_yaml = fixed_yaml.replace("launch_profile: vllm-ascend", "launch_profile: sim")
    assert sim_yaml != fixed_yaml
    revision = revision_create(deployment=deployment, user=None, yaml_text=sim_yaml)
    spec = revision_spec(revision)
    plan = render_plan(spec, deployment.cluster, deployment_id=deployment.pk)
    pinned = build_plan(spec, cluster_facts(deployment.cluster, launch_profile="sim"))
    assert [start_line(p) for p in plan.processes] == [detached_start_command(p.launch) for p in pinned.processes]
    assert plan == pinned


def test_render_plan_still_refuses_what_only_the_database_knows(deployment, fixed_yaml):
    # build_plan would render this spec; the run_dir, dies and ports of another active deployment on the cluster
    # forbid it.
    spec = revision_spec(deployment.active_revision)
    with pytest.raises(RevisionInvalid) as caught:
        render_plan(spec, deployment.cluster, deployment_id=None)
    paths = [p.path for p in caught.value.problems]
    assert paths[0] == "run_dir" and {"instances[0].devices", "proxy.port"} <= set(paths)
