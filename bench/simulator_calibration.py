"""The simulator's figures next to the published ones (simcluster/calibration.py), measured on real simulated engines.

  .venv/bin/python bench/simulator_calibration.py [--case KEY ...] [--window-cap 20]

Time scale 1, addresses 127.0.10.95-.98 (P .95, D .96, pdproxy .97, PD-mixed engine .98). Every process started
is stopped by PID before the next case. How each case is measured in a short, bounded run:
- One engine process per role with one DP rank at the case's TP and --max-num-seqs: the simulator's DP ranks are
  independent cores, so a rank's figures times the rank count are the instance's. PD cases go client -> pdproxy ->
  P -> KV pull -> D, PD-mixed cases client -> engine.
- `b` resident streams (short prompts, ignore_eos, no max) keep the decoding rank at the case's steady-state batch
  (b and the arrival rate come from the cost model's replay of the published run, calibration.replay).
- A window of n whole arrival intervals (n >= 2, about 6 s or more, capped): at each interval one resident is
  cancelled (the engine aborts it) and one request at the published input length and output length arrives and
  takes its slot, as in steady state where a finished request makes room for the next. TTFT = median of these
  arrivals (on PD through one P rank that gets the Decode rank's arrival rate, not the P instance's); TPOT = mean
  gap between consecutive decode tokens of all streams inside the window (prefill stalls included); output tok/s
  = tokens streamed in the window / window x decoding ranks. The published runs also hold ramp-up and ramp-down; the "model" column (the replay of the whole
  published run) includes them, the measured window does not.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from simcluster import calibration  # noqa: E402

P_HOST, D_HOST, PROXY_HOST, MIXED_HOST = "127.0.10.95", "127.0.10.96", "127.0.10.97", "127.0.10.98"
API_PORT, PROXY_PORT = 7300, 7400
MODEL_NAMES = {"deepseek-r1": "/models/ds_r1", "qwen3-235b": "/models/qwen3-235b"}
RESIDENT_PROMPT_WORDS = 64


def kv_config(role: str, case: calibration.Case) -> str:
    return json.dumps({"kv_connector": "MooncakeConnectorV1", "kv_role": role,
                       "kv_port": "31000" if role == "kv_producer" else "31200",
                       "kv_connector_extra_config": {"prefill": {"dp_size": case.prefill.dp, "tp_size": case.prefill.tp},
                                                     "decode": {"dp_size": case.decode.dp, "tp_size": case.decode.tp}}})


class Processes:
    def __init__(self, logdir: Path):
        self.logdir, self.procs = logdir, []

    def start(self, name: str, argv: list[str]) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO), "SIMCLUSTER_TIME_SCALE": "1", "SIMCLUSTER_STARTUP_S": "0"}
        env.pop("SIMCLUSTER_MODEL_PROFILE", None)
        log = open(self.logdir / f"{name}.log", "wb")
        self.procs.append((name, subprocess.Popen([sys.executable, *argv], env=env, stdout=log, stderr=log), log))

    def engine(self, name: str, case: calibration.Case, host: str, role: calibration.Role, kv: str | None) -> None:
        argv = ["-m", "simcluster.engine", "serve", MODEL_NAMES[case.profile], "--host", host, "--port",
                str(API_PORT), "-tp", str(role.tp), "--max-num-seqs", str(role.max_num_seqs),
                "--max-model-len", "65536", "--no-enable-prefix-caching"]
        self.start(name, argv + (["--kv-transfer-config", kv] if kv else []))

    def stop(self) -> None:
        for _, proc, _ in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for _name, proc, log in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
            log.close()
        self.procs = []

    def dead(self) -> list[str]:
        return [name for name, proc, _ in self.procs if proc.poll() is not None]


async def wait_healthy(session: aiohttp.ClientSession, urls: list[str], procs: Processes) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if procs.dead():
            raise RuntimeError(f"exited at start: {procs.dead()} (logs in {procs.logdir})")
        try:
            codes = []
            for url in urls:
                async with session.get(url + "/health") as r:
                    codes.append(r.status)
            if all(c == 200 for c in codes):
                return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError(f"not healthy within 30 s: {urls}")


def prompt(words: int, tag: str) -> str:
    return " ".join(f"{tag}w{j}" for j in range(words))


class Stream:
    """One streaming completion: token arrival times, TTFT."""

    def __init__(self, session, url: str, model: str, text: str, max_tokens: int):
        self.sent = time.monotonic()
        self.times: list[float] = []
        self.task = asyncio.create_task(self._run(session, url, model, text, max_tokens))

    async def _run(self, session, url, model, text, max_tokens) -> None:
        body = {"model": model, "prompt": text, "max_tokens": max_tokens, "stream": True, "ignore_eos": True}
        async with session.post(url + "/v1/completions", json=body) as r:
            if r.status != 200:
                raise RuntimeError(f"{url}: {r.status} {await r.text()}")
            async for line in r.content:
                if line.startswith(b"data: {"):
                    self.times.append(time.monotonic())

    @property
    def ttft(self) -> float | None:
        return self.times[0] - self.sent if self.times else None


async def measure(case: calibration.Case, model: dict, window_cap: float) -> dict:
    decoding = case.decode or case.mixed
    front = case.prefill or case.mixed
    out = case.output_tokens
    batch = max(1, min(decoding.max_num_seqs, round(model["output_tps"] * model["tpot_ms"] / 1000 / decoding.ranks)))
    rate = model["output_tps"] / out / decoding.ranks  # arrivals per second per decoding rank
    intervals = min(max(2, math.ceil(6 * rate)), max(1, int(window_cap * rate)))
    window = intervals / rate
    procs = Processes(Path(tempfile.mkdtemp(prefix="simcal-")))
    try:
        if case.decode:
            procs.engine("prefill", case, P_HOST, front, kv_config("kv_producer", case))
            procs.engine("decode", case, D_HOST, decoding, kv_config("kv_consumer", case))
            backends = [f"http://{P_HOST}:{API_PORT}", f"http://{D_HOST}:{API_PORT}"]
            procs.start("pdproxy", ["-m", "pdproxy", "--host", PROXY_HOST, "--port", str(PROXY_PORT), "--prefill",
                                    f"{P_HOST}:{API_PORT}", "--decode", f"{D_HOST}:{API_PORT}"])
            url = f"http://{PROXY_HOST}:{PROXY_PORT}"
        else:
            procs.engine("mixed", case, MIXED_HOST, front, None)
            backends, url = [f"http://{MIXED_HOST}:{API_PORT}"], f"http://{MIXED_HOST}:{API_PORT}"
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=5)
        async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as session:
            await wait_healthy(session, backends + ([url] if case.decode else []), procs)
            name = MODEL_NAMES[case.profile]
            residents = [Stream(session, url, name, prompt(RESIDENT_PROMPT_WORDS, f"r{i}"), 1_000_000)
                         for i in range(batch)]
            settle = time.monotonic() + 60
            while any(not s.times for s in residents) and time.monotonic() < settle:
                await asyncio.sleep(0.05)
                for s in residents:
                    if s.task.done() and s.task.exception():
                        raise s.task.exception()
            await asyncio.sleep(0.5)
            start = time.monotonic()
            arrivals, cancelled = [], []  # an arrival takes a cancelled resident's slot and decodes on
            for k in range(intervals):
                await asyncio.sleep(max(0.0, start + (k + 0.5) / rate - time.monotonic()))
                cancelled.append(residents.pop(0))
                cancelled[-1].task.cancel()
                arrivals.append(Stream(session, url, name, prompt(case.input_tokens, f"a{k}"), out))
            await asyncio.sleep(max(0.0, start + window - time.monotonic()))
            end = time.monotonic()
            first_tokens = [a.ttft for a in arrivals if a.ttft is not None]
            while len(first_tokens) < len(arrivals) and time.monotonic() < end + 30:
                await asyncio.sleep(0.05)
                first_tokens = [a.ttft for a in arrivals if a.ttft is not None]
            streams = residents + cancelled + arrivals
            gaps, tokens = [], 0
            for s in streams:
                inside = [t for t in s.times[1:] if start <= t <= end]  # decode tokens only
                gaps += [b - a for a, b in zip(inside, inside[1:], strict=False)]
            for s in streams:
                tokens += sum(1 for t in s.times if start <= t <= end)
            for s in streams:
                s.task.cancel()
            await asyncio.gather(*(s.task for s in streams), return_exceptions=True)
    finally:
        procs.stop()
    shutil.rmtree(procs.logdir)  # kept when the run failed
    output_tps = tokens / (end - start) * decoding.ranks
    return {"output_tps": output_tps, "tpot_ms": 1000 * statistics.fmean(gaps),
            "ttft_median_ms": 1000 * statistics.median(first_tokens) if first_tokens else float("nan"),
            "total_tps_per_die": output_tps * (case.input_tokens + out) / out / case.dies,
            "_batch": batch, "_window_s": end - start, "_arrivals": len(arrivals)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", nargs="*", help="case keys (default: all)")
    parser.add_argument("--window-cap", type=float, default=20.0, help="longest measuring window, seconds")
    args = parser.parse_args()
    cases = [calibration.case_named(k) for k in args.case] if args.case else calibration.CASES
    measured, modelled = {}, {}
    for case in cases:
        modelled[case.key] = calibration.replay(case)
        t0 = time.monotonic()
        measured[case.key] = asyncio.run(measure(case, modelled[case.key], args.window_cap))
        m = measured[case.key]
        print(f"# {case.key}: {case.layout()}, batch {m['_batch']} per decoding rank, window {m['_window_s']:.1f} s, "
              f"{m['_arrivals']} arrivals, {time.monotonic() - t0:.0f} s", flush=True)
    print()
    print("| case | figure | published | sim measured | sim model | measured / published | model / published |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for case in cases:
        for name, published in case.figures.items():
            m, mod = measured[case.key][name], modelled[case.key][name]
            flag = "" if case.asserts(name) else " (not asserted)"
            print(f"| {case.key} | {calibration.FIGURES[name]}{flag} | {published:g} | {m:.4g} | {mod:.4g} | "
                  f"{m / published:.2f} | {mod / published:.2f} |")
    pd_key, mixed_key = calibration.PD_OVER_MIXED
    if pd_key in measured and mixed_key in measured:
        pub = calibration.published_pd_over_mixed()
        m = measured[pd_key]["output_tps"] / measured[mixed_key]["output_tps"]
        mod = modelled[pd_key]["output_tps"] / modelled[mixed_key]["output_tps"]
        print(f"| {pd_key} / {mixed_key} | {calibration.FIGURES['pd_over_mixed']} | {pub:.3f} | {m:.3f} | "
              f"{mod:.3f} | {m / pub:.2f} | {mod / pub:.2f} |")
    print()
    for case in cases:
        print(f"- {case.key}: {case.hardware}, {case.layout()}, {case.input_tokens}/{case.output_tokens} tokens, "
              f"concurrency {case.concurrency}, rate {case.request_rate or 'unbounded'}, {case.num_prompts} prompts. "
              f"{case.source}. {case.note}")


if __name__ == "__main__":
    main()
