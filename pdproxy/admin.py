"""Admin API (bearer token): list, add, remove, drain and undrain instances without a restart; served on the main
listener, or only on a listener of its own (AdminListener)."""

from __future__ import annotations

import asyncio
import hmac
import json

from .backend_pool import DRAINING, PENDING
from .config import ConfigError, parse_address
from .fanout import FanoutInvalid, reset_prefix_cache

ROLES = ("prefill", "decode")


def _json(conn, status: int, payload) -> None:
    conn.send_response(status, json.dumps(payload).encode())


class Admin:
    def __init__(self, token: str | None, pools: dict, health, connect_timeout: float = 2.0):
        self.token = token.encode() if token else None
        self.pools = pools
        self.health = health
        self.connect_timeout = connect_timeout

    def _authorized(self, req) -> bool:
        auth = req.headers.get("authorization", "")
        if not auth.lower().startswith("bearer "):
            return False
        return hmac.compare_digest(auth[7:].strip().encode(), self.token)

    def listing(self) -> dict:
        return {role: [b.describe() for b in self.pools[role].backends] for role in ROLES}

    async def handle(self, req, conn):
        if self.token is None:
            conn.send_error(403, "the admin API is disabled: start the proxy with --admin-token or "
                            "--admin-token-file", "PermissionDeniedError")
            return
        if not self._authorized(req):
            conn.send_error(401, "missing or wrong bearer token", "AuthenticationError",
                            extra=[(b"WWW-Authenticate", b"Bearer")])
            return
        parts = [p for p in req.path.split("/") if p][1:]  # drop "admin"
        method = req.method
        if parts == ["instances"]:
            if method == "GET":
                return _json(conn, 200, self.listing())
            if method == "POST":
                return await self.add(req, conn)
            return conn.send_error(405, "use GET or POST on /admin/instances", "MethodNotAllowed")
        if parts == ["reset_prefix_cache"]:
            if method != "POST":
                return conn.send_error(405, "use POST on /admin/reset_prefix_cache", "MethodNotAllowed")
            try:
                status, payload = await reset_prefix_cache(self.pools, req.query, self.connect_timeout)
            except FanoutInvalid as exc:
                return conn.send_error(400, str(exc), "BadRequestError")
            return _json(conn, status, payload)
        if len(parts) in (3, 4) and parts[0] == "instances":
            role, addr = parts[1], parts[2]
            if role not in ROLES:
                return conn.send_error(404, f"unknown role {role!r}: use prefill or decode", "NotFoundError")
            try:
                b = self.pools[role].get(addr)
            except ConfigError as exc:
                return conn.send_error(400, str(exc), "BadRequestError")
            if b is None:
                return conn.send_error(404, f"no {role} instance {addr}", "NotFoundError")
            pool = self.pools[role]
            if len(parts) == 3:
                if method == "GET":
                    return _json(conn, 200, b.describe())
                if method == "DELETE":
                    pool.remove(b.addr)
                    return _json(conn, 200, {"removed": b.describe()})
                return conn.send_error(405, "use GET or DELETE on an instance", "MethodNotAllowed")
            action = parts[3]
            if method != "POST":
                return conn.send_error(405, f"use POST on .../{action}", "MethodNotAllowed")
            if action == "drain":
                pool.set_state(b, DRAINING, "admin drain")
                return _json(conn, 200, b.describe())
            if action == "undrain":
                if b.state == DRAINING:
                    pool.set_state(b, PENDING, "admin undrain")
                    await self.health.check(pool, b)
                return _json(conn, 200, b.describe())
            return conn.send_error(404, f"unknown action {action!r}: use drain or undrain", "NotFoundError")
        conn.send_error(404, f"no admin endpoint {req.path}", "NotFoundError")

    async def add(self, req, conn):
        try:
            payload = json.loads(req.body or b"{}")
        except ValueError as exc:
            return conn.send_error(400, f"malformed JSON body: {exc}", "BadRequestError")
        if not isinstance(payload, dict):
            return conn.send_error(400, "the body must be a JSON object", "BadRequestError")
        role = payload.get("role") or payload.get("type")
        if role not in ROLES:
            return conn.send_error(400, "role must be 'prefill' or 'decode'", "BadRequestError")
        addrs = payload.get("instances") or ([payload["address"]] if payload.get("address") else [])
        if not addrs or not all(isinstance(a, str) for a in addrs):
            return conn.send_error(400, "give 'address': 'host:port' or 'instances': ['host:port', ...]",
                                   "BadRequestError")
        weight = payload.get("weight", 1.0)
        if not isinstance(weight, int | float) or weight <= 0:
            return conn.send_error(400, "weight must be a positive number", "BadRequestError")
        pool = self.pools[role]
        try:
            for a in addrs:
                parse_address(a)
                if pool.get(a) is not None:
                    return conn.send_error(409, f"{role} instance {a} already exists", "ConflictError")
        except ConfigError as exc:
            return conn.send_error(400, str(exc), "BadRequestError")
        added = [pool.add(a, weight) for a in addrs]
        # probe at once so a healthy instance takes traffic without waiting for the next round
        await asyncio.gather(*(self.health.check(pool, b) for b in added))
        _json(conn, 201, {"added": [b.describe() for b in added]})


class AdminListener:
    """What --admin-host/--admin-port serve: the admin API and nothing else."""

    def __init__(self, admin: Admin, refused):
        self.admin = admin
        self.refused = refused  # the proxy's own count of refused requests

    async def handle(self, req, conn):
        if req.path.startswith("/admin/"):
            await self.admin.handle(req, conn)
        else:
            conn.send_error(404, f"no route for {req.method} {req.path} on the admin listener", "NotFoundError")
