"""The engine answers book questions through a real PD pair (Prefill -> KV hand-over -> Decode), behind pdproxy.

Addresses 127.0.10.130-.139 (this file's share of the simcluster tests' range).
"""

import json
import re
import subprocess
import sys
import urllib.request

import pytest

from simcluster import nodestate
from simcluster.engine import answers, textgen
from tests.simcluster.simtest_helpers import free_port, sim_env, wait_http

pytestmark = pytest.mark.procs  # every test here starts processes or servers

P_HOST, D_HOST, PROXY_HOST, LOCAL_HOST = "127.0.10.130", "127.0.10.131", "127.0.10.132", "127.0.10.133"
EXTRA = {"prefill": {"dp_size": 1, "tp_size": 1}, "decode": {"dp_size": 1, "tp_size": 1}}
BOOK = answers.load_book(answers.book_path("made-up-aime"))
ACCURACY = 0.6
RIGHT = answers.expected_correct(BOOK, ACCURACY)
SUFFIX = "\nRemember to put your final answer within \\boxed{}."
BOOK_ENV = {"SIMCLUSTER_ANSWER_BOOK": "made-up-aime", "SIMCLUSTER_ACCURACY": str(ACCURACY), "SIMCLUSTER_THINK": "1"}


def engine_argv(host, port, kv_role=None, kv_port=None):
    argv = [sys.executable, "-m", "simcluster.engine", "serve", "/models/ds_r1", "--host", host, "--port", str(port),
            "--served-model-name", "ds_r1", "--max-num-seqs", "8"]
    if kv_role:
        kv = {"kv_connector": "MooncakeConnectorV1", "kv_role": kv_role, "kv_port": str(kv_port),
              "kv_connector_extra_config": EXTRA}
        argv += ["--kv-transfer-config", json.dumps(kv)]
    return argv


def start_engine(spawn, tmp, host, kv_role=None, **env):
    node_dir = tmp / host
    (node_dir / "engines").mkdir(parents=True)
    nodestate.write_json(node_dir / "node.json", {"name": host, "hardware": "A3"})
    port = free_port(host)
    proc = spawn(engine_argv(host, port, kv_role, free_port(host)),
                 sim_env(ASCEND_RT_VISIBLE_DEVICES="0", SIMCLUSTER_NODE_DIR=node_dir, **env), tmp / f"{host}.log")
    wait_http(f"http://{host}:{port}/health", proc=proc)
    return f"{host}:{port}"


@pytest.fixture
def proxy(spawn, state_root):
    """pdproxy in front of one Prefill and one Decode that both load the answer book."""
    p = start_engine(spawn, state_root, P_HOST, "kv_producer", **BOOK_ENV)
    d = start_engine(spawn, state_root, D_HOST, "kv_consumer", **BOOK_ENV)
    port = free_port(PROXY_HOST)
    proc = spawn([sys.executable, "-m", "pdproxy", "--host", PROXY_HOST, "--port", str(port), "--prefill", p,
                  "--decode", d], sim_env(), state_root / "proxy.log")
    wait_http(f"http://{PROXY_HOST}:{port}/healthcheck", proc=proc)
    return {"url": f"http://{PROXY_HOST}:{port}", "p": f"http://{p}", "d": f"http://{d}"}


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=20) as resp:
        return resp.read().decode()


def stream_events(url, body):
    raw = post(url, {**body, "stream": True, "stream_options": {"include_usage": True}})
    events = [e for e in raw.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    return [json.loads(e[len("data: "):]) for e in events[:-1]]


def expected_answer(row):
    return row["answer"] if row["question"] in RIGHT else str((int(row["answer"]) + 1) % 1000)


def metric(base, name):
    text = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


def test_chat_answers_every_book_question_by_the_rule_through_the_pd_pair(proxy):
    for row in BOOK:
        messages = [{"role": "user", "content": row["question"] + SUFFIX}]
        out = json.loads(post(proxy["url"] + "/v1/chat/completions",
                              {"model": "ds_r1", "messages": messages, "max_tokens": 200}))
        text = out["choices"][0]["message"]["content"]
        assert text.startswith("<think>\n") and "</think>" in text
        assert re.findall(r"\\boxed\{(\d+)\}", text) == [expected_answer(row)]
        assert out["choices"][0]["finish_reason"] == "stop"
        prompt_n = len(textgen.tokenize(textgen.chat_prompt(messages)))
        completion_n = len(textgen.tokenize(text))
        assert out["usage"] == {"prompt_tokens": prompt_n, "completion_tokens": completion_n,
                                "total_tokens": prompt_n + completion_n}
    assert metric(proxy["d"], "simcluster:kv_transfers_total") == len(BOOK)  # every answer crossed P -> D


def test_streamed_completion_is_the_same_text_one_token_per_chunk(proxy):
    row = next(r for r in BOOK if r["question"] not in RIGHT)
    prompt = f"Problem:\n{row['question']}{SUFFIX}"
    events = stream_events(proxy["url"] + "/v1/completions", {"model": "ds_r1", "prompt": prompt, "max_tokens": 200})
    chunks = [e["choices"][0] for e in events if e["choices"]]
    text = "".join(c["text"] for c in chunks)
    assert re.findall(r"\\boxed\{(\d+)\}", text) == [str((int(row["answer"]) + 1) % 1000)]
    assert [c["text"] for c in chunks] == textgen.pieces(text)
    assert [c["finish_reason"] for c in chunks] == [None] * (len(chunks) - 1) + ["stop"]
    assert events[-1]["usage"]["completion_tokens"] == len(textgen.tokenize(text)) == len(chunks)
    assert events[-1]["usage"]["prompt_tokens"] == len(textgen.tokenize(prompt))


def test_max_tokens_cuts_the_answer_with_length(proxy):
    row = BOOK[0]
    messages = [{"role": "user", "content": row["question"] + SUFFIX}]
    events = stream_events(proxy["url"] + "/v1/chat/completions", {"model": "ds_r1", "messages": messages,
                                                                   "max_tokens": 5})
    deltas = [e["choices"][0] for e in events if e["choices"]]
    assert "".join(d["delta"].get("content", "") for d in deltas) == "<think>\nSimulated reasoning"
    assert deltas[-1]["finish_reason"] == "length" and events[-1]["usage"]["completion_tokens"] == 5


def test_unknown_questions_keep_the_plain_simulated_text(proxy):
    out = json.loads(post(proxy["url"] + "/v1/completions", {"model": "ds_r1", "prompt": "What is love?",
                                                             "max_tokens": 8}))
    assert out["choices"][0]["text"].startswith("[simulated]") and out["usage"]["completion_tokens"] == 8


def test_an_engine_without_pd_answers_too_and_without_think(spawn, state_root):
    base = "http://" + start_engine(spawn, state_root, LOCAL_HOST, SIMCLUSTER_ANSWER_BOOK="made-up-aime")
    row = BOOK[5]
    out = json.loads(post(base + "/v1/completions", {"model": "ds_r1", "prompt": row["question"], "max_tokens": 50}))
    assert out["choices"][0]["text"] == f"The final answer is \\boxed{{{row['answer']}}}."  # accuracy 1.0 by default


@pytest.mark.parametrize(("env", "message"), [
    ({"SIMCLUSTER_ANSWER_BOOK": "no-such-book"}, "SIMCLUSTER_ANSWER_BOOK: no answer book named 'no-such-book'"),
    ({"SIMCLUSTER_ANSWER_BOOK": "../answer_books/made-up-aime"}, "known books: "),
    ({"SIMCLUSTER_ANSWER_BOOK": "made-up-aime", "SIMCLUSTER_ACCURACY": "1.5"}, "SIMCLUSTER_ACCURACY must be a number"),
    ({"SIMCLUSTER_ANSWER_BOOK": "made-up-aime", "SIMCLUSTER_ACCURACY": "high"}, "SIMCLUSTER_ACCURACY must be a number"),
    ({"SIMCLUSTER_ANSWER_BOOK": "made-up-aime", "SIMCLUSTER_ACCURACY": "nan"}, "SIMCLUSTER_ACCURACY must be a number"),
    ({"SIMCLUSTER_ANSWER_BOOK": "made-up-aime", "SIMCLUSTER_THINK": "yes"}, "SIMCLUSTER_THINK must be 0 or 1"),
])
def test_bad_answer_book_env_stops_the_engine_at_start(env, message):
    host = "127.0.10.134"
    proc = subprocess.run(engine_argv(host, free_port(host)), env=sim_env(ASCEND_RT_VISIBLE_DEVICES="0", **env),
                          capture_output=True, text=True, timeout=20)
    assert proc.returncode == 1
    assert message in proc.stderr
