"""`python -m simcluster up|down|status|fault ...`: the simulated cluster's command line."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

from simcluster import cluster, nodestate, procs
from simcluster.spec import load_spec

FAULTS = ("kill-engine", "hang", "corrupt-kv", "kv-events-gap", "ssh-cut", "npu-alarm", "memcached-stop",
          "hccn-no-ip", "hccn-link-down", "hccn-ping-loss", "npu-foreign-process")
HCCN_FAULTS = {"hccn-no-ip": "hccn_no_ip", "hccn-link-down": "hccn_link_down", "hccn-ping-loss": "hccn_ping_loss"}
FOREIGN_PID_BASE = 800000  # default pid of a foreign process: no engine of ours, printed only


def _engine_pid(ndir: Path, args) -> int:
    engines = nodestate.running_engines(ndir)
    if args.pid:
        return args.pid
    match = [e for e in engines if args.port and e.get("api", "").endswith(f":{args.port}")]
    if len(match) != 1:
        raise SystemExit(f"name one engine with --pid or --port; running: {[e.get('api') for e in engines]}")
    return int(match[0]["pid"])


def _die(args) -> int:
    if args.die is None:
        raise SystemExit(f"{args.kind} needs --die (the die's physical id, 0-15 on A3)")
    return args.die


def fault(args) -> str:
    state_dir = Path(args.state_dir).resolve()
    state = cluster.load_state(state_dir)
    on = not args.off
    if args.kind == "memcached-stop":
        port = args.port or state["spec"]["services"]["memcached_ports"][0]
        key = f"memcached:{port}"
        if on:
            procs.stop_pid(state["pids"][key])
            return f"stopped memcached {port}"
        raise SystemExit("restarting one memcached is not supported; run down/up")
    ndir = Path(state["nodes"][args.node]["dir"])
    if args.kind == "npu-alarm":
        nodestate.set_fault(ndir, "npu_alarm", args.die, on)
        return f"{args.node} die {args.die} health {'Alarm' if on else 'OK'}"
    if args.kind in HCCN_FAULTS:
        nodestate.set_fault(ndir, HCCN_FAULTS[args.kind], _die(args), on)
        return f"{args.node} die {args.die} {args.kind} {'on' if on else 'off'}"
    if args.kind == "npu-foreign-process":
        pid = args.pid or FOREIGN_PID_BASE + _die(args)
        nodestate.set_foreign_process(ndir, args.die, pid, args.mb, on)
        return f"{args.node} die {args.die} foreign process {pid} ({args.mb} MB) {'on' if on else 'off'}"
    if args.kind == "ssh-cut":
        if on:
            pid = state["pids"][f"sshd:{args.node}"]
            for child in procs.children_of(pid):  # open sessions go too: a cut is a cut
                procs.stop_pid(child, timeout=2)
            procs.stop_pid(pid)
            return f"{args.node} SSH cut"
        node = cluster.restart_sshd(state_dir, args.node)
        return f"{args.node} SSH back (pid {node.pid})"
    pid = _engine_pid(ndir, args)
    if args.kind == "kill-engine":
        os.kill(pid, signal.SIGKILL)
        return f"killed engine {pid} on {args.node}"
    kind = {"hang": "hang", "corrupt-kv": "corrupt_kv", "kv-events-gap": "kv_events_gap"}[args.kind]
    nodestate.set_fault(ndir, kind, pid, on)
    return f"{args.kind} {'on' if on else 'off'} for engine {pid} on {args.node}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m simcluster")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("up", "down", "status", "fault"):
        p = sub.add_parser(name)
        p.add_argument("--state-dir", default=str(cluster.DEFAULT_STATE_DIR))
        if name == "up":
            p.add_argument("--spec", help="YAML spec (default: the reference cluster)")
        if name == "fault":
            p.add_argument("kind", choices=FAULTS)
            p.add_argument("--node")
            p.add_argument("--pid", type=int)
            p.add_argument("--port", type=int, help="engine API port, or memcached port")
            p.add_argument("--die", type=int, help="die id (0-15 on A3; logic id = physical id here)")
            p.add_argument("--mb", type=int, default=20000, help="HBM of an npu-foreign-process")
            p.add_argument("--off", action="store_true", help="clear the fault")
    args = parser.parse_args(argv)
    if args.command == "up":
        state = cluster.up(load_spec(args.spec), Path(args.state_dir))
        print(f"simcluster up in {state['seconds']}s: {len(state['nodes'])} nodes")
        print(f"inventory: {state['inventory']}")
        print(f"run dirs: {state['runs_dir']} (owned by the nodes' login user)")
        for name, n in state["nodes"].items():
            print(f"  {name:<10} ssh simnode@{n['address']} -p {n['port']} -i {Path(args.state_dir).resolve()}/id_ed25519")
        for key, value in state.get("services", {}).items():
            print(f"  {key}: {value}")
    elif args.command == "down":
        stopped = cluster.down(Path(args.state_dir))
        print(f"stopped {len(stopped)}: {' '.join(stopped)}")
    elif args.command == "status":
        print(json.dumps(cluster.status(Path(args.state_dir)), indent=1))
    else:
        print(fault(args))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
