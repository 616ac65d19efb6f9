"""The form editor: the same revision as the YAML editor for the same values, problems on the field they name,
nothing saved on a problem, operators only."""

import re
from html.parser import HTMLParser

import pytest
from django.test import Client

from apps.deployments.models import Revision

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


def test_a_viewer_gets_403(make_user, deployment):
    client = Client()
    client.force_login(make_user("viewer", username="form-viewer"))
    assert client.get(form_url(deployment)).status_code == 403
    assert client.post(form_url(deployment), {"proxy.policy": "round_robin"}).status_code == 403
    assert deployment.revisions.count() == 1
