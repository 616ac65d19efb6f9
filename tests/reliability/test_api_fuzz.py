"""Every operation of the OpenAPI schema /api/schema/ serves, fuzzed with schemathesis as admin, operator and
viewer (valid and invalid requests): no 5xx but a documented 502 (a node that does not answer), every status
documented for its operation, every body of the content type and shape the schema gives it.

In-process: the schema is loaded from /api/schema/ through the Django WSGI app and every case goes through it,
on the test database, each case in a savepoint rolled back afterwards (every case meets the same world). A
path id is the world's object of that collection (the light run), or that and generated ones (the deep run).
Nothing leaves loopback: queued jobs never run (`no_celery`, and on_commit never fires in a test transaction),
the nodes' SSH ports on 127.0.0.x are closed, and a guard refuses, fast, any connection or name lookup outside
127.0.0.0/8."""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import time
from collections import Counter
from dataclasses import dataclass, field

import pytest

ROLES = ("admin", "operator", "viewer")
LIGHT_EXAMPLES = 1  # per operation, role and kind of case (valid or not; the world's ids or generated ones)
DEEP_EXAMPLES = 4
SEED = int(os.environ.get("PDCP_FUZZ_SEED", "20261203"))  # fixed: CI reproducible; set it to explore
REFERENCE_NODES = (("node0", 16), ("node1", 16), ("node2", 16), ("node3", 16), ("proxy", 0), ("bench", 0))
CLOSED_SSH_PORT = 9  # discard: nothing listens on the loopback addresses the world's nodes have


def is_loopback(host) -> bool:
    if isinstance(host, bytes):
        host = host.decode()
    if host in (None, "localhost"):
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture
def loopback_only(monkeypatch):
    """Connections and name lookups outside loopback fail at once (as an unreachable network would); the list
    of refused hosts is returned, so the figure can say what a fuzzed request tried to reach."""
    refused = []
    lookup, connect = socket.getaddrinfo, socket.socket.connect

    def guarded_lookup(host, *args, **kwargs):
        if not is_loopback(host):
            refused.append(host)
            raise socket.gaierror(socket.EAI_NONAME, f"fuzz guard: no lookups outside loopback ({host!r})")
        return lookup(host, *args, **kwargs)

    def guarded_connect(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not is_loopback(address[0]):
            refused.append(address[0])
            raise OSError(errno.ENETUNREACH, f"fuzz guard: no connections outside loopback ({address[0]!r})")
        return connect(sock, address)

    monkeypatch.setattr(socket, "getaddrinfo", guarded_lookup)
    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    return refused


@pytest.fixture
def quick_job_wait(monkeypatch):
    """GET /api/jobs/<id>/?wait=N on a job that never runs would hold the case N seconds: the wait loop still
    runs, for at most a tenth of a second."""
    from apps.jobs.api import views

    real_wait = views.wait_until_done
    monkeypatch.setattr(views, "wait_until_done",
                        lambda job_id, seconds: real_wait(job_id, min(seconds, 0.1)))


@pytest.fixture
def in_process_wsgi():
    """Requests through the WSGI handler keep the test's database connection (as the test client's do)."""
    from django.core import signals
    from django.db import close_old_connections

    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture
def world(db, api_client_for, credential, make_user, settings, tmp_path):
    """A cluster of six nodes (their SSH ports closed), NPUs, a deployment with two revisions and a process, a
    finished job with an event, an eval run and a sweep; the three roles' tokens; the ids path parameters
    take."""
    from django.utils import timezone
    from rest_framework.authtoken.models import Token

    from apps.audit.models import AuditEntry
    from apps.deployments.models import Process
    from apps.deployments.services import deployment_create, revision_create
    from apps.evals.models import EvalRun, EvalSweep
    from apps.inventory.models import Cluster, Node, Npu
    from apps.jobs.models import Job, JobEvent
    from tests.keys import TEST_HOST_KEY

    settings.PDCP_EVALS_DIR = tmp_path / "evals"
    cluster = Cluster.objects.create(name="reference", description="fuzzed")
    nodes = {}
    for i, (name, npus) in enumerate(REFERENCE_NODES):
        nodes[name] = Node.objects.create(cluster=cluster, name=name, address=f"127.0.0.{20 + i}",
                                          ssh_port=CLOSED_SSH_PORT, credential=credential,
                                          host_key=TEST_HOST_KEY, npu_count=npus)
    npu = Npu.objects.bulk_create([Npu(node=nodes["node0"], npu_id=i // 2, chip_id=i % 2, logical_id=i,
                                       name="910", health="OK") for i in range(16)])[0]
    yaml_text = (settings.BASE_DIR / "examples" / "reference-topology-fixed.yaml").read_text()
    owner = make_user("operator", "owner")
    deployment = deployment_create(name="reference", cluster=cluster, user=owner, yaml_text=yaml_text)
    revision = revision_create(deployment=deployment, user=owner, yaml_text=yaml_text, comment="second")
    process = Process.objects.create(
        deployment=deployment, revision=deployment.active_revision, node=nodes["node0"], node_name="node0",
        role="prefill", instance="p0", key="p0-dp0", address="127.0.0.20", ports=[7101], command="x",
        fingerprint="x", log_path="/l", pid_file="/p", state="running")
    job = Job.objects.create(kind="discover", target_type="inventory.node", target_id=nodes["node0"].pk,
                             target_label="node0", status="successful", created_by=owner,
                             finished=timezone.now(), event_count=1)
    JobEvent.objects.create(job=job, counter=1, text="found 16 NPUs")
    active = deployment.active_revision
    sweep = EvalSweep.objects.create(deployment=deployment, deployment_name=deployment.name,
                                     concurrencies=[1, 4], created_by=owner)
    run = EvalRun.objects.create(
        deployment=deployment, deployment_name=deployment.name, revision=active,
        revision_number=active.number, revision_spec=active.spec, endpoint_url="http://127.0.0.24:1999/",
        served_model="qwen3", mode="accuracy", dataset_key="catalogue:aime2025", dataset_abbr="aime2025",
        dataset_family="aime", status="succeeded", finished=timezone.now(), sweep=sweep)
    clients = {role: api_client_for(role) for role in ROLES}
    tokens = {role: Token.objects.get(user=client.user).key for role, client in clients.items()}
    ids = {"clusters": cluster.pk, "nodes": nodes["node0"].pk, "npus": npu.pk, "credentials": credential.pk,
           "deployments": deployment.pk, "revisions": revision.pk, "processes": process.pk, "jobs": job.pk,
           "audit": AuditEntry.objects.order_by("pk").values_list("pk", flat=True).first(),
           "users": clients["viewer"].user.pk, "runs": run.pk, "sweeps": sweep.pk}
    return {"tokens": tokens, "ids": ids}


@dataclass
class Tally:
    operations: list = field(default_factory=list)
    cases: Counter = field(default_factory=Counter)  # (role, operation) -> cases sent
    statuses: Counter = field(default_factory=Counter)
    failures: dict = field(default_factory=dict)  # (role, operation, title) -> first message

    def per_role(self, role: str) -> int:
        return sum(n for (who, _), n in self.cases.items() if who == role)

    @property
    def server_errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 500 and status != 502)

    @property
    def mismatches(self) -> int:
        return len(self.failures)


def no_server_error(ctx, response, case):
    """schemathesis's not_a_server_error, except a 502: a node that does not answer (status_code_conformance
    still requires that the operation documents it)."""
    from schemathesis.core.failures import ServerError

    if response.status_code >= 500 and response.status_code != 502:
        raise ServerError(operation=case.operation.label, status_code=response.status_code)


def checks():
    """No 5xx; status, content type, headers and body as documented."""
    from schemathesis.checks import load_all_checks
    from schemathesis.specs.openapi import checks as openapi_checks

    load_all_checks()
    return [no_server_error, openapi_checks.status_code_conformance, openapi_checks.content_type_conformance,
            openapi_checks.response_headers_conformance, openapi_checks.response_schema_conformance]


def load_schema(token: str):
    import schemathesis
    from django.core.wsgi import get_wsgi_application

    return schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application(),
                                          headers={"Authorization": f"Token {token}"})


def known_path_parameters(operation, ids: dict) -> dict:
    """The id of the world's object of this path's collection (/api/evals/runs/{id}/ -> the eval run)."""
    if "{id}" not in operation.path:
        return {}
    collection = operation.path.split("/{id}")[0].rsplit("/", 1)[-1]
    return {"id": ids[collection]} if ids.get(collection) is not None else {}


def fuzz(world, examples: int, *, random_ids: bool) -> Tally:
    schema = load_schema(world["tokens"]["admin"])
    operations = [result.ok() for result in schema.get_all_operations()]
    tally = Tally(operations=[operation.label for operation in operations])
    for role in ROLES:
        for operation in operations:
            fuzz_operation(operation, role, world, examples, tally, random_ids=random_ids)
    return tally


def fuzz_operation(operation, role: str, world, examples: int, tally: Tally, *, random_ids: bool) -> None:
    """`examples` cases of each kind: valid and invalid, with the world's ids (where the path takes one)
    and, if `random_ids` or the path takes no id the world has, with generated ones."""
    from django.db import transaction
    from hypothesis import HealthCheck, Phase, given, seed, settings
    from hypothesis import strategies as st
    from schemathesis import GenerationMode
    from schemathesis.core.failures import FailureGroup

    headers, wanted = {"Authorization": f"Token {world['tokens'][role]}"}, checks()
    modes = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    known = known_path_parameters(operation, world["ids"])
    strategies = [operation.as_strategy(mode, path_parameters=known) for mode in modes] if known else []
    if random_ids or not known:
        strategies += [operation.as_strategy(mode) for mode in modes]

    @seed(SEED)
    @settings(max_examples=examples * len(strategies), database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=st.one_of(strategies))
    def one_case(case):
        with transaction.atomic():
            response = case.call(headers=headers)
            tally.cases[role, operation.label] += 1
            tally.statuses[response.status_code] += 1
            try:
                case.validate_response(response, checks=wanted, headers=headers)
            except FailureGroup as group:
                for failure in group.exceptions:
                    key = (role, operation.label, failure.title)
                    tally.failures.setdefault(key, f"{failure.message[:600]}\n  {case.as_curl_command()}")
            transaction.set_rollback(True)

    one_case()


def report(tally: Tally) -> str:
    return "\n".join(f"{role} {operation}: {title}\n  {message}"
                     for (role, operation, title), message in sorted(tally.failures.items()))


def run_and_record(world, figure, *, case: str, examples: int, random_ids: bool, command: str, refused: list):
    started = time.monotonic()
    tally = fuzz(world, examples, random_ids=random_ids)
    seconds = time.monotonic() - started
    assert tally.failures == {}, f"{tally.mismatches} failing (role, operation, check):\n{report(tally)}"
    assert tally.server_errors == 0
    untried = [(role, label) for role in ROLES for label in tally.operations if not tally.cases[role, label]]
    assert len(tally.operations) > 80 and untried == []
    per_role = ", ".join(f"{role} {tally.per_role(role)}" for role in ROLES)
    ids = "the world's ids and generated ones" if random_ids else "the world's ids"
    figure(case, held="every answer: no 5xx but a documented 502 (node unreachable), status documented for "
                      "the operation, content type, headers and body as the schema says; valid and invalid "
                      f"requests, {ids}",
           figure=f"{len(tally.operations)} operations x 3 roles, {sum(tally.cases.values())} requests "
                  f"({per_role}); 5xx found = 0, mismatches = 0; {tally.statuses[502]} documented 502s, "
                  f"{len(refused)} connections outside loopback refused; {seconds:.0f} s",
           command=command,
           values={"operations": len(tally.operations),
                   "examples_per_role": {role: tally.per_role(role) for role in ROLES},
                   "statuses": {str(k): v for k, v in sorted(tally.statuses.items())}, "server_errors": 0,
                   "mismatches": 0, "refused_non_loopback": len(refused), "seconds": round(seconds, 1),
                   "seed": SEED})


@pytest.mark.usefixtures("no_celery", "own_cache_prefix", "quick_job_wait", "in_process_wsgi")
def test_api_fuzz_as_each_role(world, figure, loopback_only):
    run_and_record(world, figure, case="api-fuzz", examples=LIGHT_EXAMPLES, random_ids=False,
                   refused=loopback_only,
                   command='make test PYTEST_ARGS="tests/reliability/test_api_fuzz.py"')


@pytest.mark.reliability
@pytest.mark.timeout(900)
@pytest.mark.usefixtures("no_celery", "own_cache_prefix", "quick_job_wait", "in_process_wsgi")
def test_api_fuzz_deep_as_each_role(world, figure, loopback_only):
    run_and_record(world, figure, case="api-fuzz-deep", examples=DEEP_EXAMPLES, random_ids=True,
                   refused=loopback_only,
                   command='make reliability PYTEST_ARGS="-k api_fuzz_deep"')
