"""The images a node holds (its node.json `images`, from the spec: simcluster/spec.py) and docker's reference rules."""

from __future__ import annotations

import re

HEX = re.compile(r"^(sha256:)?[0-9a-f]{1,64}$")


def normalize(ref: str) -> tuple[str, str, str]:
    """(repository with registry, tag, digest) the way distribution/reference reads a name: docker.io/library/ for
    a bare name, tag `latest` when none is given."""
    name, _, digest = ref.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    tag = ""
    if colon > slash:
        name, tag = name[:colon], name[colon + 1:]
    first = name.split("/", 1)[0]
    if "/" not in name or not ("." in first or ":" in first or first == "localhost"):
        name = "docker.io/" + (name if "/" in name else "library/" + name)
    return name, tag or ("" if digest else "latest"), digest


def familiar(repository: str) -> str:
    for prefix in ("docker.io/library/", "docker.io/"):
        if repository.startswith(prefix):
            return repository[len(prefix):]
    return repository


def familiar_ref(ref: str) -> str:
    """What docker prints for a reference: `hello-world:latest`, `quay.io/ascend/vllm-ascend:v0.23.0-a3`."""
    repo, tag, digest = normalize(ref)
    return familiar(repo) + (f"@{digest}" if digest else f":{tag}")


def find(images: list[dict], ref: str) -> dict | None:
    if HEX.match(ref):
        wanted = ref if ref.startswith("sha256:") else "sha256:" + ref
        hits = [i for i in images if i["id"].startswith(wanted)]
        if len(hits) == 1 and (len(ref) >= 12 or ref.startswith("sha256:")):
            return hits[0]
    repo, tag, digest = normalize(ref)
    for image in images:
        irepo, itag, _ = normalize(image["ref"])
        if irepo == repo and (image["digest"] == digest if digest else itag == tag):
            return image
    return None


def repo_tags(image: dict) -> list[str]:
    return [familiar_ref(image["ref"])]


def repo_digests(image: dict) -> list[str]:
    return [f"{familiar(normalize(image['ref'])[0])}@{image['digest']}"]
