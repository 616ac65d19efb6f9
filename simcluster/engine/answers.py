"""The simulated model's answer book: which known question a prompt asks, and the answer text it gives.

A book (simcluster/answer_books/<name>.jsonl) maps questions to integer answers. A prompt that contains a
book question (whitespace normalised; the one ending last wins, so a few-shot prompt is answered for the
question it asks) gets "The final answer is \\boxed{N}.", optionally after a made-up <think> part. Which
questions are answered right is a pure function of the book and the accuracy knob (`expected_correct`), so
an accuracy run has a score known in advance. Prompts asking nothing from the book get textgen's plain
simulated text.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

BOOKS_DIR = Path(__file__).resolve().parent.parent / "answer_books"
BOOK_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_ANSWER_RE = re.compile(r"^(0|[1-9][0-9]{0,2})$")
_THOUGHTS = ("Restate the problem.", "Try a small case first.", "Set up the count carefully.",
             "Look for a pattern.", "Check the arithmetic once more.", "Compare with the constraints.")


class AnswerBookError(ValueError):
    pass


def book_names() -> list[str]:
    return sorted(p.stem for p in BOOKS_DIR.glob("*.jsonl") if BOOK_NAME_RE.match(p.stem))


def book_path(name: str) -> Path:
    """The file of a known book; a name is never read as a path."""
    known = book_names()
    if name not in known:
        raise AnswerBookError(f"no answer book named {name!r}; known books: {', '.join(known) or 'none'}")
    return BOOKS_DIR / f"{name}.jsonl"


def normalise(text: str) -> str:
    return " ".join(text.split())


def load_book(path: Path) -> list[dict[str, str]]:
    """Rows {"question", "answer"} in file order; AnswerBookError names the file and line of a bad one."""
    rows: list[dict[str, str]] = []
    seen: dict[str, int] = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = _row(line, f"{path}, line {number}")
            key = normalise(row["question"])
            if key in seen:
                raise AnswerBookError(f"{path}, line {number}: question repeats line {seen[key]}")
            seen[key] = number
            rows.append(row)
    return rows


def _row(line: str, where: str) -> dict[str, str]:
    try:
        data = json.loads(line)
    except ValueError as exc:
        raise AnswerBookError(f"{where}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise AnswerBookError(f"{where}: expected a JSON object {{\"question\": ..., \"answer\": ...}}")
    if set(data) != {"question", "answer"}:
        raise AnswerBookError(f"{where}: needs the fields question and answer, has {', '.join(sorted(data))}")
    question, answer = data["question"], data["answer"]
    if not isinstance(question, str) or not question.strip():
        raise AnswerBookError(f"{where}: question must be a non-empty string")
    if not isinstance(answer, str) or not _ANSWER_RE.match(answer):
        raise AnswerBookError(f"{where}: answer must be an integer 0-999 written as a string, got {answer!r}")
    return {"question": question, "answer": answer}


def expected_correct(book_rows: Iterable[Mapping[str, str]], accuracy: float) -> set[str]:
    """The questions answered right: the first round(accuracy * N) of the book's N questions ordered by
    sha256(question) (Python's round: halves go to the even number). The rule is over the engine's whole book;
    for a run on a subset, intersect the result with the subset."""
    if not 0.0 <= accuracy <= 1.0:
        raise ValueError(f"accuracy must be within 0..1, got {accuracy}")
    questions = sorted((r["question"] for r in book_rows), key=lambda q: hashlib.sha256(q.encode()).hexdigest())
    return set(questions[:round(accuracy * len(questions))])


def wrong_answer(answer: str) -> str:
    return str((int(answer) + 1) % 1000)


def answer_text(question: str, answer: str, *, think: bool) -> str:
    final = f"The final answer is \\boxed{{{answer}}}."
    if not think:
        return final
    digest = hashlib.sha256(question.encode()).digest()
    thoughts = [_THOUGHTS[b % len(_THOUGHTS)] for b in digest[:3]]
    return f"<think>\nSimulated reasoning. {' '.join(dict.fromkeys(thoughts))}\n</think>\n\n{final}"


def asked_text(body: Mapping, chat: bool) -> str:
    """What a request asks: the last user message of a chat, the prompt of a completion ("" if neither)."""
    if not chat:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        return prompt if isinstance(prompt, str) else ""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return ""
    for m in reversed(messages):
        if isinstance(m, dict) and m.get("role", "user") == "user":
            content = m.get("content", "")
            if isinstance(content, list):
                content = " ".join(c.get("text", "") for c in content if isinstance(c, dict))
            return content if isinstance(content, str) else ""
    return ""


class AnswerBook:
    def __init__(self, rows: list[dict[str, str]], accuracy: float = 1.0, think: bool = False):
        right = expected_correct(rows, accuracy)
        self.replies = {normalise(r["question"]): answer_text(
            r["question"], r["answer"] if r["question"] in right else wrong_answer(r["answer"]), think=think)
            for r in rows}

    @classmethod
    def named(cls, name: str, accuracy: float = 1.0, think: bool = False) -> AnswerBook:
        return cls(load_book(book_path(name)), accuracy, think)

    def reply(self, asked: str) -> str | None:
        """The answer text for a prompt containing a book question, None for any other prompt."""
        text = normalise(asked)
        best, found = (-1, -1), None
        for question, reply in self.replies.items():
            at = text.rfind(question)
            if at >= 0 and (at + len(question), len(question)) > best:
                best, found = (at + len(question), len(question)), reply
        return found
