"""Mooncake KV pool on loopback: one store-client agent per engine, in a network namespace shared by all agents.

Why an agent: Mooncake store clients always listen on wildcard ports (docs/mooncake-on-cpu.md), which this
project may not open in the main network namespace. So each engine whose AscendStoreConnector uses the mooncake
backend starts an agent process holding a real `MooncakeDistributedStore` (protocol tcp, P2PHANDSHAKE) inside a
private user + network namespace (`unshare -rn`, allowed to unprivileged users), and talks to it over a Unix
socket, which crosses namespaces.

One namespace for all agents of a user: a client reads a block from the segment of whichever client holds it,
by connecting to that client's transfer engine, so every agent must reach every other agent. The first agent
creates the namespace (`unshare -rn`), later ones join it (`nsenter -U -n -t <a live agent>`), under a lock
in the user's pool dir (`<tmp>/simcluster-kvpool-<uid>`, 0700), which also lists the live agents. Each agent
advertises its engine's address (the node's 127.0.10.x, all local inside the namespace), so segment names read
`<node address>:<port>` and `prefer_alloc_in_same_node` means "the same simulated node", as on real hosts.

Master: the real `mooncake_master` named by the engine's mooncake.json (or MOONCAKE_MASTER) listens in the main
namespace. The engine serves `<pool dir>/<engine pid>.master.sock` (Unix -> that TCP address, in its event loop)
and the agent runs `simcluster.relay --listen-tcp 127.0.0.1:0` inside the namespace towards that socket.
Agent and relay die with their parent (PR_SET_PDEATHSIG), so a killed engine takes its segment with it, as a
killed vLLM takes its registered memory.

Puts go as vllm-ascend's do (mooncake_backend.put): one batch_put_from_multi_buffers per request, from a
registered buffer, with a ReplicateConfig carrying mooncake.json's prefer_alloc_in_same_node and, with
preferred_segment, this client's own segment. (Mooncake's plain put() refuses prefer_alloc_in_same_node.)

Engine <-> agent protocol (one request at a time per connection):
  MPUT <n>\\n then n x (<key> <len>\\n<bytes>)  ->  OK <rc> ...\\n   (rc 0 = stored, negative = Mooncake error)
  GET <key>\\n               ->  VAL <len>\\n<bytes>   (len 0 = missing or unreadable)
  EXISTS <key> <key>...\\n   ->  EX <1|0> <1|0>...\\n  (batch_is_exist)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import fcntl
import os
import signal
import socket
import socketserver
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1
JOIN_ATTEMPTS = 5  # live agents tried in turn before giving up


def die_with_parent() -> None:
    """preexec_fn: SIGKILL this child when the process that started it dies (kept across unshare/nsenter/exec)."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class KVPoolClient:
    """Blocking client of an agent; used from one worker thread per engine."""

    def __init__(self, path: str, timeout: float = 5.0):
        self.path = path
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._file = None

    def _connect(self):
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            sock.connect(self.path)
            self._sock, self._file = sock, sock.makefile("rb")
        return self._sock, self._file

    def _round_trip(self, head: bytes, body: bytes = b"") -> tuple[str, list[str], bytes]:
        try:
            sock, f = self._connect()
            sock.sendall(head + body)
            word, *rest = f.readline().decode().split()
            payload = f.read(int(rest[0])) if word == "VAL" else b""
            return word, rest, payload
        except (OSError, ValueError, IndexError) as exc:
            self.close()
            raise ConnectionError(f"kvpool agent {self.path}: {exc}") from exc

    def put_many(self, items: list[tuple[str, bytes]]) -> list[bool]:
        """One batch (one placement decision for all of them, as vllm-ascend puts a request's blocks)."""
        if not items:
            return []
        body = b"".join(f"{key} {len(value)}\n".encode() + value for key, value in items)
        _word, rest, _ = self._round_trip(f"MPUT {len(items)}\n".encode(), body)
        return [r == "0" for r in rest]

    def put(self, key: str, value: bytes) -> bool:
        return self.put_many([(key, value)]) == [True]

    def get(self, key: str) -> bytes | None:
        _word, _rest, payload = self._round_trip(f"GET {key}\n".encode())
        return payload or None

    def exists(self, keys: list[str]) -> list[bool]:
        if not keys:
            return []
        _word, rest, _ = self._round_trip(("EXISTS " + " ".join(keys) + "\n").encode())
        return [r == "1" for r in rest]

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock = self._file = None


# -- the agent (runs inside the namespace) -----------------------------------------------------------------

class _Staging:
    """A registered buffer the puts are copied into (batch_put_from_multi_buffers reads registered memory)."""

    def __init__(self, store, size: int):
        self.size = size
        self.buffer = ctypes.create_string_buffer(size)
        self.address = ctypes.addressof(self.buffer)
        rc = store.register_buffer(self.address, size)
        if rc != 0:
            raise RuntimeError(f"register_buffer failed: {rc}")

    def batches(self, items: list[tuple[str, bytes]]):
        """Consecutive runs of items that fit the buffer together, with their offsets."""
        run, used = [], 0
        for key, value in items:
            if run and used + len(value) > self.size:
                yield run
                run, used = [], 0
            run.append((key, value, used))
            used += len(value)
        if run:
            yield run


def _serve(store, socket_path: str, put_config, staging: _Staging) -> socketserver.ThreadingUnixStreamServer:
    lock = threading.Lock()  # one store call at a time: the binding is not documented thread-safe

    def put_many(items: list[tuple[str, bytes]]) -> list[int]:
        results = []
        for run in staging.batches(items):
            if any(len(value) > staging.size for _key, value, _off in run):
                results += [-1] * len(run)  # larger than the local buffer: Mooncake would refuse it too
                continue
            for _key, value, offset in run:
                ctypes.memmove(staging.address + offset, value, len(value))
            rcs = store.batch_put_from_multi_buffers([k for k, _v, _o in run],
                                                    [[staging.address + o] for _k, _v, o in run],
                                                    [[len(v)] for _k, v, _o in run], put_config)
            results += [min(int(rc), 0) for rc in rcs]
        return results

    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            while line := self.rfile.readline():
                parts = line.decode().split()
                if not parts:
                    continue
                if parts[0] == "MPUT":
                    items = []
                    for _ in range(int(parts[1])):
                        key, size = self.rfile.readline().decode().split()
                        items.append((key, self.rfile.read(int(size))))
                    with lock:
                        rcs = put_many(items)
                    self.wfile.write(("OK " + " ".join(map(str, rcs)) + "\n").encode())
                elif parts[0] == "GET":
                    with lock:
                        data = store.get(parts[1]) or b""
                    self.wfile.write(f"VAL {len(data)}\n".encode() + data)
                elif parts[0] == "EXISTS":
                    with lock:
                        found = store.batch_is_exist(parts[1:]) if parts[1:] else []
                    self.wfile.write(("EX " + " ".join("1" if f == 1 else "0" for f in found) + "\n").encode())

    if os.path.exists(socket_path):
        os.unlink(socket_path)
    server = socketserver.ThreadingUnixStreamServer(socket_path, Handler)
    server.daemon_threads = True
    return server


def _start_inner_relay(master_socket: str) -> int:
    """The namespace-side relay on 127.0.0.1:<any port>, a child that dies with us; returns its port."""
    relay = subprocess.Popen([sys.executable, "-m", "simcluster.relay", "--listen-tcp", "127.0.0.1:0",
                              "--unix", master_socket], stdout=subprocess.PIPE, preexec_fn=die_with_parent)
    line = relay.stdout.readline().decode()  # "relay listening on 127.0.0.1:PORT"
    if not line.startswith("relay listening on "):
        raise RuntimeError(f"inner relay did not start: {line!r}")
    return int(line.rsplit(":", 1)[1])


def agent_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="simcluster.kvpool")
    parser.add_argument("--socket", required=True)
    parser.add_argument("--master-socket", required=True, help="Unix socket relayed to the real master")
    parser.add_argument("--advertise", default="127.0.0.1", help="the address this client's segment is named by")
    parser.add_argument("--segment-bytes", type=int, default=64 << 20)
    parser.add_argument("--local-buffer-bytes", type=int, default=16 << 20)
    parser.add_argument("--prefer-same-node", action="store_true")
    parser.add_argument("--preferred-segment", action="store_true")
    args = parser.parse_args(argv)
    # Advertise the node's loopback address and skip the RDMA probe (docs/mooncake-on-cpu.md): without them
    # setup() returns -600.
    os.environ["MC_TCP_BIND_ADDRESS"] = args.advertise
    os.environ.setdefault("MC_FORCE_TCP", "1")
    from mooncake.store import MooncakeDistributedStore, ReplicateConfig

    port = _start_inner_relay(args.master_socket)
    store = MooncakeDistributedStore()
    rc = store.setup(args.advertise, "P2PHANDSHAKE", args.segment_bytes, args.local_buffer_bytes, "tcp", "",
                     f"127.0.0.1:{port}")
    if rc != 0:
        print(f"FAILED {rc}", flush=True)
        return 1
    config = ReplicateConfig()
    config.prefer_alloc_in_same_node = args.prefer_same_node
    if args.preferred_segment:
        config.preferred_segment = store.get_hostname()
    server = _serve(store, args.socket, config, _Staging(store, args.local_buffer_bytes))
    print(f"READY {store.get_hostname()}", flush=True)
    server.serve_forever()
    return 0


# -- the engine's side: start an agent, relay its master traffic ---------------------------------------------

class PoolAgentError(RuntimeError):
    pass


def pool_dir() -> Path:
    """The user's pool dir: sockets, the namespace lock and the list of live agents. Refuses one that another user
    could have prepared (not ours, a symbolic link, or open to others)."""
    path = Path(os.environ.get("SIMCLUSTER_KVPOOL_DIR") or Path(tempfile.gettempdir()) / f"simcluster-kvpool-{os.getuid()}")
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise PoolAgentError(f"refusing pool dir {path}: must be a directory of uid {os.getuid()}, mode 0700")
    (path / "agents").mkdir(mode=0o700, exist_ok=True)
    return path


def _start_time(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _netns(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def _live_agent(directory: Path) -> int | None:
    """A live agent of ours whose namespace a new agent can join; stale entries are removed."""
    own = _netns("self")
    for entry in sorted((directory / "agents").iterdir()):
        try:
            pid, started = int(entry.name), entry.read_text().strip()
        except (ValueError, OSError):
            entry.unlink(missing_ok=True)
            continue
        if _start_time(pid) == started and _netns(pid) not in (None, own):
            return pid
        entry.unlink(missing_ok=True)
    return None


async def _entered_namespace(proc: asyncio.subprocess.Process, timeout: float = 10) -> bool:
    """True once `proc` runs in another network namespace than ours; False when it exited before (nsenter failed)."""
    own, deadline = _netns("self"), time.monotonic() + timeout
    while _netns(proc.pid) in (own, None):
        if proc.returncode is not None:  # set by asyncio's child watcher while we sleep below
            return False
        if time.monotonic() > deadline:
            proc.kill()
            raise PoolAgentError("the pool agent never entered its network namespace")
        await asyncio.sleep(0.005)
    return True


def _clean_stale_sockets(directory: Path) -> None:
    for sock in directory.glob("*.sock"):
        pid = sock.name.split(".", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            sock.unlink(missing_ok=True)


class PoolAgent:
    """One engine's agent: the process, its socket, the master relay the engine serves for it."""

    def __init__(self, proc: asyncio.subprocess.Process, socket_path: Path, relay: asyncio.AbstractServer,
                 master_socket: Path, segment: str, directory: Path):
        self.proc = proc
        self.socket_path = socket_path
        self.relay = relay
        self.master_socket = master_socket
        self.segment = segment  # how the master names this agent's segment
        self.directory = directory

    @classmethod
    async def start(cls, *, master: str, advertise: str, segment_bytes: int, local_buffer_bytes: int,
                    prefer_same_node: bool, preferred_segment: bool, timeout: float = 60.0) -> PoolAgent:
        from simcluster.relay import start_unix_to_tcp

        directory = pool_dir()
        _clean_stale_sockets(directory)
        tag = str(os.getpid())
        master_socket, agent_socket = directory / f"{tag}.master.sock", directory / f"{tag}.agent.sock"
        host, port = master.rsplit(":", 1)
        relay = await start_unix_to_tcp(str(master_socket), host, int(port))
        agent_args = [sys.executable, "-m", "simcluster.kvpool", "--socket", str(agent_socket), "--master-socket",
                      str(master_socket), "--advertise", advertise, "--segment-bytes", str(segment_bytes),
                      "--local-buffer-bytes", str(local_buffer_bytes)]
        agent_args += ["--prefer-same-node"] if prefer_same_node else []
        agent_args += ["--preferred-segment"] if preferred_segment else []
        try:
            proc = await cls._spawn(directory, agent_args)
            try:
                line = (await asyncio.wait_for(proc.stdout.readline(), timeout)).decode().strip()
            except TimeoutError:
                proc.kill()
                raise PoolAgentError(f"the Mooncake client did not come up within {timeout:.0f} s "
                                     f"(master {master})") from None
            if not line.startswith("READY "):
                await proc.wait()
                raise PoolAgentError(f"ret={line.removeprefix('FAILED ') or proc.returncode}, master={master}")
        except BaseException:
            relay.close()
            master_socket.unlink(missing_ok=True)
            raise
        return cls(proc, agent_socket, relay, master_socket, line.split(" ", 1)[1], directory)

    @staticmethod
    async def _spawn(directory: Path, agent_args: list[str]) -> asyncio.subprocess.Process:
        """Create the namespace (first agent) or join it, holding the pool dir's lock until the agent is in it. The
        agent whose namespace a new one joins may exit meanwhile (its engine stopped: the lock guards only the list),
        and `nsenter` then fails; the new agent tries the next live one, or creates the namespace."""
        lock = os.open(directory / "ns.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            await asyncio.get_running_loop().run_in_executor(None, fcntl.flock, lock, fcntl.LOCK_EX)
            for _ in range(JOIN_ATTEMPTS):
                target = _live_agent(directory)
                if target:
                    argv = ["nsenter", "-U", "-n", "-t", str(target), "--preserve-credentials", *agent_args]
                else:
                    argv = ["unshare", "-rn", "sh", "-c", 'ip link set lo up && exec "$0" "$@"', *agent_args]
                proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                            stdin=asyncio.subprocess.DEVNULL,
                                                            preexec_fn=die_with_parent)
                if await _entered_namespace(proc):
                    started = _start_time(proc.pid)
                    if started:
                        (directory / "agents" / str(proc.pid)).write_text(started)
                    return proc
                if not target:
                    raise PoolAgentError(f"the pool agent could not create its network namespace "
                                         f"(exit {proc.returncode})")
                (directory / "agents" / str(target)).unlink(missing_ok=True)
            raise PoolAgentError(f"the pool agent could not join a live agent's namespace in {JOIN_ATTEMPTS} tries")
        finally:
            os.close(lock)  # releases the flock

    def client(self) -> KVPoolClient:
        return KVPoolClient(str(self.socket_path))

    async def close(self) -> None:
        if self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 5)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        (self.directory / "agents" / str(self.proc.pid)).unlink(missing_ok=True)
        self.relay.close()
        for path in (self.master_socket, self.socket_path):
            path.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(agent_main(sys.argv[1:]))
