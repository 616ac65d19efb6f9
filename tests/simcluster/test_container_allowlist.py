"""The simulated cluster's container allowlist (simcluster/spec.py CONTAINER_ALLOWLIST, what `simcluster up` writes
into its inventory) is the one examples/reference-allowlist-containers.yaml shows operators: the simulator cannot
read examples/ (its nodes run only its own packages, tests/simcluster/test_private_checkout.py), so the two are
kept equal here."""

from pathlib import Path

import yaml

from simcluster.cluster import cluster_allowlist
from simcluster.spec import CONTAINER_ALLOWLIST

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "reference-allowlist-containers.yaml"


def test_the_simulators_container_allowlist_is_the_examples():
    example = yaml.safe_load(EXAMPLE.read_text())
    assert example["images"] == CONTAINER_ALLOWLIST["images"]
    assert example["mounts"] == CONTAINER_ALLOWLIST["mounts"]


def test_the_simulated_inventory_allows_the_container_example_beside_mindie():
    allowlist = cluster_allowlist()
    assert {"reference": "quay.io/ascend/vllm-ascend:v0.23.0-a3"} in allowlist["images"]
    assert len(allowlist["images"]) == 2  # MindIE's image too
    assert [m["name"] for m in allowlist["mounts"]] == [m["name"] for m in CONTAINER_ALLOWLIST["mounts"]]
