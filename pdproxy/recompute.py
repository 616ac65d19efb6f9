"""vllm-ascend's recompute path: a Decode that dropped the KV ends with stop_reason "recomputed"; the proxy
re-runs Prefill on prompt + text so far and continues the answer from a new Decode."""

from __future__ import annotations

import copy
import json
import logging

from .errors import Answer, sse_error_event

log = logging.getLogger("pdproxy.recompute")


def _events(data: bytes):
    for raw in data.split(b"\n\n"):
        line = raw.strip()
        if line.startswith(b"data:"):
            payload = line[5:].strip()
            if payload and payload != b"[DONE]":
                try:
                    yield raw, json.loads(payload)
                except ValueError:
                    yield raw, None
                continue
        if line:
            yield raw, None


def _choice_text(event) -> str:
    if not isinstance(event, dict):
        return ""
    choices = event.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return ""
    c = choices[0]
    delta = c.get("delta") or {}
    message = c.get("message") or {}
    return (isinstance(delta, dict) and delta.get("content")) or (isinstance(message, dict) and
                                                                   message.get("content")) or c.get("text") or ""


def _is_recomputed(event) -> bool:
    if not isinstance(event, dict):
        return False
    choices = event.get("choices") or []
    return bool(choices) and isinstance(choices[0], dict) and choices[0].get("stop_reason") == "recomputed"


def continuation_body(body: dict, text_so_far: str, tokens_so_far: int) -> dict | None:
    """The original request, asked to continue after text_so_far. None when its prompt cannot be extended."""
    nb = copy.deepcopy(body)
    if "messages" in nb:
        msgs = nb["messages"]
        if not isinstance(msgs, list):
            return None
        if nb.get("continue_final_message") and msgs and msgs[-1].get("role") == "assistant":
            msgs[-1] = dict(msgs[-1], content=(msgs[-1].get("content") or "") + text_so_far)
        else:
            msgs.append({"role": "assistant", "content": text_so_far})
        nb["continue_final_message"] = True
        nb["add_generation_prompt"] = False
    else:
        prompt = nb.get("prompt")
        if isinstance(prompt, str):
            nb["prompt"] = prompt + text_so_far
        elif isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            nb["prompt"] = [prompt[0] + text_so_far]
        else:
            return None
    for key in ("max_tokens", "max_completion_tokens"):
        if isinstance(nb.get(key), int):
            nb[key] = nb[key] - tokens_so_far
            if nb[key] <= 0:
                return None
    return nb


class Recompute:
    """Continues an answer a Decode ended with stop_reason "recomputed", through the exchange's PD legs
    (Exchange.through_pd), at most --max-recomputes times."""

    def __init__(self, flow):
        self.flow = flow

    @staticmethod
    def split_at_recomputed(data: bytes) -> tuple[bytes, dict]:
        """Events before the recomputed one (as bytes) and the recomputed event itself (parsed)."""
        before = []
        for raw, event in _events(data):
            if _is_recomputed(event):
                text = _choice_text(event)
                if text:  # keep its text, but not its end-of-answer marks
                    c = event["choices"][0]
                    c["finish_reason"] = None
                    c["stop_reason"] = None
                    before.append(b"data: " + json.dumps(event).encode())
                return (b"\n\n".join(before) + b"\n\n" if before else b""), event
            before.append(raw)
        return data, {}

    async def stream(self, ex, body: dict, kept: list[bytes], event: dict, depth: int):
        flow = self.flow
        flow.metrics.recompute()
        text, tokens = "", 0
        for _raw, ev in _events(b"".join(kept)):
            t = _choice_text(ev)
            if t:
                text += t
                tokens += 1
        nb = continuation_body(body, text, tokens)
        if nb is None or depth >= flow.cfg.max_recomputes:
            log.warning("request %s: recomputed, but cannot continue (depth %d)", ex.rid, depth)
            ex.conn.send_chunk(sse_error_event(502, "decode dropped the request (recomputed) and it cannot "
                                               "be continued", "BadGatewayError"))
            return
        try:
            more = await ex.through_pd(nb, f"{ex.rid}-c{depth + 1}", ex.pipe)
        except Answer as ans:
            flow.metrics.error(ans.cause)
            ex.conn.send_chunk(sse_error_event(ans.status, ans.message or "continuation failed",
                                               ans.err_type or "BadGatewayError"))
            return
        if more is not None and more.recomputed is not None:  # recomputed again
            await self.stream(ex, nb, more.kept, more.recomputed, depth + 1)

    async def whole(self, ex, raw: bytes, body: dict | None = None, depth: int = 0) -> bytes:
        try:
            answer = json.loads(raw)
        except ValueError:
            return raw
        if not _is_recomputed(answer):
            return raw
        flow = self.flow
        flow.metrics.recompute()
        text = _choice_text(answer)
        usage = answer.get("usage") or {}
        tokens = usage.get("completion_tokens") or 0
        nb = continuation_body(body if body is not None else ex.body, text, tokens)
        if nb is None or depth >= flow.cfg.max_recomputes:
            return raw
        try:
            more_raw = await ex.through_pd(nb, f"{ex.rid}-c{depth + 1}", ex.read_rest)
            more = json.loads(await self.whole(ex, more_raw, nb, depth + 1))
            more["choices"][0]
        except Exception as exc:  # keep what we have rather than lose it
            log.warning("request %s: continuation after recompute failed: %s", ex.rid, exc)
            return raw
        c, mc = answer["choices"][0], more["choices"][0]
        if "message" in c and isinstance(c["message"], dict):
            c["message"]["content"] = text + (_choice_text(more) or "")
        else:
            c["text"] = text + (_choice_text(more) or "")
        c["finish_reason"] = mc.get("finish_reason")
        c["stop_reason"] = mc.get("stop_reason")
        mu = more.get("usage") or {}
        if isinstance(usage, dict) and usage:
            usage["completion_tokens"] = tokens + (mu.get("completion_tokens") or 0)
            usage["total_tokens"] = (usage.get("prompt_tokens") or 0) + usage["completion_tokens"]
        return json.dumps(answer).encode()
