"""OpenAI-style error bodies, shaped the way vLLM answers them."""

from __future__ import annotations

import json


def error_body(status: int, message: str, err_type: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": err_type, "param": None, "code": status}}).encode()


def sse_error_event(status: int, message: str, err_type: str) -> bytes:
    """What vLLM itself emits when a stream fails after it started: an error event, then [DONE]."""
    return b"data: " + error_body(status, message, err_type) + b"\n\ndata: [DONE]\n\n"
