"""The simulated model's HuggingFace tokenizer counts tokens exactly as the engine does (textgen.tokenize).

Runs under the AISBench venv's python (it has tokenizers and transformers), with only the repo on PYTHONPATH.
"""

import json
import os
import random
import subprocess
from pathlib import Path

import pytest

from simcluster.engine import answers, textgen

pytestmark = pytest.mark.procs  # every test here starts processes or servers

REPO = Path(__file__).resolve().parents[2]
VENVS = (Path("/opt/pdcp-aisbench"), Path("/opt/pdcp-aisbench-try"))  # -try: until the project's installer lands
SUFFIX = "\nRemember to put your final answer within \\boxed{}."
COUNT = """
import json, sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
job = json.load(sys.stdin)
texts = [len(tok(t)["input_ids"]) for t in job["texts"]]
chats = [len(tok.apply_chat_template(m, tokenize=True, add_generation_prompt=True, return_dict=True)["input_ids"])
         for m in job["chats"]]
print(json.dumps({"texts": texts, "chats": chats, "class": type(tok).__name__}))
"""


@pytest.fixture(scope="module")
def venv_python():
    found = [v / "bin" / "python" for v in VENVS if (v / "bin" / "ais_bench").exists()]
    assert found, f"no AISBench venv in {', '.join(map(str, VENVS))}"
    return str(found[0])


@pytest.fixture(scope="module")
def tokenizer(venv_python, tmp_path_factory):
    dest = tmp_path_factory.mktemp("tok") / "ds_r1"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([venv_python, "-m", "simcluster.tokenizer_dir", str(dest)], env=env, cwd="/",
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(dest) and (dest / "tokenizer.json").exists()
    return dest


def hf_counts(venv_python, tokenizer, texts=(), chats=()):
    done = subprocess.run([venv_python, "-c", COUNT, str(tokenizer)], input=json.dumps(
        {"texts": list(texts), "chats": list(chats)}), capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def odd_texts():
    fixed = ["x² + y³ = z", "e\u0301t\u00e9", "Ⅻ ½ ⅔ ٣ ௰", "a‿b", "tab\there\r\nnew", "nb\u00a0sp\u2007x\u3000y",
             "sep\x1cfs\x1dgs\x1e\x1fus", "zw\u200dj\u200b", "emoji 🎉🧮 ok", "中文字符，标点。", "\\boxed{70}",
             "$\\frac{1}{2}$ {{x}} \\\\ \\n", "don't stop_here -12 3.14 1e10 0x1F", "snake_case __dunder__",
             "\u0660\u0661 ١٢٣ ᠐", "  leading and trailing  ", "a\u0300\u0301\u0302b", "Ⓐⓑ ﬁ ﬀ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟘𝟙"]
    rng = random.Random(10)
    alphabet = [chr(c) for c in (*range(0x20, 0x7F), *range(0xA0, 0x250), *range(0x300, 0x370), *range(0x1C, 0x20),
                                 *range(0x2000, 0x2070), *range(0x2150, 0x2190), *range(0x3000, 0x3040),
                                 *range(0x4E00, 0x4E40), *range(0x1F600, 0x1F610), *range(0x1D400, 0x1D420))]
    fuzz = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60))) for _ in range(300)]
    return fixed + fuzz


def test_counts_agree_on_the_book_and_its_answers(venv_python, tokenizer):
    book = answers.load_book(answers.book_path("made-up-aime"))
    texts = [r["question"] for r in book] + [r["question"] + SUFFIX for r in book]
    texts += [answers.answer_text(r["question"], r["answer"], think=t) for r in book for t in (False, True)]
    out = hf_counts(venv_python, tokenizer, texts)
    assert out["texts"] == [len(textgen.tokenize(t)) for t in texts]


def test_counts_agree_on_odd_text(venv_python, tokenizer):
    texts = odd_texts()
    got = hf_counts(venv_python, tokenizer, texts)["texts"]
    mismatches = [(t, g, len(textgen.tokenize(t))) for t, g in zip(texts, got, strict=True)
                  if g != len(textgen.tokenize(t))]
    assert mismatches == []


def test_chat_wrapped_prompts_count_as_the_engine_counts_them(venv_python, tokenizer):
    book = answers.load_book(answers.book_path("made-up-aime"))
    chats = [[{"role": "user", "content": r["question"] + SUFFIX}] for r in book[:5]]
    chats.append([{"role": "system", "content": "Be brief {x}."}, {"role": "user", "content": "2² = ?"}])
    chats.append([{"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "two"}]}])
    prompts = [textgen.chat_prompt(m) for m in chats]
    out = hf_counts(venv_python, tokenizer, prompts, chats)
    expected = [len(textgen.tokenize(p)) for p in prompts]
    assert out["texts"] == expected  # the engine's prompt text, counted
    assert out["chats"] == expected  # the tokenizer's own chat template renders the same text


def test_the_module_imports_no_tokenizers_until_build():
    probe = ("import sys, simcluster.tokenizer_dir; "
             "print(sorted(m for m in ('tokenizers', 'transformers', 'prometheus_client', 'django', 'aiohttp') "
             "if m in sys.modules))")
    done = subprocess.run(["python3", "-c", probe], env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
