"""OpenAI-style error bodies, shaped the way vLLM answers them, and Answer: an error the client gets now."""

from __future__ import annotations

import json
from http import HTTPStatus


def error_body(status: int, message: str, err_type: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": err_type, "param": None, "code": status}}).encode()


def sse_error_event(status: int, message: str, err_type: str) -> bytes:
    """What vLLM itself emits when a stream fails after it started: an error event, then [DONE]."""
    return b"data: " + error_body(status, message, err_type) + b"\n\ndata: [DONE]\n\n"


def gateway_failure(kind: str) -> tuple[int, str]:
    """(status, OpenAI error type) of a backend failure of `kind` (BackendError's kinds, or 5xx): a timeout is a
    gateway timeout, anything else a bad gateway."""
    return (504, "GatewayTimeoutError") if kind == "timeout" else (502, "BadGatewayError")


def status_error_type(status: int) -> str:
    """The OpenAI error type vLLM gives a status: 400 BadRequestError, 404 NotFoundError, ..."""
    try:
        return HTTPStatus(status).phrase.replace(" ", "").replace("-", "") + "Error"
    except ValueError:
        return "APIError"


class Answer(Exception):
    """Answer the client with this error now (nothing has been sent yet). `body`: a backend's own error answer,
    passed through as it is; otherwise an OpenAI-style body is made of status, message and err_type. `cause`
    is the pdproxy_errors_total label."""

    def __init__(self, status: int, message: str, err_type: str, cause: str, body: bytes | None = None,
                 content_type: bytes = b"application/json"):
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.cause = cause
        self.body = body
        self.content_type = content_type
