"""Fixtures for the topology tests: the reference inventory as NodeFacts and the example topologies."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from apps.deployments.topology import NodeFacts, spec_from_dict

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def reference_inventory() -> dict[str, NodeFacts]:
    """The reference cluster (docs/reference-cluster.md) as the sim lays it out: four 16-die A3 nodes, the proxy host and the bench host."""
    nodes = {f"node{i}": NodeFacts(f"node{i}", f"127.0.10.{i + 1}", frozenset(range(16)), 16, "eth0", True)
             for i in range(4)}
    nodes["proxy"] = NodeFacts("proxy", "127.0.10.5", frozenset(), 0, "eth0", True)
    nodes["bench"] = NodeFacts("bench", "127.0.10.6", frozenset(), 0, "eth0", True)
    return nodes


@pytest.fixture
def nodes() -> dict[str, NodeFacts]:
    return reference_inventory()


@pytest.fixture
def fixed_data() -> dict:
    """A fresh, mutable dict of the valid reference topology; tests break one thing in it."""
    return copy.deepcopy(yaml.safe_load((EXAMPLES / "reference-topology-fixed.yaml").read_text()))


@pytest.fixture
def drawn_data() -> dict:
    return copy.deepcopy(yaml.safe_load((EXAMPLES / "reference-topology.yaml").read_text()))


@pytest.fixture
def fixed_spec(fixed_data):
    return spec_from_dict(fixed_data)


# --- Django side of deployments (added by the deployments API/jobs tests) -----------------------------------

REFERENCE_NODES = (("node0", 16), ("node1", 16), ("node2", 16), ("node3", 16), ("proxy", 0), ("bench", 0))


@pytest.fixture
def ref_cluster(cluster, credential):
    """The reference cluster in the inventory (no NPUs discovered: npu_count counts as healthy ids 0..n-1)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from apps.inventory.models import Node

    host_key = Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    for i, (name, npus) in enumerate(REFERENCE_NODES):
        Node.objects.create(cluster=cluster, name=name, address=f"127.0.10.{230 + i}", credential=credential,
                            host_key=host_key, npu_count=npus)
    return cluster


@pytest.fixture
def fixed_yaml() -> str:
    return (EXAMPLES / "reference-topology-fixed.yaml").read_text()


@pytest.fixture
def drawn_yaml() -> str:
    return (EXAMPLES / "reference-topology.yaml").read_text()


@pytest.fixture
def deployment(ref_cluster, fixed_yaml, make_user):
    from apps.deployments.services import deployment_create

    return deployment_create(name="reference", cluster=ref_cluster, user=make_user("operator", "owner"),
                             yaml_text=fixed_yaml)
