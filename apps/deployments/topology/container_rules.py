"""What a `runtime: container` topology must be (docs/containers.md): a profile whose engines can run in vllm-ascend's
image, an image and mounts the cluster's admin allows (docs/cluster-allowlist.md), weights a mount reaches, and env
that `docker run -e` can set as written."""

from __future__ import annotations

from pathlib import PurePosixPath

from sshexec import EnvExtend

from .allowlist import NO_ALLOWLIST, ClusterAllowlist
from .problem import Problem, instance_path
from .spec import CONTAINER_PROFILES, TopologySpec

ASK_ADMIN = "ask an admin to add it to the cluster's allowlist (docs/cluster-allowlist.md)"


def container_rules(spec: TopologySpec, out: list[Problem], allowlist: ClusterAllowlist = NO_ALLOWLIST) -> None:
    c = spec.container
    if spec.runtime != "container" or c is None:
        return
    if spec.launch_profile not in CONTAINER_PROFILES:
        out.append(Problem("runtime", f"launch_profile {spec.launch_profile} does not run its engines in containers "
                           f"(only {', '.join(CONTAINER_PROFILES)} do)",
                           "remove runtime and container, or use launch_profile: vllm-ascend"))
        return
    _image(spec, allowlist, out)
    _mounts(spec, allowlist, out)
    for inst in spec.instances:
        for name, value in inst.env.items():
            if isinstance(value, EnvExtend):
                out.append(Problem(instance_path(spec, inst, f"env.{name}"), f"{inst.name}: {{prepend/append}} keeps "
                                   "the node's own value, which a container does not see: `docker run -e` sets the "
                                   "whole value", f"give {name} its whole value as a string"))
    if spec.kv_pool and spec.kv_pool.backend == "memcache":
        out.append(Problem("kv_pool.backend", "the memcache backend puts its library directory in front of the node's "
                           "LD_LIBRARY_PATH, which `docker run -e` cannot extend in a container",
                           "use backend: mooncake, or runtime: host"))


def _image(spec: TopologySpec, allowlist: ClusterAllowlist, out: list[Problem]) -> None:
    c = spec.container
    if not c.image:
        return
    entry = allowlist.image(c.image)
    if entry is None:
        known = ", ".join(i.reference for i in allowlist.images)
        out.append(Problem("container.image", f"image {c.image!r} is not on the cluster's allowlist",
                           f"use one of: {known}" if known else ASK_ADMIN))
    elif c.digest and entry.digest and c.digest != entry.digest:
        out.append(Problem("container.digest", f"{c.digest} is not the digest the cluster's allowlist pins "
                           f"{entry.reference} to ({entry.digest})", "remove digest (the allowlist's applies), or "
                           f"set it to {entry.digest}"))


def _mounts(spec: TopologySpec, allowlist: ClusterAllowlist, out: list[Problem]) -> None:
    c = spec.container
    chosen = []
    for i, name in enumerate(c.mounts):
        mount = allowlist.mount(name)
        if mount is None:
            known = ", ".join(m.name for m in allowlist.mounts)
            out.append(Problem(f"container.mounts[{i}]", f"mount {name!r} is not on the cluster's mount list",
                               f"use one of: {known}" if known else ASK_ADMIN))
            continue
        twin = next((m for m in chosen if m.container_path == mount.container_path), None)
        if twin:
            out.append(Problem(f"container.mounts[{i}]", f"mounts {twin.name!r} and {name!r} both bind "
                               f"{mount.container_path} in the container", f"name only one of {twin.name}, {name}"))
        chosen.append(mount)
    path = spec.model.path
    if path.startswith("/") and len(chosen) == len(c.mounts):
        inside = PurePosixPath(path)
        if not any(inside == PurePosixPath(m.container_path) or inside.is_relative_to(m.container_path)
                   for m in chosen):
            options = [m.name for m in allowlist.mounts if inside.is_relative_to(m.container_path)]
            out.append(Problem("model.path", f"{path} is not inside the container: no mount of container.mounts "
                               "binds it", f"add mount {options[0]} to container.mounts" if options else
                               "name a mount whose container path holds the weights (" + ASK_ADMIN + ")"))
