"""The request as a script would send it to the proxy: curl and Python (urllib3), built from the validated body;
shell words go through shlex.quote, the Python body is a JSON literal parsed at run time."""

from __future__ import annotations

import json
import shlex


def curl_snippet(url: str, body: dict, request_id: str) -> str:
    words = ["curl", "-sS", "-i"] + (["-N"] if body.get("stream") else []) + [
        url, "-H", "Content-Type: application/json", "-H", f"X-Request-Id: {request_id}",
        "-d", json.dumps(body, ensure_ascii=False)]
    return " ".join(shlex.quote(w) for w in words)


def python_snippet(url: str, body: dict) -> str:
    text = json.dumps(body, indent=4, ensure_ascii=False)
    lines = ["import json", "", "import urllib3", "", f"body = json.loads({text!r})"]
    if body.get("stream"):
        lines += [f"resp = urllib3.request('POST', {url!r}, json=body, preload_content=False)",
                  "print(resp.status, resp.headers.get('X-PD-Prefill'), resp.headers.get('X-PD-Decode'))",
                  "for line in resp:  # one SSE line at a time",
                  "    if line.startswith(b'data: ') and line.strip() != b'data: [DONE]':",
                  "        print(json.loads(line[6:]))"]
    else:
        lines += [f"resp = urllib3.request('POST', {url!r}, json=body)",
                  "print(resp.status, resp.headers.get('X-PD-Prefill'), resp.headers.get('X-PD-Decode'))",
                  "print(resp.json())"]
    return "\n".join(lines) + "\n"
