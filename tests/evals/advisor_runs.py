"""Helpers of the advisor tests: topology spec copies with a chosen P:D layout, and finished performance runs whose
results the real parser stored (apps/evals/results.py over a copy of the recorded folder tests/evals/fixtures/perf_ok,
its throughput and TTFT/TPOT rows rewritten to the figures a test needs)."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import yaml

FIXTURES = Path(__file__).parent / "fixtures"
FIXED_TOPOLOGY = Path(__file__).resolve().parents[2] / "examples" / "reference-topology-fixed.yaml"
# stat -> its multiple of the p90 a test names (so mean < median < p90 < p99, as in real runs)
SPREAD = {"Average": 0.8, "Min": 0.3, "Max": 1.5, "Median": 0.75, "P75": 0.9, "P90": 1.0, "P99": 1.3}


def spec_with(prefill: list[tuple[int, int]], decode: list[tuple[int, int]]) -> dict:
    """The reference topology with the given (tp, dp) per Prefill and per Decode instance, as plain data."""
    data = yaml.safe_load(FIXED_TOPOLOGY.read_text())
    p_template, d_template = data["instances"][0], data["instances"][2]
    instances = []
    for role, template, shapes in (("prefill", p_template, prefill), ("decode", d_template, decode)):
        for i, (tp, dp) in enumerate(shapes):
            inst = copy.deepcopy(template)
            inst.update(name=f"{role[0]}{i}", node=f"node{len(instances)}", tp=tp, dp=dp)
            if dp > 1:
                inst["dp_rpc_port"] = 12321
            instances.append(inst)
    data["instances"] = instances
    return data


def _row(metric: str, p90: float) -> str:
    cells = ",".join(f"{p90 * SPREAD[k]:.3f} ms" for k in ("Average", "Min", "Max", "Median", "P75", "P90", "P99"))
    return f"{metric},total,{cells},6"


def perf_folder(root: Path, *, throughput: float, ttft_p90: float, tpot_p90: float,
                request_throughput: float = 2.5) -> Path:
    """A copy of the recorded perf run folder measuring these figures (token/s, ms); returns its run folder."""
    from apps.evals.aisbench.output_parser import latest_run_dir

    work = root / f"perf-{len(list(root.glob('perf-*')))}"
    shutil.copytree(FIXTURES / "perf_ok" / "work", work)
    run_dir = latest_run_dir(work)
    folder = run_dir / "performances" / "mock-chat"
    metrics = json.loads((folder / "synthetic6.json").read_text())
    metrics["Output Token Throughput"]["total"] = f"{throughput:.4f} token/s"
    metrics["Request Throughput"]["total"] = f"{request_throughput:.4f} req/s"
    (folder / "synthetic6.json").write_text(json.dumps(metrics, indent=4))
    lines = (folder / "synthetic6.csv").read_text().splitlines()
    rewritten = {"TTFT": _row("TTFT", ttft_p90), "TPOT": _row("TPOT", tpot_p90)}
    (folder / "synthetic6.csv").write_text("\n".join(rewritten.get(line.split(",")[0], line) for line in lines) + "\n")
    return run_dir


def measured_run(root: Path, *, spec: dict, throughput: float, ttft_p90: float, tpot_p90: float,
                 concurrency: int = 4, **fields):
    """A succeeded performance run against `spec`, its results stored by the real parser and store."""
    from apps.evals.models import EvalRun
    from apps.evals.results import store_pass_results

    values = {"deployment_name": "layout", "revision_number": 1, "revision_spec": spec,
              "endpoint_url": "http://127.0.10.85:1999/", "served_model": "qwen3-235b", "mode": "performance",
              "dataset_key": "catalogue:made-up-aime", "dataset_abbr": "made_up_aime", "dataset_family": "aime",
              "max_out_len": 512, "concurrency": concurrency, "status": "succeeded"}
    values.update(fields)
    run = EvalRun.objects.create(**values)
    store_pass_results(run, "performance", perf_folder(root, throughput=throughput, ttft_p90=ttft_p90,
                                                       tpot_p90=tpot_p90))
    run.refresh_from_db()
    return run
