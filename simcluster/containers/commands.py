"""The subcommands besides `run` (run.py): ps, inspect, logs, stop, rm, images, image inspect, version."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time

from simcluster import procs
from simcluster.containers import flags, images, runflags, table, templates, views
from simcluster.containers.flavors import Refusal
from simcluster.sshnode import pid_alive

STOP_SETTLE_S = 10.0  # after SIGKILL, how long to wait for the monitor to record the exit
PS_FILTERS = ("ancestor", "before", "expose", "exited", "health", "id", "isolation", "is-task", "label", "name",
              "network", "publish", "since", "status", "volume")


def _parse(ctx, command: str, argv: list[str], known) -> tuple[dict, list[str]]:
    try:
        return flags.parse(argv, known)
    except flags.FlagError as exc:
        raise ctx.flavor.flag_error(command, str(exc)) from None


def _rows(ctx) -> dict:
    return {cid: views.refresh(row) for cid, row in table.snapshot(ctx.node_dir).items()}


def _matches(row: dict, filters: dict[str, list[str]]) -> bool:
    def label_ok(want: str) -> bool:
        key, eq, value = want.partition("=")
        return key in row["labels"] and (not eq or row["labels"][key] == value)

    tests = {"label": label_ok, "name": lambda v: re.search(v, "/" + row["name"]) is not None,
             "id": lambda v: row["id"].startswith(v), "status": lambda v: row["state"]["status"] == v,
             "exited": lambda v: row["state"]["status"] == "exited" and str(row["state"].get("exit_code")) == v,
             "ancestor": lambda v: images.normalize(v)[:2] == images.normalize(row["image_ref"])[:2]}
    for key, values in filters.items():
        test = tests.get(key)
        if test is None:
            raise Refusal(f"simcluster: the ps filter {key!r} is not simulated", 1)
        if key == "label":
            if not all(test(v) for v in values):  # docker ANDs label filters, ORs the others
                return False
        elif not any(test(v) for v in values):
            return False
    return True


def ps(ctx, argv: list[str]) -> int:
    opts, args = _parse(ctx, "ps", argv, runflags.PS)
    if args:
        raise ctx.flavor.flag_error("ps", f'"{ctx.flavor.name} ps" accepts no arguments')
    filters: dict[str, list[str]] = {}
    for item in opts.get("filter", []):
        key, eq, value = item.partition("=")
        if not eq:
            raise Refusal("Error: bad format of filter (expected name=value)", 125)
        if key not in PS_FILTERS:
            raise ctx.flavor.daemon(f"invalid filter '{key}'")
        filters.setdefault(key, []).append(value)
    rows = sorted(_rows(ctx).values(), key=lambda r: r["created"], reverse=True)
    show_all = opts.get("all") or "status" in filters or "exited" in filters
    rows = [r for r in rows if (show_all or r["state"]["status"] == "running") and _matches(r, filters)]
    if opts.get("latest"):
        rows = rows[:1]
    elif opts.get("last"):
        rows = rows[:int(opts["last"])]
    no_trunc = bool(opts.get("no-trunc"))
    if opts.get("quiet"):
        sys.stdout.write("".join((r["id"] if no_trunc else r["id"][:12]) + "\n" for r in rows))
        return 0
    fmt = opts.get("format")
    if not fmt or fmt == "table":
        sys.stdout.write(views.ps_table(rows, ctx.flavor.name, no_trunc))
        return 0
    shape = views.docker_ps_row if ctx.flavor.name == "docker" else views.podman_ps_row
    for row in rows:
        print(templates.render(fmt, shape(row, no_trunc), labels=row["labels"]))
    return 0


def _print_inspected(found: list, fmt: str | None) -> None:
    if fmt and not templates.is_json(fmt):
        for item in found:
            print(templates.render(fmt, item))
    elif fmt:
        for item in found:
            print(templates.go_json(item))
    else:
        print(json.dumps(found, indent=4, ensure_ascii=False))


def inspect(ctx, argv: list[str], typed: str | None = None) -> int:
    command = "container inspect" if typed == "container" else "inspect"
    opts, refs = _parse(ctx, command, argv, runflags.INSPECT)
    if not refs:
        raise ctx.flavor.too_few_args(command)
    kind = typed or opts.get("type")
    rows = _rows(ctx)
    found, errors = [], []
    for ref in refs:
        row = table.find(rows, ref) if kind in (None, "container") else None
        image = images.find(ctx.node.get("images", []), ref) if row is None and kind in (None, "image") else None
        if row is not None:
            found.append(views.container_json(row, ctx.flavor.name, ctx.node))
        elif image is not None:
            found.append(views.image_json(image, ctx.flavor.name))
        elif kind == "container":
            errors.append(f"Error response from daemon: No such container: {ref}" if ctx.flavor.name == "docker"
                          else f'Error: no such container "{ref}"')
        elif kind == "image":
            errors.append(ctx.flavor.image_inspect_missing(ref).message)
        else:
            errors.append(ctx.flavor.inspect_missing(ref).message)
    _print_inspected(found, opts.get("format"))
    if errors:
        raise Refusal("\n".join(errors), 1 if ctx.flavor.name == "docker" else 125)
    return 0


def image_inspect(ctx, argv: list[str]) -> int:
    opts, refs = _parse(ctx, "image inspect", argv, runflags.IMAGE_INSPECT)
    if not refs:
        raise ctx.flavor.too_few_args("image inspect")
    found, errors = [], []
    for ref in refs:
        image = images.find(ctx.node.get("images", []), ref)
        if image is None:
            errors.append(ctx.flavor.image_inspect_missing(images.familiar_ref(ref) if ctx.flavor.name == "docker"
                                                            else ref).message)
        else:
            found.append(views.image_json(image, ctx.flavor.name))
    _print_inspected(found, opts.get("format"))
    if errors:
        raise Refusal("\n".join(errors), 1 if ctx.flavor.name == "docker" else 125)
    return 0


def images_list(ctx, argv: list[str]) -> int:
    opts, args = _parse(ctx, "images", argv, runflags.IMAGES)
    held = ctx.node.get("images", [])
    if args:
        repo = images.normalize(args[0])[0]
        tag = args[0].rpartition(":")[2] if ":" in args[0].rpartition("/")[2] else None
        held = [i for i in held if images.normalize(i["ref"])[0] == repo
                and (tag is None or images.normalize(i["ref"])[1] == tag)]
    no_trunc = bool(opts.get("no-trunc"))
    rows = [views.image_row(i, no_trunc, bool(opts.get("digests"))) for i in held]
    if opts.get("quiet"):
        sys.stdout.write("".join(r["ID"] + "\n" for r in rows))
    elif opts.get("format") and opts["format"] != "table":
        for r in rows:
            print(templates.render(opts["format"], r))
    else:
        sys.stdout.write(views.images_table(rows, ctx.flavor.name, bool(opts.get("digests"))))
    return 0


def logs(ctx, argv: list[str]) -> int:
    opts, args = _parse(ctx, "logs", argv, runflags.LOGS)
    if len(args) != 1:
        raise ctx.flavor.too_few_args("logs")
    if opts.get("timestamps"):
        raise Refusal("simcluster: logs --timestamps is not simulated (the container's log keeps no times)", 1)
    row = table.find(_rows(ctx), args[0])
    if row is None:
        raise ctx.flavor.no_such_container(args[0], "logs")
    tail = opts.get("tail", "all")
    offset = 0
    while True:
        try:
            data = open(row["log"], "rb").read()
        except FileNotFoundError:
            data = b""
        chunk = data[offset:]
        if offset == 0 and tail.lstrip("-").isdigit() and int(tail) >= 0:
            lines = chunk.splitlines(keepends=True)
            chunk = b"".join(lines[len(lines) - int(tail):]) if int(tail) else b""
        sys.stdout.buffer.write(chunk)
        sys.stdout.flush()
        offset = len(data)
        current = _rows(ctx).get(row["id"])
        if not opts.get("follow") or current is None or current["state"]["status"] != "running":
            return 0
        time.sleep(0.1)


def _signal_group(row: dict, sig: int) -> None:
    pid = row["state"].get("pid") or 0
    if pid and pid_alive(pid) and procs.start_time(pid) == row["state"].get("start_ticks"):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _wait_exited(ctx, cid: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while True:
        row = _rows(ctx).get(cid)
        if row is None or row["state"]["status"] != "running":
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def _halt(ctx, row: dict, grace: float, sig: int = signal.SIGTERM) -> None:
    """docker stop: the signal to the container's process group, SIGKILL after `grace` seconds."""
    if row["state"]["status"] != "running":
        return
    _signal_group(row, sig)
    if not _wait_exited(ctx, row["id"], grace):
        _signal_group(row, signal.SIGKILL)
        if not _wait_exited(ctx, row["id"], STOP_SETTLE_S):
            raise Refusal(f"simcluster: container {row['id']} still runs {STOP_SETTLE_S}s after SIGKILL", 1)


def stop(ctx, argv: list[str]) -> int:
    opts, names = _parse(ctx, "stop", argv, runflags.STOP)
    if not names:
        raise ctx.flavor.too_few_args("stop")
    grace = float(opts.get("time", ctx.flavor.stop_timeout))
    sig = getattr(signal, "SIG" + opts["signal"].upper().removeprefix("SIG")) if opts.get("signal") else signal.SIGTERM
    errors = []
    for name in names:
        row = table.find(_rows(ctx), name)
        if row is None:
            errors.append(ctx.flavor.no_such_container(name, "stop"))
            continue
        _halt(ctx, row, grace, sig)
        print(name)
    return _report(errors)


def rm(ctx, argv: list[str]) -> int:
    opts, names = _parse(ctx, "rm", argv, runflags.RM)
    if not names:
        raise ctx.flavor.too_few_args("rm")
    errors = []
    for name in names:
        row = table.find(_rows(ctx), name)
        if row is None:
            if not opts.get("force"):
                errors.append(ctx.flavor.no_such_container(name, "rm"))
            continue
        if row["state"]["status"] == "running":
            if not opts.get("force"):
                errors.append(ctx.flavor.rm_running(name, row["id"]))
                continue
            _halt(ctx, row, 0, signal.SIGKILL)
        with table.locked(ctx.node_dir) as rows:
            table.forget(ctx.node_dir, rows, row["id"])
        print(name)
    return _report(errors)


def _report(errors: list[Refusal]) -> int:
    for refusal in errors:
        print(refusal.message, file=sys.stderr)
    return max((r.code for r in errors), default=0)


def version(ctx, argv: list[str]) -> int:
    opts, _ = _parse(ctx, "version", argv, runflags.VERSION)
    flavor = ctx.flavor
    fmt = opts.get("format")
    if flavor.name == "docker":
        side = {"Version": flavor.version, "ApiVersion": flavor.api_version, "GoVersion": "go1.24.9",
                "GitCommit": "simcluster", "Os": "linux", "Arch": "arm64", "BuildTime": "2026-08-01T00:00:00.000000000+00:00"}
        report = {"Client": {**side, "DefaultAPIVersion": flavor.api_version, "Context": "default"},
                  "Server": {"Platform": {"Name": "Docker Engine - Community"}, **side, "MinAPIVersion": "1.24",
                             "KernelVersion": os.uname().release,
                             "Components": [{"Name": "Engine", "Version": flavor.version, "Details": {}}]}}
    else:
        report = {"Client": {"APIVersion": flavor.api_version, "Version": flavor.version, "GoVersion": "go1.24.9",
                             "GitCommit": "", "BuiltTime": "Sat Aug  1 00:00:00 2026", "Built": 1785542400,
                             "OsArch": "linux/arm64", "Os": "linux"}}
    if fmt:
        if templates.is_json(fmt):
            print(templates.go_json(report))
        elif flavor.name == "podman" and ".Server." in fmt:  # podman falls back to the client (system/version.go)
            print(templates.render(fmt.replace(".Server.", "."), report["Client"]))
        else:
            print(templates.render(fmt, report))
        return 0
    for side, info in report.items():
        print(f"{side}:{' Docker Engine - Community' if flavor.name == 'docker' and side == 'Server' else ''}")
        for key in ("Version", "ApiVersion", "APIVersion", "GoVersion", "Os", "Arch", "OsArch"):
            if key in info:
                print(f" {key + ':':<16}{info[key]}")
    return 0
