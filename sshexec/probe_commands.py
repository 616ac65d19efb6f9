"""Shell lines the deployment jobs send to nodes, built from typed values only (every word through shlex.quote).

Health probes run on the node itself (where a 0.0.0.0-bound engine always answers): curl when present, python3
otherwise; tcp:// targets are probed with bash's /dev/tcp, python3 otherwise.
"""

from __future__ import annotations

import json
import shlex
from pathlib import PurePosixPath
from urllib.parse import urlsplit

from .process_commands import parse_process_state, private_dirs_command, process_state_command

q = shlex.quote

_HTTP_PY = ("import sys,urllib.request\n"
            "try:\n urllib.request.urlopen(sys.argv[1], timeout=3).close()\n"
            "except Exception as e:\n print(e); sys.exit(1)")
_TCP_PY = "import socket,sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 3).close()"


def health_probe_command(url: str) -> str:
    """Exit 0 when the URL answers 2xx (http) or accepts a connection (tcp://host:port)."""
    parts = urlsplit(url)
    if parts.scheme == "tcp":
        host, port = q(parts.hostname or ""), int(parts.port or 0)
        return (f"if command -v bash >/dev/null 2>&1; then timeout 3 bash -c {q(': < /dev/tcp/$0/$1')} {host} {port};"
                f" else python3 -c {q(_TCP_PY)} {host} {port}; fi")
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"unsupported health URL {url!r}")
    return (f"if command -v curl >/dev/null 2>&1; then curl -fsS -o /dev/null -m 3 {q(url)};"
            f" else python3 -c {q(_HTTP_PY)} {q(url)}; fi")


def check_command(pid_file: PurePosixPath | str, health_url: str | None) -> str:
    """One round trip: the process state line, then `health <exit status>` of the probe (or `health -`)."""
    state = f"( {process_state_command(pid_file)} )"
    if not health_url:
        return f'{state}; echo "health -"'
    return f'{state}; {health_probe_command(health_url)} >/dev/null 2>&1; echo "health $?"'


def parse_check(stdout: str) -> tuple[str, int | None, bool | None]:
    """(state, pid, healthy): state running|stopped|zombie|no-pid-file; healthy None when there is no probe."""

    lines = [ln for ln in stdout.strip().splitlines() if ln.strip()]
    health_line = next((ln for ln in reversed(lines) if ln.startswith("health ")), "health 1")
    state_lines = [ln for ln in lines if not ln.startswith("health ")]
    ps = parse_process_state(state_lines[0] if state_lines else "no-pid-file")
    value = health_line.split()[1]
    return ps.state, ps.pid, (None if value == "-" else value == "0")


def binaries_command(names: list[str]) -> str:
    words = " ".join(q(n) for n in names)
    return f'for b in {words}; do if command -v "$b" >/dev/null 2>&1; then echo "ok $b"; else echo "missing $b"; fi; done'


def files_command(paths: list[str]) -> str:
    """`ok PATH` for each path that is a readable regular file, `missing PATH` otherwise."""
    words = " ".join(q(p) for p in paths)
    return f'for f in {words}; do if [ -f "$f" ] && [ -r "$f" ]; then echo "ok $f"; else echo "missing $f"; fi; done'


def disk_command(path: PurePosixPath | str) -> str:
    """`df -Pk` of the nearest existing directory at or above path: one line, available KiB in column 4."""
    return (f"d={q(str(path))}; while [ ! -d \"$d\" ]; do d=$(dirname \"$d\"); done; "
            'df -Pk "$d" | tail -n 1')


PREFLIGHT_SECTIONS = ("binaries", "ports", "disk", "rundir", "npu", "scripts", "owner", "files")
RUN_DIR_OK = "run-dir-ok"


def run_dir_check_command(run_dir: str) -> str:
    """Prints RUN_DIR_OK, or why the start would refuse run_dir (sshexec/process_commands.py); creates nothing."""
    run = PurePosixPath(run_dir)
    check = private_dirs_command([run, run / "logs", run / "pids", run / "secrets"], create=False)
    return f"( {check} ) 2>&1 && echo {RUN_DIR_OK}"


def preflight_script(*, binaries: list[str], run_dir: str, npu: bool, files: list[str] = ()) -> str:
    """All of a node's preflight reads in one round trip, as sections `@@name` the parser splits on."""
    parts = ["echo @@binaries", binaries_command(binaries),
             "echo @@ports", "ss -ltnH 2>/dev/null || echo ss-missing",
             "echo @@disk", disk_command(run_dir),
             "echo @@rundir", run_dir_check_command(run_dir)]
    if files:
        parts += ["echo @@files", files_command(list(files))]
    if npu:
        parts += ["echo @@npu", "npu-smi info 2>&1 || echo npu-smi-failed"]
    return "; ".join(parts)


def split_sections(stdout: str) -> dict[str, str]:
    out: dict[str, list[str]] = {}
    current = None
    for line in stdout.splitlines():
        if line.startswith("@@") and line[2:] in PREFLIGHT_SECTIONS:
            current = line[2:]
            out[current] = []
        elif current:
            out[current].append(line)
    return {k: "\n".join(v) for k, v in out.items()}


def listening_ports(ss_output: str, address: str) -> set[int]:
    """Ports listening on this address or a wildcard, from `ss -ltnH` (Local Address:Port is column 4)."""
    ports = set()
    for line in ss_output.splitlines():
        cols = line.split()
        if len(cols) < 4:
            continue
        host, _, port = cols[3].rpartition(":")
        host = host.strip("[]")
        if port.isdecimal() and host in (address, "0.0.0.0", "*", "::", ""):
            ports.add(int(port))
    return ports


def proxy_admin_command(*, admin_host: str, admin_port: int, header_file: PurePosixPath | str, role: str, backend: str,
                        action: str) -> str:
    """POST /admin/instances/<role>/<host:port>/<drain|undrain>, run on the proxy node: the admin API listens only
    on an address of that node (its loopback on a real cluster: topology/profiles/); the token is read from a file
    on the node."""
    if action not in ("drain", "undrain") or role not in ("prefill", "decode"):
        raise ValueError("bad proxy admin action")
    url = f"http://{admin_host}:{int(admin_port)}/admin/instances/{role}/{backend}/{action}"
    return f"curl -sS -m 10 -X POST -H @{q(str(header_file))} -w '\\nHTTP %{{http_code}}' {q(url)}"


def completion_probe_command(*, address: str, port: int, model: str, timeout: int = 60) -> str:
    """One /v1/completions request through the proxy; prints the body, then `HTTP <code>`."""
    body = json.dumps({"model": model, "prompt": "The control plane says hello", "max_tokens": 8})
    url = f"http://{address}:{int(port)}/v1/completions"
    return (f"curl -sS -m {int(timeout)} -H 'Content-Type: application/json' -d {q(body)} "
            f"-w '\\nHTTP %{{http_code}}' {q(url)}")


def split_http(stdout: str) -> tuple[int, str]:
    body, _, code = stdout.rstrip().rpartition("\nHTTP ")
    return (int(code) if code.isdecimal() else 0), body
