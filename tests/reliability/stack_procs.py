"""The control plane's processes for the reliability tests, as `make run` starts them (scripts/run.sh): daphne, a
Celery worker, beat, and a redis-server of the test's own (which a case may kill and restart: never the machine's
Redis on 6379), on the test database. Each runs in its own session, so a case can SIGKILL one (its pool children
too) as a crash would; everything is stopped by PID. Plus what the load cases read of them: CPU time and the
database's connections."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from tests.ports import free_port  # noqa: F401  (re-exported)
from tests.waiting import wait_until  # noqa: F401  (re-exported)

ROOT = Path(__file__).resolve().parents[2]
REDIS_SERVER = "/usr/bin/redis-server"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# --- ports, readiness, stopping ---------------------------------------------------------------------------------

def port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False




def wait_ready(what: str, ready, proc: subprocess.Popen, log: Path, timeout: float = 60) -> None:
    """Until ready() holds; raises with the log's tail if the process exits or the timeout passes (the process is
    then stopped)."""
    deadline = time.monotonic() + timeout
    while not ready():
        failure = (f"{what} exited {proc.returncode}" if proc.poll() is not None
                   else f"{what} not ready after {timeout}s" if time.monotonic() > deadline else None)
        if failure:
            stop(proc)
            raise RuntimeError(f"{failure}: {log.read_text()[-3000:]}")
        time.sleep(0.1)


def wait_for_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 60) -> None:
    wait_ready(f"the process listening on {port}", lambda: port_open(port), proc, log, timeout)


def spawn(argv: list[str], env: dict | None, log: Path, *, append: bool = False) -> subprocess.Popen:
    """argv in a session of its own (so killpg reaches its children), its output in log."""
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log.open("a" if append else "w"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 15) -> None:
    """sig to the process's session (its own group), then KILL if it outlives the timeout."""
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)


# --- the processes ------------------------------------------------------------------------------------------

class RedisServer:
    """A redis-server on 127.0.0.1:<a free port>, no persistence (a restart loses every key, as a crash of a Redis
    without persistence does), its files in `directory`."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.log = self.directory / "redis.log"
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> RedisServer:
        self.proc = spawn([REDIS_SERVER, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
                           "--appendonly", "no", "--dir", str(self.directory), "--protected-mode", "yes"],
                          None, self.log, append=True)
        wait_for_port(self.port, self.proc, self.log, timeout=30)
        self.starts += 1
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None:
            stop(self.proc, sig)

    def restart(self, sig: int = signal.SIGKILL, down_seconds: float = 0.0) -> None:
        """Kill it (SIGKILL: a crash) and start it again on the same port after down_seconds."""
        self.stop(sig)
        time.sleep(down_seconds)
        self.start()


def database_url() -> str:
    """The test database, as a process started by the test must be told it."""
    from django.db import connection

    db = connection.settings_dict
    if "sqlite" in db["ENGINE"]:
        return f"sqlite:///{db['NAME']}"
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def stack_env(redis_url: str | None = None, namespace: str | None = None, **extra: str) -> dict[str, str]:
    """This process's environment on the test database; on redis_url (broker, cache, channel layer) and in
    namespace if given (else the test run's), plus extra (DEBUG="0" for a server under load: DEBUG keeps every SQL
    query in memory)."""
    env = {**os.environ, "DATABASE_URL": database_url(), "PYTHONPATH": str(ROOT)}
    if redis_url:
        env.update(REDIS_URL=redis_url, CELERY_BROKER_URL=redis_url)
    if namespace:
        env["PDCP_NAMESPACE"] = namespace
    return {**env, **extra}


def start_daphne(env: dict, log: Path) -> tuple[subprocess.Popen, int]:
    """daphne on a free port; returns it and the port once it listens."""
    port = free_port()
    proc = spawn([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                  "controlplane.asgi:application"], env, log)
    wait_for_port(port, proc, log)
    return proc, port


def start_worker(env: dict, log: Path, queues: str | list[str], *, concurrency: int | None = None,
                 hostname: str | None = None, timeout: float = 60) -> subprocess.Popen:
    """A Celery worker on queues (solo pool unless concurrency is given); with `hostname`, in a UTS namespace of
    its own, as a worker on another host. Returns once it says it is ready."""
    pool = f"--concurrency={concurrency}" if concurrency else "--pool=solo"
    argv = [sys.executable, "-m", "celery", "-A", "controlplane", "worker", "-Q",
            queues if isinstance(queues, str) else ",".join(queues), pool, "--without-gossip", "--without-mingle",
            "--loglevel=INFO"]
    if hostname:
        argv = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', hostname, *argv]
    proc = spawn(argv, env, log)
    wait_ready("the worker", lambda: "ready." in log.read_text(), proc, log, timeout)
    return proc


def start_beat(env: dict, log: Path, schedule: Path, timeout: float = 60) -> subprocess.Popen:
    proc = spawn([sys.executable, "-m", "celery", "-A", "controlplane", "beat", "--loglevel=INFO", "--schedule",
                  str(schedule)], env, log)
    wait_ready("beat", lambda: "beat: Starting" in log.read_text(), proc, log, timeout)
    return proc


# --- this test process on the stack's Redis -------------------------------------------------------------------

def use_broker(app, url: str) -> None:
    """Point this process's Celery app at another broker, dropping the connections it pooled for the previous one
    (as tests/e2e/conftest.py does)."""
    from kombu import pools

    app.conf.broker_url = url
    pools.reset()
    app._pool = None
    app.amqp._producer_pool = None


@contextmanager
def this_process_on(redis_url: str, settings):
    """This test process's channel layer, cache and Celery broker on redis_url (what it emits and queues goes to the
    processes it started); restored at the end."""
    from django.core.cache import caches

    from controlplane.celery import app

    namespace = settings.PDCP_NAMESPACE
    previous = app.conf.broker_url  # before the settings change: a conf read first below would take the new URL
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                                           "CONFIG": {"hosts": [{"address": redis_url, "socket_timeout": None}],
                                                      "prefix": namespace}}}
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": redis_url,
                                   "KEY_PREFIX": namespace}}
    settings.CELERY_BROKER_URL = redis_url
    use_broker(app, redis_url)
    try:
        yield
    finally:
        use_broker(app, previous)
        caches["default"].close()


@contextmanager
def live_stack(redis: RedisServer, settings, logs: Path, *, worker: bool = True):
    """daphne and (unless worker=False) a solo Celery worker for the ssh and evals queues, on the test database and
    `redis`, this process too; yields (base URL, {"web": proc, "worker": proc}). Stopped by PID at the end."""
    namespace = settings.PDCP_NAMESPACE
    env = stack_env(redis.url(), namespace)
    procs: dict[str, subprocess.Popen] = {}
    try:
        with this_process_on(redis.url(), settings):
            procs["web"], port = start_daphne(env, logs / "web.log")
            if worker:
                procs["worker"] = start_worker(env, logs / "worker.log", [f"{namespace}.ssh", f"{namespace}.evals"])
            yield f"http://127.0.0.1:{port}", procs
    finally:
        for proc in procs.values():
            stop(proc)


class ControlPlane:
    """The whole control plane (daphne, a worker with two processes, beat) on a Redis of its own, each process
    restartable: start_*() each; kill(name) SIGKILLs one process group; close() stops whatever is left."""

    def __init__(self, workdir: Path, namespace: str, **env: str):
        self.dir = workdir
        self.redis = RedisServer(workdir / "redis")
        self.namespace = namespace
        self.env = stack_env(self.redis.url(), namespace, **env)
        self.procs: dict[str, subprocess.Popen] = {}
        self.web_port = 0
        self.starts = 0

    def _log(self, name: str) -> Path:
        self.starts += 1
        return self.dir / f"{name}-{self.starts}.log"

    def start_redis(self) -> None:
        self.procs["redis"] = self.redis.start().proc

    def start_web(self) -> None:
        self.procs["web"], self.web_port = start_daphne(self.env, self._log("web"))

    def start_worker(self, *, hostname: str | None = None) -> None:
        """A worker on this run's ssh and evals queues (no telemetry: no scrapes or auto-restarts in these
        cases); with `hostname`, as a worker on another host."""
        self.procs["worker"] = start_worker(self.env, self._log("worker"),
                                            [f"{self.namespace}.ssh", f"{self.namespace}.evals"],
                                            concurrency=2, hostname=hostname)

    def start_beat(self) -> None:
        self.procs["beat"] = start_beat(self.env, self._log("beat"), self.dir / "celerybeat-schedule")

    def start_all(self) -> None:
        self.start_web()
        self.start_worker()
        self.start_beat()

    def kill(self, *names: str) -> float:
        """SIGKILL these processes' groups (the worker's pool children too); returns the time it was done."""
        for name in names:
            proc = self.procs.pop(name)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        return time.time()

    def close(self) -> None:
        for name in [n for n in self.procs if n != "redis"] + ["redis"]:
            proc = self.procs.pop(name, None)
            if proc is not None:
                stop(proc)

    def api(self, token: str, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        """The REST API, as an operator's script uses it."""
        req = urllib.request.Request(f"http://127.0.0.1:{self.web_port}{path}", method=method,
                                     data=json.dumps(body or {}).encode() if method == "POST" else None,
                                     headers={"Authorization": f"Token {token}",
                                              "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")


# --- what the load cases read of them -------------------------------------------------------------------------

def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


class ConnectionPeak:
    """The most connections open to the test database at once while the block runs, sampled every 0.2 s from a
    connection of its own (counted too)."""

    def __init__(self):
        self.peak = 0
        self._done = threading.Event()

    def __enter__(self):
        import psycopg
        from django.db import connection

        db = connection.settings_dict
        self._conn = psycopg.connect(host=db["HOST"], port=db["PORT"], user=db["USER"], dbname=db["NAME"],
                                     autocommit=True)
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()
        self._conn.close()

    def _sample(self):
        while not self._done.wait(0.2):
            row = self._conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
            self.peak = max(self.peak, row.fetchone()[0])
