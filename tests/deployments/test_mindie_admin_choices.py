"""Issue 35 §1: an operator's MindIE topology picks only what the cluster's admin allows (Cluster.allowlist,
docs/cluster-allowlist.md): the image (rendered pinned by its digest), the weights MindIE mounts into every pod, the
scripts directory whose Python the deploy runs, and in mindie.extra only listed tuning keys with plain values."""

from __future__ import annotations

import json

import pytest
import yaml

from apps.deployments.models import Deployment
from apps.inventory.models import Cluster
from tests.deployments.conftest import EXAMPLES

pytestmark = pytest.mark.django_db

SCRIPTS = "/var/lib/pdcp-sim/mindie/kubernetes_deploy_scripts"
IMAGE = "mindie:2.1.RC1-800I-A3-py311-openeuler24.03-lts-aarch64"
DIGEST = "sha256:" + "0123456789abcdef" * 4
ALLOWLIST = {"images": [{"reference": IMAGE, "digest": DIGEST}], "weights": ["/models"], "mindie_scripts": [SCRIPTS]}
MODEL_CONFIG = ("mindie_server_prefill_config", "BackendConfig", "ModelDeployConfig", "ModelConfig")


def demo(edit=None) -> str:
    data = yaml.safe_load((EXAMPLES / "mindie" / "demo-sim.yaml").read_text())
    if edit:
        edit(data)
    return yaml.safe_dump(data, sort_keys=False)


@pytest.fixture
def allowed_cluster(ref_cluster):
    ref_cluster.allowlist = ALLOWLIST
    ref_cluster.save()
    return ref_cluster


def hostile(data: dict) -> None:
    """Everything the review reproduced, at once."""
    m = data["mindie"]
    m.update(image_name="docker.io/attacker/miner:latest", weight_mount_path="/etc", scripts_dir="/tmp")
    model = {"trustRemoteCode": True, "plugin_params": '{"plugin_type": "evil"}', "kv_trans_timeout": "/etc/passwd"}
    m["extra"] = {
        "mindie_server_prefill_config": {"BackendConfig": {"ModelDeployConfig": {"ModelConfig": [model]}},
                                         "ServerConfig": {"httpsEnabled": False}},
        "mindie_ms_coordinator_config": {"tls_config": {"controller_server_tls_enable": False}},
        "deploy_config": {"tls_config": {"tls_enable": True}},
    }


def test_an_operators_mindie_topology_cannot_pick_image_mounts_scripts_or_code(api_client_for, allowed_cluster):
    response = api_client_for("operator").post("/api/deployments/", {
        "name": "mindie-demo", "cluster": allowed_cluster.pk, "yaml_text": demo(hostile)}, format="json")
    assert response.status_code == 400, response.json()
    found = {e["path"]: e["message"] for e in response.json()["errors"]}
    model = "mindie.extra." + ".".join(MODEL_CONFIG) + "[0]"
    assert "docker.io/attacker/miner:latest" in found["mindie.image_name"] and IMAGE in found["mindie.image_name"]
    assert "'/etc' is mounted into every MindIE pod" in found["mindie.weight_mount_path"]
    assert "the deploy runs the Python found there" in found["mindie.scripts_dir"]
    assert "weights already on the nodes" not in found.get(f"{model}.trustRemoteCode", "") and \
        "trustRemoteCode runs the Python" in found[f"{model}.trustRemoteCode"]
    assert "not a key mindie.extra may set" in found[f"{model}.plugin_params"]
    assert "expected a whole number from 0" in found[f"{model}.kv_trans_timeout"]
    assert "not a key" in found["mindie.extra.mindie_server_prefill_config.ServerConfig.httpsEnabled"]
    assert "not a key" in found["mindie.extra.mindie_ms_coordinator_config.tls_config"]
    assert "rendered from the topology" in found["mindie.extra.deploy_config.tls_config.tls_enable"]
    assert not Deployment.objects.exists()


def test_without_an_allowlist_nothing_mindie_runs_is_accepted(api_client_for, ref_cluster):
    response = api_client_for("operator").post("/api/deployments/", {
        "name": "mindie-demo", "cluster": ref_cluster.pk, "yaml_text": demo()}, format="json")
    assert response.status_code == 400
    found = {e["path"]: e["message"] for e in response.json()["errors"]}
    assert {"mindie.image_name", "model.path", "mindie.scripts_dir"} <= set(found), found
    assert "the cluster's allowlist has no image" in found["mindie.image_name"]


def test_the_admins_choices_are_accepted_and_the_image_is_rendered_pinned(api_client_for, allowed_cluster):
    def trusted(data):
        data["mindie"]["extra"] = {"mindie_server_prefill_config": {"BackendConfig": {"ModelDeployConfig": {
            "ModelConfig": [{"trustRemoteCode": True, "kv_trans_timeout": 10}]}}}}

    client = api_client_for("operator")
    response = client.post("/api/deployments/", {"name": "mindie-demo", "cluster": allowed_cluster.pk,
                                                 "yaml_text": demo(trusted)}, format="json")
    assert response.status_code == 201, response.json()
    from apps.deployments.revision_plan import deployment_plan

    _, plan = deployment_plan(Deployment.objects.get(name="mindie-demo"))
    config = json.loads(plan.mindie.user_config)
    assert config["deploy_config"]["image_name"] == f"{IMAGE}@{DIGEST}"
    assert config["deploy_config"]["weight_mount_path"] == "/models/DeepSeek-R1-W8A8"
    assert plan.mindie.deploy.endswith(f"cd {SCRIPTS} && python3 deploy_ac_job.py --user_config_path "
                                       "/home/simnode/pdcp-runs/mindie-demo/user_config.json")


def test_an_admin_narrowing_the_allowlist_invalidates_a_remembered_plan(api_client_for, allowed_cluster):
    from apps.deployments.revision_checks import RevisionInvalid
    from apps.deployments.revision_plan import deployment_plan_cached

    client = api_client_for("operator")
    assert client.post("/api/deployments/", {"name": "mindie-demo", "cluster": allowed_cluster.pk,
                                             "yaml_text": demo()}, format="json").status_code == 201
    deployment = Deployment.objects.select_related("cluster").get()
    deployment_plan_cached(deployment)  # the pages' plan, remembered by what it is computed from
    allowed_cluster.allowlist = {**ALLOWLIST, "images": []}
    allowed_cluster.save()
    with pytest.raises(RevisionInvalid) as caught:
        deployment_plan_cached(Deployment.objects.select_related("cluster").get())
    assert "mindie.image_name" in {p.path for p in caught.value.problems}


def test_only_an_admin_edits_the_allowlist_and_bad_entries_name_their_field(api_client_for, allowed_cluster):
    url = f"/api/clusters/{allowed_cluster.pk}/"
    widened = {"allowlist": {**ALLOWLIST, "mindie_scripts": ["/tmp"]}}
    assert api_client_for("operator").patch(url, widened, format="json").status_code == 403
    assert Cluster.objects.get().allowlist == ALLOWLIST
    admin = api_client_for("admin")
    bad = admin.patch(url, {"allowlist": {"images": [{"reference": "attacker/miner:latest", "digest": "md5:00"},
                                                      {"reference": "untagged"}],
                                          "weights": ["/"], "mindie_scripts": ["/opt/../etc"], "volumes": []}},
                      format="json")
    assert bad.status_code == 400
    text = json.dumps(bad.json())
    for field in ("images[0].reference", "images[0].digest", "images[1].reference", "weights[0]", "mindie_scripts[0]",
                  "allowlist.volumes"):
        assert field in text, (field, text)
    assert Cluster.objects.get().allowlist == ALLOWLIST  # nothing stored on a bad request
    good = admin.patch(url, {"allowlist": {"images": [{"reference": IMAGE}], "weights": ["/data/models"]}},
                       format="json")
    assert good.status_code == 200, good.json()
    assert good.json()["allowlist"] == {"images": [{"reference": IMAGE}], "weights": ["/data/models"],
                                        "mindie_scripts": []}


def test_the_inventory_file_carries_the_allowlist_and_names_a_bad_line(api_client_for, allowed_cluster):
    from apps.inventory.inventory_file import InventoryFileInvalid
    from apps.inventory.services import inventory_export, inventory_import

    exported = inventory_export()
    assert exported["clusters"][0]["allowlist"]["images"] == [{"reference": IMAGE, "digest": DIGEST}]
    Cluster.objects.update(allowlist={})
    inventory_import(yaml.safe_dump(exported))
    assert Cluster.objects.get().allowlist == ALLOWLIST
    text = "version: 1\nclusters:\n  - name: reference\n    allowlist:\n      images: [{reference: evil:latest}]\n"
    with pytest.raises(InventoryFileInvalid) as caught:
        inventory_import(text)
    error, = caught.value.errors
    assert (error.line, error.field) == (4, "clusters[0].allowlist.images[0].reference")
    assert "'latest' moves" in error.message
    assert Cluster.objects.get().allowlist == ALLOWLIST


def test_the_cluster_page_shows_the_allowlist_and_only_an_admin_gets_the_edit_link(client, make_user, allowed_cluster):
    client.force_login(make_user("operator", "op"))
    page = client.get(f"/clusters/{allowed_cluster.pk}/").content.decode()
    assert f"<code>{IMAGE}</code>" in page and "<code>/models</code>" in page and f"<code>{SCRIPTS}</code>" in page
    assert "/admin/inventory/cluster/" not in page
    client.force_login(make_user("admin", "adm"))
    page = client.get(f"/clusters/{allowed_cluster.pk}/").content.decode()
    assert f"/admin/inventory/cluster/{allowed_cluster.pk}/change/" in page


def test_a_final_newline_is_no_part_of_an_allowlist_entry():
    from apps.inventory.allowlist import allowlist_problems

    found = dict(allowlist_problems({"images": [{"reference": f"{IMAGE}\n", "digest": f"{DIGEST}\n"}],
                                     "weights": ["/models\n"], "mindie_scripts": [f"{SCRIPTS}\n"]}))
    assert set(found) == {"allowlist.images[0].reference", "allowlist.images[0].digest", "allowlist.weights[0]",
                          "allowlist.mindie_scripts[0]"}, found
    assert allowlist_problems(ALLOWLIST) == []
