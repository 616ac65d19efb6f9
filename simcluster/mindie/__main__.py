"""`python -m simcluster.mindie deploy|delete|kubectl|coordinator|controller ...`: what the published scripts
(simcluster/mindie_scripts/) and the `kubectl` shim run, and the processes of the coordinator and controller pods."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys

from simcluster.mindie import kube


def delete(argv: list[str]) -> int:
    """delete.sh [namespace, default mindie] [output dir, ignored]: MindIE-Motor's argument convention."""
    namespace = argv[0] if argv else "mindie"
    print("NOW EXECUTING [kubectl delete] COMMANDS. THE RESULT IS: \n")
    try:
        lines = kube.delete_namespace(kube.state_dir_from_env(), namespace)
    except kube.KubeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if lines is None:
        print(f"No resources found in {namespace} namespace.")
        return 0
    print("\n".join(lines))
    print(f'namespace "{namespace}" deleted')
    return 0


def controller(argv: list[str]) -> int:
    args = argparse.ArgumentParser(prog="controller").parse_known_args(argv)[0]
    del args
    log = logging.getLogger("mindie-ms-controller")
    log.info("MindIE-MS controller started (deploy_mode pd_separate); the simulated controller only holds the pod")
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    log.info("MindIE-MS controller stopping")
    return 0


def coordinator(argv: list[str]) -> int:
    from simcluster.mindie.coordinator import serve

    parser = argparse.ArgumentParser(prog="coordinator")
    parser.add_argument("--plan", required=True)
    args = parser.parse_args(argv)
    with open(args.plan) as f:
        plan = json.load(f)
    return asyncio.run(serve(plan))


def main() -> int:
    if len(sys.argv) < 2:
        print("usage: python -m simcluster.mindie deploy|delete|kubectl|coordinator|controller ...", file=sys.stderr)
        return 2
    command, argv = sys.argv[1], sys.argv[2:]
    if command == "kubectl":
        from simcluster.mindie.kubectl import run

        return run(argv)
    if command == "deploy":
        from simcluster.mindie.deploy import deploy

        return deploy(argv)
    if command == "delete":
        return delete(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s [%(levelname)s] [%(name)s] %(message)s",
                        stream=sys.stdout)
    if command == "coordinator":
        return coordinator(argv)
    if command == "controller":
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
        return controller(argv)
    print(f"unknown command {command!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
