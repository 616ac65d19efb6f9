"""runtime: container in a topology: the container block's shape (each bad field named), the rules against the
cluster's allowlist (an image, mount or weights path off the list is refused naming it), the admin's mount list,
and that every topology without it reads and writes back as before."""

from __future__ import annotations

import dataclasses

import pytest

from apps.deployments.topology import SpecError, spec_from_dict, spec_to_dict, validate_topology
from apps.inventory.allowlist import allowlist_problems

from .conftest import reference_inventory
from .container_fixtures import allowlist, allowlist_data, container_data


def spec_errors(data) -> dict[str, str]:
    with pytest.raises(SpecError) as caught:
        spec_from_dict(data)
    return dict(caught.value.errors)


def problems(data, allow=None) -> dict[str, str]:
    found = validate_topology(spec_from_dict(data), reference_inventory(), allow or allowlist())
    return {p.path: p.message for p in found}


def test_the_example_validates_and_writes_back_as_it_was_read():
    spec = spec_from_dict(container_data())
    assert spec.runtime == "container" and spec.container.engine == "docker" and spec.container.shm_size == "1g"
    assert problems(container_data()) == {}
    assert spec_from_dict(spec_to_dict(spec)) == spec


def test_a_topology_without_runtime_is_unchanged(fixed_data, fixed_spec):
    assert fixed_spec.runtime == "host" and fixed_spec.container is None
    assert "runtime" not in spec_to_dict(fixed_spec) and "container" not in spec_to_dict(fixed_spec)
    assert spec_from_dict(spec_to_dict(fixed_spec)) == fixed_spec


@pytest.mark.parametrize(("change", "field", "words"), [
    ({"image": "quay.io/ascend/vllm-ascend"}, "container.image", "no tag"),
    ({"image": "quay.io/ascend/vllm-ascend:latest"}, "container.image", "'latest' moves"),
    ({"image": "quay.io/ascend/vllm-ascend:v1@sha256:" + "a" * 64}, "container.image", "container.digest"),
    ({"image": "--privileged"}, "container.image", "expected an image reference"),
    ({"digest": "sha256:xyz"}, "container.digest", "64 lowercase hex"),
    ({"engine": "containerd"}, "container.engine", "docker, podman"),
    ({"mounts": ["dcmi", "dcmi"]}, "container.mounts[1]", "listed twice"),
    ({"mounts": ["/etc:/etc"]}, "container.mounts[0]", "expected a mount name"),
    ({"mounts": "dcmi"}, "container.mounts", "expected a list"),
    ({"shm_size": "lots"}, "container.shm_size", "like 1g"),
    ({"privileged": True}, "container.privileged", "unknown field"),
    ({"entrypoint": "bash"}, "container.entrypoint", "unknown field"),
    ({"network": "bridge"}, "container.network", "unknown field"),
])
def test_each_bad_container_field_is_named(change, field, words):
    data = container_data()
    data["container"].update(change)
    errors = spec_errors(data)
    assert field in errors, errors
    assert words in errors[field]


def test_runtime_and_the_container_block_go_together():
    data = container_data()
    del data["container"]
    assert "needs a container block" in spec_errors(data)["container"]
    data = container_data()
    data["runtime"] = "host"
    assert "only runtime: container" in spec_errors(data)["container"]
    data["runtime"] = "kubernetes"
    assert "host, container" in spec_errors(data)["runtime"]
    data = container_data()
    del data["container"]["image"]
    assert spec_errors(data)["container.image"] == "missing required field"


def test_a_mount_not_on_the_clusters_list_is_refused_naming_it():
    data = container_data()
    data["container"]["mounts"].append("docker-socket")
    found = problems(data)
    assert "'docker-socket' is not on the cluster's mount list" in found["container.mounts[9]"]


def test_an_image_not_on_the_allowlist_is_refused_naming_it():
    data = container_data()
    data["container"]["image"] = "docker.io/attacker/miner:v1"
    assert "'docker.io/attacker/miner:v1' is not on the cluster's allowlist" in problems(data)["container.image"]


def test_a_digest_other_than_the_allowlists_is_refused():
    allow = allowlist_data()
    allow["images"][0]["digest"] = "sha256:" + "1" * 64
    from apps.deployments.topology import ClusterAllowlist
    data = container_data()
    data["container"]["digest"] = "sha256:" + "2" * 64
    assert "is not the digest" in problems(data, ClusterAllowlist.from_data(allow))["container.digest"]


def test_weights_no_mount_reaches_are_refused():
    data = container_data()
    data["container"]["mounts"].remove("models")
    found = problems(data)
    assert "not inside the container" in found["model.path"]


def test_without_an_allowlist_nothing_is_accepted():
    from apps.deployments.topology import NO_ALLOWLIST
    found = problems(container_data(), NO_ALLOWLIST)
    assert {"container.image", "container.mounts[0]", "container.mounts[8]"} <= set(found)


def test_env_that_extends_the_nodes_value_is_refused():
    data = container_data()
    data["instances"][2]["env"] = {"LD_LIBRARY_PATH": {"prepend": "/opt/lib"}}
    assert "docker run -e" in problems(data)["instances[2].env.LD_LIBRARY_PATH"]


@pytest.mark.parametrize("profile", ["mindie", "vllm-cpu"])
def test_profiles_whose_engines_do_not_run_in_the_image_are_refused(profile):
    spec = dataclasses.replace(spec_from_dict(container_data()), launch_profile=profile)
    found = {p.path: p.message for p in validate_topology(spec, reference_inventory(), allowlist())}
    assert f"launch_profile {profile} does not run its engines in containers" in found["runtime"]


@pytest.mark.parametrize(("entry", "field", "words"), [
    ({"name": "Root", "host_path": "/x", "container_path": "/x"}, "allowlist.mounts[0].name", "lowercase"),
    ({"name": "root", "host_path": "/", "container_path": "/host"}, "allowlist.mounts[0].host_path", "whole node"),
    ({"name": "rel", "host_path": "data", "container_path": "/data"}, "allowlist.mounts[0].host_path", "absolute"),
    ({"name": "colon", "host_path": "/a:/b", "container_path": "/b"}, "allowlist.mounts[0].host_path", "one spelling"),
    ({"name": "up", "host_path": "/a/../etc", "container_path": "/b"}, "allowlist.mounts[0].host_path", "'..'"),
    ({"name": "x", "host_path": "/a", "container_path": "/a", "read_only": "yes"}, "allowlist.mounts[0].read_only",
     "true or false"),
    ({"name": "x", "host_path": "/a", "container_path": "/a", "mode": "rw"}, "allowlist.mounts[0].mode",
     "unknown key"),
    ({"host_path": "/a", "container_path": "/a"}, "allowlist.mounts[0].name", "required"),
])
def test_each_bad_mount_of_the_allowlist_is_named(entry, field, words):
    found = dict(allowlist_problems({"mounts": [entry]}))
    assert field in found, found
    assert words in found[field]


def test_a_mount_name_listed_twice_is_refused():
    entry = {"name": "dcmi", "host_path": "/usr/local/dcmi", "container_path": "/usr/local/dcmi"}
    assert dict(allowlist_problems({"mounts": [entry, entry]}))["allowlist.mounts[1].name"] == \
        "mount 'dcmi' is listed twice"


def test_a_save_from_the_form_editor_keeps_the_container_block():
    from apps.deployments.spec_form.state import state_from_spec
    from apps.deployments.spec_form.to_data import state_to_data

    data, errors, _ = state_to_data(state_from_spec(container_data()))
    assert errors == []
    assert data["runtime"] == "container" and data["container"] == container_data()["container"]
