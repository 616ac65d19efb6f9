"""The mock OpenAI server that the AISBench fixtures and the end-to-end test run against."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from tests.evals.mock_openai import MockOpenAI

pytestmark = pytest.mark.procs  # every test here starts processes or servers


@pytest.fixture
def server():
    mock = MockOpenAI().start()
    yield mock
    mock.stop()


def post(server: MockOpenAI, path: str, body: dict) -> tuple[int, bytes]:
    request = urllib.request.Request(server.base_url + path.lstrip("/"), json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_models_chat_and_completions(server):
    with urllib.request.urlopen(server.base_url + "v1/models", timeout=10) as response:
        assert json.load(response)["data"][0]["id"] == "mock-model"
    status, body = post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "q <<answer:42>>"}]})
    reply = json.loads(body)
    assert status == 200 and reply["choices"][0]["message"]["content"].endswith("\\boxed{42}.")
    assert reply["usage"]["completion_tokens"] == len(reply["choices"][0]["message"]["content"].split())
    status, body = post(server, "/v1/completions", {"prompt": "no marker", "max_tokens": 3})
    assert status == 200 and json.loads(body)["choices"][0]["text"] == "Let me think"
    assert [r["path"] for r in server.requests] == ["/v1/chat/completions", "/v1/completions"]


def test_stream_sends_deltas_a_usage_chunk_and_done(server):
    status, body = post(server, "/v1/chat/completions", {"stream": True, "stream_options": {"include_usage": True},
                                                         "messages": [{"role": "user", "content": "<<answer:7>>"}]})
    events = [line.removeprefix("data: ") for line in body.decode().split("\n\n") if line]
    assert status == 200 and events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"]["content"] for c in chunks if c["choices"])
    assert text.endswith("\\boxed{7}.") and chunks[-1]["usage"]["completion_tokens"] == len(text.split())


def test_failures_on_demand(server):
    assert post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x <<fail>>"}]})[0] == 500
    assert post(server, "/v1/v1/chat/completions", {"messages": []})[0] == 404
    server.mode = "fail500"
    assert post(server, "/v1/completions", {"prompt": "fine"})[0] == 500
