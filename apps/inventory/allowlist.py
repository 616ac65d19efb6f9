"""A cluster's allowlist: what only an admin decides and a topology may only pick from (docs/cluster-allowlist.md).

Container images (a repository with an explicit tag, and its digest where known: the pin), host directories by
purpose: `weights` (roots below which model weights may be mounted into MindIE's pods) and `mindie_scripts` (MindIE's
kubernetes_deploy_scripts directories, whose Python the deploy runs), and `mounts`: the bind mounts (name, host path,
container path, read-only) a `runtime: container` topology may name. An operator's topology names one of them; it can
never add one. Stored on Cluster.allowlist in this one spelling; `allowlist_problems` names each wrong field."""

from __future__ import annotations

import re
from collections.abc import Mapping

KEYS = ("images", "weights", "mindie_scripts", "mounts")
IMAGE_KEYS = ("reference", "digest")
MOUNT_KEYS = ("name", "host_path", "container_path", "read_only")
_MOUNT_NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
MAX_ENTRIES = 64
# registry[:port]/path/name:tag — the tag is what follows the last ':' after the last '/'
# all used with fullmatch: '$' would let a final newline through
_REPOSITORY_RE = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]{1,5})?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*")
_TAG_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")
_PATH_RE = re.compile(r"(/[A-Za-z0-9_][A-Za-z0-9._-]*)+")  # each part starts with no '.': no '.' or '..' parts


def split_reference(reference: str) -> tuple[str, str] | None:
    """'registry:5000/repo/name:tag' -> (repository, tag); None without a tag after the last '/'."""
    head, _, last = reference.rpartition("/")
    name, sep, tag = last.partition(":")
    if not sep:
        return None
    return (f"{head}/{name}" if head else name), tag


def allowlist_problems(data) -> list[tuple[str, str]]:
    """(field path, message) for every wrong part of an allowlist; [] when it may be stored as it is."""
    if data in (None, ""):
        return []
    if not isinstance(data, Mapping):
        return [("allowlist", "expected a mapping with images, weights, mindie_scripts and mounts")]
    out = [(f"allowlist.{key}", f"unknown key; the allowlist has {', '.join(KEYS)}") for key in data if key not in KEYS]
    images = data.get("images", [])
    if not isinstance(images, list):
        out.append(("allowlist.images", "expected a list of {reference: <repository>:<tag>, digest: sha256:...}"))
    else:
        out += _too_many("allowlist.images", images)
        for i, entry in enumerate(images):
            out += _image_problems(f"allowlist.images[{i}]", entry)
    for key in ("weights", "mindie_scripts"):
        paths = data.get(key, [])
        if not isinstance(paths, list):
            out.append((f"allowlist.{key}", "expected a list of absolute directories"))
            continue
        out += _too_many(f"allowlist.{key}", paths)
        for i, path in enumerate(paths):
            problem = directory_problem(path)
            if problem:
                out.append((f"allowlist.{key}[{i}]", problem))
    mounts = data.get("mounts", [])
    if not isinstance(mounts, list):
        out.append(("allowlist.mounts", "expected a list of {name, host_path, container_path, read_only}"))
    else:
        out += _too_many("allowlist.mounts", mounts)
        names: set[str] = set()
        for i, entry in enumerate(mounts):
            out += _mount_problems(f"allowlist.mounts[{i}]", entry, names)
    return out


def _mount_problems(where: str, entry, names: set[str]) -> list[tuple[str, str]]:
    """A bind mount: the guides mount files (npu-smi, version.info) as well as directories, so a path here is any
    absolute path in one spelling (docs/container-launch-facts.md §1.5)."""
    if not isinstance(entry, Mapping):
        return [(where, "expected {name, host_path, container_path, read_only}")]
    out = [(f"{where}.{key}", f"unknown key; a mount has {', '.join(MOUNT_KEYS)}") for key in entry
           if key not in MOUNT_KEYS]
    name = entry.get("name")
    if not isinstance(name, str) or not _MOUNT_NAME_RE.fullmatch(name):
        out.append((f"{where}.name", "required: lowercase letters, digits and '-' (e.g. ascend-driver), at most 63"))
    elif name in names:
        out.append((f"{where}.name", f"mount {name!r} is listed twice"))
    else:
        names.add(name)
    for key in ("host_path", "container_path"):
        problem = mount_path_problem(entry.get(key))
        if problem:
            out.append((f"{where}.{key}", problem))
    if not isinstance(entry.get("read_only", False), bool):
        out.append((f"{where}.read_only", "expected true or false"))
    return out


def _too_many(where: str, items: list) -> list[tuple[str, str]]:
    return [(where, f"at most {MAX_ENTRIES} entries")] if len(items) > MAX_ENTRIES else []


def _image_problems(where: str, entry) -> list[tuple[str, str]]:
    if not isinstance(entry, Mapping):
        return [(where, "expected {reference: <repository>:<tag>, digest: sha256:<64 hex digits>}")]
    out = [(f"{where}.{key}", f"unknown key; an image has {', '.join(IMAGE_KEYS)}") for key in entry
           if key not in IMAGE_KEYS]
    reference, digest = entry.get("reference"), entry.get("digest", "")
    parts = split_reference(reference) if isinstance(reference, str) else None
    if not isinstance(reference, str) or not reference:
        out.append((f"{where}.reference", "required: <repository>:<tag>, e.g. "
                    "swr.cn-south-1.myhuaweicloud.com/ascendhub/mindie:2.1.RC1-800I-A3-py311-openeuler24.03-lts"))
    elif "@" in reference:
        out.append((f"{where}.reference", "give the digest in digest, not after '@' in the reference"))
    elif parts is None:
        out.append((f"{where}.reference", f"{reference!r} has no tag: pin it with an explicit <repository>:<tag>"))
    elif not _REPOSITORY_RE.fullmatch(parts[0]) or not _TAG_RE.fullmatch(parts[1]):
        out.append((f"{where}.reference", f"{reference!r} is not an image reference (lowercase repository path, "
                    "then ':' and a tag of letters, digits, '_', '.', '-')"))
    elif parts[1] == "latest":
        out.append((f"{where}.reference", f"{reference!r}: 'latest' moves; pin a release tag"))
    if not isinstance(digest, str) or (digest and not _DIGEST_RE.fullmatch(digest)):
        out.append((f"{where}.digest", "expected sha256:<64 lowercase hex digits>, or leave it out where unknown"))
    return out


_MOUNT_PATH_RE = re.compile(r"(/(?!\.\.?(?:/|$))[A-Za-z0-9._-]+)+")  # no '.' or '..' part; '.cache' is fine


def mount_path_problem(path) -> str:
    """Why `path` cannot be one side of a bind mount (`-v host:container`): '' when it is an absolute path in one
    spelling, without ':' or ','."""
    if not isinstance(path, str) or not path:
        return "expected an absolute path, e.g. /usr/local/dcmi"
    if path == "/":
        return "'/' would hand the container the whole node"
    if not _MOUNT_PATH_RE.fullmatch(path):
        return (f"{path!r} is not an absolute path in one spelling (letters, digits, '.', '_', '-' between single "
                "'/'; no '.' or '..' parts, no trailing '/')")
    return ""


def directory_problem(path) -> str:
    """Why `path` is not an absolute directory in its one spelling ('' when it is)."""
    if not isinstance(path, str) or not path:
        return "expected an absolute directory, e.g. /data/models"
    if path == "/":
        return "'/' would allow every directory of the node"
    if not _PATH_RE.fullmatch(path):
        return (f"{path!r} is not an absolute directory in one spelling (letters, digits, '.', '_', '-' between "
                "single '/'; no '.' or '..' parts, no trailing '/')")
    return ""


def normal_allowlist(data) -> dict:
    """The stored form of a valid allowlist: every key present, in order (mounts only when there are any, so an
    allowlist stored before mounts existed reads back as it was)."""
    data = data or {}
    out = {"images": [{"reference": e["reference"], **({"digest": e["digest"]} if e.get("digest") else {})}
                      for e in data.get("images", [])],
           "weights": list(data.get("weights", [])), "mindie_scripts": list(data.get("mindie_scripts", []))}
    if data.get("mounts"):
        out["mounts"] = [{"name": m["name"], "host_path": m["host_path"], "container_path": m["container_path"],
                          "read_only": bool(m.get("read_only", False))} for m in data["mounts"]]
    return out
