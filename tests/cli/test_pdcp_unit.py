"""pdcp (pdcpcli/) against a tiny HTTP stub on 127.0.0.1: argument parsing, what it sends, what it prints, and
how it reports errors. No Django and no database: the client only speaks HTTP."""

from __future__ import annotations

import email.parser
import email.policy
import io
import json
import os
import stat
import subprocess
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pdcpcli import api, progress
from pdcpcli.main import main
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]


class Stub:
    """Routes (method, path) to answers; an answer is (status, body[, headers]), a list of them (served in
    order, the last one repeating) or a callable of the request. Every request is kept."""

    def __init__(self):
        self.routes, self.requests = {}, []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _serve(self):
                parts = urllib.parse.urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                request = {"method": self.command, "path": parts.path,
                           "query": dict(urllib.parse.parse_qsl(parts.query)), "headers": dict(self.headers),
                           "body": _body(self.headers.get("Content-Type") or "", raw)}
                stub.requests.append(request)
                answer = stub.routes.get((self.command, parts.path), (404, {"detail": "Not found."}))
                if callable(answer):
                    answer = answer(request)
                if isinstance(answer, list):
                    answer = answer.pop(0) if len(answer) > 1 else answer[0]
                status, body, *rest = answer
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
                for key, value in (rest[0] if rest else {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _serve

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def on(self, method: str, path: str, *answer):
        self.routes[(method, path)] = answer[0] if len(answer) == 1 else answer

    def sent(self, method: str, path: str) -> list[dict]:
        return [r for r in self.requests if r["method"] == method and r["path"] == path]


def _body(kind: str, raw: bytes):
    """JSON, or a multipart form read by the standard library's MIME parser: {field: text, file: (name, bytes)}."""
    if not kind.startswith("multipart/form-data"):
        return json.loads(raw) if raw else None
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {kind}\r\n\r\n".encode() + raw)
    out = {}
    for part in message.iter_parts():
        name, data = part.get_param("name", header="content-disposition"), part.get_payload(decode=True)
        out[name] = (part.get_filename(), data) if part.get_filename() else data.decode()
    return out


@pytest.fixture
def stub(monkeypatch, tmp_path):
    server = Stub()
    monkeypatch.setenv("PDCP_URL", server.url)
    monkeypatch.setenv("PDCP_TOKEN", "tok-123")
    monkeypatch.setenv("PDCP_CONFIG", str(tmp_path / "config.toml"))
    monkeypatch.setattr(progress, "POLL_SECONDS", 0)
    yield server
    server.server.shutdown()
    server.server.server_close()


class Tty(io.StringIO):
    def isatty(self):
        return True


def run(*argv, out=None):
    out, err = out or io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def page(results, next_url=None):
    return {"count": len(results), "next": next_url, "previous": None, "results": results}


DEPLOYMENT = {"id": 7, "name": "reference-sim", "cluster": 1, "cluster_name": "reference", "active_revision": 1,
              "revision_count": 1, "running_count": 0, "launch_profile": "sim", "served_model": "qwen3"}


def with_deployment(stub):
    stub.on("GET", "/api/deployments/", lambda r: (200, page([DEPLOYMENT] if r["query"].get("name") in
                                                             (None, "reference-sim") else [])))
    stub.on("GET", "/api/deployments/7/", (200, DEPLOYMENT))


# --- arguments ----------------------------------------------------------------------------------------------

@pytest.mark.procs
@pytest.mark.parametrize("argv", [["deploy"], ["restart", "d"], ["restart", "d", "--instance", "p0", "--role",
                                                                  "decode"], ["eval", "run", "d", "--kind", "x",
                                                                              "--dataset", "y"],
                                  ["job", "not-a-number"], ["nosuch"], ["deployment"], ["jobs", "--limit", "0"]])
def test_a_usage_error_is_one_line_and_exit_3(argv, stub):
    code, out, err = run(*argv)
    assert code == 3
    assert err.startswith("pdcp: ") and len(err.strip().splitlines()) == 1, err
    assert stub.requests == []


def test_help_and_version_exit_0(capsys):
    assert main(["--help"]) == 0
    assert "deploy" in capsys.readouterr().out
    assert main(["--version"]) == 0


@pytest.mark.procs
def test_json_goes_before_or_after_the_command(stub):
    stub.on("GET", "/api/clusters/", (200, page([{"id": 1, "name": "reference", "node_count": 6}])))
    for argv in (["--json", "clusters"], ["clusters", "--json"]):
        code, out, _ = run(*argv)
        assert code == 0 and json.loads(out) == [{"id": 1, "name": "reference", "node_count": 6}]
    code, out, _ = run("clusters")
    assert out.splitlines()[0].split() == ["ID", "NAME", "NODES", "DESCRIPTION"]
    assert out.splitlines()[1].split()[:3] == ["1", "reference", "6"]


# --- what is sent -------------------------------------------------------------------------------------------

@pytest.mark.procs
def test_nodes_filters_by_cluster_name_or_id_and_sends_the_token(stub):
    stub.on("GET", "/api/nodes/", (200, page([{"id": 3, "cluster_name": "reference", "name": "node0",
                                               "address": "127.0.10.210", "npu_total": 16, "npu_count": 16,
                                               "labels": {"role": "prefill"}, "reachability": "reachable"}])))
    code, out, _ = run("nodes", "--cluster", "reference")
    assert code == 0 and "node0" in out and "16/16" in out and "role=prefill" in out
    run("nodes", "--cluster", "4")
    first, second = stub.sent("GET", "/api/nodes/")
    assert first["query"]["cluster_name"] == "reference" and second["query"]["cluster"] == "4"
    assert first["headers"]["Authorization"] == "Token tok-123"


@pytest.mark.procs
def test_lists_follow_every_page(stub):
    stub.on("GET", "/api/deployments/", lambda r: (200, page([{**DEPLOYMENT, "id": 1, "name": "a"}], "more"))
            if not r["query"].get("offset") else (200, page([{**DEPLOYMENT, "id": 2, "name": "b"}])))
    code, out, _ = run("deployments", "--json")
    assert [d["name"] for d in json.loads(out)] == ["a", "b"]


@pytest.mark.procs
def test_a_deployment_is_named_or_numbered(stub):
    with_deployment(stub)
    stub.on("GET", "/api/deployments/7/revisions/", (200, page([
        {"number": 2, "is_active": False, "comment": "new"}, {"number": 1, "is_active": True, "comment": "created"}])))
    assert run("revisions", "reference-sim")[0] == 0
    code, out, _ = run("revisions", "7")
    assert code == 0 and "1 *" in out and "new" in out
    code, _, err = run("revisions", "nope")
    assert code == 3 and err == "pdcp: no deployment named 'nope'\n"


@pytest.mark.procs
def test_diff_compares_with_the_active_revision_unless_given_two(stub):
    with_deployment(stub)
    stub.on("GET", "/api/deployments/7/diff/", lambda r: (200, {
        "old": int(r["query"].get("old", 2)), "new": int(r["query"].get("new", 3)),
        "changes": [{"path": "instances[0].tp", "old": 2, "new": 4}, {"path": "labels.x", "old": None, "new": "y"}]}))
    code, out, _ = run("diff", "reference-sim")
    assert code == 0
    assert out.splitlines()[0] == "reference-sim r2 -> r3: 2 changes"
    assert "  ~ instances[0].tp: 2 -> 4" in out and '  + labels.x: "y"' in out
    run("diff", "reference-sim", "1")
    run("diff", "reference-sim", "1", "2")
    asked = [(r["query"].get("old"), r["query"].get("new")) for r in stub.sent("GET", "/api/deployments/7/diff/")]
    assert asked == [(None, None), (None, "1"), ("1", "2")]


@pytest.mark.procs
def test_revision_create_sends_the_yaml_and_lists_the_spec_problems(stub, tmp_path):
    with_deployment(stub)
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: x\n")
    stub.on("POST", "/api/deployments/7/revisions/", [
        (201, {"number": 2, "is_active": True}),
        (400, {"detail": "instances[0].tp: must divide the NPUs (and 1 more)", "errors": [
            {"path": "instances[0].tp", "instance": "p0", "field": "tp", "message": "must divide the NPUs",
             "suggestion": "use 2"},
            {"path": "model.name", "instance": None, "field": "name", "message": "required", "suggestion": ""}]})])
    code, out, _ = run("revision", "create", "reference-sim", "-f", str(spec), "--activate", "--comment", "why")
    assert code == 0 and out == "reference-sim: revision 2 created and active\n"
    assert stub.sent("POST", "/api/deployments/7/revisions/")[0]["body"] == {
        "yaml_text": "name: x\n", "comment": "why", "activate": True}
    code, out, err = run("revision", "create", "reference-sim", "-f", str(spec))
    assert code == 3
    assert err == ("pdcp: the server refused POST /api/deployments/7/revisions/: 2 problems:\n"
                   "  instances[0].tp: must divide the NPUs (use 2)\n  model.name: required\n")


@pytest.mark.procs
def test_import_sends_key_files_as_keys_on_the_same_lines(stub, tmp_path):
    (tmp_path / "id_ed25519").write_text("-----BEGIN KEY-----\nabc\n-----END KEY-----\n")
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("version: 1\ncredentials:\n- name: sim\n  username: simnode\n"
                         "  private_key_file: 'id_ed25519'  # beside this file\nclusters: []\n")
    stub.on("POST", "/api/inventory/import/", (200, {"credentials": 1, "clusters": 0, "nodes_created": 0,
                                                     "nodes_updated": 0}))
    code, out, _ = run("import", str(inventory))
    assert code == 0 and "imported: 1 credentials, 0 clusters, 0 nodes created, 0 nodes updated" in out
    sent = stub.sent("POST", "/api/inventory/import/")[0]["body"]["text"]
    lines = sent.splitlines()
    assert len(lines) == 6 and lines[4] == '  private_key: "-----BEGIN KEY-----\\nabc\\n-----END KEY-----\\n"'
    import yaml

    assert yaml.safe_load(sent)["credentials"][0]["private_key"].endswith("-----END KEY-----\n")


@pytest.mark.procs
def test_import_errors_name_their_lines(stub, tmp_path):
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("version: 2\n")
    stub.on("POST", "/api/inventory/import/", (400, {"errors": [
        {"line": 1, "field": "version", "message": "expected 1"}, {"line": 0, "field": "clusters",
                                                                  "message": "missing"}]}))
    code, _, err = run("import", str(inventory))
    assert code == 3 and "  line 1: version: expected 1\n  clusters: missing\n" in err
    code, _, err = run("import", str(tmp_path / "absent.yaml"))
    assert code == 3 and err.startswith("pdcp: cannot read ") and "No such file" in err


@pytest.mark.procs
def test_eval_run_sends_only_the_settings_given(stub):
    with_deployment(stub)
    stub.on("POST", "/api/evals/runs/", (201, {"id": 5, "job": 9, "status": "pending"}))
    code, out, _ = run("eval", "run", "reference-sim", "--kind", "performance", "--dataset",
                       "catalogue:made-up-aime", "--concurrency", "8", "--no-stream", "--time-limit", "120")
    assert code == 0 and "eval run 5 started" in out
    assert stub.sent("POST", "/api/evals/runs/")[0]["body"] == {"deployment": 7, "settings": {
        "dataset": "catalogue:made-up-aime", "mode": "performance", "concurrency": 8, "stream": False,
        "time_limit_s": 120}}


@pytest.mark.procs
def test_eval_run_sends_ignore_eos_only_when_given(stub):
    with_deployment(stub)
    stub.on("POST", "/api/evals/runs/", (201, {"id": 6, "job": 10, "status": "pending"}))
    code, _, _ = run("eval", "run", "reference-sim", "--kind", "performance", "--dataset", "catalogue:made-up-aime",
                     "--max-out-len", "1500", "--ignore-eos")
    assert code == 0
    code, _, _ = run("eval", "run", "reference-sim", "--kind", "performance", "--dataset", "catalogue:made-up-aime")
    assert code == 0
    first, second = (sent["body"]["settings"] for sent in stub.sent("POST", "/api/evals/runs/"))
    assert first == {"dataset": "catalogue:made-up-aime", "mode": "performance", "max_out_len": 1500,
                     "ignore_eos": True}
    assert "ignore_eos" not in second


@pytest.mark.procs
def test_eval_show_prints_each_metric_in_its_own_unit_and_only_the_percentiles_stored(stub):
    # stored as the parser keeps AISBench's table: times in ms, throughputs in theirs, token counts without one
    percentiles = {
        "TTFT": {"unit": "ms", "median": 217.6, "p90": 220.2, "p99": 223.8},
        "OutputTokens": {"unit": "", "median": 64.0, "p95": 64.0},
        "OutputTokenThroughput": {"unit": "token/s", "median": 26.62, "p90": 26.7, "p99": 26.73}}
    stub.on("GET", "/api/evals/runs/3/", (200, {
        "id": 3, "deployment_name": "mindie-demo", "revision_number": 1, "mode": "performance",
        "dataset_key": "catalogue:made-up-aime", "status": "succeeded", "results": [
            {"model": "pdcp", "dataset": "made_up_aime", "accuracy": None, "performance": {
                "headline_stage": "total", "stages": ["total"], "summary": {"total": {}},
                "percentiles": {"total": percentiles}}}]}))
    code, out, _ = run("eval", "show", "3")
    assert code == 0
    assert "  TTFT: median 217.6, p90 220.2, p99 223.8 ms\n" in out
    assert "  OutputTokens: median 64.0, p95 64.0\n" in out
    assert "  OutputTokenThroughput: median 26.62, p90 26.7, p99 26.73 token/s\n" in out


@pytest.mark.procs
def test_eval_show_prints_every_model_and_dataset_with_its_stage(stub):
    def entry(model, dataset, score, stage):
        return {"model": model, "dataset": dataset, "accuracy": {"score": score, "scores": {"accuracy": score}},
                "performance": {"headline_stage": stage, "summary": {stage: {"output_token_throughput": 10.0}},
                                "percentiles": {}}}
    stub.on("GET", "/api/evals/runs/4/", (200, {
        "id": 4, "deployment_name": "external", "revision_number": 0, "mode": "both", "source": "imported",
        "imported_from": "b.zip (AISBench output folder)", "dataset_key": "imported:gsm8k", "status": "succeeded",
        "results": [entry("model-a", "gsm8k", 90.0, "stable"), entry("model-b", "gsm8k", 50.0, "total"),
                    {"model": "model-b", "dataset": "aime", "accuracy": {"score": None}, "performance": None}]}))
    code, out, _ = run("eval", "show", "4")
    assert code == 0 and "[imported from b.zip (AISBench output folder)]" in out
    assert "  model-a · gsm8k:\n    accuracy: 90.00%\n    output token throughput: 10.00 (stage stable)\n" in out
    assert "  model-b · gsm8k:\n    accuracy: 50.00%\n    output token throughput: 10.00\n" in out
    assert "  model-b · aime:\n    accuracy: no score (AISBench wrote '-': its infer or eval task failed)\n" in out


@pytest.mark.procs
def test_eval_import_sends_the_file_or_stdin_and_the_tie(stub, tmp_path, monkeypatch):
    with_deployment(stub)
    answer = {"id": 8, "deployment_name": "reference-sim", "revision_number": 1, "mode": "accuracy",
              "dataset_key": "imported:aime4", "status": "succeeded", "source": "imported",
              "imported_from": "summary_1.md (accuracy summary)", "results": []}
    stub.on("POST", "/api/evals/import/", (201, answer))
    summary = tmp_path / "summary_1.md"
    summary.write_bytes(b"| dataset | version | metric | mode | m |\n")
    code, out, _ = run("eval", "import", str(summary), "--deployment", "reference-sim", "--revision", "1")
    assert code == 0 and "[imported from summary_1.md (accuracy summary)]" in out
    monkeypatch.setattr("sys.stdin", io.StringIO("pasted tables"))
    code, _, _ = run("eval", "import", "-", "--label", "cluster-b", "--concurrency", "8")
    assert code == 0
    first, second = stub.sent("POST", "/api/evals/import/")
    assert first["headers"]["Content-Type"].startswith("multipart/form-data; boundary=")  # any size of file
    assert first["body"] == {"deployment": "7", "revision": "1", "ignore_eos": "false",
                             "file": ("summary_1.md", summary.read_bytes())}
    assert second["body"] == {"text": "pasted tables", "label": "cluster-b", "concurrency": 8, "ignore_eos": False}
    code, _, err = run("eval", "import", str(tmp_path / "missing.zip"))
    assert code == 3 and "missing.zip: cannot be read" in err


# --- jobs and --wait ----------------------------------------------------------------------------------------

def job(status, summaries=(), **extra):
    return {"id": 12, "kind": "deploy", "status": status, "target_label": "reference-sim", "explanation": "",
            "duration_seconds": 1.5 if status != "pending" else None, "finished": None,
            "node_summaries": list(summaries), **extra}


def summary(node, state, done, total, message=""):
    return {"node": node, "state": state, "steps_done": done, "steps_total": total, "message": message}


def job_sequence(stub, final="successful", explanation="all 6 processes healthy"):
    stub.on("GET", "/api/jobs/12/", [
        (200, job("pending", waiting={"message": "pending for 0 s; 1 live worker consumes queue q"})),
        (200, job("running", [summary("node0", "running", 1, 2, "starting p0"), summary("node1", "waiting", 0, 1)])),
        (200, job("running", [summary("node0", "done", 2, 2), summary("node1", "running", 0, 1)])),
        (200, job(final, [summary("node0", "done", 2, 2), summary("node1", "done" if final == "successful" else
                                                                     "failed", 1, 1)], explanation=explanation,
                  finished="2025-01-01T00:00:00Z"))])
    events = [{"counter": 1, "node": "node0", "stream": "step", "text": "start p0"},
              {"counter": 2, "node": "node1", "stream": "error", "text": "p1 died"}]
    stub.on("GET", "/api/jobs/12/events/", lambda r: (200, page(
        [e for e in events if e["counter"] > int(r["query"].get("counter__gt", 0))])))


@pytest.mark.procs
@pytest.mark.parametrize(("final", "code"), [("successful", 0), ("failed", 1), ("error", 1), ("canceled", 2)])
def test_deploy_wait_prints_a_line_per_change_and_exits_with_the_result(stub, final, code):
    with_deployment(stub)
    stub.on("POST", "/api/deployments/7/deploy/", (202, job("pending"), {"Location": "/api/jobs/12/"}))
    job_sequence(stub, final)
    got, out, err = run("deploy", "reference-sim", "--wait", "--health-timeout", "30", "--sequential")
    assert got == code, err
    assert stub.sent("POST", "/api/deployments/7/deploy/")[0]["body"] == {"health_timeout": 30, "sequential": True}
    lines = out.splitlines()
    assert lines[0] == "job 12 deploy reference-sim: pending (pending for 0 s; 1 live worker consumes queue q)"
    assert any(line.split()[:2] == ["node0", "[##########----------]"] and "starting p0" in line for line in lines)
    assert "  ! node1: p1 died" in lines
    assert lines[-1] == f"job 12 deploy reference-sim {final} in 1.5s: all 6 processes healthy"
    assert len([line for line in lines if line.strip().startswith("node0")]) == 2  # unchanged rows are not repeated
    counters = [r["query"].get("counter__gt") for r in stub.sent("GET", "/api/jobs/12/events/")]
    assert counters[0] == "0" and counters[-1] == "2"


@pytest.mark.procs
def test_wait_on_a_terminal_redraws_in_place(stub):
    job_sequence(stub)
    out = Tty()
    code, text, _ = run("job", "12", "--wait", out=out)
    assert code == 0
    assert "\x1b[3F\x1b[J" in text  # back over the header and two node rows, then redraw
    assert "[####################] 100%" in text


@pytest.mark.procs
def test_wait_with_json_keeps_stdout_for_the_job(stub):
    job_sequence(stub)
    code, out, err = run("job", "12", "--wait", "--json")
    assert code == 0 and json.loads(out)["status"] == "successful"
    assert "node0" in err


@pytest.mark.procs
def test_deploy_of_another_revision_is_a_rollback(stub):
    with_deployment(stub)
    stub.on("POST", "/api/deployments/7/activate/", (202, job("pending")))
    code, out, _ = run("deploy", "reference-sim", "--revision", "3")
    assert code == 0 and out.startswith("job 12 started: deploy reference-sim r3")
    assert stub.sent("POST", "/api/deployments/7/activate/")[0]["body"] == {"revision": 3, "deploy": True}


@pytest.mark.procs
def test_logs_follow_until_the_job_ends(stub):
    job_sequence(stub, "failed")
    code, out, err = run("logs", "12", "--follow")
    assert code == 1
    assert [line.split()[1:3] for line in out.splitlines()] == [["node0", "step"], ["node1", "error"]]
    assert "failed" in err


@pytest.mark.procs
def test_jobs_of_a_deployment(stub):
    with_deployment(stub)
    stub.on("GET", "/api/jobs/", (200, page([job("successful")])))
    code, out, _ = run("jobs", "--deployment", "reference-sim", "--status", "successful", "--limit", "5")
    assert code == 0 and "reference-sim" in out
    query = stub.sent("GET", "/api/jobs/")[0]["query"]
    assert query == {"target_type": "deployments.deployment", "target_id": "7", "status": "successful", "limit": "5"}


# --- errors -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("status", "body", "expected"), [
    (400, {"name": ["This field is required."]}, "pdcp: name: This field is required.\n"),
    (400, {"settings": {"dataset": ["unknown dataset"]}, "deployment": ["Invalid pk"]},
     "pdcp: the server refused POST /api/deployments/: 2 problems:\n  settings.dataset: unknown dataset\n"
     "  deployment: Invalid pk\n"),
    (400, {"detail": "name: This field is required.", "errors": [{"field": "name",
                                                                  "message": "This field is required."}]},
     "pdcp: name: This field is required.\n"),
    (400, {"detail": "bad spec", "errors": [{"field": "a", "message": "x"}, {"field": None, "message": "y"}]},
     "pdcp: bad spec:\n  a: x\n  y\n"),
    (409, {"detail": "job 3 (deploy) acts on this deployment"}, "pdcp: job 3 (deploy) acts on this deployment\n"),
    (409, {"detail": "busy", "errors": []}, "pdcp: busy\n"),
    (403, {"detail": "Your role does not allow this."}, "pdcp: permission denied: Your role does not allow this.\n"),
    (500, "<html>Server Error</html>", "pdcp: server error 500 on POST /api/deployments/: <html>Server Error</html>\n"),
])
@pytest.mark.procs
def test_server_errors_are_clear_lines(stub, tmp_path, status, body, expected):
    stub.on("GET", "/api/clusters/", (200, page([{"id": 1, "name": "reference"}])))
    stub.on("POST", "/api/deployments/", (status, body))
    spec = tmp_path / "s.yaml"
    spec.write_text("x: 1\n")
    code, _, err = run("deployment", "create", "d", "--cluster", "reference", "-f", str(spec))
    assert (code, err) == (3, expected)


@pytest.mark.procs
def test_401_says_to_log_in(stub):
    stub.on("GET", "/api/clusters/", (401, {"detail": "Invalid token."}))
    code, _, err = run("clusters")
    assert code == 3
    assert err == f"pdcp: not logged in, or the token is no longer valid (Invalid token.): run `pdcp login --url {stub.url} --user NAME`\n"


def test_connection_refused_names_the_url(monkeypatch, tmp_path):
    port = free_port()  # nothing listens on it
    monkeypatch.setenv("PDCP_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("PDCP_TOKEN", "t")
    code, _, err = run("deployments")
    assert code == 3
    assert err == f"pdcp: cannot connect to http://127.0.0.1:{port}: connection refused (is the control plane running there?)\n"


def test_no_server_configured(monkeypatch, tmp_path):
    monkeypatch.delenv("PDCP_URL", raising=False)
    monkeypatch.delenv("PDCP_TOKEN", raising=False)
    monkeypatch.setenv("PDCP_CONFIG", str(tmp_path / "none.toml"))
    code, _, err = run("clusters")
    assert code == 3 and "pdcp login --url URL --user NAME" in err


def test_messages_of_each_error_shape():
    assert api.messages_of({"detail": "x"}) == ("x", [])
    assert api.messages_of({"non_field_errors": ["both given"]}) == (None, ["both given"])
    assert api.messages_of({"instances": [{}, {"tp": ["too big"]}]}) == (None, ["instances[1].tp: too big"])
    assert api.messages_of({"errors": [{"line": 4, "field": "nodes[0].address", "message": "bad"}]}) == (
        None, ["line 4: nodes[0].address: bad"])


# --- config and login ---------------------------------------------------------------------------------------

@pytest.mark.procs
def test_login_writes_a_private_config_that_later_commands_use(stub, monkeypatch, tmp_path):
    monkeypatch.delenv("PDCP_URL")
    monkeypatch.delenv("PDCP_TOKEN")
    path = tmp_path / "conf" / "pdcp.toml"
    monkeypatch.setenv("PDCP_CONFIG", str(path))
    stub.on("POST", "/api/auth/token/", (200, {"token": "fresh", "expires": None}))
    stub.on("GET", "/api/me/", (200, {"username": "admin", "role": "admin"}))
    monkeypatch.setattr(sys, "stdin", io.StringIO("pass word\n"))
    code, out, err = run("login", "--url", stub.url + "/", "--user", "admin", "--password-stdin")
    assert code == 0, err
    assert out == f"logged in to {stub.url} as admin; the token is in {path}\n"
    login = stub.sent("POST", "/api/auth/token/")[0]
    assert login["body"] == {"username": "admin", "password": "pass word"} and "Authorization" not in login["headers"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == f'url = "{stub.url}"\ntoken = "fresh"\n'
    code, out, _ = run("whoami")
    assert code == 0 and out == f"admin (admin) at {stub.url}\n"
    assert stub.sent("GET", "/api/me/")[0]["headers"]["Authorization"] == "Token fresh"


@pytest.mark.procs
def test_a_wrong_password_at_login_says_so_not_to_log_in(stub, monkeypatch, tmp_path):
    monkeypatch.delenv("PDCP_URL")
    monkeypatch.delenv("PDCP_TOKEN")
    monkeypatch.setenv("PDCP_CONFIG", str(tmp_path / "pdcp.toml"))
    stub.on("POST", "/api/auth/token/", (401, {"detail": "Wrong user name or password (or the account is deactivated).",
                                               "errors": []}))
    monkeypatch.setattr(sys, "stdin", io.StringIO("nope\n"))
    code, _, err = run("login", "--url", stub.url, "--user", "admin", "--password-stdin")
    assert (code, err) == (3, "pdcp: Wrong user name or password (or the account is deactivated).\n")
    assert not (tmp_path / "pdcp.toml").exists()


@pytest.mark.procs
def test_a_config_others_can_read_is_refused(stub, monkeypatch, tmp_path):
    monkeypatch.delenv("PDCP_TOKEN")
    path = tmp_path / "config.toml"
    path.write_text('url = "http://x"\ntoken = "t"\n')
    path.chmod(0o644)
    code, _, err = run("clusters")
    assert code == 3 and err == f"pdcp: {path} holds a token but is mode 0644: run `chmod 600 {path}`\n"


@pytest.mark.procs
def test_the_environment_wins_over_the_file(stub, monkeypatch, tmp_path):
    path = tmp_path / "config.toml"
    path.write_text('url = "http://127.0.0.1:9"\ntoken = "from-file"\n')
    path.chmod(0o600)
    monkeypatch.delenv("PDCP_TOKEN")
    stub.on("GET", "/api/me/", (200, {"username": "u", "role": "viewer"}))
    assert run("whoami")[0] == 0
    assert stub.sent("GET", "/api/me/")[0]["headers"]["Authorization"] == "Token from-file"


@pytest.mark.procs
def test_a_wrong_password_is_the_servers_message(stub, monkeypatch):
    stub.on("POST", "/api/auth/token/", (400, {"non_field_errors": ["Unable to log in with provided credentials."]}))
    monkeypatch.setattr(sys, "stdin", io.StringIO("nope\n"))
    code, _, err = run("login", "--url", stub.url, "--user", "admin", "--password-stdin")
    assert (code, err) == (3, "pdcp: Unable to log in with provided credentials.\n")


# --- packaging ----------------------------------------------------------------------------------------------

@pytest.mark.procs
def test_the_client_imports_no_django_and_is_installed():
    probe = ("import sys, pdcpcli.main, pdcpcli.commands; "
             "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
             "{'django', 'rest_framework', 'apps', 'controlplane', 'requests', 'yaml'}); print(bad)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.stdout.strip() == "[]", result.stderr
    script = Path(sys.executable).parent / "pdcp"
    assert script.exists(), "run `.venv/bin/python -m pip install -e '.[dev]'` (make venv does)"
    result = subprocess.run([str(script), "--version"], capture_output=True, text=True, cwd="/", timeout=60)
    assert result.returncode == 0 and result.stdout.startswith("pdcp ")
