"""AscendStore client: KV blocks on several memcached servers, consistent hashing, N replicas.

Placement: a uhashring ring (virtual nodes) over the servers; a key lives on the first `replicas`
distinct servers its hash meets on the ring, so losing one server loses no block while replicas remain
and only moves 1/N of the keys' primaries. A server that fails is marked down for `retry_after` seconds
and leaves the ring meanwhile (as memcached clients eject a dead server): its keys' reads and writes go
to the next live servers on the ring, so writes keep succeeding, and a lost key is a miss, never an error.
"""

from __future__ import annotations

import time

from pymemcache.client.base import Client
from uhashring import HashRing


class AscendStore:
    # timeout: a dead server refuses at once; 2 s lets a live one on a loaded machine answer (at 0.5 s a stalled
    # memcached was marked down and the next blocks lost a replica)
    def __init__(self, servers: list[str], replicas: int = 3, vnodes: int = 160,
                 timeout: float = 2.0, retry_after: float = 2.0):
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
        """Where the key lives while every server is up."""
        return [node["nodename"] for node in self.ring.range(key, size=self.replicas, unique=True)]

    def _live_servers(self, key: str) -> list[str]:
        """All servers in the key's ring order, without those marked down."""
        now = time.monotonic()
        return [node["nodename"] for node in self.ring.range(key, size=len(self.servers), unique=True)
                if self._down_until.get(node["nodename"], 0) <= now]

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
        """Write to the first `replicas` live servers of the key; returns how many accepted it."""
        stored = answered = 0
        for server in self._live_servers(key):
            if answered == self.replicas:
                break
            try:
                stored += bool(self._call(server, "set", key, value, 0, False))
            except ConnectionError:
                continue
            answered += 1
        return stored

    def get(self, key: str) -> bytes | None:
        """First of the key's `replicas` live servers that answers with the value wins."""
        answered = 0
        for server in self._live_servers(key):
            if answered == self.replicas:
                break
            try:
                value = self._call(server, "get", key)
            except ConnectionError:
                continue
            if value is not None:
                return value
            answered += 1
        return None

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()
