"""The container reference: examples/reference-topology-containers.yaml rendered against the allowlist an admin would
set for it (examples/reference-allowlist-containers.yaml) on the reference inventory."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from apps.deployments.topology import ClusterAllowlist, build_plan, spec_from_dict
from apps.inventory.allowlist import allowlist_problems, normal_allowlist

from .conftest import reference_inventory

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def allowlist_data() -> dict:
    data = yaml.safe_load((EXAMPLES / "reference-allowlist-containers.yaml").read_text())
    assert allowlist_problems(data) == []
    return normal_allowlist(data)


def allowlist() -> ClusterAllowlist:
    return ClusterAllowlist.from_data(allowlist_data())


def container_data() -> dict:
    return copy.deepcopy(yaml.safe_load((EXAMPLES / "reference-topology-containers.yaml").read_text()))


def container_plan(data: dict | None = None, nodes=None):
    return build_plan(spec_from_dict(data or container_data()), nodes or reference_inventory(), allowlist())
