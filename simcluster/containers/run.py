"""`docker run` / `podman run`: the checks in the real order, then a detached monitor (monitor.py) starts the command.

Order (docs/container-launch-facts.md §3.4): flags; the image (pulled when missing unless `--pull=never`; the
simulated nodes reach no registry, so a pull fails as an offline host's does); podman then checks devices and bind
sources; the name; docker creates the container and checks devices when starting it, so a missing device leaves
a `created` container behind (exit code 128, its Error set) unless `--rm`.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

from simcluster.containers import flags, hostfs, images, runflags, table
from simcluster.containers.flavors import Refusal
from simcluster.containers.humane import ram_in_bytes

IMAGE_CMD = ["/bin/bash"]  # vllm-ascend's Dockerfile.a3: no ENTRYPOINT, CMD ["/bin/bash"]
IMAGE_WORKDIR = "/workspace"
DEFAULT_SHM = 64 << 20
START_DEADLINE_S = 20.0
ADJECTIVES = ("brave", "calm", "eager", "fervent", "gifted", "jolly", "keen", "nifty", "quirky", "serene")
SURNAMES = ("curie", "darwin", "euler", "gauss", "hopper", "lovelace", "noether", "pascal", "turing", "wright")


def _pairs(values: list[str]) -> dict[str, str]:
    return dict(v.partition("=")[::2] for v in values)


def _env(values: list[str]) -> list[str]:
    out = []
    for value in values:
        key, eq, _ = value.partition("=")
        if eq:
            out.append(value)
        elif key in os.environ:  # `-e NAME` takes the caller's value, and is dropped when the caller has none
            out.append(f"{key}={os.environ[key]}")
    return out


def _image(ctx, ref: str, pull: str) -> dict:
    flavor = ctx.flavor
    if pull not in ("always", "missing", "never"):
        raise flavor.run_error(f"invalid pull option: '{pull}': must be one of \"always\", \"missing\" or \"never\"")
    found = images.find(ctx.node.get("images", []), ref)
    if found and pull != "always":
        return found
    if pull == "never":
        raise flavor.image_missing(images.familiar_ref(ref) if flavor.name == "docker" else ref)
    notice, refusal = flavor.pull_failed(ref)
    print(notice, file=sys.stderr)
    raise refusal


def _check_devices(ctx, devices: list[dict]) -> None:
    for dev in devices:
        if not hostfs.device_exists(ctx.node, dev["PathOnHost"]):
            raise ctx.flavor.device_missing(dev["PathOnHost"])


def _record(ctx, opts: dict, args: list[str], image: dict, devices, mounts, shm: int) -> dict:
    cid = secrets.token_hex(32)
    name = opts.get("name") or f"{secrets.choice(ADJECTIVES)}_{secrets.choice(SURNAMES)}"
    entrypoint = [opts["entrypoint"]] if opts.get("entrypoint") else None
    cmd = args[1:] or ([] if entrypoint else list(IMAGE_CMD))
    env = _env(opts.get("env", []))
    workdir = opts.get("workdir") or IMAGE_WORKDIR
    host_env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"), "HOSTNAME": ctx.node.get("name", ""),
                "HOME": str(table.container_dir(ctx.node_dir, cid) / "rootfs"),
                "SIMCLUSTER_NODE": os.environ.get("SIMCLUSTER_NODE", ctx.node.get("name", "")),
                "SIMCLUSTER_NODE_DIR": str(ctx.node_dir)}
    host_env.update(hostfs.env_to_host(_pairs(env), mounts))
    return {"id": cid, "name": name, "created": time.time(), "image": args[0], "image_id": image["id"],
            "image_ref": image["ref"], "cmd": cmd, "entrypoint": entrypoint, "labels": _pairs(opts.get("label", [])),
            "env": env, "devices": devices, "binds": list(opts.get("volume", [])), "mounts": mounts,
            "network": opts.get("network") or ("bridge" if ctx.flavor.name == "docker" else "pasta"),
            "shm_size": shm, "auto_remove": bool(opts.get("rm")), "workdir": workdir, "ipc": opts.get("ipc") or
            ("private" if ctx.flavor.name == "docker" else "shareable"), "privileged": bool(opts.get("privileged")),
            "tty": bool(opts.get("tty")), "interactive": bool(opts.get("interactive")), "user": opts.get("user", ""),
            "attached": not opts.get("detach"), "flavor": ctx.flavor.name,
            "log": str(table.container_dir(ctx.node_dir, cid) / "log"),
            "state": {"status": "created", "pid": 0, "exit_code": 0, "error": "", "started_at": None,
                      "finished_at": None},
            "host": {"argv": hostfs.argv_to_host((entrypoint or []) + cmd, mounts), "env": host_env,
                     "cwd": hostfs.to_host(workdir, mounts)}}


def _fail_start(ctx, cid: str, refusal: Refusal, exit_code: int) -> Refusal:
    with table.locked(ctx.node_dir) as rows:
        row = rows.get(cid)
        if row is not None:
            if row["auto_remove"]:
                table.forget(ctx.node_dir, rows, cid)
            else:
                row["state"].update(exit_code=exit_code, error=refusal.message.split("\n")[0].removeprefix("docker: ")
                                    .removeprefix("Error response from daemon: "))
    return refusal


def _wait_started(ctx, cid: str) -> dict | None:
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        row = table.snapshot(ctx.node_dir).get(cid)
        if row is None or row["state"]["status"] != "created" or row["state"].get("start_error"):
            return row
        time.sleep(0.02)
    raise Refusal(f"simcluster: container {cid} did not start within {START_DEADLINE_S}s (see "
                  f"{table.container_dir(ctx.node_dir, cid)}/monitor.log)", 125)


def run(ctx, argv: list[str]) -> int:
    flavor = ctx.flavor
    known = runflags.RUN if flavor.name == "docker" else runflags.PODMAN_RUN
    try:
        opts, args = flags.parse(argv, known, interspersed=False)
        shm = _shm_size(opts.get("shm-size"))
    except flags.FlagError as exc:
        raise flavor.flag_error("run", str(exc)) from None
    if not args:
        raise flavor.too_few_args("run")
    try:
        devices = [hostfs.parse_device(d) for d in opts.get("device", [])]
        mounts = [hostfs.parse_volume(v) for v in opts.get("volume", [])]
        mount_flags = [hostfs.parse_mount(m) for m in opts.get("mount", [])]
    except hostfs.BadSpec as exc:
        raise flavor.run_error(str(exc)) from None
    image = _image(ctx, args[0], opts.get("pull", "missing"))
    for mount in mount_flags:  # neither engine creates a --mount source
        if not hostfs.path_exists(ctx.node, mount["Source"]):
            raise flavor.mount_source_missing(mount["Source"])
    mounts += mount_flags
    if flavor.name == "podman":
        _check_devices(ctx, devices)
        for mount in mounts:
            if not hostfs.path_exists(ctx.node, mount["Source"]):
                raise flavor.bind_missing(mount["Source"])
    row = _record(ctx, opts, args, image, devices, mounts, shm)
    with table.locked(ctx.node_dir) as rows:
        clash = next((r for r in rows.values() if r["name"] == row["name"]), None)
        if clash:
            if not (flavor.name == "podman" and opts.get("replace")):
                raise flavor.name_conflict(row["name"], clash["id"])
            if clash["state"]["status"] == "running":
                raise Refusal("simcluster: podman run --replace of a running container is not simulated", 125)
            table.forget(ctx.node_dir, rows, clash["id"])
        table.container_dir(ctx.node_dir, row["id"]).mkdir(parents=True)
        rows[row["id"]] = row
    cid = row["id"]
    if flavor.name == "docker":
        try:
            _check_devices(ctx, devices)
        except Refusal as refusal:
            raise _fail_start(ctx, cid, refusal, 128) from None
    cdir = table.container_dir(ctx.node_dir, cid)
    with open(cdir / "monitor.log", "ab") as out:
        subprocess.Popen([sys.executable, "-m", "simcluster.containers", "monitor", str(ctx.node_dir), cid],
                         stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    started = _wait_started(ctx, cid)
    if started and started["state"].get("start_error"):
        raise _fail_start(ctx, cid, flavor.command_missing(started["state"]["start_error"]), 127)
    if opts.get("detach"):
        print(cid)
        return 0
    return _attached(ctx, cid, Path(row["log"]))


def _shm_size(value: str | None) -> int:
    if value is None:
        return DEFAULT_SHM
    try:
        return ram_in_bytes(value)
    except ValueError as exc:
        raise flags.FlagError(f'invalid argument "{value}" for "--shm-size" flag: {exc}') from None


def _attached(ctx, cid: str, log: Path) -> int:
    """Without -d: the container's output, then its exit code (no stdin, no terminal)."""
    offset = 0
    while True:
        row = table.snapshot(ctx.node_dir).get(cid)
        offset = _copy(log, offset)
        if row is None or row["state"]["status"] == "exited":
            break
        time.sleep(0.05)
    _copy(log, offset)
    exit_file = table.root(ctx.node_dir) / f"{cid}.exit"
    if row is None:
        code = int(exit_file.read_text()) if exit_file.exists() else 0
        exit_file.unlink(missing_ok=True)
        return code
    return int(row["state"]["exit_code"])


def _copy(log: Path, offset: int) -> int:
    try:
        with open(log, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return offset
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
    return offset + len(data)
