"""The playground refuses before sending: bad input answers 400 naming the field, a viewer 403, a deployment that
is not running a clear 409 (audited as refused, with no text)."""

import json

import pytest

from apps.audit.models import AuditAction, AuditEntry
from apps.deployments.playground.request import PlaygroundInvalid, parse_playground_request
from apps.deployments.playground.snippets import curl_snippet

pytestmark = pytest.mark.django_db


@pytest.fixture
def deployment(ref_cluster, make_user):
    from apps.deployments.services import deployment_create
    from tests.deployments.simdeploy import topology_yaml

    return deployment_create(name="pg", cluster=ref_cluster, user=make_user("admin", "owner"),
                             yaml_text=topology_yaml("/home/simnode/pdcp-runs/pg"))


@pytest.mark.parametrize(("body", "field"), [
    ({"kind": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}, "max_tokens"),
    ({"kind": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5000}, "max_tokens"),
    ({"kind": "chat", "messages": []}, "messages"),
    ({"kind": "chat", "messages": [{"role": "user", "content": "  "}]}, "messages[0].content"),
    ({"kind": "poem", "prompt": "x"}, "kind"),
    ({"kind": "completion", "prompt": ""}, "prompt"),
    ({"kind": "completion", "prompt": "x", "temperature": "hot"}, "temperature"),
    ({"kind": "completion", "prompt": "x", "stream": "yes"}, "stream"),
])
def test_bad_input_names_the_field(body, field):
    with pytest.raises(PlaygroundInvalid) as exc:
        parse_playground_request(body)
    assert [e["field"] for e in exc.value.errors] == [field]


def test_the_page_and_the_api_answer_400_naming_the_field(client, make_user, api_client_for, deployment):
    client.force_login(make_user("operator", "op"))
    url = f"/deployments/{deployment.pk}/playground/"
    r = client.post(url, json.dumps({"kind": "chat", "messages": [{"role": "user", "content": "hi"}],
                                     "max_tokens": 0}), content_type="application/json")
    assert r.status_code == 400 and r.json()["errors"][0]["field"] == "max_tokens"
    r = api_client_for("operator").post(f"/api/deployments/{deployment.pk}/playground/",
                                        {"kind": "nope"}, format="json")
    assert r.status_code == 400 and r.json()["errors"][0]["field"] == "kind"
    assert not AuditEntry.objects.filter(action=AuditAction.PLAYGROUND).exists()


def test_a_viewer_sees_the_page_but_cannot_send(client, make_user, api_client_for, deployment):
    client.force_login(make_user("viewer", "v"))
    url = f"/deployments/{deployment.pk}/playground/"
    page = client.get(url)
    assert page.status_code == 200 and b"needs the operator role" in page.content
    body = {"kind": "completion", "prompt": "hello", "max_tokens": 4}
    assert client.post(url, json.dumps(body), content_type="application/json").status_code == 403
    assert api_client_for("viewer").post(f"/api/deployments/{deployment.pk}/playground/", body,
                                         format="json").status_code == 403
    assert not AuditEntry.objects.filter(action=AuditAction.PLAYGROUND).exists()


def test_a_deployment_that_is_not_running_answers_a_clear_409(make_user, api_client_for, deployment):
    api = api_client_for("operator")
    r = api.post(f"/api/deployments/{deployment.pk}/playground/",
                 {"kind": "completion", "prompt": "secret prompt text", "max_tokens": 4}, format="json")
    assert r.status_code == 409
    assert "no proxy process" in r.json()["detail"]
    [entry] = AuditEntry.objects.filter(action=AuditAction.PLAYGROUND)
    assert entry.changes["status"] == [None, "refused"] and entry.username == api.user.username
    assert "secret prompt text" not in json.dumps(entry.changes)


def test_the_curl_snippet_survives_hostile_text():
    import shlex

    body = {"model": "m", "prompt": "'; rm -rf / #$(x)", "stream": True}
    words = shlex.split(curl_snippet("http://127.0.0.1:1999/v1/completions", body, "rid"))
    assert json.loads(words[words.index("-d") + 1]) == body
