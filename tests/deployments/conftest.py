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
    """design.md's cluster as the sim lays it out: four 16-die A3 nodes, the proxy host and the bench host."""
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
