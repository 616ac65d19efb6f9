"""Test settings: the real settings under a namespace of this run's own (controlplane/namespace.py), so a test
run never shares cache keys, channel groups or Celery queues with `make run` on the same database; subprocesses
the tests start inherit it."""

import os

os.environ.setdefault("PDCP_NAMESPACE", f"pdcp-test-{os.getpid()}")

from controlplane.settings import *  # noqa: E402,F403
