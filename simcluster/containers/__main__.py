"""`python -m simcluster.containers docker|podman ARGS...` (the node shims) and `... monitor NODE_DIR ID` (run.py)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from simcluster import nodestate
from simcluster.containers import commands, run
from simcluster.containers.flavors import FLAVORS, Refusal
from simcluster.containers.monitor import monitor

SUBCOMMANDS = {
    ("run",): run.run, ("container", "run"): run.run,
    ("ps",): commands.ps, ("container", "ls"): commands.ps, ("container", "list"): commands.ps,
    ("container", "ps"): commands.ps,
    ("inspect",): commands.inspect,
    ("container", "inspect"): lambda ctx, argv: commands.inspect(ctx, argv, typed="container"),
    ("logs",): commands.logs, ("container", "logs"): commands.logs,
    ("stop",): commands.stop, ("container", "stop"): commands.stop,
    ("rm",): commands.rm, ("container", "rm"): commands.rm,
    ("images",): commands.images_list, ("image", "ls"): commands.images_list, ("image", "list"): commands.images_list,
    ("image", "inspect"): commands.image_inspect,
    ("version",): commands.version,
}
# Real subcommands the simulation does not play: refused with a message that says so, not as unknown.
NOT_SIMULATED = ("exec", "pull", "start", "restart", "kill", "create", "wait", "cp", "attach", "pause", "unpause",
                 "top", "stats", "port", "rename", "update", "commit", "build", "push", "tag", "rmi", "save", "load",
                 "network", "volume", "system", "info", "login", "logout", "compose", "events", "history", "export")


@dataclass(frozen=True)
class Context:
    flavor: object
    node_dir: Path
    node: dict


def _dispatch(flavor, argv: list[str]):
    for length in (2, 1):
        handler = SUBCOMMANDS.get(tuple(argv[:length]))
        if handler:
            return handler, argv[length:]
    word = argv[0] if argv else ""
    if word in NOT_SIMULATED or word in ("container", "image"):
        raise Refusal(f"simcluster: `{flavor.name} {' '.join(argv[:2])}` is not simulated (simcluster/README.md, "
                      f"Containers)", 1)
    if flavor.name == "docker":
        raise Refusal(f"docker: unknown command: docker {word}\n\nRun 'docker --help' for more information", 1)
    raise Refusal(f"Error: unrecognized command `podman {word}`\nTry 'podman --help' for more information", 125)


def cli(flavor_name: str, argv: list[str]) -> int:
    flavor = FLAVORS[flavor_name]
    node_dir = nodestate.node_dir()
    node = nodestate.node_config(node_dir)
    try:
        if node.get("container_engine", "docker") != flavor.name:
            raise flavor.not_installed()
        if node_dir is None:
            raise Refusal(f"simcluster: {flavor.name} runs on a simulated node (SIMCLUSTER_NODE_DIR is not set)", 1)
        handler, rest = _dispatch(flavor, argv)
        return handler(Context(flavor, node_dir, node), rest)
    except Refusal as refusal:
        sys.stdout.write(refusal.stdout)
        sys.stdout.flush()
        print(refusal.message, file=sys.stderr)
        return refusal.code


def main(argv: list[str]) -> int:
    if argv[:1] == ["monitor"]:
        return monitor(Path(argv[1]), argv[2])
    return cli(argv[0], argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
