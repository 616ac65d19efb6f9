"""POST /admin/reset_prefix_cache: vLLM's POST /reset_prefix_cache sent to every configured Prefill and Decode
instance at once (what the example proxy's /reset_prefix_cache does), with each instance's answer reported."""

from __future__ import annotations

import asyncio
from urllib.parse import parse_qsl, urlencode

from .http_client import BackendError
from .lease import request_whole
from .leg_bodies import snippet

RESET_TIMEOUT_S = 10.0  # first byte, then the whole answer; vLLM answers once every engine core has reset
RESET_FLAGS = ("reset_running_requests", "reset_external")  # vLLM's query parameters, booleans
DEV_MODE_HINT = " (vLLM serves /reset_prefix_cache only when started with VLLM_SERVER_DEV_MODE=1)"


class FanoutInvalid(ValueError):
    """The query string is not what vLLM's endpoint takes; the message names the parameter."""


def reset_path(query: str) -> bytes:
    """/reset_prefix_cache with the client's flags, checked: only vLLM's two, each true or false."""
    params = []
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name not in RESET_FLAGS:
            raise FanoutInvalid(f"unknown query parameter {name!r}: use {' or '.join(RESET_FLAGS)}")
        if value.lower() not in ("true", "false"):
            raise FanoutInvalid(f"{name} must be true or false")
        params.append((name, value.lower()))
    return b"/reset_prefix_cache" + (b"?" + urlencode(params).encode() if params else b"")


async def _reset_one(backend, path: bytes, connect_timeout: float) -> dict:
    result = {"role": backend.role, "address": backend.addr, "state": backend.state, "ok": False, "status": None,
              "error": ""}
    try:
        answer, raw = await request_whole(backend, asyncio.get_running_loop(), connect_timeout, b"POST", path,
                                          RESET_TIMEOUT_S)
    except BackendError as exc:
        result["error"] = exc.reason
        return result
    result["status"] = answer.status
    result["ok"] = 200 <= answer.status < 300
    if not result["ok"]:
        result["error"] = f"answered HTTP {answer.status}: {snippet(raw)}" + (DEV_MODE_HINT if answer.status == 404
                                                                             else "")
    return result


async def reset_prefix_cache(pools: dict, query: str, connect_timeout: float) -> tuple[int, dict]:
    """(HTTP status, body): 200 when every instance reset its cache, 502 when any did not (each one says why),
    503 when no instance is configured. Every configured instance is asked, healthy or not: a cache left
    behind on an ejected or draining instance would serve stale prefixes once it is back."""
    path = reset_path(query)
    backends = [b for role in ("prefill", "decode") for b in pools[role].backends]
    if not backends:
        return 503, {"reset": 0, "failed": 0, "instances": [], "error": "no instance is configured"}
    results = await asyncio.gather(*(_reset_one(b, path, connect_timeout) for b in backends))
    failed = sum(1 for r in results if not r["ok"])
    return (502 if failed else 200), {"reset": len(results) - failed, "failed": failed, "instances": results}
