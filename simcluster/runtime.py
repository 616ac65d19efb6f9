"""What the simulated nodes' login user runs, published where that user can read it.

A clone may live in a directory only root can enter (`mktemp -d` gives 0700, and so does /root), yet the
login user of the simulated nodes must run the simulator's code with the venv's packages. `publish()` puts
both below RUNTIME_ROOT, root-owned and 0755 all the way down (readable, never writable, by that user):
- `site-<hash of the installed distributions>/`: the venv's site-packages, hard-linked (copied across
  filesystems) once per set of installed distributions;
- `src-<hash of the files>/`: the project's packages the nodes run (NODE_PACKAGES), copied and
  byte-compiled once per content.
Each tree is built in a temporary directory and renamed into place, so a node never imports from a
half-written tree, and two `up`s of different checkouts never change each other's files.
"""

from __future__ import annotations

import compileall
import hashlib
import os
import shutil
import stat
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RUNTIME_ROOT = Path(os.environ.get("SIMCLUSTER_RUNTIME_ROOT", "/var/lib/pdcp-sim"))
NODE_PACKAGES = ("simcluster", "pdproxy", "plainyaml")
STALE_SECONDS = 7 * 24 * 3600


@dataclass(frozen=True)
class NodeRuntime:
    python: str  # an interpreter the login user may execute
    pythonpath: tuple[str, ...]  # project sources first, then site-packages


class RuntimeUnavailable(RuntimeError):
    pass


def others_can_reach(path: Path, *, execute: bool = False) -> bool:
    """True if a user who is neither owner nor group can traverse every parent and read (or run) path."""
    path = Path(os.path.realpath(path))
    try:
        if any(not p.stat().st_mode & stat.S_IXOTH for p in path.parents):
            return False
        mode = path.stat().st_mode
    except OSError:
        return False
    need = stat.S_IXOTH if execute else stat.S_IROTH
    return bool(mode & need)


def node_python() -> str:
    """The venv's own interpreter when others may run it, else a system python of the same minor version
    (compiled wheels are ABI-compatible within a minor version)."""
    real = Path(os.path.realpath(sys.executable))
    if others_can_reach(real, execute=True):
        return str(real)
    minor = f"python{sys.version_info.major}.{sys.version_info.minor}"
    found = shutil.which(minor, path="/usr/local/bin:/usr/bin:/bin")
    if found and others_can_reach(Path(found), execute=True):
        return found
    raise RuntimeUnavailable(f"no {minor} the simulated nodes' login user may run: {real} is private and none is in "
                        f"/usr/local/bin:/usr/bin:/bin (install the python3 Debian package)")


def _site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def _digest(parts: list[str]) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _site_key(site: Path) -> str:
    dists = sorted(p.name for p in site.iterdir() if p.name.endswith((".dist-info", ".egg-info")))
    return _digest([str(site), *dists])


def _source_files(package: Path) -> list[Path]:
    return sorted(p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                  and p.suffix not in (".pyc", ".pyo"))


def _src_key() -> str:
    h = hashlib.sha256()
    for name in NODE_PACKAGES:
        for f in _source_files(REPO / name):
            h.update(str(f.relative_to(REPO)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _make_public_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o755)
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode) or info.st_uid != os.getuid():
        raise RuntimeUnavailable(f"{path} must be a directory owned by uid {os.getuid()}, not a symlink")


def _publish(target: Path, build) -> Path:
    if target.is_dir():
        return target
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        tmp.chmod(0o755)
        build(tmp)
        try:
            tmp.rename(target)
        except OSError:  # another `up` published the same content first
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _link_tree(source: Path, dest: Path) -> None:
    try:
        shutil.copytree(source, dest, copy_function=os.link, symlinks=True, dirs_exist_ok=True)
    except (OSError, shutil.Error):  # across filesystems: copy instead of linking
        shutil.copytree(source, dest, symlinks=True, dirs_exist_ok=True)


def _build_src(dest: Path) -> None:
    for name in NODE_PACKAGES:
        files = _source_files(REPO / name)
        for f in files:
            out = dest / f.relative_to(REPO)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, out)
    compileall.compile_dir(str(dest), quiet=1, workers=1)
    _open_modes(dest)


def _open_modes(root: Path) -> None:
    for dirpath, _dirs, files in os.walk(root):
        os.chmod(dirpath, 0o755)
        for f in files:
            os.chmod(os.path.join(dirpath, f), 0o644)


def _prune(root: Path, keep: set[Path]) -> None:
    now = time.time()
    for old in root.glob("*-*"):
        if old in keep or not old.is_dir():
            continue
        try:
            if now - old.stat().st_mtime > STALE_SECONDS:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass


def publish(root: Path | None = None) -> NodeRuntime:
    """Publish (or reuse) the node runtime below root; returns how a node's shim must start python."""
    root = Path(root or RUNTIME_ROOT)
    _make_public_dir(root)
    if not others_can_reach(root, execute=True):
        raise RuntimeUnavailable(f"{root} is below a directory other users cannot search: set SIMCLUSTER_RUNTIME_ROOT "
                                 f"to a directory below world-searchable ones (default {RUNTIME_ROOT})")
    site = _site_packages()
    site_dir = _publish(root / f"site-{_site_key(site)}", lambda d: _link_tree(site, d))
    src_dir = _publish(root / f"src-{_src_key()}", _build_src)
    _prune(root, {site_dir, src_dir})
    return NodeRuntime(python=node_python(), pythonpath=(str(src_dir), str(site_dir)))
