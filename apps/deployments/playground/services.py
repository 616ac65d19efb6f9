"""The playground's writes: start a request (validated, aimed at the running proxy), stream or collect its events,
and audit it (who, deployment, kind, token counts, status, P and D, request id; never the text)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator

from asgiref.sync import async_to_sync, sync_to_async

from apps.audit.models import AuditAction
from apps.audit.services import audit_record

from ..models import Deployment
from .exchange import PlaygroundExchange, PlaygroundResult
from .request import parse_playground_request
from .target import PlaygroundRefused, proxy_target


def new_request_id() -> str:
    return f"playground-{uuid.uuid4().hex}"


def playground_start(*, deployment: Deployment, user, data) -> PlaygroundExchange:
    """The exchange to run. PlaygroundInvalid for bad input (not audited: nothing was sent); PlaygroundRefused when
    the deployment cannot take it (audited as refused)."""
    preq = parse_playground_request(data)
    try:
        target = proxy_target(deployment)
    except PlaygroundRefused as exc:
        refused = PlaygroundResult(request_id=new_request_id(), kind=preq.kind, status="refused", message=str(exc))
        playground_audit(refused, deployment=deployment, user=user)
        raise
    return PlaygroundExchange(target, preq, new_request_id())


def playground_audit(result: PlaygroundResult, *, deployment: Deployment, user):
    def name(served: dict | None) -> str | None:
        return (served.get("key") or served.get("address")) if served else None

    status = result.status if result.status != "pending" else "cancelled"  # the client left before the end
    values = {"kind": result.kind, "status": status, "request_id": result.request_id,
              "prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
              "prefill": name(result.prefill), "decode": name(result.decode),
              "ttft_ms": result.figures.get("ttft_ms")}
    return audit_record(action=AuditAction.PLAYGROUND, instance=deployment, user=user,
                        changes={k: [None, v] for k, v in values.items()})


def sse_event(name: str, data: dict) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


async def playground_sse(exchange: PlaygroundExchange, *, deployment: Deployment, user) -> AsyncIterator[bytes]:
    """The exchange's events as server-sent events; audited when it ends, however it ends."""
    try:
        async for name, data in exchange.events():
            yield sse_event(name, data)
    finally:
        await sync_to_async(playground_audit)(exchange.result, deployment=deployment, user=user)


async def _collect(exchange: PlaygroundExchange) -> dict:
    answer: dict = {"meta": None, "done": None, "error": None}
    async for name, data in exchange.events():
        if name == "delta":
            continue
        answer[name] = data
    return answer


def playground_run(exchange: PlaygroundExchange, *, deployment: Deployment, user) -> dict:
    """The whole exchange at once (the API): answer text, figures, the P and D, or the error; audited."""
    try:
        events = async_to_sync(_collect)(exchange)
    finally:
        playground_audit(exchange.result, deployment=deployment, user=user)
    r = exchange.result
    meta, end = events["meta"] or {}, events["done"] or events["error"] or {}
    return {"request_id": r.request_id, "deployment": deployment.name, "kind": r.kind, "status": r.status,
            "http_status": r.http_status, "message": r.message, "text": "".join(r.text),
            "prefill": r.prefill, "decode": r.decode, "retries": r.retries,
            "stats": {"ttft_ms": r.figures.get("ttft_ms"), "itl_p50_ms": r.figures.get("itl_p50_ms"),
                      "itl_mean_ms": r.figures.get("itl_mean_ms"), "total_ms": r.figures.get("total_ms"),
                      "chunks": r.figures.get("chunks"), "tokens_in": r.prompt_tokens,
                      "tokens_out": r.completion_tokens, "finish_reason": r.finish_reason},
            "request": meta.get("request") or exchange.request_view(), "raw_response": end.get("raw_response", "")}
