"""A request's prompt as the engine's token ids (`--tokenizer DIR`), for cache_aware's exact view.

As vLLM does it (docs/kv-events.md): a completion's prompt string is encoded with the model's tokenizer.json,
special tokens added (`add_special_tokens`, default true); a prompt of token ids is taken as it is; a chat is
rendered with the chat template (`chat_template.jinja`, else tokenizer_config.json's `chat_template`) the way
transformers' apply_chat_template renders it (a sandboxed jinja2 environment with trim_blocks and lstrip_blocks,
`raise_exception`, `strftime_now`, `tojson`; variables messages, tools, add_generation_prompt (default true),
the special tokens, the request's chat_template_kwargs) and encoded without special tokens (vLLM's chat default).
Anything else, or a template that fails, gives None: the approximate view decides that request.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from pathlib import Path

log = logging.getLogger("pdproxy")
MAX_PROMPT_CHARS = 1 << 17  # what is tokenized of a prompt (cache_aware.py looks at as much)
SPECIAL = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")


class TokenizerError(ValueError):
    pass


def _template_env():
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        """transformers' {% generation %} block (it marks assistant text); rendered as its body."""
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


class PromptTokens:
    def __init__(self, directory: str):
        from tokenizers import Tokenizer

        path = Path(directory)
        try:
            self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        except Exception as exc:  # tokenizers raises its own Exception for a bad file
            raise TokenizerError(f"tokenizer: cannot load {path / 'tokenizer.json'}: {exc}") from None
        config = {}
        if (path / "tokenizer_config.json").exists():
            config = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8"))
        template = config.get("chat_template")
        if (path / "chat_template.jinja").exists():
            template = (path / "chat_template.jinja").read_text(encoding="utf-8")
        elif isinstance(template, list):  # named templates: the default one
            template = next((t.get("template") for t in template if t.get("name") == "default"), None)
        self.specials = {}
        for name in SPECIAL:
            value = config.get(name)
            if isinstance(value, dict):
                value = value.get("content")
            if isinstance(value, str):
                self.specials[name] = value
        self.template = _template_env().from_string(template) if template else None
        self._encode = self.tokenizer.encode_batch_fast  # ids only: no offsets kept

    def encode(self, text: str, special: bool) -> list[int]:
        return self._encode([text[:MAX_PROMPT_CHARS]], add_special_tokens=special)[0].ids

    def __call__(self, body: dict) -> list[int] | None:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if isinstance(prompt, str):
            return self.encode(prompt, body.get("add_special_tokens", True) is not False)
        if isinstance(prompt, list):
            return prompt if prompt and all(type(t) is int for t in prompt) else None
        messages = body.get("messages")
        if not isinstance(messages, list) or self.template is None:
            return None
        extra = body.get("chat_template_kwargs")
        try:
            text = self.template.render(
                **self.specials, **(extra if isinstance(extra, dict) else {}), messages=messages,
                tools=body.get("tools"), add_generation_prompt=body.get("add_generation_prompt", True) is not False,
                continue_final_message=bool(body.get("continue_final_message")))
        except Exception as exc:  # a template's own raise_exception, or one that does not fit the request
            log.debug("chat template failed (%s): routing by the approximate view", exc)
            return None
        return self.encode(text, body.get("add_special_tokens") is True)
