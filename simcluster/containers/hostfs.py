"""A container's view of its node: device nodes, bind mounts, and container paths turned back into host paths.

Every sim node shares this machine's filesystem, so the Ascend device nodes are the node's simulated ones
(`/dev/davinci<N>` for each of its NPUs, plus the three management devices on a node with NPUs), and a bind
source exists if this machine has it or it lies below one of the node's `host_paths` (simcluster/spec.py: the
Ascend driver paths and /root/.cache on an NPU node). Nothing is created on this machine for a missing source.
"""

from __future__ import annotations

import os
import re

MANAGEMENT_DEVICES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
ASCEND_DEVICE = re.compile(r"^/dev/(davinci\d+|davinci_manager|devmm_svm|hisi_hdc)$")
PERMISSIONS = re.compile(r"^[rwm]{1,3}$")


class BadSpec(ValueError):
    pass


def node_devices(node: dict) -> set[str]:
    count = int(node.get("npu_count") or 0)
    return {f"/dev/davinci{i}" for i in range(count)} | (set(MANAGEMENT_DEVICES) if count else set())


def device_exists(node: dict, path: str) -> bool:
    return path in node_devices(node) if ASCEND_DEVICE.match(path) else os.path.exists(path)


def parse_device(spec: str) -> dict:
    """HOST[:CONTAINER][:PERMISSIONS], as docker/cli's parseDevice (default permissions rwm)."""
    parts = spec.split(":")
    src, dst, perms = parts[0], parts[0], "rwm"
    if len(parts) == 2:
        if PERMISSIONS.match(parts[1]):
            perms = parts[1]
        else:
            dst = parts[1]
    elif len(parts) == 3:
        dst, perms = parts[1], parts[2]
    elif len(parts) > 3:
        raise BadSpec(f"invalid device specification: {spec}")
    return {"PathOnHost": src, "PathInContainer": dst, "CgroupPermissions": perms}


def parse_volume(spec: str) -> dict:
    """SRC:DST[:OPTIONS] bind mounts. Named and anonymous volumes are not simulated."""
    parts = spec.split(":")
    if len(parts) not in (2, 3) or not parts[0].startswith("/"):
        raise BadSpec(f"simcluster: only bind mounts SRC:DST[:ro] with an absolute SRC are simulated, got {spec!r}")
    src, dst = parts[0], parts[1]
    options = parts[2].split(",") if len(parts) == 3 else []
    if not dst.startswith("/"):
        raise BadSpec(f"invalid volume specification: '{spec}'")
    rw = "ro" not in options
    return {"Type": "bind", "Source": src, "Destination": dst, "Mode": ",".join(options), "RW": rw,
            "Propagation": "rprivate"}


def parse_mount(spec: str) -> dict:
    """`--mount type=bind,source=SRC,target=DST[,readonly]` (docker/cli opts/mount.go's keys and aliases); only
    bind mounts are simulated."""
    fields: dict[str, str] = {}
    for part in spec.split(","):
        key, eq, value = part.partition("=")
        fields[key.strip().lower()] = value if eq else "true"
    if fields.get("type", "volume") != "bind":
        raise BadSpec(f"simcluster: only --mount type=bind is simulated, got {spec!r}")
    src = fields.get("source") or fields.get("src") or ""
    dst = fields.get("target") or fields.get("destination") or fields.get("dst") or ""
    if not src.startswith("/") or not dst.startswith("/"):
        raise BadSpec(f"invalid argument \"{spec}\" for \"--mount\" flag: source and target must be absolute paths")
    ro = fields.get("readonly", fields.get("ro", "false")) in ("true", "1")
    return {"Type": "bind", "Source": src, "Destination": dst, "Mode": "ro" if ro else "", "RW": not ro,
            "Propagation": "rprivate"}


def path_exists(node: dict, path: str) -> bool:
    if os.path.exists(path):
        return True
    return any(path == p.rstrip("/") or path.startswith(p.rstrip("/") + "/") for p in node.get("host_paths", []))


def to_host(value: str, mounts: list[dict]) -> str:
    """A container path below a bind mount's destination, as the host path below its source; anything else as is."""
    for mount in sorted(mounts, key=lambda m: len(m["Destination"]), reverse=True):
        dst = mount["Destination"].rstrip("/") or "/"
        if value == dst or value.startswith(dst.rstrip("/") + "/"):
            return mount["Source"].rstrip("/") + value[len(dst.rstrip("/")):]
    return value


def argv_to_host(argv: list[str], mounts: list[dict]) -> list[str]:
    out = []
    for arg in argv:
        flag, eq, value = arg.partition("=")
        out.append(f"{flag}={to_host(value, mounts)}" if eq and flag.startswith("-") else to_host(arg, mounts))
    return out


def env_to_host(env: dict[str, str], mounts: list[dict]) -> dict[str, str]:
    return {k: to_host(v, mounts) for k, v in env.items()}
