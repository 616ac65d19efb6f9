"""Mooncake KV pool on loopback: a store-client agent inside a private network namespace.

Why an agent: Mooncake store clients always listen on wildcard ports (docs/mooncake-on-cpu.md), which this
project may not open in the main namespace. So `simcluster up` starts ONE agent under `unshare -n`
holding a real `MooncakeDistributedStore` (protocol tcp, P2PHANDSHAKE metadata) and engines talk to
it over a Unix socket, which crosses network namespaces. The agent reaches the real `mooncake_master`
(main namespace, 127.0.10.x:50051, /metrics on :9003) through a TCP->Unix->TCP relay
(simcluster.relay), since a fresh namespace has its own empty loopback.

Engine <-> agent protocol (one request at a time per connection):
  PUT <key> <len>\\n<bytes>  ->  OK <rc>\\n            (rc 0 = stored)
  GET <key>\\n               ->  VAL <len>\\n<bytes>   (len 0 = missing)
"""

from __future__ import annotations

import argparse
import os
import socket
import socketserver
import sys
import threading


class KVPoolClient:
    """Blocking client; used from one worker thread per engine."""

    def __init__(self, path: str, timeout: float = 2.0):
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

    def _round_trip(self, head: bytes, body: bytes = b"") -> tuple[str, bytes]:
        try:
            sock, f = self._connect()
            sock.sendall(head + body)
            word, size = f.readline().decode().split()
            payload = f.read(int(size)) if word == "VAL" else b""
            return (word, payload) if word == "VAL" else (word, size.encode())
        except (OSError, ValueError) as exc:
            self.close()
            raise ConnectionError(f"kvpool agent {self.path}: {exc}") from exc

    def put(self, key: str, value: bytes) -> bool:
        _word, rc = self._round_trip(f"PUT {key} {len(value)}\n".encode(), value)
        return rc == b"0"

    def get(self, key: str) -> bytes | None:
        _word, payload = self._round_trip(f"GET {key}\n".encode())
        return payload or None

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock = self._file = None


def _serve(store, socket_path: str) -> None:
    lock = threading.Lock()  # one store call at a time: the binding is not documented thread-safe

    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            while line := self.rfile.readline():
                parts = line.decode().split()
                if parts[0] == "PUT":
                    data = self.rfile.read(int(parts[2]))
                    with lock:
                        rc = store.put(parts[1], data)
                    self.wfile.write(f"OK {rc}\n".encode())
                elif parts[0] == "GET":
                    with lock:
                        data = store.get(parts[1]) or b""
                    self.wfile.write(f"VAL {len(data)}\n".encode() + data)

    if os.path.exists(socket_path):
        os.unlink(socket_path)
    server = socketserver.ThreadingUnixStreamServer(socket_path, Handler)
    os.chmod(socket_path, 0o666)  # engines run as the node login user
    print(f"kvpool agent serving {socket_path}", flush=True)
    server.serve_forever()


def _start_inner_relay(listen: str, master_socket: str) -> None:
    """The namespace-side relay, as a child that dies with us (PR_SET_PDEATHSIG), even on SIGKILL."""
    import ctypes
    import signal
    import subprocess
    import time

    def die_with_parent():
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG

    relay = subprocess.Popen([sys.executable, "-m", "simcluster.relay", "--listen-tcp", listen,
                              "--unix", master_socket], stdout=subprocess.PIPE, preexec_fn=die_with_parent)
    relay.stdout.readline()  # "relay listening on ..."
    signal.signal(signal.SIGTERM, lambda *_: (relay.terminate(), relay.wait(5), os._exit(0)))
    time.sleep(0.05)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="simcluster.kvpool")
    parser.add_argument("--socket", required=True)
    parser.add_argument("--master-socket", help="Unix socket relayed to the real master (main namespace)")
    parser.add_argument("--master", default="127.0.0.1:50051", help="master address inside this namespace")
    parser.add_argument("--segment-mb", type=int, default=256)
    args = parser.parse_args(argv)
    # Advertise loopback and skip the RDMA probe (docs/mooncake-on-cpu.md): without them setup() returns -600.
    os.environ.setdefault("MC_TCP_BIND_ADDRESS", "127.0.0.1")
    os.environ.setdefault("MC_FORCE_TCP", "1")
    from mooncake.store import MooncakeDistributedStore

    if args.master_socket:
        _start_inner_relay(args.master, args.master_socket)

    store = MooncakeDistributedStore()
    rc = store.setup("127.0.0.1:17812", "P2PHANDSHAKE", args.segment_mb << 20, 64 << 20, "tcp", "", args.master)
    if rc != 0:
        print(f"mooncake store setup failed: {rc}", file=sys.stderr, flush=True)
        return 1
    _serve(store, args.socket)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
