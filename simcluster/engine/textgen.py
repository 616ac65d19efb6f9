"""Simulated tokenizer, prefix block hashes, KV block bytes, plainly simulated output text, answer pieces.

Everything is a pure function of its input, so a Prefill and a Decode that see the same prompt
agree on token counts, block hashes and the exact KV bytes that must cross the wire.
"""

from __future__ import annotations

import hashlib
import re
import zlib

VOCAB = 151_000
WORDS = ("sim", "token", "alpha", "beta", "gamma", "delta", "kv", "block", "prefill", "decode",
         "ascend", "npu", "die", "cache", "stream", "batch")
_TOKEN_RE = re.compile(r"\w+|[^\w\s]")


def token_texts(text: str) -> list[str]:
    """The text of each token: words and single punctuation marks (simcluster/tokenizer_dir.py counts alike)."""
    return _TOKEN_RE.findall(text)


def tokenize(prompt) -> list[int]:
    """Words and punctuation -> ids; a list of ints is taken as token ids already."""
    if isinstance(prompt, list):
        if all(isinstance(t, int) for t in prompt):
            return list(prompt)
        prompt = " ".join(str(p) for p in prompt)
    return [zlib.crc32(w.encode()) % VOCAB for w in token_texts(str(prompt))] or [0]


def pieces(text: str) -> list[str]:
    """`text` cut into one piece per token of tokenize(text): each token with the whitespace before it, the last
    one also with the whitespace after it, so the pieces concatenate back to `text`."""
    ends = [m.end() for m in _TOKEN_RE.finditer(text)]
    if not ends:
        return [text]
    ends[-1] = len(text)
    return [text[start:end] for start, end in zip([0, *ends[:-1]], ends, strict=True)]


def scripted_tokens(text: str) -> list[tuple[int, str]]:
    """(token id, piece) for emitting `text` one simulated token at a time."""
    return list(zip(tokenize(text), pieces(text), strict=True))


def chat_prompt(messages: list[dict]) -> str:
    # A template-like wrapper so chat requests cost a few tokens more than their text, as in vLLM.
    parts = []
    for m in messages:
        content = m.get("content", "")
        if isinstance(content, list):
            content = " ".join(c.get("text", "") for c in content if isinstance(c, dict))
        parts.append(f"<|{m.get('role', 'user')}|> {content}")
    return " ".join(parts) + " <|assistant|>"


def block_hashes(model: str, tokens: list[int], block_size: int, seed: str = "") -> list[str]:
    """Chained hashes of full blocks, like vLLM's prefix-cache block hashes. `seed` plays vLLM's NONE_HASH (the
    parent of the first block): hash(PYTHONHASHSEED) when that is set, random per process otherwise, so two
    processes agree on a prompt's block hashes only when both run with the same PYTHONHASHSEED."""
    hashes, parent = [], model.encode() + (b"\0" + seed.encode() if seed else b"")
    for start in range(0, len(tokens) - block_size + 1, block_size):
        chunk = ",".join(map(str, tokens[start:start + block_size])).encode()
        parent = hashlib.sha256(parent + chunk).digest()
        hashes.append(parent.hex()[:32])
    return hashes


def block_bytes(seed: str, size: int) -> bytes:
    return hashlib.shake_256(seed.encode()).digest(size)


def natural_length(prompt_tokens: list[int]) -> int:
    """Where the simulated answer stops by itself (finish_reason "stop") if max_tokens allows."""
    return 16 + zlib.crc32(bytes(str(prompt_tokens[:64]), "ascii")) % 48


def output_token(prompt_tokens: list[int], index: int) -> tuple[int, str]:
    if index == 0:
        return 0, "[simulated]"
    h = zlib.crc32(f"{prompt_tokens[:32]}:{index}".encode())
    return h % VOCAB, " " + WORDS[h % len(WORDS)]
