"""AscendStore client: KV blocks on several memcached servers, consistent hashing, N replicas.

Placement: a uhashring ring (virtual nodes) over the servers; a key lives on the first `replicas`
distinct servers its hash meets on the ring, so losing one server loses no block and only moves
1/N of the keys' primaries. A server that fails is skipped for `retry_after` seconds instead of
costing a connect timeout on every call.
"""

from __future__ import annotations

import time

from pymemcache.client.base import Client
from uhashring import HashRing


class AscendStore:
    def __init__(self, servers: list[str], replicas: int = 3, vnodes: int = 160,
                 timeout: float = 0.5, retry_after: float = 2.0):
        if not servers:
            raise ValueError("AscendStore needs at least one memcached server")
        self.servers = list(servers)
        self.replicas = min(replicas, len(self.servers))
        self.ring = HashRing(nodes=self.servers, vnodes=vnodes)
        self.timeout = timeout
        self.retry_after = retry_after
        self._clients: dict[str, Client] = {}
        self._down_until: dict[str, float] = {}

    def placement(self, key: str) -> list[str]:
        return [node["nodename"] for node in self.ring.range(key, size=self.replicas, unique=True)]

    def _client(self, server: str) -> Client:
        if server not in self._clients:
            host, port = server.rsplit(":", 1)
            self._clients[server] = Client((host, int(port)), connect_timeout=self.timeout,
                                           timeout=self.timeout, no_delay=True)
        return self._clients[server]

    def _call(self, server: str, method: str, *args):
        if self._down_until.get(server, 0) > time.monotonic():
            raise ConnectionError(f"{server} marked down")
        try:
            return getattr(self._client(server), method)(*args)
        except (OSError, Exception) as exc:  # pymemcache raises several unrelated types
            self._down_until[server] = time.monotonic() + self.retry_after
            client = self._clients.pop(server, None)
            if client is not None:
                client.close()
            raise ConnectionError(f"{server}: {exc}") from exc

    def put(self, key: str, value: bytes) -> int:
        """Write to every replica; returns how many accepted it."""
        stored = 0
        for server in self.placement(key):
            try:
                stored += bool(self._call(server, "set", key, value, 0, False))
            except ConnectionError:
                continue
        return stored

    def get(self, key: str) -> bytes | None:
        """First replica that answers with the value wins."""
        for server in self.placement(key):
            try:
                value = self._call(server, "get", key)
            except ConnectionError:
                continue
            if value is not None:
                return value
        return None

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()
