"""Test settings: the real settings under a namespace of this run's own (controlplane/namespace.py), so a test
run never shares cache keys, channel groups or Celery queues with `make run` on the same database; subprocesses
the tests start inherit it."""

import os

os.environ.setdefault("PDCP_NAMESPACE", f"pdcp-test-{os.getpid()}")

# Under pytest-xdist each worker keeps its files (secrets key, eval dirs named by row id) in a directory of its own.
_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker and os.environ.get("PDCP_DATA_DIR") and os.path.basename(os.environ["PDCP_DATA_DIR"]) != _worker:
    os.environ["PDCP_DATA_DIR"] = os.path.join(os.environ["PDCP_DATA_DIR"], _worker)

from django.conf import global_settings  # noqa: E402

from controlplane.settings import *  # noqa: E402,F403

# Users the tests create log in at once: a fast hash (the production hashers still check theirs).
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher", *global_settings.PASSWORD_HASHERS]
