"""A HuggingFace tokenizer directory for the simulated model, built offline: `python -m simcluster.tokenizer_dir DEST`.

Clients that count tokens themselves (AISBench) need a tokenizer; this one counts exactly as the engine does
(simcluster/engine/textgen.py: one token per match of `\\w+|[^\\w\\s]`), so their numbers agree with the engine's
usage. A WordLevel model (every piece is one token, [UNK] if not in the vocab) after a pre-tokenizer that keeps
only the regex matches. The regex engine of `tokenizers` (Oniguruma) reads \\w and \\s differently from Python's
re at the edges (combining marks, superscripts, U+001C-U+001F), so the classes are spelled out as the code point
ranges Python's re gives them, computed by the interpreter that builds the directory. Its chat template renders
textgen.chat_prompt's text. Needs `tokenizers` and `transformers` (the AISBench venv has both); imports neither
until build() runs.
"""

from __future__ import annotations

import json
import re
import string
import sys
from pathlib import Path

from simcluster.engine import answers, textgen

UNK = "[UNK]"
_SURROGATES = range(0xD800, 0xE000)  # never in a str decoded from UTF-8
CHAT_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m['content'] is string -%}{%- set text = m['content'] -%}"
    "{%- else -%}{%- set text = m['content'] | map(attribute='text') | join(' ') -%}{%- endif -%}"
    "{{ '<|' + m['role'] + '|> ' + text + ' ' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|assistant|>{%- endif -%}"
)


def _ranges(pattern: str) -> list[tuple[int, int]]:
    """The code points a one-character Python regex matches, as inclusive ranges."""
    match = re.compile(pattern).match
    out: list[tuple[int, int]] = []
    start = None
    for cp in range(0x110000):
        hit = cp not in _SURROGATES and match(chr(cp)) is not None
        if hit and start is None:
            start = cp
        elif not hit and start is not None:
            out.append((start, cp - 1))
            start = None
    if start is not None:
        out.append((start, 0x10FFFF))
    return out


def _class_body(ranges: list[tuple[int, int]]) -> str:
    return "".join(f"\\x{{{a:X}}}" if a == b else f"\\x{{{a:X}}}-\\x{{{b:X}}}" for a, b in ranges)


def token_pattern() -> str:
    """textgen's `\\w+|[^\\w\\s]` with Python's \\w and \\s spelled out for Oniguruma."""
    word, space = _class_body(_ranges(r"\w")), _class_body(_ranges(r"\s"))
    return f"[{word}]+|[^{word}{space}]"


def vocabulary() -> list[str]:
    """Words the simulated model reads and writes; anything else is [UNK], still one token."""
    words = set(textgen.WORDS) | set(string.punctuation) | {str(n) for n in range(1000)}
    words |= set(textgen.token_texts(textgen.chat_prompt([{"role": r, "content": ""} for r in
                                                            ("system", "user", "assistant")])))
    for name in answers.book_names():
        for row in answers.load_book(answers.book_path(name)):
            for think in (False, True):
                text = row["question"] + " " + answers.answer_text(row["question"], row["answer"], think=think)
                words |= set(textgen.token_texts(text))
    return [UNK, *sorted(words - {UNK})]


def token_ids() -> dict[str, int]:
    """Each known word's id is the engine's own (textgen.tokenize), so a router tokenizing with this directory
    cuts a prompt into the blocks the engine's KV cache events name (docs/kv-events.md); [UNK] is textgen.VOCAB,
    an id the engine never gives. Of words whose engine ids collide, the first in sorted order keeps the id (a
    vocabulary holds an id once) and the others read as [UNK]."""
    ids: dict[str, int] = {UNK: textgen.VOCAB}
    taken = set()
    for word in vocabulary()[1:]:
        tid = textgen.tokenize(word)[0]
        if tid not in taken:
            taken.add(tid)
            ids[word] = tid
    return ids


def build(dest: Path) -> Path:
    """Written with transformers when it is there (AISBench's venv); else tokenizer.json and tokenizer_config.json
    with `tokenizers` alone, which is what pdproxy's --tokenizer reads."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel(vocab=token_ids(), unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(token_pattern()), behavior="removed", invert=True)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    try:
        from transformers import PreTrainedTokenizerFast
    except ImportError:
        tok.save(str(dest / "tokenizer.json"))
        (dest / "tokenizer_config.json").write_text(json.dumps({
            "tokenizer_class": "PreTrainedTokenizerFast", "unk_token": UNK, "chat_template": CHAT_TEMPLATE,
            "model_max_length": 1 << 20}, indent=1))
        return dest
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=UNK, chat_template=CHAT_TEMPLATE)
    fast.save_pretrained(str(dest))
    return dest


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m simcluster.tokenizer_dir DEST", file=sys.stderr)
        return 2
    print(build(Path(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
