"""The whole stack for browser tests: a simulated cluster, daphne, a Celery worker, and Debian's Chromium (the
`browser` fixture of tests/conftest.py).

Everything runs against the test database (transactional tests) and a Redis database of its own, and every
process is stopped by PID at the end. Addresses 127.0.10.180-.189 belong to these tests.
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from tests.ports import free_port  # noqa: F401  (re-exported)

ROOT = Path(__file__).resolve().parents[2]


def e2e_redis_db() -> str:
    """The Redis database a live stack flushes and uses: one per xdist worker (gw0 14, gw1 13, ...), so browser
    tests on two workers never flush each other's; PDCP_E2E_REDIS_DB picks another for a run beside a suite."""
    chosen = os.environ.get("PDCP_E2E_REDIS_DB")
    if chosen:
        return chosen
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return str(14 - int(worker[2:] or 0))


E2E_REDIS_DB = e2e_redis_db()
E2E_REDIS = f"redis://127.0.0.1:6379/{E2E_REDIS_DB}"
SIM_FIRST = 183  # the reference cluster of these tests: node0 .183 ... bench .188
SPEC = {
    "name": "e2e",
    "nodes": [
        {"name": "node0", "address": "127.0.10.181", "hardware": "A3", "role": "prefill",
         "labels": {"role": "prefill"}},
        {"name": "gpu-less", "address": "127.0.10.182", "hardware": "", "role": "proxy", "labels": {"role": "proxy"}},
    ],
    "services": {"host": "127.0.10.182", "mooncake_rpc_port": 50071, "mooncake_metrics_port": 9073,
                 "memcached_ports": [11271, 11272, 11273]},
}


def use_broker(app, url: str) -> None:
    """Point this process's Celery app at another broker, dropping the connections (and the producers on them) it
    pooled for the previous one: a pool kept from the e2e broker would send later tests' tasks there."""
    from kombu import pools

    app.conf.broker_url = url
    # app._pool and the producer pool are kombu's process-wide pools for that URL: closing them without taking them
    # out of kombu's registry leaves a closed pool there, which the next switch to the same URL would be handed.
    pools.reset()
    app._pool = None
    app.amqp._producer_pool = None


def wait_for_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port} after {timeout}s: {log.read_text()[-2000:]}")


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the process group, SIGKILL after 10 s. The wait after SIGKILL is long: on two starved cores a
    killed Celery worker once outlived a 5 s wait (a quiet full run, beside the real vLLM engines compiling)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)


@pytest.fixture(scope="session")
def simulated_cluster():
    state = Path(tempfile.mkdtemp(prefix="pdcp-e2e-sim-"))
    state.chmod(0o755)
    spec = state / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "simcluster", "up", "--spec", str(spec), "--state-dir", str(state)],
                   cwd=ROOT, env=env, check=True, capture_output=True, timeout=120)
    try:
        yield state
    finally:
        subprocess.run([sys.executable, "-m", "simcluster", "down", "--state-dir", str(state)], cwd=ROOT, env=env,
                       capture_output=True, timeout=120)


@pytest.fixture
def live_stack(transactional_db, tmp_path, settings):
    """daphne + a Celery worker on the test database; yields the base URL."""
    from django.db import connection

    db = connection.settings_dict
    if "sqlite" in db["ENGINE"]:
        database_url = f"sqlite:///{db['NAME']}"
    else:
        database_url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    prefix = settings.PDCP_NAMESPACE  # the servers' cache keys, channel groups and queues are the test's
    env = {**os.environ, "DATABASE_URL": database_url, "REDIS_URL": E2E_REDIS, "PDCP_NAMESPACE": prefix,
           "PYTHONPATH": str(ROOT)}
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                                           "CONFIG": {"hosts": [{"address": E2E_REDIS, "socket_timeout": None}],
                                                      "prefix": prefix}}}
    settings.CELERY_BROKER_URL = E2E_REDIS
    from controlplane.celery import app

    use_broker(app, E2E_REDIS)
    subprocess.run(["redis-cli", "-n", E2E_REDIS_DB, "flushdb"], capture_output=True, timeout=10)
    port = free_port()
    web_log, worker_log = tmp_path / "web.log", tmp_path / "worker.log"
    web = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                            "controlplane.asgi:application"], cwd=ROOT, env=env, stdout=web_log.open("w"),
                           stderr=subprocess.STDOUT, start_new_session=True)
    worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "controlplane", "worker", "-Q", f"{prefix}.ssh,{prefix}.evals",
                               "--pool=solo", "--without-gossip", "--without-mingle", "--loglevel=INFO"],
                              cwd=ROOT, env=env, stdout=worker_log.open("w"), stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        wait_for_port(port, web, web_log)
        deadline = time.monotonic() + 30
        while "ready" not in worker_log.read_text() and time.monotonic() < deadline:
            if worker.poll() is not None:
                raise RuntimeError(worker_log.read_text()[-2000:])
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(web)
        stop(worker)
        use_broker(app, os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))


@pytest.fixture(scope="module")
def sim():
    """The deployment tests' simulated cluster (tests/deployments/simdeploy.py), one per module, on this suite's
    .183-.188 (the deployment tests may run theirs on .210 at the same time)."""
    from tests.deployments.simdeploy import start_cluster, stop_cluster

    state_dir, state = start_cluster(SIM_FIRST)
    try:
        yield state
    finally:
        stop_cluster(state_dir)
