"""Every YAML reader refuses aliases, so a few hundred bytes cannot expand into billions of values."""

import time

import pytest
import yaml

import plainyaml
from apps.deployments.models import Deployment
from apps.deployments.topology import SpecError, spec_from_yaml
from apps.inventory.inventory_file import InventoryFileInvalid, parse_yaml
from apps.inventory.models import Cluster
from pdproxy.config import ConfigError, load_yaml
from simcluster.spec import load_spec


def bomb(levels: int = 9) -> str:
    """The issue's shape: each level lists the previous one nine times (9**levels leaves)."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_the_loader_refuses_an_alias_naming_its_line():
    with pytest.raises(yaml.MarkedYAMLError) as caught:
        plainyaml.load(bomb())
    assert caught.value.problem_mark.line == 1 and "aliases are not accepted" in str(caught.value)
    assert plainyaml.load("a: &x 1\nb: 2\n") == {"a": 1, "b": 2}  # an anchor alone is harmless


def test_merge_keys_are_aliases_too():
    with pytest.raises(yaml.MarkedYAMLError):
        plainyaml.load("base: &b {tp: 4}\nd0:\n  <<: *b\n")


def test_a_topology_with_aliases_is_a_syntax_error_in_no_time():
    t0 = time.monotonic()
    with pytest.raises(SpecError) as caught:
        spec_from_yaml("model: {path: /m}\n" + bomb())
    assert time.monotonic() - t0 < 0.5
    path, message = caught.value.errors[0]
    assert path == "yaml" and "line 3" in message and "aliases" in message


def test_an_inventory_with_aliases_is_refused_with_its_line():
    with pytest.raises(InventoryFileInvalid) as caught:
        parse_yaml("version: 1\n" + bomb())
    assert caught.value.errors[0].line == 3


def test_proxy_and_simulator_configs_refuse_aliases(tmp_path):
    config = tmp_path / "proxy.yaml"
    config.write_text("prefill: &p [127.0.0.1:8100]\ndecode: *p\n")
    with pytest.raises(ConfigError, match="aliases"):
        load_yaml(str(config))
    spec = tmp_path / "spec.yaml"
    spec.write_text(bomb())
    with pytest.raises(yaml.MarkedYAMLError):
        load_spec(spec)


@pytest.mark.django_db
def test_the_api_answers_an_alias_bomb_with_a_400_and_stores_nothing(api_client_for):
    cluster = Cluster.objects.create(name="c")
    t0 = time.monotonic()
    response = api_client_for("operator").post("/api/deployments/", {
        "name": "bomb", "cluster": cluster.pk, "yaml_text": "model: {path: /m}\n" + bomb(10)}, format="json")
    assert time.monotonic() - t0 < 2
    assert response.status_code == 400 and response.json()["errors"][0]["path"] == "yaml"
    assert not Deployment.objects.exists()


def test_error_text_quoting_a_huge_value_is_cheap_and_short():
    from apps.deployments.topology import spec_from_dict

    huge = [list(range(10**6))] * 100  # what aliases would build: 10**8 values, cheap to hold, slow to repr
    t0 = time.monotonic()
    with pytest.raises(SpecError) as caught:
        spec_from_dict({"model": {"path": "/m"}, "instances": [{"name": "p0", "tp": huge}]})
    assert time.monotonic() - t0 < 1
    assert all(len(message) < 400 for _path, message in caught.value.errors)
