"""Telemetry tests keep their Redis keys under a prefix of their own, so parallel runs never read each other's;
the topology snapshot tests draw the reference topology on the reference cluster."""

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def isolated_cache(own_cache_prefix):
    """The keys expire with LIVE_TTL_S."""


REFERENCE_NODES = (("node0", 16), ("node1", 16), ("node2", 16), ("node3", 16), ("proxy", 0), ("bench", 0))
FIXED_TOPOLOGY = Path(__file__).resolve().parents[2] / "examples" / "reference-topology-fixed.yaml"


@pytest.fixture
def ref_cluster(cluster, credential):
    """The reference cluster (docs/reference-cluster.md) in the inventory, as tests/deployments/conftest.py lays it
    out: no NPUs discovered, so npu_count counts as healthy ids 0..n-1."""
    from apps.inventory.models import Node
    from tests.keys import TEST_HOST_KEY

    for i, (name, npus) in enumerate(REFERENCE_NODES):
        Node.objects.create(cluster=cluster, name=name, address=f"127.0.10.{230 + i}", credential=credential,
                            host_key=TEST_HOST_KEY, npu_count=npus)
    return cluster


@pytest.fixture
def deployment(ref_cluster, make_user):
    """The reference topology deployed nowhere yet: one active revision, no process running."""
    from apps.deployments.services import deployment_create

    return deployment_create(name="reference", cluster=ref_cluster, user=make_user("operator", "owner"),
                             yaml_text=FIXED_TOPOLOGY.read_text())
