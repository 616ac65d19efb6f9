"""64 commands over 8 real sshd nodes: pooled parallel vs sequential persistent vs a new connection each.

Run as root (it starts sshd): .venv/bin/python bench/ssh/run.py
Nodes listen on 127.0.10.162-.169 (the SSH executor's range) and are stopped by PID at the end.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from simcluster.sshnode import generate_client_key, start_ssh_node, stop_ssh_node  # noqa: E402
from sshexec import SshConnection, SshPool, SshTarget  # noqa: E402

NODES = 8
COMMANDS = 64
ADDRESSES = [f"127.0.10.{162 + i}" for i in range(NODES)]
COMMAND = "echo {i}; cat /proc/loadavg"


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="pdcp-sshbench-"))
    root.chmod(0o755)
    nodes = []
    try:
        key, pub = generate_client_key(root / "id_ed25519")
        for i, address in enumerate(ADDRESSES):
            nodes.append(start_ssh_node(f"bench{i}", address, 22, root / f"bench{i}", pub))
        targets = [SshTarget(n.name, n.address, n.port, n.user, key, None, n.host_key_line) for n in nodes]
        pairs = [(targets[i % NODES], COMMAND.format(i=i)) for i in range(COMMANDS)]

        def check(stdout: str, i: int) -> None:
            if not stdout.startswith(f"{i}\n"):
                raise SystemExit(f"command {i} printed {stdout!r}")

        with SshPool() as pool:
            for t in targets:  # connect first: this measures command fan-out, not the handshakes
                pool.connection(t).connect()

            def parallel() -> None:
                for i, r in enumerate(pool.run_on_many(pairs, max_parallel=NODES * 2, timeout=30)):
                    check(r.result.stdout, i)

            def sequential() -> None:
                for i, (t, c) in enumerate(pairs):
                    check(pool.run(t, c, timeout=30).stdout, i)

            parallel()  # warm-up
            t_parallel = timed(parallel)
            t_sequential = timed(sequential)

        def new_each() -> None:
            for i, (t, c) in enumerate(pairs):
                with SshConnection(t) as conn:
                    check(conn.run(c, timeout=30).stdout, i)

        t_new = timed(new_each)
    finally:
        for node in nodes:
            stop_ssh_node(node)
        shutil.rmtree(root, ignore_errors=True)

    print(f"{COMMANDS} commands over {NODES} nodes (OpenSSH on loopback, paramiko, TCP_NODELAY)")
    print(f"  parallel, persistent (pool of {NODES * 2})  {t_parallel:7.3f} s   1.0x")
    print(f"  sequential, persistent            {t_sequential:7.3f} s  {t_sequential / t_parallel:5.1f}x slower")
    print(f"  sequential, new connection each   {t_new:7.3f} s  {t_new / t_parallel:5.1f}x slower")


if __name__ == "__main__":
    main()
