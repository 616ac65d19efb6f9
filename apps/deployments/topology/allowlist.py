"""What a cluster's admin lets a topology name on its nodes, as plain values (Cluster.allowlist, read by
inventory_lookup; docs/cluster-allowlist.md): container images, pinned, host directories by purpose, and the bind
mounts a container topology may name. The rules only read it: a topology picks among these, it never adds one."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath


@dataclass(frozen=True)
class AllowedImage:
    reference: str  # <repository>:<tag>
    digest: str = ""  # sha256:<64 hex>, "" where the admin did not give one

    @property
    def pinned(self) -> str:
        """What a node is told to run: the digest fixes the bytes where the tag alone could move."""
        return f"{self.reference}@{self.digest}" if self.digest else self.reference


@dataclass(frozen=True)
class AllowedMount:
    """A bind mount a container topology may name: `-v host_path:container_path[:ro]`."""

    name: str
    host_path: str
    container_path: str
    read_only: bool = False

    @property
    def volume(self) -> str:
        return f"{self.host_path}:{self.container_path}{':ro' if self.read_only else ''}"


@dataclass(frozen=True)
class ClusterAllowlist:
    images: tuple[AllowedImage, ...] = ()
    weights: tuple[str, ...] = ()  # roots below which model weights may be mounted
    mindie_scripts: tuple[str, ...] = ()  # MindIE kubernetes_deploy_scripts directories
    mounts: tuple[AllowedMount, ...] = ()  # what runtime: container may bind into its containers, by name

    @classmethod
    def from_data(cls, data: dict | None) -> ClusterAllowlist:
        data = data or {}
        return cls(images=tuple(AllowedImage(e["reference"], e.get("digest", "")) for e in data.get("images", ())),
                   weights=tuple(data.get("weights", ())), mindie_scripts=tuple(data.get("mindie_scripts", ())),
                   mounts=tuple(AllowedMount(m["name"], m["host_path"], m["container_path"],
                                             bool(m.get("read_only", False))) for m in data.get("mounts", ())))

    def mount(self, name: str) -> AllowedMount | None:
        return next((m for m in self.mounts if m.name == name), None)

    def image(self, name: str | None) -> AllowedImage | None:
        """The entry a topology's image name picks: by its reference, or its pinned form."""
        return next((i for i in self.images if name in (i.reference, i.pinned)), None)

    def weights_root(self, path: str) -> str | None:
        """The listed root `path` is (or lies below); None when it is none's, or not one plain absolute path."""
        p = PurePosixPath(path)
        if not p.is_absolute() or ".." in p.parts or str(p) != path:
            return None
        return next((root for root in self.weights if p == PurePosixPath(root) or p.is_relative_to(root)), None)


NO_ALLOWLIST = ClusterAllowlist()
