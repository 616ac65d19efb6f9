"""The form editor: the same revision as the YAML editor for the same values, problems on the field they name,
nothing saved on a problem, operators only."""

import copy
import re
from html.parser import HTMLParser

import pytest
import yaml
from django.test import Client

from apps.deployments.models import Revision
from apps.deployments.spec_form.state import node_names

pytestmark = pytest.mark.django_db


class FormFields(HTMLParser):
    """What a browser would submit from the page's spec form as it is (no button pressed)."""

    def __init__(self):
        super().__init__()
        self.fields: list[tuple[str, str]] = []
        self._form = False
        self._select: str | None = None
        self._options: list[tuple[str, bool]] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form" and a.get("id") == "spec-form":
            self._form = True
        if not self._form:
            return
        if tag == "input" and a.get("name"):
            if a.get("type") == "checkbox":
                if "checked" in a:
                    self.fields.append((a["name"], "on"))
            else:
                self.fields.append((a["name"], a.get("value", "")))
        elif tag == "select":
            self._select, self._options = a["name"], []
        elif tag == "option" and self._select:
            self._options.append((a.get("value", ""), "selected" in a))

    def handle_endtag(self, tag):
        if tag == "form":
            self._form = False
        if tag == "select" and self._select:
            chosen = next((v for v, sel in self._options if sel), self._options[0][0] if self._options else "")
            self.fields.append((self._select, chosen))
            self._select = None


def page_fields(html: str) -> dict[str, str]:
    parser = FormFields()
    parser.feed(html)
    return dict(parser.fields)


@pytest.fixture
def operator(make_user):
    client = Client()
    client.force_login(make_user("operator", username="form-operator"))
    return client


def form_url(deployment):
    return f"/deployments/{deployment.pk}/edit/form/"


def cell(html: str, name: str) -> str:
    """The table cell (or label) holding the field `name`."""
    start = html.index(f'name="{name}"')
    ends = [i for i in (html.find("</td>", start), html.find("</label>", start)) if i != -1]
    return html[start:min(ends)]


def test_the_page_shows_the_active_spec_and_is_linked_both_ways(operator, deployment):
    page = operator.get(form_url(deployment))
    assert page.status_code == 200
    html = page.content.decode()
    fields = page_fields(html)
    assert fields["model.served_name"] == "qwen3-235b" and fields["instances[2].tp"] == "4"
    assert fields["instances[2].node"] == "node2" and fields["proxy.policy"] == "least_conn"
    assert "node0" in cell(html, "instances[0].node") and "proxy" not in cell(html, "instances[0].node")
    assert "--enforce-eager" in html and "edit in YAML" in html
    assert f'href="/deployments/{deployment.pk}/edit/"' in html
    assert form_url(deployment) in operator.get(f"/deployments/{deployment.pk}/edit/").content.decode()
    assert form_url(deployment) in operator.get(f"/deployments/{deployment.pk}/").content.decode()


def test_a_valid_form_saves_what_the_yaml_editor_would(operator, deployment, fixed_yaml):
    fields = page_fields(operator.get(form_url(deployment)).content.decode())
    fields.update({"proxy.policy": "round_robin", "comment": "rr from the form"})
    response = operator.post(form_url(deployment), fields)
    assert response.status_code == 302 and response["Location"] == f"/deployments/{deployment.pk}/"
    from_form = Revision.objects.get(deployment=deployment, number=2)
    assert from_form.comment == "rr from the form" and not from_form.is_active

    yaml_edit = operator.post(f"/deployments/{deployment.pk}/edit/", {
        "yaml_text": fixed_yaml.replace("policy: least_conn", "policy: round_robin")})
    assert yaml_edit.status_code == 302
    from_yaml = Revision.objects.get(deployment=deployment, number=3)
    assert from_form.spec == from_yaml.spec
    assert "--compilation-config" in from_form.yaml_text  # extra_args survived the round trip


def test_rows_can_be_added_and_removed(operator, deployment):
    html = operator.post(form_url(deployment), {**page_fields(operator.get(form_url(deployment)).content.decode()),
                                                "add_instance": "1"}).content.decode()
    fields = page_fields(html)
    assert "instances[5].name" in fields and not Revision.objects.filter(number=2).exists()
    fields.update({"instances[3].remove": "on", "instances[4].name": "d9", "instances[4].role": "decode",
                   "instances[4].node": "node3", "instances[4].tp": "4", "instances[4].dp": "4",
                   "instances[4].dp_rpc_port": "12321", "instances[4].api_port": "7100",
                   "instances[4].kv_port": "30200", "activate": "on"})
    assert operator.post(form_url(deployment), fields).status_code == 302
    names = [i["name"] for i in deployment.active_revision.spec["instances"]]
    assert names == ["p0", "p1", "d0", "d9"]


def test_a_bad_tp_is_shown_on_that_rows_tp_and_nothing_is_saved(operator, deployment):
    fields = page_fields(operator.get(form_url(deployment)).content.decode())
    fields["instances[2].tp"] = "3"
    page = operator.post(form_url(deployment), fields)
    assert page.status_code == 400
    html = page.content.decode()
    here = cell(html, "instances[2].tp")
    assert "TP3 must be a power of two" in here and "Fix: use TP=" in here and 'aria-invalid="true"' in here
    assert "must be a power of two" not in cell(html, "instances[3].tp")
    assert "nothing was saved" in html
    assert page_fields(html)["instances[2].tp"] == "3"  # what was typed stays
    assert deployment.revisions.count() == 1


def test_a_problem_after_a_removed_row_lands_on_the_right_row(operator, deployment):
    fields = page_fields(operator.get(form_url(deployment)).content.decode())
    fields.update({"instances[1].remove": "on", "instances[3].kv_port": "20000"})
    html = operator.post(form_url(deployment), fields).content.decode()
    assert "ADXL" in cell(html, "instances[3].kv_port")
    assert deployment.revisions.count() == 1


def test_text_in_a_number_field_names_the_field(operator, deployment):
    fields = page_fields(operator.get(form_url(deployment)).content.decode())
    fields.update({"instances[0].api_port": "71OO", "proxy.port": "1999.5"})
    page = operator.post(form_url(deployment), fields)
    assert page.status_code == 400
    html = page.content.decode()
    assert re.search(r"instance p0 api_port</code>: expected a whole number, got &#x27;71OO&#x27;",
                     cell(html, "instances[0].api_port"))
    assert "proxy port</code>: expected a whole number" in cell(html, "proxy.port")
    assert "missing required field" not in html  # the unreadable number is not reported twice

    fields.update({"instances[0].api_port": "7100", "proxy.port": "1999", "instances[0].max_num_seqs": "eight",
                   "instances[2].tp": "3"})
    html = operator.post(form_url(deployment), fields).content.decode()
    assert "expected a whole number, got &#x27;eight&#x27;" in cell(html, "instances[0].max_num_seqs")
    assert "must be a power of two" in cell(html, "instances[2].tp")  # the rest is still validated
    assert deployment.revisions.count() == 1


def test_a_blank_run_dir_is_the_default_named_after_the_deployment(operator, deployment):
    fields = page_fields(operator.get(form_url(deployment)).content.decode())
    fields.update({"run_dir": "", "activate": "on"})
    assert operator.post(form_url(deployment), fields).status_code == 302
    assert deployment.active_revision.spec["run_dir"] == "/var/lib/pdcp/reference"


def test_the_proxy_admin_port_rides_along_and_its_default_follows_the_port(operator, deployment, fixed_yaml):
    fields = page_fields(operator.get(form_url(deployment)).content.decode())
    fields.update({"proxy.port": "3000", "activate": "on"})
    assert operator.post(form_url(deployment), fields).status_code == 302
    assert deployment.active_revision.spec["proxy"]["admin_port"] == 3001  # port + 1, not the stored 2000

    operator.post(f"/deployments/{deployment.pk}/edit/", {
        "yaml_text": fixed_yaml.replace("port: 1999,", "port: 1999, admin_port: 2500,"), "activate": "on"})
    assert deployment.active_revision.spec["proxy"]["admin_port"] == 2500
    html = operator.get(form_url(deployment)).content.decode()
    assert "2500" in html
    fields = page_fields(html)
    fields.update({"proxy.policy": "round_robin", "activate": "on"})
    assert operator.post(form_url(deployment), fields).status_code == 302
    assert deployment.active_revision.spec["proxy"]["admin_port"] == 2500


def test_proxy_workers_is_a_form_field_and_a_bad_value_is_named(operator, deployment):
    fields = page_fields(operator.get(form_url(deployment)).content.decode())
    assert fields["proxy.workers"] == "auto"
    fields.update({"proxy.workers": "3", "activate": "on"})
    assert operator.post(form_url(deployment), fields).status_code == 302
    assert deployment.active_revision.spec["proxy"]["workers"] == 3
    fields = page_fields(operator.get(form_url(deployment)).content.decode())
    assert fields["proxy.workers"] == "3"
    fields.update({"proxy.policy": "round_robin", "activate": "on"})  # a save that does not touch it keeps it
    assert operator.post(form_url(deployment), fields).status_code == 302
    assert deployment.active_revision.spec["proxy"]["workers"] == 3
    fields.update({"proxy.workers": "lots"})
    html = operator.post(form_url(deployment), fields).content.decode()
    assert "expected auto or a whole number from 1 to 64, got &#x27;lots&#x27;" in cell(html, "proxy.workers")


def test_the_proxy_kv_events_block_rides_along(operator, deployment, fixed_yaml):
    yaml_text = fixed_yaml.replace("policy: least_conn", "policy: cache_aware, kv_events: {port: 5601}").replace(
        "--no-enable-prefix-caching, ", "")
    response = operator.post(f"/deployments/{deployment.pk}/edit/", {"yaml_text": yaml_text, "activate": "on"})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert deployment.active_revision.spec["proxy"]["kv_events"]["port"] == 5601
    fields = page_fields(operator.get(form_url(deployment)).content.decode())
    fields.update({"proxy.port": "1999", "activate": "on"})
    assert operator.post(form_url(deployment), fields).status_code == 302
    assert deployment.active_revision.spec["proxy"]["kv_events"]["port"] == 5601


def test_the_simulation_block_rides_along(operator, deployment, fixed_yaml):
    sim_yaml = fixed_yaml.replace("launch_profile: vllm-ascend", "launch_profile: sim") + (
        "simulation: {answer_book: made-up-aime, accuracy: 0.7, think: true}\n")
    operator.post(f"/deployments/{deployment.pk}/edit/", {"yaml_text": sim_yaml, "activate": "on"})
    assert deployment.active_revision.spec["simulation"]["accuracy"] == 0.7
    fields = page_fields(operator.get(form_url(deployment)).content.decode())
    fields.update({"proxy.policy": "least_conn", "activate": "on"})
    assert operator.post(form_url(deployment), fields).status_code == 302
    spec = deployment.active_revision.spec
    assert spec["proxy"]["policy"] == "least_conn"
    assert spec["simulation"] == {"answer_book": "made-up-aime", "accuracy": 0.7, "think": True}


def test_kv_connector_rides_along(operator, deployment, fixed_yaml):
    operator.post(f"/deployments/{deployment.pk}/edit/", {"yaml_text": fixed_yaml + "kv_connector: layerwise\n",
                                                          "activate": "on"})
    assert deployment.active_revision.spec["kv_connector"] == "layerwise"
    fields = page_fields(operator.get(form_url(deployment)).content.decode())
    fields.update({"proxy.policy": "round_robin", "activate": "on"})
    assert operator.post(form_url(deployment), fields).status_code == 302
    spec = deployment.active_revision.spec
    assert (spec["proxy"]["policy"], spec["kv_connector"]) == ("round_robin", "layerwise")


def test_a_viewer_gets_403(make_user, deployment):
    client = Client()
    client.force_login(make_user("viewer", username="form-viewer"))
    assert client.get(form_url(deployment)).status_code == 403
    assert client.post(form_url(deployment), {"proxy.policy": "round_robin"}).status_code == 403
    assert deployment.revisions.count() == 1


# --- issue 11's fields: instances spanning nodes, engine_id, env that extends, the KV pool's backend and options ---

def spanning(fixed_data: dict) -> dict:
    """The reference topology with d0 over node2 and node3 (TP4 x DP8: 4 ranks a node, 16 NPUs each) in place of
    d0 and d1, and every issue-11 field set to something other than its default."""
    data = copy.deepcopy(fixed_data)
    p0, p1, d0 = data["instances"][:3]
    del data["instances"][3]
    del d0["node"]
    d0.update(nodes=["node2", "node3"], dp=8, engine_id="2", env={
        "LD_LIBRARY_PATH": {"prepend": "/usr/local/lib/python3.11/site-packages/mooncake"}, "HCCL_BUFFSIZE": "600"})
    p0["engine_id"] = "0"
    p1.update(devices=list(range(16)), env={
        "LD_PRELOAD": {"prepend": "/usr/lib/a.so", "append": "/usr/lib/b.so", "separator": " "}})
    data["kv_pool"] = {"backend": "mooncake", "node": "proxy", "rpc_port": 50090, "metrics_port": 9005,
                       "segment_size": "4GB", "load_failure_policy": "recompute", "consumer_is_to_load": True,
                       "consumer_is_to_put": True}
    data["transfer_ports"] = {"base": 21000, "per_device": 100}
    return data


def activate_yaml(operator, deployment, data: dict) -> Revision:
    response = operator.post(f"/deployments/{deployment.pk}/edit/", {
        "yaml_text": yaml.safe_dump(data, sort_keys=False), "activate": "on"})
    assert response.status_code == 302, re.findall(r'<li data-field[^>]*>.*?</li>', response.content.decode(), re.S)
    return deployment.active_revision


def saved_from_the_form(operator, deployment, fields: dict) -> Revision:
    response = operator.post(form_url(deployment), {**fields, "activate": "on"})
    assert response.status_code == 302, re.findall(r'<li data-field[^>]*>.*?</li>', response.content.decode(), re.S)
    return deployment.active_revision


def form_round_trip(operator, deployment, data: dict) -> tuple[Revision, Revision]:
    """The spec saved from the YAML editor, then saved again from its form as shown: (before, after)."""
    before = activate_yaml(operator, deployment, data)
    after = saved_from_the_form(operator, deployment, page_fields(operator.get(form_url(deployment)).content.decode()))
    assert after.number == before.number + 1
    return before, after


def test_every_new_field_survives_a_round_trip_through_the_form(operator, deployment, fixed_data):
    before, after = form_round_trip(operator, deployment, spanning(fixed_data))
    assert after.spec == before.spec
    d0 = after.spec["instances"][2]
    assert d0["nodes"] == ["node2", "node3"] and "node" not in d0 and d0["engine_id"] == "2"
    assert d0["env"] == {"HCCL_BUFFSIZE": "600",
                         "LD_LIBRARY_PATH": {"prepend": "/usr/local/lib/python3.11/site-packages/mooncake"}}
    assert after.spec["instances"][1]["env"]["LD_PRELOAD"] == {
        "prepend": "/usr/lib/a.so", "append": "/usr/lib/b.so", "separator": " "}
    assert after.spec["kv_pool"] == {"node": "proxy", "backend": "mooncake", "rpc_port": 50090, "metrics_port": 9005,
                                     "segment_size": "4GB", "load_failure_policy": "recompute",
                                     "consumer_is_to_load": True, "consumer_is_to_put": True}
    assert "nodes:" in after.yaml_text and "node: node0" in after.yaml_text  # one node stays `node:`


def test_the_form_shows_the_new_fields(operator, deployment, fixed_data):
    activate_yaml(operator, deployment, spanning(fixed_data))
    html = operator.get(form_url(deployment)).content.decode()
    fields = page_fields(html)
    assert fields["instances[2].node"] == "node2, node3" and fields["instances[0].node"] == "node0"
    assert fields["instances[2].engine_id"] == "2" and fields["instances[1].engine_id"] == ""
    assert fields["kv_pool.backend"] == "mooncake" and fields["kv_pool.segment_size"] == "4GB"
    assert fields["kv_pool.load_failure_policy"] == "recompute"
    assert fields["kv_pool.consumer_is_to_load"] == "on" and fields["kv_pool.consumer_is_to_put"] == "on"
    # env that extends reads as the shell would expand it, next to the row it belongs to
    assert "LD_LIBRARY_PATH=/usr/local/lib/python3.11/site-packages/mooncake:$LD_LIBRARY_PATH" in cell(
        html, "instances[2].keep")
    assert "LD_PRELOAD=/usr/lib/a.so $LD_PRELOAD /usr/lib/b.so" in cell(html, "instances[1].keep")
    # the node cell suggests the NPU nodes only
    datalist = re.search(r'<datalist id="npu-nodes">(.*?)</datalist>', html, re.S).group(1)
    assert re.findall(r'value="([^"]+)"', datalist) == ["node0", "node1", "node2", "node3"]
    assert 'list="npu-nodes"' in cell(html, "instances[2].node")
    policies = re.findall(r'<option value="([^"]*)"', cell(html, "kv_pool.load_failure_policy"))
    assert policies == ["", "fail", "recompute"]
    assert re.findall(r'<option value="([^"]*)"', cell(html, "kv_pool.backend")) == ["mooncake", "memcache"]


def test_a_memcache_pool_and_the_sims_store_survive_a_round_trip(operator, deployment, fixed_data):
    data = spanning(fixed_data)
    data["kv_pool"] = {"backend": "memcache", "node": "proxy", "config_store_port": 6001, "segment_size": "2GB",
                       "protocol": "device_sdma", "install_path": "/usr/local/lib/python3.11/site-packages"}
    before, after = form_round_trip(operator, deployment, data)
    assert after.spec == before.spec
    assert after.spec["kv_pool"]["rpc_port"] == 5000 and after.spec["kv_pool"]["config_store_port"] == 6001
    assert after.spec["kv_pool"]["protocol"] == "device_sdma" and not after.spec["kv_pool"]["consumer_is_to_load"]

    data.update(launch_profile="sim", run_dir="/home/simnode/pdcp-runs/reference",
                store={"servers": [{"node": "node1", "port": 11211}, {"node": "node2", "port": 11211}],
                       "replicas": 2, "memory_mb": 128},
                simulation={"answer_book": "made-up-aime", "accuracy": 0.5})
    for inst in data["instances"]:
        inst.pop("env", None)  # LD_* paths are no concern of the simulator
    before, after = form_round_trip(operator, deployment, data)
    assert after.spec == before.spec and after.spec["store"]["memory_mb"] == 128
    assert after.spec["instances"][2]["nodes"] == ["node2", "node3"]


def test_an_instance_is_spread_over_two_nodes_from_the_form_and_back(operator, deployment):
    fields = page_fields(operator.get(form_url(deployment)).content.decode())
    fields.update({"instances[2].node": "node2,node3", "instances[2].dp": "8", "instances[3].remove": "on",
                   "instances[2].engine_id": "7"})
    spec = saved_from_the_form(operator, deployment, fields).spec
    d0 = spec["instances"][2]
    assert d0["nodes"] == ["node2", "node3"] and "node" not in d0 and d0["engine_id"] == "7"
    assert [i["name"] for i in spec["instances"]] == ["p0", "p1", "d0"]

    fields = page_fields(operator.get(form_url(deployment)).content.decode())
    assert fields["instances[2].node"] == "node2, node3"
    fields.update({"instances[2].node": " node2 ", "instances[2].dp": "4", "instances[2].engine_id": ""})
    revision = saved_from_the_form(operator, deployment, fields)
    d0 = revision.spec["instances"][2]
    assert d0["node"] == "node2" and "nodes" not in d0 and "engine_id" not in d0
    assert "nodes:" not in revision.yaml_text


@pytest.mark.parametrize(("typed", "says"), [
    ("node2, node9", "node &#x27;node9&#x27; is not in the cluster inventory"),
    ("node2, proxy", "node proxy has no NPUs"),
    ("node2, node2", "node &#x27;node2&#x27; is listed twice"),
])
def test_a_bad_nodes_entry_is_shown_on_that_rows_node_cell(operator, deployment, typed, says):
    fields = page_fields(operator.get(form_url(deployment)).content.decode())
    fields.update({"instances[2].node": typed, "instances[2].dp": "8", "instances[3].remove": "on"})
    page = operator.post(form_url(deployment), fields)
    assert page.status_code == 400
    html = page.content.decode()
    here = cell(html, "instances[2].node")
    assert says in here and 'aria-invalid="true"' in here and "instance d0.nodes[1]" in here
    assert says not in cell(html, "instances[0].node") and says not in cell(html, "instances[2].dp")
    assert page_fields(html)["instances[2].node"] == typed  # what was typed stays
    assert deployment.revisions.count() == 1


def test_a_dp_that_does_not_split_over_the_nodes_is_shown_on_dp(operator, deployment):
    fields = page_fields(operator.get(form_url(deployment)).content.decode())
    fields.update({"instances[2].node": "node2, node3", "instances[2].dp": "3", "instances[3].remove": "on"})
    html = operator.post(form_url(deployment), fields).content.decode()
    assert "DP3 over 2 nodes does not split evenly" in cell(html, "instances[2].dp")
    assert "split evenly" not in cell(html, "instances[2].node")
    assert deployment.revisions.count() == 1


def test_the_kv_pool_is_edited_from_the_form_with_problems_on_its_fields(operator, deployment):
    fields = page_fields(operator.get(form_url(deployment)).content.decode())
    fields.update({"kv_pool.backend": "memcache", "kv_pool.rpc_port": "", "kv_pool.metrics_port": "",
                   "kv_pool.segment_size": "1.5GB", "kv_pool.load_failure_policy": "recompute"})
    html = operator.post(form_url(deployment), fields).content.decode()
    assert "expected whole gigabytes" in cell(html, "kv_pool.segment_size")

    fields["kv_pool.segment_size"] = "2GB"
    html = operator.post(form_url(deployment), fields).content.decode()
    assert "install path" in cell(html, "kv_pool.install_path")  # memcache needs it
    assert deployment.revisions.count() == 1

    fields.update({"kv_pool.install_path": "/usr/local/lib/python3.11/site-packages",
                   "kv_pool.protocol": "device_rdma", "kv_pool.consumer_is_to_load": "on"})
    pool = saved_from_the_form(operator, deployment, fields).spec["kv_pool"]
    assert pool == {"node": "proxy", "backend": "memcache", "rpc_port": 5000, "metrics_port": 8000,
                    "config_store_port": 6000, "segment_size": "2GB", "protocol": "device_rdma",
                    "install_path": "/usr/local/lib/python3.11/site-packages", "load_failure_policy": "recompute",
                    "consumer_is_to_load": True, "consumer_is_to_put": False}

    # Back to mooncake: a memcache-only field still filled in (the page's script blanks them) is named on its field.
    fields = page_fields(operator.get(form_url(deployment)).content.decode())
    fields.update({"kv_pool.backend": "mooncake", "kv_pool.install_path": "", "kv_pool.config_store_port": "",
                   "kv_pool.rpc_port": "", "kv_pool.metrics_port": ""})
    fields.pop("kv_pool.consumer_is_to_load")  # unticked
    html = operator.post(form_url(deployment), fields).content.decode()
    assert "only the memcache backend takes protocol" in cell(html, "kv_pool.protocol")
    fields["kv_pool.protocol"] = ""
    pool = saved_from_the_form(operator, deployment, fields).spec["kv_pool"]
    assert pool["backend"] == "mooncake" and pool["rpc_port"] == 50088 and not pool["consumer_is_to_load"]
    assert "protocol" not in pool and "install_path" not in pool


def test_pool_consumers_without_a_decode_instance_are_named_on_the_checkbox(operator, deployment):
    fields = page_fields(operator.get(form_url(deployment)).content.decode())
    fields.update({"kv_pool.consumer_is_to_load": "on", "instances[2].remove": "on", "instances[3].remove": "on"})
    html = operator.post(form_url(deployment), fields).content.decode()
    assert "no decode instance" in cell(html, "kv_pool.consumer_is_to_load")
    assert deployment.revisions.count() == 1


def test_the_node_cell_reads_commas_and_spaces():
    assert node_names(" node2 ,node3,, node4  node5 ") == ["node2", "node3", "node4", "node5"]
    assert node_names("  ") == []


def test_ep_size_is_a_form_field_and_a_size_that_does_not_fit_is_named_in_its_cell(operator, deployment):
    fields = page_fields(operator.get(form_url(deployment)).content.decode())
    tp, dp = int(fields["instances[0].tp"]), int(fields["instances[0].dp"])
    fields.update({"instances[0].expert_parallel": "on", "instances[0].ep_size": "3", "activate": "on"})
    before = deployment.revisions.count()
    html = operator.post(form_url(deployment), fields).content.decode()
    assert f"does not fit its {tp * dp} devices" in cell(html, "instances[0].ep_size")
    assert deployment.revisions.count() == before
    fields["instances[0].ep_size"] = str(tp * dp)
    assert operator.post(form_url(deployment), fields).status_code == 302
    p0 = deployment.active_revision.spec["instances"][0]
    assert (p0["expert_parallel"], p0["ep_size"]) == (True, tp * dp)
