"""Which tests may run side by side when `make test` spreads the suite over pytest-xdist workers.

A test marked `procs` that brings up simulated nodes binds fixed 127.0.10.x addresses (the ranges of
docs/contracts.md §2); a browser test's live stack flushes a Redis database of its worker's own. Files that share
an address range form one group: the scheduler below hands a group's files to
one worker as one unit, which runs them one after another, and two groups never share an address. Every other
test (the files that start no process, the proxy's tests on ephemeral 127.0.0.1 ports, lint) is spread freely.

The unit is a file, not a test: xdist's own `--dist loadgroup` renames items to carry their group, which pytest 9
no longer lets a plugin do, and the scheduler (in the controller, which collects nothing) sees only node ids."""

from __future__ import annotations

import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# First match wins: a file listed by name before its directory.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # Each live stack flushes its worker's own Redis database (tests/e2e/conftest.py e2e_redis_db), so browser files
    # group only by the addresses they share with a sim module: the container deploy cluster .70-.74/.84, the
    # playground's .90-.94, the health cluster's .50-.53; every other browser file on the e2e clusters .181-.188.
    ("sim-containers", ("tests/deployments/test_container_deploy_sim.py", "tests/e2e/test_containers_in_browser.py")),
    ("sim-playground", ("tests/deployments/test_playground_sim.py", "tests/e2e/test_playground_in_browser.py")),
    ("sim-health", ("tests/telemetry/test_health_sim.py", "tests/e2e/test_health_in_browser.py")),
    ("sim-e2e", ("tests/e2e/", "tests/telemetry/test_prometheus_live.py")),
    # The deployment range .200-.239 (also the telemetry health and reliability modules that start it), .10-.64,
    # .75-.81 (MindIE deploy), .240-.249 (telemetry pool, its mooncake_master).
    ("sim-deploy", ("tests/deployments/", "tests/telemetry/", "tests/reliability/", "tests/cli/")),
    # Eval runs .190-.195, P:D advisor runs .85-.89.
    ("sim-evals", ("tests/evals/",)),
    # simcluster .1-.9, .65-.69, .100-.149; SSH executor .150-.169; inventory and discovery .170-.179, .189; jobs.
    ("sim-nodes", ("tests/simcluster/", "tests/sshexec/", "tests/inventory/", "tests/jobs/", "tests/security/")),
    # Real vLLM engines on .20.1-.20.3 (tests/realengine/real_engines.py), started once for the module.
    ("real-engine", ("tests/realengine/",)),
)


def group_of(path: str) -> str | None:
    """The group of a test file (a path relative to the repository root), None when it may run anywhere."""
    for name, prefixes in GROUPS:
        if any(path == p or (p.endswith("/") and path.startswith(p)) for p in prefixes):
            return name
    return None


@functools.cache
def file_group(path: str) -> str | None:
    """A file's group when it is in a group's range and starts processes (has a `procs` mark), else None."""
    group = group_of(path)
    if group is None:
        return None
    try:
        source = (ROOT / path).read_text()
    except OSError:
        return None
    return group if "pytest.mark.procs" in source else None


def scope_of(nodeid: str) -> str:
    """The unit of work a test is scheduled in: its file's group, or the test alone."""
    return file_group(nodeid.split("::", 1)[0]) or nodeid


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        """xdist's loadscope with our scopes; larger units first (xdist's --loadscope-reorder, on by default)."""

        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return GroupScheduling(config, log)
