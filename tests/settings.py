"""Test settings: the real settings under a namespace of this run's own (controlplane/namespace.py), so a test
run never shares cache keys, channel groups or Celery queues with `make run` on the same database; subprocesses
the tests start inherit it."""

import os


def own_namespace(environ, pid: int) -> None:
    """Gives this process a namespace of the run's own unless one was chosen; under pytest-xdist, each worker one of
    its own: the workers inherit the controller's environment, and both workers' databases number rows from 1, so a
    shared namespace made their deployment locks and live state collide. A worker's subprocesses keep its namespace."""
    if "PDCP_NAMESPACE" not in environ:
        environ["PDCP_NAMESPACE"] = environ["PDCP_TEST_NAMESPACE"] = f"pdcp-test-{pid}"
    worker, made = environ.get("PYTEST_XDIST_WORKER"), environ.get("PDCP_TEST_NAMESPACE")
    if worker and made and environ["PDCP_NAMESPACE"] == made and not made.endswith(f"-{worker}"):
        environ["PDCP_NAMESPACE"] = environ["PDCP_TEST_NAMESPACE"] = f"{made}-{worker}"


own_namespace(os.environ, os.getpid())

# Under pytest-xdist each worker keeps its files (secrets key, eval dirs named by row id) in a directory of its own.
_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker and os.environ.get("PDCP_DATA_DIR") and os.path.basename(os.environ["PDCP_DATA_DIR"]) != _worker:
    os.environ["PDCP_DATA_DIR"] = os.path.join(os.environ["PDCP_DATA_DIR"], _worker)

from django.conf import global_settings  # noqa: E402

from controlplane.settings import *  # noqa: E402,F403

# Users the tests create log in at once: a fast hash (the production hashers still check theirs).
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher", *global_settings.PASSWORD_HASHERS]
