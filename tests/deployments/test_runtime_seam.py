"""The runtime seam stays: each launch profile names a runtime that exists, the jobs of a plan go to the runtime of
its profile, and no job handler picks a way of running processes by itself (docs/architecture.md, "Runtimes")."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from apps.deployments.runtimes import RUNTIMES, HostRuntime, MindieK8sRuntime, runtime_for
from apps.deployments.runtimes.base import Runtime
from apps.deployments.topology.profiles import PROFILES

JOBS = Path(__file__).resolve().parents[2] / "apps" / "deployments" / "jobs"
JOB_LEVEL = ("deploy", "stop", "restart", "refresh", "preflight")
PROCESS_LEVEL = ("read_states", "start_processes", "stop_items", "tail_log", "write_files", "remove_files")


@pytest.mark.parametrize(("profile", "runtime"), [("vllm-ascend", HostRuntime), ("sim", HostRuntime),
                                                  ("vllm-cpu", HostRuntime), ("mindie", MindieK8sRuntime)])
def test_each_launch_profile_maps_to_its_runtime(profile, runtime):
    found = runtime_for(SimpleNamespace(profile=profile))
    assert type(found) is runtime
    assert RUNTIMES[PROFILES[profile].runtime] is found


def test_every_profile_is_mapped():
    assert {p.runtime for p in PROFILES.values()} <= set(RUNTIMES)
    assert set(PROFILES) == {"vllm-ascend", "sim", "vllm-cpu", "mindie"}, "a new profile: add it to the test above"


def test_a_plan_that_no_longer_renders_is_acted_on_by_pid_file():
    assert type(runtime_for(None)) is HostRuntime


@pytest.mark.parametrize("name", sorted(RUNTIMES))
def test_every_runtime_has_both_levels(name):
    runtime = RUNTIMES[name]
    assert runtime.name == name
    for op in (*JOB_LEVEL, *PROCESS_LEVEL):
        assert callable(getattr(runtime, op)), op
        assert op in Runtime.__dict__, f"{op} is not part of runtimes/base.py's Runtime"


def test_no_job_handler_branches_on_a_launch_profile():
    sources = {p.name: p.read_text() for p in JOBS.glob("*.py")}
    assert sources, JOBS
    branching = {name: found for name, text in sources.items()
                 if (found := re.findall(r"mindie|launch_profile|get_profile|PROFILES", text, re.I))}
    assert branching == {}, "how processes run is the runtime's choice (apps/deployments/runtimes/), not a handler's"
