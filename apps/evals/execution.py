"""Runs one eval job: write the config, start ais_bench on its host, follow its progress, judge and store.

Success is decided from the output files, never from ais_bench's exit code (it exits 0 when the benchmark failed).
"""

from __future__ import annotations

import time
from urllib.parse import urlsplit

from django.db import close_old_connections
from django.utils import timezone

from apps.deployments.inventory_lookup import cluster_nodes
from apps.inventory.ssh_targets import NodeNotReady, ssh_target_for
from apps.jobs.context import JobCanceled, JobContext, JobFailed

from .aisbench.config_writer import (
    DatasetConfig,
    EndpointConfig,
    GenerationConfig,
    ais_bench_argv,
    render_config,
    run_env,
)
from .aisbench.output_parser import OutputError, judge, latest_run_dir
from .choices import PASSES, EvalStatus
from .datasets import dataset_choice
from .hosts import EvalHost, HostError, LocalHost, RemoteHost, local_run_dir
from .models import EvalRun
from .results import clear_pass_results, store_pass_results
from .services import eval_emit, start_next_in_sweep

POLL_S = 1.0
EMIT_EVERY_S = 1.0
MODEL_ABBR = "pdcp"
DATA_FILE = "data.jsonl"
GSM8K_DIR = "gsm8k"
CONFIG_FILE = "eval_config.py"
CONSOLE_LINES = 400


def execute(ctx: JobContext, run: EvalRun) -> None:
    resume = bool(ctx.job.params.get("resume"))
    _set(run, status=EvalStatus.RUNNING, phase="preparing", started=run.started or timezone.now())
    host = _host_for(run)
    try:
        ctx.step(f"ais_bench on {host.name}")
        problem = host.check()
        if problem:
            raise JobFailed(problem)
        run_dir = host.put_files(_files(run))
        for pass_name in PASSES[run.mode]:
            if resume and pass_name in run.passes_done:
                ctx.log(f"{pass_name}: already done, kept")
                continue
            _run_pass(ctx, run, host, run_dir, pass_name, resume)
        _set(run, status=EvalStatus.SUCCEEDED, phase="done", finished=timezone.now(), explanation="")
        ctx.summary = _summary(run)
    except JobCanceled:
        _set(run, status=EvalStatus.CANCELED, phase="canceled", finished=timezone.now(),
             explanation="canceled by the operator; every ais_bench process was stopped. Resume goes on from "
                         "the requests already answered.")
        raise
    except (JobFailed, HostError) as exc:
        _set(run, status=EvalStatus.FAILED, finished=timezone.now(), explanation=str(exc))
        raise JobFailed(str(exc)) from None
    except Exception:
        _set(run, status=EvalStatus.FAILED, finished=timezone.now(),
             explanation="internal error while running the evaluation; see the worker log")
        raise
    finally:
        host.close()
        start_next_in_sweep(run)


def _host_for(run: EvalRun) -> EvalHost:
    if not run.client_node:
        return LocalHost(run.pk)
    if run.deployment is None:
        raise JobFailed("the deployment was deleted: its AISBench client host is unknown")
    node = cluster_nodes(run.deployment.cluster).get(run.client_node)
    if node is None:
        raise JobFailed(f"the AISBench client node {run.client_node!r} is no longer in the inventory")
    try:
        target = ssh_target_for(node)
    except NodeNotReady as exc:
        raise JobFailed(str(exc)) from None
    return RemoteHost(run.pk, target, run.revision_spec["run_dir"])


def _files(run: EvalRun) -> dict[str, str]:
    choice = dataset_choice(run.dataset_key)
    if choice is None or not choice.present:
        raise JobFailed(choice.problem if choice else f"dataset {run.dataset_key} is gone")
    text = choice.path.read_text(encoding="utf-8")
    if run.dataset_family == "gsm8k":  # AISBench's GSM8K loader reads a folder holding train.jsonl and test.jsonl
        train = choice.path.with_name("train.jsonl")
        return {f"{GSM8K_DIR}/test.jsonl": text,
                f"{GSM8K_DIR}/train.jsonl": train.read_text(encoding="utf-8") if train.is_file() else text}
    return {DATA_FILE: text}


def _render(run: EvalRun, run_dir: str, pass_name: str) -> str:
    endpoint = EndpointConfig(base_url=run.endpoint_url, served_model=run.served_model, api_style=run.api_style,
                              stream=run.stream)
    # A fixed output length would cut or pad an accuracy answer: only the performance pass gets it.
    generation = GenerationConfig(max_out_len=run.max_out_len, concurrency=run.concurrency,
                                  request_rate=run.request_rate, temperature=run.temperature, top_p=None, retry=2,
                                  ignore_eos=run.ignore_eos and pass_name == "performance")
    data = GSM8K_DIR if run.dataset_family == "gsm8k" else DATA_FILE
    dataset = DatasetConfig(abbr=run.dataset_abbr, family=run.dataset_family, path=f"{run_dir}/{data}")
    # AISBench checks the tokenizer directory whenever one is named; only the performance summarizer needs it.
    tokenizer = run.tokenizer_path if pass_name == "performance" else ""
    return render_config(MODEL_ABBR, endpoint, generation, dataset, tokenizer)


def _config(run: EvalRun, run_dir: str, pass_name: str) -> str:
    """The config file's source; a value the writer refuses (a run stored before a check existed) fails the job
    naming it, and nothing is written or started."""
    try:
        return _render(run, run_dir, pass_name)
    except ValueError as exc:
        raise JobFailed(f"{pass_name}: the AISBench config cannot be written: {exc}") from None


def _run_pass(ctx: JobContext, run: EvalRun, host: EvalHost, run_dir: str, pass_name: str, resume: bool) -> None:
    work = f"out-{pass_name}"  # relative to the run dir
    reuse = run.timestamps.get(pass_name) if resume else None
    if not reuse:
        clear_pass_results(run, pass_name)
    host.put_files({CONFIG_FILE: _config(run, run_dir, pass_name)})
    total = run.num_prompts or dataset_choice(run.dataset_key).lines or 0
    _set(run, phase=f"{pass_name}: starting ais_bench", progress_done=0, progress_total=total)
    argv = ais_bench_argv(host.executable, f"{run_dir}/{CONFIG_FILE}", f"{run_dir}/{work}", pass_name, num_prompts=run.num_prompts, num_warmups=run.num_warmups,
                          reuse=reuse)
    env = run_env(host.base_env, urlsplit(run.endpoint_url).hostname or "")
    ctx.log(f"{pass_name}: {' '.join(argv)}")
    host.start(argv, env, run.time_limit_s, pass_name)
    try:
        _follow(ctx, run, host, work, pass_name, total)
    except (JobCanceled, JobFailed):
        _bring_home(host, run, work, pass_name)  # what was answered stays: the folder a resume goes on from
        raise
    out, ts_dir = _bring_home(host, run, work, pass_name, strict=True)
    console = _keep_console(host, run, pass_name)
    verdict = judge(out, pass_name, console)
    if ts_dir is not None:
        _store_what_parses(ctx, run, pass_name, ts_dir, required=verdict.ok)
    if not verdict.ok:
        _set(run, log_tail=verdict.log_tail or console.splitlines()[-40:])
        for line in verdict.log_tail[-20:]:
            ctx.log(line, stream="stderr")
        raise JobFailed(f"{pass_name} run failed: " + "; ".join(verdict.reasons))
    _set(run, passes_done=[*run.passes_done, pass_name])


def _keep_console(host: EvalHost, run: EvalRun, pass_name: str) -> str:
    """ais_bench's own stdout/stderr (some failures are told only there), kept beside the output folder."""
    text = "\n".join(host.log_tail(CONSOLE_LINES))
    folder = local_run_dir(run.pk)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{pass_name}.console.log").write_text(text, encoding="utf-8")
    return text


def _store_what_parses(ctx: JobContext, run: EvalRun, pass_name: str, ts_dir, *, required: bool) -> None:
    """Results are stored even from a failed pass (failed requests count as wrong), unless its files are bad."""
    try:
        store_pass_results(run, pass_name, ts_dir)
    except OutputError as exc:
        if required:
            raise JobFailed(f"{pass_name} output could not be read: {exc}") from None
        ctx.log(f"{pass_name}: partial results not stored: {exc}", stream="stderr")
        return
    ctx.log(f"{pass_name}: results stored")


def _bring_home(host: EvalHost, run: EvalRun, work: str, pass_name: str, *, strict: bool = False):
    """The pass's output folder, fetched, and its AISBench timestamp recorded (a resume passes it to --reuse)."""
    try:
        out = host.fetch(work)
    except HostError:
        if strict:
            raise
        return None, None
    ts_dir = latest_run_dir(out)
    if ts_dir is not None:
        run.timestamps = {**run.timestamps, pass_name: ts_dir.name}
        _set(run, timestamps=run.timestamps)
    return out, ts_dir


def _follow(ctx: JobContext, run: EvalRun, host: EvalHost, work: str, pass_name: str, total: int) -> None:
    started = time.monotonic()
    last_emit = 0.0
    _set(run, phase=f"{pass_name}: running")
    while host.running():
        if ctx.cancel_requested:
            ctx.log("cancel requested: stopping ais_bench's process group")
            host.stop()
            raise JobCanceled()
        if time.monotonic() - started > run.time_limit_s + 60:
            host.stop()
            raise JobFailed(f"{pass_name} run went past its wall-clock limit of {run.time_limit_s} s and was killed")
        done = host.progress(work)
        if done != run.progress_done and time.monotonic() - last_emit >= EMIT_EVERY_S:
            _set(run, progress_done=min(done, total) if total else done)
            last_emit = time.monotonic()
        time.sleep(POLL_S)
    if time.monotonic() - started >= run.time_limit_s:
        raise JobFailed(f"{pass_name} run hit its wall-clock limit of {run.time_limit_s} s and was killed")
    _set(run, progress_done=total or host.progress(work), phase=f"{pass_name}: reading results")


def _set(run: EvalRun, **fields) -> None:
    close_old_connections()
    for name, value in fields.items():
        setattr(run, name, value)
    EvalRun.objects.filter(pk=run.pk).update(**fields)
    eval_emit(run)


def _summary(run: EvalRun) -> str:
    parts = []
    if run.accuracy is not None:
        parts.append(f"accuracy {run.accuracy:.2f}%")
    tput = (run.perf_summary or {}).get("output_token_throughput")
    if tput:
        parts.append(f"output {tput} token/s")
    return ", ".join(parts) or "done"
