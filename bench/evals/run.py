"""Where the time of an accuracy run goes: ais_bench's own start-up, the prompts, and the control plane around it.

For N = 1 and N = 21 prompts of made-up-aime, side by side in one run:
  - the same ais_bench command run directly (subprocess, the config the control plane generated, same endpoint),
  - the same run through the control plane (eval_run_create, then the evaluate job run in this process),
    locally (no client host: the evals worker runs ais_bench) and on the client host over SSH,
plus `ais_bench --help`. Start-up ~ the direct N=1 time; per-prompt cost = (N=21 - N=1) / 20.

Run as root (it starts sshd):
  DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/evals/run.py
It creates and drops its own test database, deploys a small simulated PD deployment (1 Prefill, 1 Decode,
pdproxy, an AISBench client host) on 127.0.10.228-.231 answering the made-up-aime book, keeps eval files in a
temp dir, and stops everything by PID at the end. BENCH_REPEATS (default 2): medians of that many runs;
BENCH_KEEP_FILES=1 keeps the temp dir (ais_bench's logs and output folders).
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
TMP = Path(tempfile.mkdtemp(prefix="pdcp-bench-evals-", dir="/tmp"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
os.environ["PDCP_DATA_DIR"] = str(TMP / "data")
os.environ["PDCP_EVALS_DIR"] = str(TMP / "evals")

import django  # noqa: E402

django.setup()

import yaml  # noqa: E402
from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402

REPEATS = int(os.environ.get("BENCH_REPEATS", "2"))
ADDRESSES = [f"127.0.10.{228 + i}" for i in range(4)]
SIZES = (1, 21)
RUN_SETTINGS = {"dataset": "catalogue:made-up-aime", "mode": "accuracy", "max_out_len": 512, "concurrency": 4,
                "num_warmups": 0, "time_limit_s": 300}
PHASES = ("CLI start-up and config load", "inference task process starts", "inference requests",
          "inference task ends", "evaluation task process starts", "evaluation and its end", "summary",
          "exit after the last log line")
LOG_TIME = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] \[ais_bench\]")
ENGINE_ENV = {"SIMCLUSTER_STARTUP_S": "0.2", "SIMCLUSTER_TIME_SCALE": "0.3"}  # as tests/evals/test_eval_runs_sim.py


def cluster_spec() -> dict:
    node = {"ssh_port": 22, "labels": {"rack": "r1"}}
    names = (("node0", "prefill", "A3"), ("node1", "decode", "A3"), ("proxy", "proxy", ""), ("bench", "client", ""))
    nodes = [{**node, "name": n, "role": r, "hardware": hw, "address": a}
             for (n, r, hw), a in zip(names, ADDRESSES, strict=True)]
    return {"name": "bench-evals", "nodes": nodes, "services": {}}


def topology(run_dir: str) -> str:
    ref = yaml.safe_load((REPO / "examples" / "reference-topology-fixed.yaml").read_text())
    prefill = {**ref["instances"][0], "env": dict(ENGINE_ENV)}
    decode = {**ref["instances"][2], "node": "node1", "dp": 1, "env": dict(ENGINE_ENV)}
    decode.pop("dp_rpc_port")
    data = {"launch_profile": "sim", "run_dir": run_dir, "model": ref["model"], "instances": [prefill, decode],
            "proxy": ref["proxy"], "bench_client": {"node": "bench"},
            "simulation": {"answer_book": "made-up-aime", "accuracy": 0.7, "think": True}}
    return yaml.safe_dump(data, sort_keys=False)


def run_job_checked(job) -> None:
    from apps.jobs.models import Job
    from apps.jobs.runner import run_job

    run_job(job.pk)
    job = Job.objects.get(pk=job.pk)
    if job.status != "successful":
        raise SystemExit(f"{job.kind} failed: {job.explanation}")


def through_control_plane(deployment, n: int, *, ssh: bool) -> tuple[float, dict]:
    """Seconds from eval_run_create to the job's end, and where they went (from the job's event times)."""
    from apps.evals.hosts import local_run_dir
    from apps.evals.models import EvalRun
    from apps.evals.services import eval_run_create
    from apps.jobs.runner import run_job

    t0 = time.time()
    run = eval_run_create(deployment=deployment, user=None, settings={**RUN_SETTINGS, "num_prompts": n})
    if not ssh:  # the evals worker runs it, as for a deployment without a bench_client
        EvalRun.objects.filter(pk=run.pk).update(client_node="")
    run_job(run.job_id)
    seconds = time.time() - t0
    run = EvalRun.objects.get(pk=run.pk)
    if run.status != "succeeded" or run.samples.count() != n:
        raise SystemExit(f"eval #{run.pk} {run.status}: {run.explanation}\n" + "\n".join(run.log_tail))
    events = list(run.job.events.order_by("counter"))
    started = next(e.time.timestamp() for e in events if e.text.startswith("accuracy: ") and "--mode" in e.text)
    stored = next(e.time.timestamp() for e in events if e.text == "accuracy: results stored")
    last_line = last_log_time(local_run_dir(run.pk) / "accuracy.console.log")
    return seconds, {"before": started - t0, "during": stored - started, "after": t0 + seconds - stored,
                     "ais_bench": last_line - started, "follow": stored - last_line, "run": run}


def last_log_time(path: Path) -> float:
    """When ais_bench wrote its last log line (this machine's clock: the client host is a loopback sshd here)."""
    return log_time(path, "")


def log_time(path: Path, marker: str, *, first: bool = False) -> float:
    """When ais_bench logged a line containing marker (the last such line, or the first)."""
    lines = [line for line in path.read_text(errors="replace").splitlines() if marker in line]
    stamps = [stamp for line in lines for stamp in LOG_TIME.findall(line)]
    if not stamps:
        raise SystemExit(f"no ais_bench log line with {marker!r} in {path}")
    return datetime.strptime(stamps[0 if first else -1], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def ais_bench_phases(console: Path, out: Path, launched: float, ended: float) -> dict[str, float]:
    """Where a direct run's time went, from ais_bench's own log lines (console, infer and eval task logs)."""
    infer = next((out / "logs" / "infer").rglob("*.out"))
    evaluate = next((out / "logs" / "eval").rglob("*.out"))
    marks = [launched, log_time(console, "", first=True), log_time(infer, "Task [", first=True),
             log_time(infer, "Api infer task time elapsed"), log_time(console, "Inference tasks completed"),
             log_time(evaluate, "", first=True), log_time(console, "Evaluation tasks completed"),
             log_time(console, ""), ended]
    return dict(zip(PHASES, (b - a for a, b in zip(marks, marks[1:], strict=False)), strict=True))


def direct(run_dir: Path, n: int, work: Path) -> tuple[float, dict[str, float]]:
    """The command the job ran, with the same config, env and `timeout` wrapper, in its own work dir."""
    from urllib.parse import urlsplit

    from apps.evals.aisbench.config_writer import ais_bench_argv, run_env
    from apps.evals.aisbench.output_parser import judge, latest_run_dir, parse_accuracy
    from apps.evals.execution import CONFIG_FILE
    from apps.evals.hosts import _limited

    config = (run_dir / CONFIG_FILE).read_text()
    url = next(line.split("'")[1] for line in config.splitlines() if line.strip().startswith("url="))
    argv = _limited(ais_bench_argv(settings.PDCP_AISBENCH, str(run_dir / CONFIG_FILE), str(work), "accuracy",
                                   num_prompts=n, num_warmups=RUN_SETTINGS["num_warmups"]), RUN_SETTINGS["time_limit_s"])
    env = run_env(dict(os.environ), urlsplit(url).hostname)
    console = work.parent / f"{work.name}.log"
    with console.open("wb") as log:
        t0, launched = time.perf_counter(), time.time()
        subprocess.run(argv, cwd=run_dir, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                       check=False)
        seconds = time.perf_counter() - t0
        ended = time.time()
    verdict = judge(work, "accuracy")
    samples = parse_accuracy(latest_run_dir(work))[0].samples if verdict.ok else []
    if len(samples) != n:
        raise SystemExit(f"direct ais_bench N={n} failed: {verdict.reasons}")
    return seconds, ais_bench_phases(console, latest_run_dir(work), launched, ended)


def help_seconds() -> float:
    t0 = time.perf_counter()
    subprocess.run([settings.PDCP_AISBENCH, "--help"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=True, cwd=TMP)
    return time.perf_counter() - t0


def warm_page_cache() -> None:
    """Untimed: the modules every ais_bench process imports, read once, so the first timed run is not the cold one."""
    from apps.evals.aisbench.install import probe_env, venv_python

    subprocess.run([str(venv_python(Path(settings.PDCP_AISBENCH))), "-c",
                    "import torch, datasets, transformers, ais_bench.benchmark.cli.main"],
                   env=probe_env(), cwd=TMP, check=True)


def measure(deployment) -> tuple[dict, dict]:
    """Interleaved: each repeat runs every variant once, so drift in the machine's load hits them alike."""
    from apps.evals.hosts import local_run_dir

    warm_page_cache()
    times: dict[str, list[float]] = {}
    parts: dict[str, list[dict]] = {}
    config_dir = None
    for r in range(REPEATS):
        times.setdefault("help", []).append(help_seconds())
        for n in SIZES:
            for where, ssh in (("local", False), ("ssh", True)):
                seconds, split = through_control_plane(deployment, n, ssh=ssh)
                times.setdefault(f"{where} {n}", []).append(seconds)
                parts.setdefault(f"{where} {n}", []).append(split)
                config_dir = config_dir or local_run_dir(split["run"].pk)  # the generated config and data file
            work = TMP / "direct" / f"n{n}-{r}"
            work.parent.mkdir(parents=True, exist_ok=True)
            seconds, phases = direct(config_dir, n, work)
            times.setdefault(f"direct {n}", []).append(seconds)
            for phase, took in phases.items():
                times.setdefault(f"{phase} {n}", []).append(took)
    return times, parts


def report(times: dict, parts: dict) -> None:
    med = {k: statistics.median(v) for k, v in times.items()}

    def vals(key):
        return ", ".join(f"{v:.2f}" for v in times[key])

    print(f"accuracy run of made-up-aime (chat, stream, concurrency {RUN_SETTINGS['concurrency']}, max_out_len "
          f"{RUN_SETTINGS['max_out_len']}, 0 warm-ups) against pdproxy -> Prefill -> KV -> Decode (simulated, "
          f"time scale {ENGINE_ENV['SIMCLUSTER_TIME_SCALE']}), median of {REPEATS}; load {os.getloadavg()[0]:.2f}:")
    print(f"  ais_bench --help                          {med['help']:6.2f}s  ({vals('help')})")
    for n in SIZES:
        base, exit_s = med[f"direct {n}"], med[f"exit after the last log line {n}"]
        print(f"  N={n:<2} direct ais_bench                    {base:6.2f}s  ({vals(f'direct {n}')}); exits "
              f"{exit_s:.2f}s after its last log line")
        for where, label in (("local", "control plane, local (evals worker)"), ("ssh", "control plane, client host/SSH")):
            key = f"{where} {n}"
            split = {p: statistics.median(s[p] for s in parts[key]) for p in parts[key][0] if p != "run"}
            own = split["before"] + split["follow"] - exit_s + split["after"]
            print(f"  N={n:<2} {label:<36} {med[key]:6.2f}s  ({vals(key)})  minus direct {med[key] - base:+.2f}s = "
                  f"{med[key] / base:.2f}x")
            print(f"        its own part {own:.2f}s = {(base + own) / base:.2f}x direct: create->ais_bench started "
                  f"{split['before']:.2f}s, ais_bench's last log line->results stored {split['follow']:.2f}s (less "
                  f"the {exit_s:.2f}s a direct run takes to exit), stored->job ended {split['after']:.2f}s")
    startup, whole = med["direct 1"], med["direct 21"]
    print(f"  ais_bench start-up ~ direct N=1 = {startup:.2f}s = {startup / whole:.0%} of direct N=21; per prompt "
          f"(N=21 - N=1)/20 = {(whole - startup) / 20:.3f}s")
    print("  where a direct ais_bench run's time goes (from its own log lines)      N=1      N=21")
    for phase in PHASES:
        print(f"    {phase:<66} {med[f'{phase} 1']:6.2f}s  {med[f'{phase} 21']:6.2f}s")
    r1, r21 = med["inference requests 1"], med["inference requests 21"]
    print(f"  requests: {r1:.2f}s of {startup:.2f}s at N=1, {r21:.2f}s of {whole:.2f}s at N=21, per prompt "
          f"{(r21 - r1) / 20:.3f}s; everything else is ais_bench's processes starting, waiting and ending")
    spread = {n: max(times[f"direct {n}"]) - min(times[f"direct {n}"]) for n in SIZES}
    print(f"  run-to-run spread of direct ais_bench: N=1 {spread[1]:.2f}s, N=21 {spread[21]:.2f}s: a 'minus direct' "
          "smaller than that is noise; 'its own part' is timed around ais_bench, not by difference")


def main() -> None:
    from apps.deployments.services import deployment_create, deployment_deploy, deployment_stop
    from apps.inventory.models import Cluster
    from apps.inventory.services import inventory_import
    from apps.jobs import tasks
    from simcluster import cluster
    from simcluster.rundirs import new_run_dir

    tasks.run_job_task.apply_async = lambda *a, **k: None  # the bench runs each job itself, in this process
    connection.settings_dict.setdefault("TEST", {})["NAME"] = f"test_pdcp_bench_evals_{os.getpid()}"
    old_name = connection.creation.create_test_db(verbosity=0)
    state_dir = TMP / "sim"
    state_dir.mkdir(mode=0o755)
    TMP.chmod(0o755)  # sshd reads the state dir's keys as the login user
    run_dir = new_run_dir("bench-evals")
    deployment = None
    try:
        state = cluster.up(cluster_spec(), state_dir)
        inventory_import(Path(state["inventory"]).read_text(), allow_key_files=True)
        deployment = deployment_create(name="bench-evals", cluster=Cluster.objects.get(name="bench-evals"),
                                       user=None, yaml_text=topology(run_dir))
        t0 = time.perf_counter()
        run_job_checked(deployment_deploy(deployment=deployment, user=None, params={"health_timeout": 60}))
        print(f"deployed 1 Prefill + 1 Decode + pdproxy in {time.perf_counter() - t0:.1f}s")
        report(*measure(deployment))
    finally:
        if deployment is not None:
            try:
                run_job_checked(deployment_stop(deployment=deployment, user=None, params={"stop_grace": 3}))
            except SystemExit as exc:
                print(exc)
        cluster.down(state_dir)
        shutil.rmtree(run_dir, ignore_errors=True)
        connection.creation.destroy_test_db(old_name, verbosity=0)
        if os.environ.get("BENCH_KEEP_FILES"):
            print(f"kept {TMP} (ais_bench's logs and outputs)")
        else:
            shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    main()
