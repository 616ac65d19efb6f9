"""AscendStoreConnector's lookup socket: `ipc://<VLLM_RPC_BASE_PATH>/lookup_rpc_port_<n>_dp_rank<r>`.

vllm-ascend binds one per DP rank (pool_scheduler.get_zmq_rpc_path_lookup; the worker's LookupKeyServer, the
scheduler's LookupKeyClient connects). The base path is VLLM_RPC_BASE_PATH, by default the system temp dir, so
two instances on one node with the same lookup_rpc_port and DP rank meet on one path. The real engine does not
notice: libzmq unlinks an existing IPC path before binding (src/ipc_listener.cpp), the second engine takes the
path over and the first one's lookups may be answered by the second. The simulator refuses to start instead
(exit 1), so a rendering that gives two instances on a node the same lookup_rpc_port fails here, loudly.

Here the base is VLLM_RPC_BASE_PATH if set, else the node dir (SIMCLUSTER_NODE_DIR), else the temp dir. The
socket is a plain Unix stream socket answering one line of block hashes with the number of leading blocks the
pool holds (a debugging aid; the engine asks its pool directly).
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import tempfile
from pathlib import Path

from simcluster.engine.kvconfig import KVConfigError


def base_dir(env, node_dir: Path | None) -> Path:
    value = env.get("VLLM_RPC_BASE_PATH")
    if value:
        return Path(value)
    return node_dir if node_dir else Path(tempfile.gettempdir())


def socket_path(base: Path, lookup_rpc_port: str, dp_rank: int) -> Path:
    return base / f"lookup_rpc_port_{lookup_rpc_port}_dp_rank{dp_rank}"


def _in_use(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        probe.close()


class LookupSockets:
    def __init__(self, paths: list[Path], answer):
        self.paths = paths
        self.answer = answer  # async (hashes: list[str]) -> int
        self.servers: list[asyncio.AbstractServer] = []

    async def start(self) -> None:
        for path in self.paths:
            if path.exists() or path.is_symlink():
                if _in_use(path):
                    raise KVConfigError(
                        f"simcluster: lookup socket ipc://{path} is in use by another running engine on this node: "
                        "two AscendStoreConnector instances share a lookup_rpc_port (and DP rank). A real vllm-ascend "
                        "would take the path over silently (libzmq unlinks it before binding) and the two engines' "
                        "pool lookups would cross; give each instance on a node its own lookup_rpc_port.")
                path.unlink()  # a dead engine's socket, as libzmq would
            try:
                server = await asyncio.start_unix_server(self._handle, path=str(path))
            except OSError as exc:
                if exc.errno == errno.ENAMETOOLONG or len(str(path)) > 107:
                    raise KVConfigError(f"OSError: lookup socket path too long for a Unix socket: {path}") from None
                raise
            self.servers.append(server)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                hits = await self.answer(line.decode(errors="replace").split())
                writer.write(f"{hits}\n".encode())
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def close(self) -> None:
        for server in self.servers:
            server.close()
        for path in self.paths[:len(self.servers)]:
            try:
                os.unlink(path)
            except OSError:
                pass
        self.servers.clear()
