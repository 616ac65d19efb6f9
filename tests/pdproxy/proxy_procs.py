"""Real processes for the proxy tests (fake PD backends, simulated engines, the proxy) on 127.0.0.1 ephemeral
ports, stopped by PID; and the small HTTP/SSE helpers the tests share."""

from __future__ import annotations

import http.client
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PY = sys.executable
FAKE = str(HERE / "fake_backend.py")


def read_line(proc: subprocess.Popen, prefix: str, timeout: float = 60.0, skipped: list | None = None) -> str:
    """The first line `proc` prints that starts with `prefix` (read from the pipe itself: select() does not see
    lines already sitting in a file object's buffer)."""
    deadline = time.monotonic() + timeout
    fd = proc.stdout.fileno()
    buf = b""
    while time.monotonic() < deadline:
        while b"\n" in buf:
            raw, buf = buf.split(b"\n", 1)
            line = raw.decode(errors="replace").strip()
            if line.startswith(prefix):
                return line
            if skipped is not None:
                skipped.append(line)
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                try:
                    proc.wait(2)  # it closed its output: let it exit so its status and stderr are reported
                except subprocess.TimeoutExpired:
                    pass
                break
            buf += chunk
        elif proc.poll() is not None:
            break
    raise RuntimeError(f"process {proc.args} did not print {prefix!r} (exit {proc.poll()}): "
                       f"{proc.stderr.read() if proc.poll() is not None else ''}")


def request(method: str, url: str, body=None, headers=None, timeout: float = 10.0):
    """One HTTP request; returns (status, headers dict lower-cased, body bytes)."""
    assert url.startswith("http://")
    hostport, _, path = url[7:].partition("/")
    host, port = hostport.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    data = json.dumps(body).encode() if isinstance(body, dict | list) else body
    hdrs = {"Content-Type": "application/json"} if data is not None else {}
    hdrs.update(headers or {})
    try:
        conn.request(method, "/" + path, body=data, headers=hdrs)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


class FakeBackend:
    def __init__(self, proc, port, name):
        self.proc, self.port, self.name = proc, port, name
        self.addr = f"127.0.0.1:{port}"
        self.url = f"http://{self.addr}"

    def fault(self, mode="ok", **kw):
        status, _, _ = request("POST", self.url + "/_fault", {"mode": mode, **kw})
        assert status == 200

    def stats(self) -> dict:
        return json.loads(request("GET", self.url + "/_stats")[2])

    def reset(self):
        request("POST", self.url + "/_reset", b"")

    def kill(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)


class Proxy:
    def __init__(self, proc, port, token, admin_port=None):
        self.proc, self.port, self.token = proc, port, token
        self.url = f"http://127.0.0.1:{port}"
        self.admin_port = admin_port  # set when the proxy serves its admin API on a listener of its own

    def post(self, path, body, headers=None, timeout=10.0):
        return request("POST", self.url + path, body, headers, timeout)

    def admin(self, method, path, body=None, token=None):
        tok = self.token if token is None else token
        status, _, raw = request(method, self.url + "/admin" + path, body,
                                 {"Authorization": f"Bearer {tok}"} if tok else {})
        return status, (json.loads(raw) if raw else None)

    def metrics(self) -> str:
        return request("GET", self.url + "/metrics")[2].decode()

    def metric(self, name: str, **labels) -> float:
        """Sum of the samples of `name` whose labels include `labels`."""
        total = 0.0
        for line in self.metrics().splitlines():
            if not line.startswith(name + "{") and not line.startswith(name + " "):
                continue
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total


class Cluster:
    """Starts processes and stops every one of them by PID at teardown."""

    def __init__(self):
        self.procs: list[subprocess.Popen] = []

    def _spawn(self, argv):
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                start_new_session=True)
        self.procs.append(proc)
        return proc

    def backend(self, name="fake", chunks=16, token_delay=0.0) -> FakeBackend:
        proc = self._spawn([PY, FAKE, "--name", name, "--chunks", str(chunks), "--token-delay", str(token_delay)])
        port = int(read_line(proc, "PORT").split()[1])
        return FakeBackend(proc, port, name)

    def engine(self, role: str, model: str = "sim-model", *, dev_mode: bool = False) -> FakeBackend:
        """A simcluster.engine process (TP=1) playing Prefill (kv_producer) or Decode (kv_consumer); dev_mode:
        started with VLLM_SERVER_DEV_MODE=1 (it then serves /reset_prefix_cache, as vLLM does)."""
        from tests.ports import free_port

        ports = [free_port(), free_port()]
        kv = {"kv_connector": "MooncakeConnectorV1", "kv_role": "kv_producer" if role == "prefill" else
              "kv_consumer", "kv_port": str(ports[1]),
              "kv_connector_extra_config": {"prefill": {"dp_size": 1, "tp_size": 1},
                                            "decode": {"dp_size": 1, "tp_size": 1}}}
        env = {**os.environ, "PYTHONPATH": str(ROOT), "ASCEND_RT_VISIBLE_DEVICES": "0",
               "SIMCLUSTER_TIME_SCALE": "0.05", "SIMCLUSTER_STARTUP_S": "0.1"}
        if dev_mode:
            env["VLLM_SERVER_DEV_MODE"] = "1"
        proc = subprocess.Popen([PY, "-m", "simcluster.engine", "serve", model, "--host", "127.0.0.1", "--port",
                                 str(ports[0]), "-tp", "1", "--served-model-name", model,
                                 "--kv-transfer-config", json.dumps(kv)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, env=env,
                                start_new_session=True)
        self.procs.append(proc)
        eng = FakeBackend(proc, ports[0], f"{role}-{ports[0]}")
        deadline = time.monotonic() + 60  # a deadline: the real-engine tests may hold both cores meanwhile
        while time.monotonic() < deadline:
            try:
                if request("GET", eng.url + "/health", timeout=1)[0] == 200:
                    return eng
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"simcluster engine on {eng.addr} did not become healthy")

    def proxy(self, prefill, decode, *args, token="s3cret") -> Proxy:
        argv = [PY, "-m", "pdproxy", "--host", "127.0.0.1", "--port", "0", "--health-interval", "0.2",
                "--health-timeout", "0.5", "--log-level", "WARNING"]
        if prefill:
            argv += ["--prefill", *[b.addr if hasattr(b, "addr") else b for b in prefill]]
        if decode:
            argv += ["--decode", *[b.addr if hasattr(b, "addr") else b for b in decode]]
        if token:
            argv += ["--admin-token", token]
        argv += list(args)
        proc = self._spawn(argv)
        before: list[str] = []
        port = int(read_line(proc, "pdproxy listening", skipped=before).rsplit(":", 1)[1])
        admin = [line for line in before if line.startswith("pdproxy admin listening")]
        return Proxy(proc, port, token, int(admin[0].rsplit(":", 1)[1]) if admin else None)

    def stop_all(self):
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.kill(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for proc in self.procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
            for f in (proc.stdout, proc.stderr):
                if f is not None:
                    f.close()


def kv_blocks(metrics_page: str) -> dict[str, float]:
    """pdproxy_cache_aware_kv_blocks per backend (present only for instances whose publisher is connected)."""
    return {line.split('backend="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
            for line in metrics_page.splitlines() if line.startswith("pdproxy_cache_aware_kv_blocks{")}


def sse_events(raw: bytes) -> list:
    """Parsed `data:` events of an SSE body; '[DONE]' kept as the string."""
    out = []
    for block in raw.split(b"\n\n"):
        block = block.strip()
        if block.startswith(b"data:"):
            payload = block[5:].strip()
            out.append("[DONE]" if payload == b"[DONE]" else json.loads(payload))
    return out


def completion(prompt="hello world from the test", stream=False, max_tokens=16, **kw):
    return {"model": "fake-model", "prompt": prompt, "stream": stream, "max_tokens": max_tokens, **kw}


def wait_until(cond, timeout=5.0, step=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return cond()
