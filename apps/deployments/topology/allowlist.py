"""What a cluster's admin lets a topology name on its nodes, as plain values (Cluster.allowlist, read by
inventory_lookup; docs/cluster-allowlist.md): container images, pinned, and host directories by purpose. The rules
only read it: a topology picks among these, it never adds one."""

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
class ClusterAllowlist:
    images: tuple[AllowedImage, ...] = ()
    weights: tuple[str, ...] = ()  # roots below which model weights may be mounted
    mindie_scripts: tuple[str, ...] = ()  # MindIE kubernetes_deploy_scripts directories

    @classmethod
    def from_data(cls, data: dict | None) -> ClusterAllowlist:
        data = data or {}
        return cls(images=tuple(AllowedImage(e["reference"], e.get("digest", "")) for e in data.get("images", ())),
                   weights=tuple(data.get("weights", ())), mindie_scripts=tuple(data.get("mindie_scripts", ())))

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
