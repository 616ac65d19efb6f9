"""The REST API over urllib: JSON in and out, token auth, and every failure as one exception whose message is
what pdcp prints (the server's words, a 400's messages with their fields, what to do on a 401)."""

from __future__ import annotations

import http.client
import json
import re
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field

from . import __version__

DEFAULT_TIMEOUT = 30.0


class CliError(Exception):
    """Something pdcp could not do; str() is the message (maybe several lines), exit_code what main returns."""

    exit_code = 3


class ConnectionFailed(CliError):
    pass


class ApiError(CliError):
    def __init__(self, status: int, method: str, path: str, body, url: str = ""):
        self.status, self.method, self.path, self.body, self.url = status, method, path, body, url
        super().__init__(error_message(status, method, path, body, url))


@dataclass
class Response:
    status: int
    body: object
    headers: dict = field(default_factory=dict)


def _flatten(value, prefix: str = "") -> list[tuple[str, str]]:
    """DRF's {"field": ["msg"]} (nested for nested serializers, lists for many=True) as (field path, message)."""
    if isinstance(value, dict):
        out = []
        for key, inner in value.items():
            out += _flatten(inner, f"{prefix}.{key}" if prefix else str(key))
        return out
    if isinstance(value, list):
        if all(isinstance(v, str) for v in value):
            return [(prefix, v) for v in value]
        out = []
        for i, inner in enumerate(value):
            if inner not in ({}, [], None):
                out += _flatten(inner, f"{prefix}[{i}]" if prefix else f"[{i}]")
        return out
    return [(prefix, str(value))]


def _error_entry(entry) -> str:
    """One item of an "errors" list: the new {"field", "message"} form, inventory's {"line", "field", "message"},
    a spec problem's {"path", "instance", "field", "message", "suggestion"}, or a plain string."""
    if not isinstance(entry, dict):
        return str(entry)
    where = entry.get("path") or entry.get("field") or ""
    if entry.get("line"):
        where = f"line {entry['line']}" + (f": {where}" if where else "")
    text = str(entry.get("message") or entry.get("detail") or json.dumps(entry))
    if entry.get("suggestion"):
        text += f" ({entry['suggestion']})"
    return f"{where}: {text}" if where else text


def messages_of(body) -> tuple[str | None, list[str]]:
    """(detail, field messages) of an error body in any of the forms the API answers with."""
    if isinstance(body, dict):
        detail = body.get("detail") if isinstance(body.get("detail"), str) else None
        if isinstance(body.get("errors"), list):
            return detail, [_error_entry(e) for e in body["errors"]]
        rest = {k: v for k, v in body.items() if not (k == "detail" and detail is not None)}
        lines = [f"{where}: {text}" if where and where != "non_field_errors" else text
                 for where, text in _flatten(rest)]
        return detail, lines
    if isinstance(body, list):
        return None, [_error_entry(e) for e in body]
    if isinstance(body, str) and body.strip():
        text = " ".join(body.split())
        return (text[:300] + "...") if len(text) > 300 else text, []
    return None, []


def _summarises(detail: str, first: str) -> bool:
    """Whether detail is the API's summary line of its errors ("<first error> (and 2 more)")."""
    short = re.sub(r"\s*\(and \d+ more\)$", "", detail).strip()
    return bool(short) and (short in first or first in short)


def error_message(status: int, method: str, path: str, body, url: str = "") -> str:
    detail, lines = messages_of(body)
    if status == 401 and path.rstrip("/") == "/api/auth/token":  # a login that failed, not an expired token
        return detail or "wrong user name or password"
    if status == 401:
        said = f" ({detail})" if detail else ""
        return f"not logged in, or the token is no longer valid{said}: run `pdcp login --url {url or 'URL'} --user NAME`"
    if status == 403:
        return f"permission denied: {detail or 'your role does not allow this'}"
    if status == 404:
        return f"not found: {method} {path}" + (f" ({detail})" if detail and detail != "Not found." else "")
    if status >= 500:
        return f"server error {status} on {method} {path}" + (f": {detail}" if detail else "")
    if not lines:
        return detail or f"the server answered {status} to {method} {path}"
    if detail and _summarises(detail, lines[0]):
        detail = None  # the one-line summary of the same errors: say them once
    if len(lines) == 1:
        return f"{detail.rstrip(':. ')}: {lines[0]}" if detail else lines[0]
    head = detail or f"the server refused {method} {path}: {len(lines)} problems"
    return head.rstrip(":. ") + ":\n" + "\n".join(f"  {line}" for line in lines)


class Client:
    def __init__(self, url: str, token: str | None = None, *, timeout: float = DEFAULT_TIMEOUT,
                 ca_bundle: str | None = None):
        self.url, self.token, self.timeout = url.rstrip("/"), token, timeout
        self._context = ssl.create_default_context(cafile=ca_bundle) if ca_bundle else None

    def request(self, method: str, path: str, *, params: dict | None = None, body=None,
                auth: bool = True, form: tuple[bytes, str] | None = None) -> Response:
        """body: sent as JSON; form: (an encoded body, its Content-Type), e.g. from multipart()."""
        query = {k: v for k, v in (params or {}).items() if v is not None}
        full = self.url + path + (("?" + urllib.parse.urlencode(query)) if query else "")
        headers = {"Accept": "application/json", "User-Agent": f"pdcp/{__version__}"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        elif form is not None:
            data, headers["Content-Type"] = form
        if auth and self.token:
            headers["Authorization"] = f"Token {self.token}"
        req = urllib.request.Request(full, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self._context) as response:
                return Response(response.status, _decode(response.read(), response.headers),
                                dict(response.headers.items()))
        except urllib.error.HTTPError as exc:
            try:
                raw = exc.read()
            except OSError:
                raw = b""
            raise ApiError(exc.code, method, path, _decode(raw, exc.headers), self.url) from None
        except urllib.error.URLError as exc:
            raise ConnectionFailed(self._connection_message(exc.reason)) from None
        except TimeoutError:
            raise ConnectionFailed(f"no answer from {self.url} within {self.timeout:g} s") from None
        except (http.client.HTTPException, ConnectionError, OSError) as exc:
            raise ConnectionFailed(f"the connection to {self.url} failed: {exc or type(exc).__name__}") from None

    def _connection_message(self, reason) -> str:
        if isinstance(reason, ConnectionRefusedError):
            return f"cannot connect to {self.url}: connection refused (is the control plane running there?)"
        if isinstance(reason, socket.gaierror):
            return f"cannot connect to {self.url}: unknown host"
        if isinstance(reason, TimeoutError):
            return f"no answer from {self.url} within {self.timeout:g} s"
        if isinstance(reason, ssl.SSLError):
            return f"TLS with {self.url} failed: {getattr(reason, 'reason', None) or reason}"
        return f"cannot connect to {self.url}: {getattr(reason, 'strerror', None) or reason}"

    def get(self, path: str, **params):
        return self.request("GET", path, params=params).body

    def post(self, path: str, body=None, **kwargs):
        return self.request("POST", path, body=body if body is not None else {}, **kwargs).body

    def post_file(self, path: str, fields: dict, name: str, data: bytes):
        """A multipart/form-data POST: the file as field "file" (the server takes it whatever its size, up to its
        own limit; a JSON body is capped near 2.5 MB) and the other fields as text."""
        return self.request("POST", path, form=multipart(fields, name, data)).body

    def get_all(self, path: str, *, page: int = 500, most: int | None = None, **params) -> list:
        """Every result of a paginated list (limit/offset pages), or of a plain list; at most `most`."""
        out, offset = [], 0
        while True:
            limit = page if most is None else min(page, most - len(out))
            body = self.get(path, **params, limit=limit, offset=offset or None)
            if isinstance(body, list):
                return body if most is None else body[:most]
            results = body.get("results", []) if isinstance(body, dict) else []
            out += results
            if not body.get("next") or not results or (most is not None and len(out) >= most):
                return out
            offset += len(results)


def multipart(fields: dict, file_name: str, data: bytes) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    quoted = file_name.replace("\\", "_").replace('"', "_").replace("\r", "_").replace("\n", "_")
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"\r\n\r\n{value}\r\n'.encode()
             for key, value in fields.items()]
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{quoted}"\r\n'
                 "Content-Type: application/octet-stream\r\n\r\n".encode() + data + b"\r\n")
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def _decode(raw: bytes, headers) -> object:
    text = raw.decode("utf-8", errors="replace")
    kind = (headers.get("Content-Type") or "") if headers else ""
    if "json" in kind or text[:1] in ("{", "["):
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text
