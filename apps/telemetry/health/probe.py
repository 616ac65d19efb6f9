"""Asking every process's health URL in parallel with a short timeout: `http://...` answers 200 when ready
(vLLM's /health, the proxy's /healthcheck, mooncake_master's /health), `tcp://host:port` is ready when it accepts.
Every failure becomes (False, reason), never an exception."""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import urllib3

CONNECT_TIMEOUT_S = 0.5
READ_TIMEOUT_S = 1.5
MAX_PARALLEL = 16

_http = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(connect=CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S),
                            maxsize=4)


def probe(url: str) -> tuple[bool, str]:
    parts = urlsplit(url)
    if parts.scheme == "tcp":
        try:
            with socket.create_connection((parts.hostname, parts.port), timeout=CONNECT_TIMEOUT_S):
                return True, "accepts"
        except OSError as exc:
            return False, f"tcp {parts.hostname}:{parts.port} {exc.strerror or type(exc).__name__}"
    if parts.scheme not in ("http", "https"):
        return False, f"unknown health URL scheme {parts.scheme!r}"
    try:
        resp = _http.request("GET", url, redirect=False, preload_content=True)
    except urllib3.exceptions.NewConnectionError:
        return False, "unreachable (connection refused)"
    except urllib3.exceptions.ConnectTimeoutError:
        return False, f"unreachable (connect timeout after {CONNECT_TIMEOUT_S:g} s)"
    except urllib3.exceptions.ReadTimeoutError:
        return False, f"no answer within {READ_TIMEOUT_S:g} s"
    except urllib3.exceptions.HTTPError as exc:
        return False, f"unreachable ({type(exc).__name__})"
    if resp.status != 200:
        return False, f"HTTP {resp.status}"
    return True, "HTTP 200"


def probe_all(urls: dict[str, str], *, fetch=probe) -> dict[str, tuple[bool, str]]:
    """key -> (healthy, reason) for every key's URL, asked at the same time."""
    if not urls:
        return {}
    keys = list(urls)
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(keys))) as pool:
        return dict(zip(keys, pool.map(lambda k: fetch(urls[k]), keys), strict=True))
