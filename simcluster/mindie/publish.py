"""Publish the simulated MindIE deploy scripts at `<SIMCLUSTER_RUNTIME_ROOT>/mindie/kubernetes_deploy_scripts`
(deploy_ac_job.py, delete.sh, log.sh, a sample user_config.json), root-owned and readable by the login user.

The scripts only re-exec into the cluster's `simcluster-mindie` shim, so one copy serves every cluster; each file is
replaced atomically (write + rename), so a session never runs a half-written script.
"""

from __future__ import annotations

import os
from pathlib import Path

from simcluster import runtime

SCRIPTS = Path(__file__).resolve().parent.parent / "mindie_scripts"
FILES = {"deploy_ac_job.py": 0o755, "delete.sh": 0o755, "log.sh": 0o755, "user_config.json": 0o644}


SAMPLE_IMAGE = "mindie:2.1.RC1-800I-A3-py311-openeuler24.03-lts-aarch64"  # the sample user_config.json's
WEIGHTS_ROOT = "/models"  # where the examples' simulated weights are "mounted" from (examples/mindie/*-sim.yaml)


def scripts_dir(root: Path | None = None) -> Path:
    return Path(root or runtime.RUNTIME_ROOT) / "mindie" / "kubernetes_deploy_scripts"


def cluster_allowlist(root: Path | None = None) -> dict:
    """What the simulated cluster's inventory allows a MindIE topology to name (docs/cluster-allowlist.md): the one
    image, the weights root and the published scripts directory."""
    return {"images": [{"reference": SAMPLE_IMAGE}], "weights": [WEIGHTS_ROOT],
            "mindie_scripts": [str(scripts_dir(root))]}


def publish_scripts(root: Path | None = None) -> Path:
    target = scripts_dir(root)
    for directory in (target.parent, target):
        directory.mkdir(exist_ok=True)
        directory.chmod(0o755)
    for name, mode in FILES.items():
        tmp = target / f".{name}.{os.getpid()}.tmp"
        tmp.write_bytes((SCRIPTS / name).read_bytes())
        tmp.chmod(mode)
        os.replace(tmp, target / name)
    return target
