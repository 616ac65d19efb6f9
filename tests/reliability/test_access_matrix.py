"""Access matrix: every URL pattern, REST action and websocket route (access_rules.py walks them) is called by an
anonymous client, a viewer, an operator and an admin, with real objects behind each id in the path.

Below a route's least role the answer is a refusal (pages: the login redirect, then 403; API: 401, then 403;
websockets: closed with 4403) and a refused write changes no row; at or above it the answer is neither a refusal
nor a 5xx. A route without a rule, or a rule without a route, fails `test_every_route_has_a_rule`; a planted
endpoint proves that check catches a new one.
"""

from __future__ import annotations

import copy
import logging
import re
import time
import types
from pathlib import Path

import pytest
from django.urls import path

from tests.ports import free_port
from tests.reliability.access_rules import (
    ANONYMOUS,
    IDENTITIES,
    NOBODY,
    RANK,
    RULES,
    STAFF,
    all_routes,
    build_path,
    coverage_problems,
    http_routes,
    rule_for,
)

COMMAND = 'make test PYTEST_ARGS="tests/reliability/test_access_matrix.py"'
LOGIN_PAGES = ("/login/", "/admin/login/")
HTML_API_PAGES = ("/api/docs/", "/api/redoc/")  # sent to the login page like any page
GATEWAY_ANSWERS = (502, 503)  # documented: the node (SSH) or Redis behind the answer could not be read
WRITES = ("POST", "PUT", "PATCH", "DELETE")
NODE_ADDRESSES = [f"127.0.10.{44 + i}" for i in range(6)]  # this module's slice of the reliability range
FIXED_TOPOLOGY = Path(__file__).resolve().parents[2] / "examples" / "reference-topology-fixed.yaml"
REFERENCE_NODES = (("node0", 16), ("node1", 16), ("node2", 16), ("node3", 16), ("proxy", 0), ("bench", 0))


def test_every_route_has_a_rule():
    routes = all_routes()
    assert coverage_problems(routes) == []
    assert sum(r.websocket for r in routes) >= 3 and len(routes) > 150


def test_a_new_endpoint_without_a_rule_is_reported(settings):
    """A URLconf of the real URLs plus one view nobody wrote a rule for: the coverage check names it."""
    from django.http import HttpResponse

    import controlplane.urls

    stale = coverage_problems(all_routes(), {**RULES, "gone-report": "viewer"})
    assert stale == ["the access rule 'gone-report' names no route any more: remove it"]
    planted = types.ModuleType("planted_urls")
    planted.urlpatterns = [*controlplane.urls.urlpatterns,
                           path("reports/secret/", lambda request: HttpResponse("x"), name="secret-report")]
    settings.ROOT_URLCONF = planted
    problems = coverage_problems(http_routes())
    assert [p.split(" (")[0] for p in problems if "secret-report" in p] == [
        "no access rule for GET 'secret-report'", "no access rule for POST 'secret-report'"]
    assert any("the access rule 'ws:" in p for p in problems)  # only HTTP routes walked: ws rules name nothing


def test_a_key_that_is_no_key_is_a_400_not_a_500(node, api_client_for, make_user):
    """Found by the matrix: pinning an empty key (page) or one of the right shape but no key's data (API) raised
    SshTargetInvalid, a 500; now a 400 naming host_key, and nothing is pinned."""
    from django.test import Client

    admin = Client()
    admin.force_login(make_user("admin"))
    page = admin.post(f"/nodes/{node.pk}/host-key/", {"host_key": "", "fingerprint": ""})
    assert page.status_code == 302 and page["Location"] == f"/nodes/{node.pk}/host-key/"
    api = api_client_for("admin").post(f"/api/nodes/{node.pk}/pin-host-key/",
                                       {"host_key": "ssh-ed25519 AAAA", "fingerprint": "x"}, format="json")
    assert api.status_code == 400 and [e["field"] for e in api.json()["errors"]] == ["host_key"], api.content
    node.refresh_from_db()
    assert node.host_key.startswith("ssh-ed25519 AAAAC3")


@pytest.fixture
def world(make_user, credential, cluster):
    """One object of every kind a path names, keyed by model, plus the other path values."""
    from django.contrib.auth import get_user_model

    from apps.audit.models import AuditEntry
    from apps.deployments.models import Deployment, Process, Revision
    from apps.deployments.services import deployment_create
    from apps.evals.models import EvalRun, EvalSweep
    from apps.inventory.models import Cluster, Node, Npu, SshCredential
    from apps.jobs.choices import JobKind
    from apps.jobs.models import Job
    from tests.keys import TEST_HOST_KEY

    port = free_port()  # nothing listens on it: an SSH attempt is refused at once
    nodes = [Node.objects.create(cluster=cluster, name=name, address=address, ssh_port=port, credential=credential,
                                 host_key=TEST_HOST_KEY, npu_count=npus)
             for (name, npus), address in zip(REFERENCE_NODES, NODE_ADDRESSES, strict=True)]
    deployment = deployment_create(name="matrix", cluster=cluster, user=make_user("operator", "matrix-owner"),
                                   yaml_text=FIXED_TOPOLOGY.read_text())
    revision = deployment.active_revision
    npu = Npu.objects.create(node=nodes[0], npu_id=0, chip_id=0, logical_id=0, name="910C")  # after: no die is free
    process = Process.objects.create(deployment=deployment, revision=revision, node=nodes[0], node_name="node0",
                                     role="prefill", instance="p0", key="p0-dp0", address=nodes[0].address,
                                     ports=[7100], command="vllm serve", fingerprint="0" * 64,
                                     log_path="/home/simnode/pdcp-runs/matrix/p0.log",
                                     pid_file="/home/simnode/pdcp-runs/matrix/p0.pid")
    job = Job.objects.create(kind=JobKind.DISCOVER, target_type="inventory.node", target_id=nodes[0].pk,
                             target_label="node0")
    sweep = EvalSweep.objects.create(deployment=deployment, deployment_name=deployment.name, concurrencies=[1, 2])
    run = EvalRun.objects.create(deployment=deployment, deployment_name=deployment.name, revision=revision,
                                 revision_number=revision.number, revision_spec=revision.spec,
                                 endpoint_url="http://127.0.10.48:1999/", served_model="qwen3-235b", mode="accuracy",
                                 dataset_key="catalogue:made-up-aime", dataset_abbr="made_up_aime",
                                 dataset_family="aime", status="failed", sweep=sweep)
    someone = make_user("viewer", "someone-else")
    objects = {Cluster: cluster, Node: nodes[0], Npu: npu, SshCredential: credential, Deployment: deployment,
               Revision: revision, Process: process, Job: job, EvalRun: run, EvalSweep: sweep,
               AuditEntry: AuditEntry.objects.order_by("pk").first(), get_user_model(): someone}
    values = {"number": revision.number, "kind": "preflight", "name": "p0", "format": "json",
              "object_id": str(someone.pk), "content_type_id": "1", "id": str(someone.pk), "app_label": "inventory",
              "url": "no-such-page/", "job_id": job.pk, "deployment_id": deployment.pk, "run_id": run.pk}
    return objects, values


SEGMENT_MODELS = {"deployments": ("deployments", "Deployment"), "processes": ("deployments", "Process"),
                  "evals": ("evals", "EvalRun"), "runs": ("evals", "EvalRun"), "sweeps": ("evals", "EvalSweep"),
                  "clusters": ("inventory", "Cluster"), "nodes": ("inventory", "Node"), "jobs": ("jobs", "Job")}


def pk_model(route):
    """The model a route's `pk` names: a DRF view's queryset model, else the path segment before the id."""
    from django.apps import apps

    queryset = getattr(getattr(route.callback, "cls", None), "queryset", None)
    if queryset is not None:
        return queryset.model
    found = re.search(r"([\w-]+)/(?:<int:pk>|\(\?P<pk>)", route.pattern)
    assert found and found[1] in SEGMENT_MODELS, f"which object does <pk> of {route.pattern} name? (SEGMENT_MODELS)"
    return apps.get_model(*SEGMENT_MODELS[found[1]])


def route_path(route, objects, values) -> str:
    from django.urls import resolve

    filled = dict(values)
    if "(?P<pk>" in "".join(route.regexes):
        filled["pk"] = objects[pk_model(route)].pk
    url = build_path(route, filled)
    if not route.websocket:
        match = resolve(url)
        assert match.func is route.callback, f"{url} resolves to {match.route}, not {route.pattern}"
    return url


def is_api(url: str) -> bool:
    return url.startswith("/api/") and not url.startswith(HTML_API_PAGES)


def send(client, method: str, url: str):
    """GET, or a write with an empty body: JSON for the API (a 400, or a 415 where it reads only forms), a form
    for pages."""
    if method == "GET":
        return client.get(url)
    if is_api(url):
        return client.generic(method, url, b"{}", content_type="application/json")
    return client.generic(method, url, b"", content_type="application/x-www-form-urlencoded")


def unexpected(identity: str, level: str, url: str, response) -> str | None:
    """Why this answer breaks the rule, or None. A refusal of a page is the login redirect (with ?next=) for the
    anonymous and 403 for a role too low; the admin site sends anyone not staff to its own login (or index)."""
    status, location = response.status_code, response.get("Location", "")
    to_login = status == 302 and location.split("?")[0] in LOGIN_PAGES and "next=" in location
    if RANK[identity] >= RANK[level]:
        if status in (401, 403) or to_login:
            return f"allowed ({level}) but refused: {status} {location}"
        if status >= 500 and not (is_api(url) and status in GATEWAY_ANSWERS):
            return f"allowed ({level}) but answered {status}"
        return None
    if identity == ANONYMOUS:
        refused = status == 401 or (to_login and not is_api(url))
    else:
        refused = status == 403 or (level == STAFF and status == 302 and location.startswith("/admin/"))
    if refused or (level == NOBODY and status == 405):
        return None
    return f"needs {level} but answered {status} {location}"


def rows_written() -> int:
    """Rows this transaction inserted, updated or deleted so far (PostgreSQL's own count), sessions aside; else
    (SQLite) the row count of every table."""
    from django.apps import apps
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM pg_stat_xact_user_tables"
                           " WHERE relname <> 'django_session'")
            return cursor.fetchone()[0]
        tables = {m._meta.db_table for m in apps.get_models() if m._meta.managed and not m._meta.proxy}
        cursor.execute(" + ".join(f"(SELECT count(*) FROM {connection.ops.quote_name(t)})" for t in tables))
        return cursor.fetchone()[0]


def identity_client(identity: str, make_user):
    """A client for the identity: logged in (pages) and carrying its API token; anonymous carries neither."""
    from django.test import Client
    from rest_framework.authtoken.models import Token

    client = Client(raise_request_exception=False)
    if identity != ANONYMOUS:
        user = make_user(identity, username=f"matrix-{identity}")
        client.force_login(user)
        client.defaults["HTTP_AUTHORIZATION"] = f"Token {Token.objects.create(user=user).key}"
    return client


def call(client, method, url, *, check_writes: bool):
    """One request in a transaction rolled back afterwards, so each call sees the same rows; with check_writes,
    also whether any row changed."""
    from django.db import transaction

    cookies = copy.deepcopy(client.cookies)
    with transaction.atomic():
        before = rows_written() if check_writes else None
        response = send(client, method, url)
        changed = check_writes and rows_written() != before
        transaction.set_rollback(True)
    client.cookies = cookies  # a logout clears the session cookie; the next call is still this identity
    return response, changed


async def websocket_outcomes(cases):
    from channels.testing import WebsocketCommunicator

    from controlplane.asgi import application

    outcomes = []
    for url, cookie in cases:
        headers = [(b"host", b"127.0.0.1"), (b"origin", b"http://127.0.0.1")]
        if cookie:
            headers.append((b"cookie", f"sessionid={cookie}".encode()))
        socket_client = WebsocketCommunicator(application, url, headers=headers)
        connected, code = await socket_client.connect(timeout=10)
        if connected:
            await socket_client.disconnect()
        outcomes.append((connected, code))
    return outcomes


@pytest.fixture
def quiet_request_log():
    """Each refusal would log a warning with its traceback: 1,000 of them only slow the run down. Errors stay."""
    logger = logging.getLogger("django.request")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


def http_matrix(routes, clients, objects, values, tally) -> list[str]:
    """Every HTTP route × method × identity; what broke a rule, one line each."""
    problems = []
    for route in routes:
        url = route_path(route, objects, values)
        for method in route.methods:
            level = rule_for(route, method)
            if level not in RANK:
                problems.append(f"{method} {url} [{route.key}]: no rule (see test_every_route_has_a_rule)")
                continue
            for identity, client in clients.items():
                allowed = RANK[identity] >= RANK[level]
                response, wrote = call(client, method, url, check_writes=method in WRITES)
                tally["requests"] += 1
                tally["served" if allowed else "refused"] += 1
                tally["refused_writes"] += method in WRITES and not allowed
                tally["served_writes_that_wrote"] += wrote and allowed
                why = unexpected(identity, level, url, response)
                if wrote and not allowed:
                    why = (why + "; " if why else "") + "a refused write changed rows"
                if why:
                    problems.append(f"{method} {url} as {identity} [{route.key}]: {why}")
    return problems


def websocket_matrix(routes, clients, objects, values, tally) -> list[str]:
    """Every websocket route × identity, with the identity's session cookie: accepted, or closed with 4403."""
    from asgiref.sync import async_to_sync

    cases = [(route, route_path(route, objects, values), identity) for route in routes for identity in clients]
    cookies = {i: c.cookies["sessionid"].value if "sessionid" in c.cookies else None for i, c in clients.items()}
    outcomes = async_to_sync(websocket_outcomes)([(url, cookies[identity]) for _route, url, identity in cases])
    problems = []
    for (route, url, identity), (connected, code) in zip(cases, outcomes, strict=True):
        allowed = RANK[identity] >= RANK[rule_for(route, "WS")]
        tally["requests"] += 1
        tally["served" if allowed else "refused"] += 1
        if allowed != connected or (not allowed and code != 4403):
            problems.append(f"WS {url} as {identity} [{route.key}]: connected={connected}, close code {code}")
    return problems


@pytest.mark.django_db(transaction=True)
def test_access_matrix(world, make_user, own_cache_prefix, quiet_request_log, figure):
    objects, values = world
    clients = {identity: identity_client(identity, make_user) for identity in IDENTITIES}
    routes = all_routes()
    tally = dict.fromkeys(("requests", "refused", "served", "refused_writes", "served_writes_that_wrote"), 0)
    started, cpu_started = time.monotonic(), time.process_time()
    problems = http_matrix([r for r in routes if not r.websocket], clients, objects, values, tally)
    problems += websocket_matrix([r for r in routes if r.websocket], clients, objects, values, tally)
    seconds, cpu_seconds = time.monotonic() - started, time.process_time() - cpu_started
    pairs = sum(len(r.methods) for r in routes)
    figure("access-matrix",
           held="every URL pattern, REST action, format suffix and websocket route has a rule (a planted endpoint "
                "without one is reported); below its least role each answer is a refusal (login redirect or 401, "
                "then 403; websocket close 4403) and a refused write writes no row; at or above it, no refusal "
                "and no 5xx (the API's documented 502/503 aside)",
           figure=f"{len(routes)} routes ({pairs} route×method) × {len(IDENTITIES)} identities = "
                  f"{tally['requests']} requests ({tally['refused']} refused as ruled, {tally['served']} served; "
                  f"{tally['refused_writes']} refused writes wrote no row), {len(problems)} unexpected",
           command=COMMAND,
           values={"routes": len(routes), "websocket_routes": sum(r.websocket for r in routes),
                   "route_methods": pairs, "identities": len(IDENTITIES), **tally, "unexpected": len(problems),
                   "seconds": round(seconds, 1), "cpu_seconds": round(cpu_seconds, 1)})
    assert problems == [], "\n".join(problems)
    assert tally["served_writes_that_wrote"] > 20  # the write check does see the writes that were allowed
