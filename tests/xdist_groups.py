"""Which tests may run side by side when `make test` spreads the suite over two pytest-xdist workers.

A test marked `procs` that brings up simulated nodes binds fixed 127.0.10.x addresses (the ranges of
docs/contracts.md §2), and the browser tests share one Redis database that their stack flushes. Files that share
an address range, that Redis database or a live stack form one group: xdist runs a group's tests one after another
on one worker (`--dist loadgroup`), and two groups never share an address. Everything else (tests that start no
process, the proxy's tests on ephemeral 127.0.0.1 ports, lint) is spread freely."""

from __future__ import annotations

import pytest

# First match wins: a file listed by name before its directory.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # Redis database 14 flushed by each live stack; the playground's .90-.94 and the health cluster's .50-.53, each
    # shared by a sim module and a browser module.
    ("sim-e2e", ("tests/e2e/", "tests/telemetry/test_prometheus_live.py", "tests/deployments/test_playground_sim.py",
                 "tests/telemetry/test_health_sim.py")),
    # The deployment range .200-.239 (also the telemetry health and reliability modules that start it), .10-.64,
    # .75-.81 (MindIE deploy), .240-.249 (telemetry pool, its mooncake_master).
    ("sim-deploy", ("tests/deployments/", "tests/telemetry/", "tests/reliability/", "tests/cli/")),
    # Eval runs .190-.195, P:D advisor runs .85-.89.
    ("sim-evals", ("tests/evals/",)),
    # simcluster .1-.9, .65-.69, .100-.149; SSH executor .150-.169; inventory and discovery .170-.179, .189; jobs.
    ("sim-nodes", ("tests/simcluster/", "tests/sshexec/", "tests/inventory/", "tests/jobs/", "tests/security/")),
)


def group_of(path: str) -> str | None:
    """The group of a test file (a path relative to the repository root), None when it may run anywhere."""
    for name, prefixes in GROUPS:
        if any(path == p or (p.endswith("/") and path.startswith(p)) for p in prefixes):
            return name
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marks to name the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("procs") is None:
            continue
        group = group_of(item.nodeid.split("::", 1)[0])
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
