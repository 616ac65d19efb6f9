"""Eval fixtures: the reference cluster with the reference topology as one deployment (its active revision is the
target a run copies), and eval files below a folder of the test's own."""

from pathlib import Path

import pytest

REFERENCE_NODES = (("node0", 16), ("node1", 16), ("node2", 16), ("node3", 16), ("proxy", 0), ("bench", 0))
FIXED_TOPOLOGY = Path(__file__).resolve().parents[2] / "examples" / "reference-topology-fixed.yaml"


@pytest.fixture
def ref_cluster(cluster, credential):
    """The reference cluster as tests/deployments/conftest.py lays it out (no NPUs discovered)."""
    from apps.inventory.models import Node
    from tests.keys import TEST_HOST_KEY

    for i, (name, npus) in enumerate(REFERENCE_NODES):
        Node.objects.create(cluster=cluster, name=name, address=f"127.0.10.{230 + i}", credential=credential,
                            host_key=TEST_HOST_KEY, npu_count=npus)
    return cluster


@pytest.fixture
def fixed_yaml() -> str:
    return FIXED_TOPOLOGY.read_text()


@pytest.fixture
def deployment(ref_cluster, fixed_yaml, make_user):
    """The reference topology deployed nowhere yet: one active revision (vllm-ascend profile)."""
    from apps.deployments.services import deployment_create

    return deployment_create(name="reference", cluster=ref_cluster, user=make_user("operator", "owner"),
                             yaml_text=fixed_yaml)


@pytest.fixture
def evals_dir(settings, tmp_path):
    """Uploaded and catalogue datasets below this test's own folder."""
    settings.PDCP_EVALS_DIR = tmp_path / "evals"
    return settings.PDCP_EVALS_DIR
