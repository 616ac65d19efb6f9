"""The simulated model's answer book: loading, which question a prompt asks, the deterministic correctness rule."""

import hashlib
import json
import re

import pytest

from simcluster.engine import answers, textgen

BOOK = answers.load_book(answers.book_path("made-up-aime"))
AISBENCH_SUFFIX = "\nRemember to put your final answer within \\boxed{}."


def boxed(text):
    return re.findall(r"\\boxed\{(\d+)\}", text)


def test_made_up_aime_is_a_valid_book_of_aime_shaped_rows():
    assert "made-up-aime" in answers.book_names()
    assert 15 <= len(BOOK) <= 30
    for row in BOOK:
        assert set(row) == {"question", "answer"}
        assert 0 <= int(row["answer"]) <= 999 and str(int(row["answer"])) == row["answer"]
        assert len(textgen.tokenize(row["question"])) < 80


def test_book_names_never_resolve_to_paths():
    for name in ("../answer_books/made-up-aime", "/etc/passwd", "made-up-aime.jsonl", "", "nope"):
        with pytest.raises(answers.AnswerBookError, match="known books: .*made-up-aime"):
            answers.book_path(name)


@pytest.mark.parametrize(("content", "message"), [
    ('{"question": "Q?", "answer": "7"}\nnot json\n', "line 2: not JSON"),
    ('{"question": "Q?"}\n', "line 1: needs the fields question and answer"),
    ('{"question": "Q?", "answer": 7}\n', "line 1: answer must be an integer 0-999 written as a string"),
    ('{"question": "Q?", "answer": "1000"}\n', "line 1: answer must be an integer 0-999"),
    ('{"question": "Q?", "answer": "07"}\n', "line 1: answer must be an integer 0-999"),
    ('{"question": "  ", "answer": "7"}\n', "line 1: question must be a non-empty string"),
    ('["Q?", "7"]\n', "line 1: expected a JSON object"),
    ('{"question": "Q?", "answer": "7"}\n\n{"question": "Q?  ", "answer": "8"}\n', "line 3: question repeats line 1"),
])
def test_a_bad_line_names_the_file_and_the_line(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(answers.AnswerBookError) as err:
        answers.load_book(path)
    assert str(err.value).startswith(f"{path}, ") and message in str(err.value)


def test_expected_correct_takes_the_first_round_a_n_questions_by_sha256():
    by_hash = sorted((r["question"] for r in BOOK), key=lambda q: hashlib.sha256(q.encode()).hexdigest())
    for accuracy in (0.0, 0.3, 0.6, 0.7, 1.0):
        assert answers.expected_correct(BOOK, accuracy) == set(by_hash[:round(accuracy * len(BOOK))])
    assert answers.expected_correct(BOOK, 1.0) == {r["question"] for r in BOOK}
    assert answers.expected_correct(BOOK, 0.0) == set()
    assert answers.expected_correct(BOOK, 0.7) <= answers.expected_correct(BOOK, 0.8)  # monotone in a
    with pytest.raises(ValueError):
        answers.expected_correct(BOOK, 1.5)


@pytest.mark.parametrize("accuracy", [0.0, 0.6, 1.0])
def test_each_book_question_is_answered_right_or_wrong_by_the_rule(accuracy):
    book = answers.AnswerBook(BOOK, accuracy=accuracy, think=False)
    right = answers.expected_correct(BOOK, accuracy)
    for row in BOOK:
        text = book.reply(row["question"] + AISBENCH_SUFFIX)
        expected = row["answer"] if row["question"] in right else str((int(row["answer"]) + 1) % 1000)
        assert text == f"The final answer is \\boxed{{{expected}}}."


def test_think_adds_made_up_reasoning_before_the_answer():
    row = BOOK[0]
    text = answers.AnswerBook(BOOK, accuracy=1.0, think=True).reply(row["question"])
    think, answer = text.split("</think>")
    assert think.startswith("<think>") and len(think.split()) >= 4 and "boxed" not in think
    assert answer.strip() == f"The final answer is \\boxed{{{row['answer']}}}."
    assert boxed(text) == [row["answer"]]


def test_matching_ignores_whitespace_and_finds_the_question_inside_the_prompt():
    book = answers.AnswerBook(BOOK)
    row = BOOK[9]
    spaced = "  ".join(row["question"].split(" ")).replace(" ", "\n", 3)
    assert boxed(book.reply(f"Problem:\n{spaced}{AISBENCH_SUFFIX}")) == [row["answer"]]
    assert book.reply("What is the capital of France?") is None
    assert book.reply(row["question"][:-5]) is None


def test_a_few_shot_prompt_is_answered_for_the_question_asked_last():
    book = answers.AnswerBook(BOOK)
    shots = f"{BOOK[1]['question']} \\boxed{{{BOOK[1]['answer']}}}\n\n{BOOK[4]['question']}{AISBENCH_SUFFIX}"
    assert boxed(book.reply(shots)) == [BOOK[4]["answer"]]


def test_asked_text_is_the_last_user_message_or_the_prompt():
    chat = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "first"},
                         {"role": "assistant", "content": "ok"},
                         {"role": "user", "content": [{"type": "text", "text": "second"}, {"type": "text", "text": "part"}]}]}
    assert answers.asked_text(chat, chat=True) == "second part"
    assert answers.asked_text({"prompt": "p q"}, chat=False) == "p q"
    assert answers.asked_text({"prompt": ["only one"]}, chat=False) == "only one"
    assert answers.asked_text({"prompt": [1, 2, 3]}, chat=False) == ""
    assert answers.asked_text({"messages": "junk"}, chat=True) == ""


def test_the_answer_is_split_into_one_piece_per_simulated_token():
    for think in (False, True):
        text = answers.AnswerBook(BOOK, think=think).reply(BOOK[3]["question"])
        script = textgen.scripted_tokens(text)
        assert "".join(piece for _id, piece in script) == text
        assert [token_id for token_id, _piece in script] == textgen.tokenize(text)
    odd = "  lead\\boxed{12}.\n\n trail  "
    assert "".join(textgen.pieces(odd)) == odd and len(textgen.pieces(odd)) == len(textgen.tokenize(odd))


def test_the_book_file_is_plain_jsonl_aisbench_reads():
    lines = answers.book_path("made-up-aime").read_text().splitlines()
    assert [json.loads(line) for line in lines] == BOOK
