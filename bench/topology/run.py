"""The topology dashboard at 64 nodes x 16 NPUs and 256 instances: collector CPU per scrape round as targets grow,
the page's first render and live update in Chromium, and the latency from a metric change on an engine to the
browser, measured side by side in one run.

  .venv/bin/python bench/topology/run.py [--rounds 3] [--changes 8] [--no-browser] [--json out.json]

DATABASE_URL names the PostgreSQL server (a throwaway database is created there and dropped), REDIS_URL the Redis
(keys under a namespace of the run's own, deleted at the end). Simulated metrics endpoints (targets.py, another
process) listen on 127.0.10.65-.79; daphne and Chromium on 127.0.0.1. Every process is stopped by PID at the end,
also on Ctrl-C or an error, and dies with the bench (PR_SET_PDEATHSIG). About 3 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
NAMESPACE = f"pdcp-bench-topology-{os.getpid()}"
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
os.environ.setdefault("PDCP_DATA_DIR", str(REPO / "data" / "test"))
os.environ["PDCP_NAMESPACE"] = NAMESPACE  # cache keys, channel groups: this run's own
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # ORM calls beside Playwright's sync API (its loop, this thread)

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402

from bench.topology import collector, deployment  # noqa: E402
from simcluster.kvpool import die_with_parent  # noqa: E402

ADDRESSES = [f"127.0.10.{65 + i}" for i in range(15)]
INTERVAL_S = 5.0
USER, PASSWORD = "bench-viewer", "bench-password-123"
TMP = Path(tempfile.mkdtemp(prefix="pdcp-bench-topology-", dir="/tmp"))
PROCS: list[subprocess.Popen] = []


# -- processes ---------------------------------------------------------------------------------------------------

def spawn(argv: list[str], env: dict, log: Path, **kw) -> subprocess.Popen:
    proc = subprocess.Popen(argv, env=env, cwd=REPO, stderr=log.open("wb"), preexec_fn=die_with_parent,
                            start_new_session=True, **kw)
    PROCS.append(proc)
    return proc


def stop_all() -> None:
    for proc in reversed(PROCS):
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(5)


def start_targets(plan: dict) -> tuple[subprocess.Popen, dict[str, int]]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = spawn([sys.executable, str(Path(__file__).with_name("targets.py"))], env, TMP / "targets.log",
                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    proc.stdin.write(json.dumps(plan) + "\n")
    proc.stdin.flush()
    line = proc.stdout.readline()
    if not line:
        raise SystemExit(f"the simulated endpoints did not start: {(TMP / 'targets.log').read_text()[-2000:]}")
    return proc, json.loads(line)["ports"]


def database_url() -> str:
    db = connection.settings_dict
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def start_daphne() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "DATABASE_URL": database_url(), "PYTHONPATH": str(REPO)}
    proc = spawn([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "controlplane.asgi:application"],
                 env, TMP / "daphne.log", stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"daphne exited: {(TMP / 'daphne.log').read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    raise SystemExit("daphne did not listen within 30 s")


def daphne_refusals() -> list[str]:
    """Websocket messages daphne refused to send (autobahn's payload limit), from its log."""
    log = (TMP / "daphne.log").read_text(errors="replace")
    return [line for line in log.splitlines() if "PayloadExceededError:" in line]


def control(port: int, path: str) -> dict:
    with urllib.request.urlopen(f"http://{ADDRESSES[-1]}:{port}{path}", timeout=5) as resp:
        return json.loads(resp.read())


def forget_redis_keys() -> None:
    import redis

    r = redis.Redis.from_url(settings.REDIS_URL)
    keys = list(r.scan_iter(f"{NAMESPACE}*", count=1000))
    if keys:
        r.delete(*keys)


# -- the measurements --------------------------------------------------------------------------------------------

def collector_figures(dep, procs: list, sizes: list[int], rounds: int, control_port: int) -> dict:
    engines = [p for p in procs if p.role in ("prefill", "decode")]
    prefill = [p for p in engines if p.role == "prefill"]
    decode = [p for p in engines if p.role == "decode"]
    service = [p for p in procs if p.role not in ("prefill", "decode")]
    rows = []
    for n in sizes:
        rows.append({"what": f"{n} engines", **collector.measure(dep, prefill[:n // 2] + decode[:n - n // 2], rounds)})
    proxy = [p for p in service if p.role == "proxy"]
    rows.append({"what": f"proxy alone ({len(prefill)}x{len(decode)} edges)", **collector.measure(dep, proxy, rounds)})
    full = f"full: {len(engines)} engines + proxy + pool"
    rows.append({"what": full, **collector.measure(dep, procs, rounds)})
    with collector.variant("keep-alive"):
        rows.append({"what": f"{full}, keep-alive", **collector.measure(dep, procs, rounds)})
    with collector.variant("whole pages"):
        rows.append({"what": f"{full}, whole pages (before)", **collector.measure(dep, procs, rounds)})
        rows.append({"what": f"{len(engines)} engines, whole pages (before)",
                     **collector.measure(dep, engines, rounds)})
    control(control_port, "/page?kind=simcluster")
    rows.append({"what": f"{len(engines)} engines, simcluster page", **collector.measure(dep, engines, rounds)})
    control(control_port, "/page?kind=vllm")
    areas, top = collector.profile(dep, procs)
    return {"rows": rows, "profile_areas": areas, "profile_top": top, "payload_bytes": collector.payload_bytes(dep.pk),
            "redis_bytes": collector.redis_bytes(dep.pk)}


def print_collector(fig: dict, rounds: int) -> None:
    print(f"collector: apps.telemetry.services.deployment_scrape, median of {rounds} rounds after a warm one, "
          f"history full ({collector_history_len()} points); CPU of this process (all threads), endpoints elsewhere")
    print(f"  {'targets':<58} {'n':>4} {'CPU ms':>8} {'wall ms':>8} {'CPU ms/target':>13} {'% core @5s':>10} {'CPU vs as is':>12}")
    by_name = {r["what"]: r for r in fig["rows"]}
    for r in fig["rows"]:
        per = r["cpu_s"] / r["targets"] * 1000
        base = by_name.get(r["what"].split(", ")[0]) if ", " in r["what"] else None
        vs = f"{r['cpu_s'] / base['cpu_s']:11.2f}x" if base else ""
        print(f"  {r['what']:<58} {r['targets']:>4} {r['cpu_s'] * 1000:8.1f} {r['wall_s'] * 1000:8.1f} "
              f"{per:13.2f} {100 * r['cpu_s'] / INTERVAL_S:9.1f}% {vs}")
    total = sum(s for _, s in fig["profile_areas"])
    print("  one full round under cProfile (thread CPU time), share of its own time by area: "
          + ", ".join(f"{name} {100 * s / total:.0f}%" for name, s in fig["profile_areas"][:8]))
    for line in fig["profile_top"][:6]:
        print(f"    {line}")
    size = fig["payload_bytes"]
    print(f"  websocket payload of one round: {size['all'] / 1024:.0f} KiB of JSON; largest parts: "
          + ", ".join(f"{k} {v / 1024:.0f} KiB" for k, v in size.items() if k != "all"))
    print("  written to Redis each round (pickled, read back the next): "
          + ", ".join(f"{k} {v / 1024:.0f} KiB" for k, v in fig["redis_bytes"].items()))


def collector_history_len() -> int:
    from apps.telemetry.selectors import HISTORY_LEN

    return HISTORY_LEN


def browser_figures(dep, procs: list, changes: int, burst: int, control_port: int, renders: int) -> dict:
    from django.contrib.auth import get_user_model
    from playwright.sync_api import sync_playwright

    from apps.accounts.roles import Role, set_role
    from apps.realtime.push import emit
    from bench.topology.browser import Page

    set_role(get_user_model().objects.create_user(USER, password=PASSWORD), Role.VIEWER)
    base = start_daphne()
    rounds: list[tuple[float, float]] = []
    stop = threading.Event()
    beat = threading.Thread(target=collector.timed_rounds, name="beat",
                            args=(dep, procs, INTERVAL_S, stop, lambda a, b: rounds.append((a, b))), daemon=True)
    beat.start()
    engines = [p for p in procs if p.role in ("prefill", "decode")]
    try:
        while not rounds:
            time.sleep(0.1)
        with sync_playwright() as pw:
            page = Page(pw, base, USER, PASSWORD, len(engines))
            try:
                first = [page.first_render(dep.pk) for _ in range(renders)]
                # As is: does a round's push reach the page at all?
                time.sleep(INTERVAL_S * 2 + 1)
                as_is = {"delivered": len(page.updates()), "refused": daphne_refusals()}
                with collector.trimmed_pushes():
                    page.wait_updates(len(page.updates()) + 1, INTERVAL_S * 3)
                    seen_before = len(page.updates())

                    def push_burst():
                        for _ in range(burst):
                            live = collector.current_push(dep.pk)
                            emit(f"deployment-{dep.pk}", collector.busy_edges_only({"type": "live", "live": live}))
                            time.sleep(0.25)

                    pusher = threading.Thread(target=push_burst, name="burst")
                    pusher.start()
                    pusher.join()
                    page.wait_updates(seen_before + burst, 30)
                    latencies = []
                    rng = random.Random(12)
                    for k in range(changes):
                        time.sleep(rng.uniform(0, INTERVAL_S))
                        proc = engines[rng.randrange(len(engines))]
                        value = 5000 + k
                        page.expect_text(k, proc.instance, f"run {value} ")
                        changed = control(control_port, f"/set?key={proc.key}&running={value}")["at"]
                        shown = page.wait_seen(k, INTERVAL_S * 2 + 10)
                        picked = next((a for a, _b in rounds if a >= changed), None)
                        if shown is None:
                            latencies.append({"instance": proc.instance, "latency_s": None})
                            continue
                        latencies.append({"instance": proc.instance, "latency_s": shown - changed,
                                          "wait_for_round_s": None if picked is None else picked - changed,
                                          "round_to_page_s": None if picked is None else shown - picked})
                updates = page.updates()
                errors = page.errors
                sockets = page.sockets()
            finally:
                page.close()
    finally:
        stop.set()
        beat.join(30)
    return {"first": first, "as_is": as_is, "updates": [u for u in updates[seen_before:] if u["frame_ms"] is not None],
            "latency": latencies, "errors": errors, "sockets": sockets, "round_s": [b - a for a, b in rounds]}


def q(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))]


def print_browser(fig: dict) -> None:
    f = fig["first"]
    print(f"browser: Chromium {CHROMIUM_VERSION()}, the deployment page, {len(f)} loads")
    print(f"  first render (navigation start -> SVG holds {f[0]['boxes']} instance boxes): "
          + ", ".join(f"{x['render_ms']:.0f}" for x in f) + " ms; median "
          + f"{statistics.median(x['render_ms'] for x in f):.0f} ms (goal < 1000 ms)")
    print(f"    of which the page's HTML {statistics.median(x['html_ms'] for x in f):.0f} ms, topology.json requested at "
          f"{statistics.median(x['json_start_ms'] for x in f):.0f} ms (its request -> response "
          f"{statistics.median(x['json_end_ms'] - x['json_start_ms'] for x in f):.0f} ms) and arrived at "
          f"{statistics.median(x['json_end_ms'] for x in f):.0f} ms ({f[0]['json_bytes'] / 1024:.0f} KiB), drawing "
          f"{statistics.median(x['render_ms'] - x['json_end_ms'] for x in f):.0f} ms; "
          f"{f[0]['svg_elements']} SVG elements, {f[0]['kv_edges']} P->D edges")
    a = fig["as_is"]
    limit = a["refused"][-1].split("PayloadExceededError: ", 1)[-1] if a["refused"] else ""
    print(f"  live pushes reaching the page in the {2 * INTERVAL_S + 1:.0f} s after load: {a['delivered']}"
          + (f"; daphne refused {len(a['refused'])}: {limit}" if a["refused"] else ""))
    u = fig["updates"]
    ms, frame = [x["ms"] for x in u], [x["frame_ms"] for x in u]
    print(f"  live update ({len(u)} websocket messages of {statistics.median(x['bytes'] for x in u) / 1024:.0f} KiB): "
          f"handler median {statistics.median(ms):.1f} ms, p90 {q(ms, 0.9):.1f}, max {max(ms):.1f} ms (goal < 50 ms); "
          f"to the next frame median {statistics.median(frame):.1f} ms")
    lat = [x["latency_s"] for x in fig["latency"] if x["latency_s"] is not None]
    missed = len(fig["latency"]) - len(lat)
    within = sum(x <= INTERVAL_S + 0.1 for x in lat)
    tail = [x["round_to_page_s"] for x in fig["latency"] if x.get("round_to_page_s") is not None]
    shown = (f"median {statistics.median(lat):.2f} s, p90 {q(lat, 0.9):.2f}, max {max(lat):.2f} s; " if lat else "")
    print(f"  metric change on an engine -> shown in the page, rounds every {INTERVAL_S:.0f} s "
          f"({len(fig['latency'])} changes at random times): {shown}{within}/{len(fig['latency'])} within one "
          f"interval + 100 ms, {missed} not shown within {2 * INTERVAL_S + 10:.0f} s; "
          f"the page opened {fig['sockets']} websocket(s) (more than 1: it reconnected)")
    if tail:
        print(f"    round start -> page: median {statistics.median(tail):.2f} s, max {max(tail):.2f} s "
              f"(scrape rounds took median {statistics.median(fig['round_s']):.2f} s wall here)")
    if fig["errors"]:
        print(f"  page errors: {fig['errors'][:3]}")


def CHROMIUM_VERSION() -> str:  # noqa: N802
    try:
        return subprocess.run(["/usr/bin/chromium", "--version"], capture_output=True, text=True,
                              timeout=10).stdout.split()[1]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "?"


def interrupted(*_) -> None:
    raise KeyboardInterrupt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=64, help="A3 nodes, 4 TP4 instances each (default 64)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 32, 128, 256], help="engine targets per step")
    parser.add_argument("--rounds", type=int, default=3, help="measured scrape rounds per step (default 3)")
    parser.add_argument("--changes", type=int, default=8, help="metric changes timed to the browser (default 8)")
    parser.add_argument("--burst", type=int, default=20, help="extra live payloads pushed to time updates")
    parser.add_argument("--renders", type=int, default=3, help="page loads timed (default 3)")
    parser.add_argument("--no-browser", action="store_true", help="collector figures only")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    parser.add_argument("--keep-logs", action="store_true", help="keep the endpoints' and daphne's logs in /tmp")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, interrupted)
    connection.settings_dict.setdefault("TEST", {})["NAME"] = f"test_pdcp_bench_topology_{os.getpid()}"
    old_name = connection.creation.create_test_db(verbosity=0)
    keep = False
    t0 = time.monotonic()
    try:
        dep, plan = deployment.create(args.nodes, ADDRESSES)
        _targets, ports = start_targets(plan)
        procs = deployment.processes(dep, plan, ports)
        load = os.getloadavg()[0]
        print(f"deployment: {args.nodes} nodes x 16 NPUs, {len(plan['engines'])} TP4 instances (sim profile), a proxy "
              f"and a Mooncake master; {len(procs)} Process rows on 127.0.10.65-.79; load {load:.2f}")
        out = {"collector": collector_figures(dep, procs, args.sizes, args.rounds, ports["control"])}
        print_collector(out["collector"], args.rounds)
        if not args.no_browser:
            out["browser"] = browser_figures(dep, procs, args.changes, args.burst, ports["control"], args.renders)
            print_browser(out["browser"])
        print(f"took {time.monotonic() - t0:.0f} s; load {load:.2f} -> {os.getloadavg()[0]:.2f}")
        if args.json:
            args.json.write_text(json.dumps(out, indent=2, default=str) + "\n")
            print(f"wrote {args.json}")
    except BaseException as exc:
        keep = not isinstance(exc, KeyboardInterrupt)
        raise
    else:
        keep = args.keep_logs
    finally:
        stop_all()
        forget_redis_keys()
        connection.close()
        connection.creation.destroy_test_db(old_name, verbosity=0)
        if keep:
            print(f"logs kept in {TMP}", file=sys.stderr)
        else:
            import shutil

            shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    main()
