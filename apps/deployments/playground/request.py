"""What an operator may send from the playground, checked field by field before anything reaches the proxy."""

from __future__ import annotations

import math
from dataclasses import dataclass

KINDS = ("chat", "completion")
ROLES = ("system", "user", "assistant")
MAX_TOKENS_RANGE = (1, 4096)
TEMPERATURE_RANGE = (0.0, 2.0)
MAX_MESSAGES = 100
MAX_TEXT_CHARS = 100_000  # all messages (or the prompt) together
DEFAULT_MAX_TOKENS = 128


class PlaygroundInvalid(ValueError):
    """The request does not validate; `errors` are [{"field", "message"}] in the API's error shape."""

    def __init__(self, errors: list[dict]):
        super().__init__("; ".join(f"{e['field']}: {e['message']}" for e in errors))
        self.errors = errors


@dataclass(frozen=True)
class PlaygroundRequest:
    kind: str  # chat | completion
    messages: tuple[dict, ...]  # chat: ({"role", "content"}, ...)
    prompt: str  # completion
    max_tokens: int
    temperature: float
    stream: bool

    @property
    def endpoint(self) -> str:
        return "/v1/chat/completions" if self.kind == "chat" else "/v1/completions"

    def proxy_body(self, model: str) -> dict:
        """The OpenAI-style body sent to the proxy (and shown in the page's raw request and snippets)."""
        body: dict = {"model": model}
        if self.kind == "chat":
            body["messages"] = [dict(m) for m in self.messages]
        else:
            body["prompt"] = self.prompt
        body.update(max_tokens=self.max_tokens, temperature=self.temperature, stream=self.stream)
        if self.stream:
            body["stream_options"] = {"include_usage": True}
        return body


def _int_in(value, field: str, lo: int, hi: int, errors: list[dict]) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        else:
            errors.append({"field": field, "message": f"must be a whole number from {lo} to {hi}"})
            return lo
    if not lo <= value <= hi:
        errors.append({"field": field, "message": f"must be from {lo} to {hi} (got {value})"})
    return value


def _float_in(value, field: str, lo: float, hi: float, errors: list[dict]) -> float:
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if not lo <= number <= hi:  # also false for NaN
        errors.append({"field": field, "message": f"must be a number from {lo:g} to {hi:g}"})
        return lo
    return number


def _messages(value, errors: list[dict]) -> tuple[dict, ...]:
    if not isinstance(value, list) or not value:
        errors.append({"field": "messages", "message": "a chat needs at least one message"})
        return ()
    if len(value) > MAX_MESSAGES:
        errors.append({"field": "messages", "message": f"at most {MAX_MESSAGES} messages"})
        return ()
    out, chars = [], 0
    for i, m in enumerate(value):
        if not isinstance(m, dict):
            errors.append({"field": f"messages[{i}]", "message": "must be an object with role and content"})
            continue
        role, content = m.get("role"), m.get("content")
        if role not in ROLES:
            errors.append({"field": f"messages[{i}].role", "message": f"must be one of {', '.join(ROLES)}"})
        if not isinstance(content, str) or not content.strip():
            errors.append({"field": f"messages[{i}].content", "message": "must be non-empty text"})
            continue
        chars += len(content)
        out.append({"role": role, "content": content})
    if chars > MAX_TEXT_CHARS:
        errors.append({"field": "messages", "message": f"at most {MAX_TEXT_CHARS} characters in all"})
    if out and out[-1]["role"] == "assistant":
        errors.append({"field": f"messages[{len(value) - 1}].role", "message": "the last message must not be "
                                                                                "the assistant's"})
    return tuple(out)


def parse_playground_request(data) -> PlaygroundRequest:
    """A PlaygroundRequest from the posted JSON object, or PlaygroundInvalid naming every field that is wrong."""
    if not isinstance(data, dict):
        raise PlaygroundInvalid([{"field": None, "message": "the body must be a JSON object"}])
    errors: list[dict] = []
    kind = data.get("kind", "chat")
    if kind not in KINDS:
        errors.append({"field": "kind", "message": f"must be one of {', '.join(KINDS)} (got {kind!r})"[:200]})
    messages: tuple[dict, ...] = ()
    prompt = ""
    if kind == "chat":
        messages = _messages(data.get("messages"), errors)
    elif kind == "completion":
        prompt = data.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            errors.append({"field": "prompt", "message": "a completion needs a non-empty prompt"})
            prompt = ""
        elif len(prompt) > MAX_TEXT_CHARS:
            errors.append({"field": "prompt", "message": f"at most {MAX_TEXT_CHARS} characters"})
    max_tokens = _int_in(data.get("max_tokens", DEFAULT_MAX_TOKENS), "max_tokens", *MAX_TOKENS_RANGE, errors)
    temperature = _float_in(data.get("temperature", 0.0), "temperature", *TEMPERATURE_RANGE, errors)
    stream = data.get("stream", True)
    if not isinstance(stream, bool):
        errors.append({"field": "stream", "message": "must be true or false"})
    if errors:
        raise PlaygroundInvalid(errors)
    return PlaygroundRequest(kind=kind, messages=messages, prompt=prompt, max_tokens=max_tokens,
                             temperature=temperature, stream=stream)
