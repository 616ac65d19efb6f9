"""What each PD leg sends: the Prefill's body (one token, KV kept for a remote Decode) and the Decode's (the
client's request plus the Prefill's kv_transfer_params), and the prompt text a prefix hash key is cut from."""

from __future__ import annotations

from .jsonfast import dumps

PREFILL_KV = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
              "remote_block_ids": None, "remote_host": None, "remote_port": None}


def prefill_body(body: dict, fast: bool = False, kv: dict = PREFILL_KV) -> bytes:
    """`fast`: body came from orjson (see jsonfast.dumps). `kv`: the pull flow's PREFILL_KV, or in the layerwise
    flow the Decode's own kv_transfer_params (layerwise.py)."""
    pb = dict(body)
    pb["kv_transfer_params"] = kv
    pb["stream"] = False
    pb["max_tokens"] = 1
    pb["min_tokens"] = 1
    if "max_completion_tokens" in pb:
        pb["max_completion_tokens"] = 1
    pb.pop("stream_options", None)
    return dumps(pb, fast)


_WS = b" \t\r\n"


def decode_body(raw: bytes | None, body: dict, kv: dict, fast: bool = False) -> bytes:
    """The Decode leg's body: the request plus kv_transfer_params.

    When `raw` (the client's bytes, which parsed to `body`) is a plain JSON object without that key, the key
    is appended before its closing brace: no second serialisation of a body that can hold a long prompt, and
    the client's bytes reach Decode untouched. Otherwise (the client sent kv_transfer_params itself, or the
    bytes are not UTF-8 framed by braces) the parsed body is re-serialised with the key replaced."""
    if raw is not None and "kv_transfer_params" not in body:
        end = len(raw) - 1
        while end > 0 and raw[end] in _WS:
            end -= 1
        start = 0
        while start < end and raw[start] in _WS:
            start += 1
        if raw[start:start + 1] == b"{" and raw[end:end + 1] == b"}":
            sep = b', "kv_transfer_params": ' if body else b'"kv_transfer_params": '
            return b"%b%b%b}" % (raw[:end], sep, dumps(kv, fast))
    dbody = dict(body)
    dbody["kv_transfer_params"] = kv
    return dumps(dbody, fast)


def prompt_text(body: dict) -> str:
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        return prompt[0]
    parts = []
    for m in body.get("messages") or ():
        if isinstance(m, dict):
            c = m.get("content")
            if isinstance(c, str):
                parts.append(c)
            elif isinstance(c, list):
                parts.extend(p.get("text", "") for p in c if isinstance(p, dict))
    return "\n".join(parts)


def snippet(body: bytes, n: int = 200) -> str:
    """The start of a backend's answer, for an error message."""
    text = body[:n].decode("utf-8", "replace")
    return text + ("..." if len(body) > n else "")
