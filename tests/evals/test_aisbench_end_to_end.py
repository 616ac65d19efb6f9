"""The real ais_bench (PDCP_AISBENCH, default /opt/pdcp-aisbench/bin/ais_bench; `make aisbench` installs it)
against tests/evals/mock_openai.py. A missing install FAILS these tests: they are the proof that the package
drives the real thing. About 25 s: nearly all of it is ais_bench starting its processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from apps.evals.aisbench.config_writer import (
    DatasetConfig,
    EndpointConfig,
    GenerationConfig,
    SyntheticShape,
    ais_bench_argv,
    render_config,
    run_env,
)
from apps.evals.aisbench.install import ais_bench_path, check_install, venv_python
from apps.evals.aisbench.output_parser import judge, latest_run_dir, parse_accuracy
from apps.evals.aisbench.progress import count_finished
from tests.evals.mock_openai import MockOpenAI

pytestmark = pytest.mark.procs  # every test here starts processes or servers

AIME4 = Path(__file__).parent / "fixtures" / "accuracy_ok" / "aime4.jsonl"


def installed_ais_bench() -> str:
    path = ais_bench_path()
    status = check_install(path)
    assert status.ok, status.problem
    assert status.version == "3.1.20260630"
    return path


def test_an_accuracy_run_of_three_prompts_is_scored(tmp_path):
    ais_bench = installed_ais_bench()
    server = MockOpenAI().start()
    try:
        endpoint = EndpointConfig(server.base_url, "mock-model", "chat", True)
        generation = GenerationConfig(max_out_len=128, concurrency=2, temperature=0.6, top_p=0.95, retry=2)
        config = tmp_path / "job_config.py"
        config.write_text(render_config("e2e-mock", endpoint, generation, DatasetConfig("aime4", "aime", str(AIME4))))
        argv = ais_bench_argv(ais_bench, str(config), str(tmp_path / "out"), "accuracy", 3, 0, None)
        started = time.monotonic()
        done = subprocess.run(argv, cwd=tmp_path, env=run_env(dict(os.environ), endpoint.host), capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, timeout=240, start_new_session=True)
        elapsed = time.monotonic() - started
    finally:
        server.stop()
    console = done.stdout + done.stderr
    verdict = judge(tmp_path / "out", "accuracy", console)
    assert verdict.ok, (verdict.reasons, verdict.log_tail, console[-3000:])
    (result,) = parse_accuracy(latest_run_dir(tmp_path / "out"))
    assert (result.model, result.dataset, result.score) == ("e2e-mock", "aime4", 66.67)
    assert [(s.id, s.extracted, s.is_correct) for s in result.samples] == [
        (0, ["15"], True), (1, ["9"], True), (2, ["48"], False)]
    assert count_finished(tmp_path / "out") == 3
    bodies = [r["body"] for r in server.requests]
    assert len(bodies) == 3 and all(r["path"] == "/v1/chat/completions" for r in server.requests)
    assert {(b["model"], b["max_tokens"], b["temperature"], b["top_p"], b["stream"]) for b in bodies} == {
        ("mock-model", 128, 0.6, 0.95, True)}
    print(f"ais_bench accuracy run of 3 prompts: {elapsed:.1f} s")


CHECK_CONFIGS = """
import json, sys
from mmengine.config import Config
from ais_bench.benchmark.cli.config_manager import CustomConfigChecker
from ais_bench.benchmark.utils.config.build import build_dataset_from_cfg
out = {}
for path in sys.argv[1:]:
    cfg = Config.fromfile(path, format_python_code=False)
    CustomConfigChecker(cfg, path).check()
    dataset = build_dataset_from_cfg(cfg["datasets"][0])
    model = cfg["models"][0]
    out[path] = {"model": model["type"].__name__, "url": model["url"], "dataset": type(dataset).__name__,
                 "rows": len(dataset.test), "first": dict(dataset.test[0])}
print(json.dumps(out))
"""


def test_aisbench_loads_every_kind_of_generated_config(tmp_path):
    ais_bench = installed_ais_bench()
    gsm8k = tmp_path / "gsm8k"
    gsm8k.mkdir()
    for split in ("train", "test"):
        (gsm8k / f"{split}.jsonl").write_text(json.dumps({"question": "2+2?", "answer": "Add.\n#### 4"}) + "\n")
    shutil.copy(AIME4, tmp_path / "aime.jsonl")
    completions = EndpointConfig("http://127.0.0.1:9/", "m", "completions", True)
    chat = EndpointConfig("https://10.1.2.3:8443/", "m", "chat", False, api_key="sk-x")
    generation = GenerationConfig(max_out_len=64)
    jobs = {
        "gsm8k.py": render_config("m", completions, generation, DatasetConfig("gsm8k", "gsm8k", str(gsm8k))),
        "synthetic.py": render_config("m", chat, generation, DatasetConfig(
            "syn", "synthetic", synthetic=SyntheticShape(requests=5, input_len=7, output_len=3))),
        "aime.py": render_config("m", completions, generation, DatasetConfig("aime", "aime", str(tmp_path / "aime.jsonl"))),
    }
    for name, source in jobs.items():
        (tmp_path / name).write_text(source)
    done = subprocess.run([str(venv_python(Path(ais_bench))), "-c", CHECK_CONFIGS, *jobs], cwd=tmp_path,
                          capture_output=True, text=True, timeout=240, env=run_env(dict(os.environ), "127.0.0.1"))
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded["gsm8k.py"] == {"model": "VLLMCustomAPI", "url": "http://127.0.0.1:9/", "dataset": "GSM8KDataset",
                                  "rows": 1, "first": {"question": "2+2?", "answer": "Add.\n#### 4",
                                                       "subdivision": "gsm8k_test", "idx": 0}}
    synthetic = loaded["synthetic.py"]
    assert (synthetic["model"], synthetic["url"], synthetic["dataset"], synthetic["rows"]) == (
        "VLLMCustomAPIChat", "https://10.1.2.3:8443/", "SyntheticDataset", 5)
    assert synthetic["first"]["question"] == "A A A A A A A" and synthetic["first"]["max_out_len"] == 3
    assert (loaded["aime.py"]["dataset"], loaded["aime.py"]["rows"]) == ("Aime2025Dataset", 4)
