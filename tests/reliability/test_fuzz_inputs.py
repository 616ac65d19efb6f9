"""Bad input is refused clearly and changes nothing: hypothesis breaks valid inventory files, topology specs,
`npu-smi info` tables, Prometheus pages and AISBench output folders, and feeds them to the real parsers and
services. Every outcome must be either accepted or the parser's own error naming the line or field (file);
any other exception (TypeError, KeyError, RecursionError, ValueError, a database error...) fails. On an error
the stored inventory, the deployment's revisions, the NPU rows and the previous scrape round are unchanged.

The light tests (derandomized, a fixed number of examples) run in `make test`; the `reliability` ones run the
same checks on many more examples. Each `@example` is an input that broke a parser before its fix.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import tempfile
from collections import Counter
from pathlib import Path

import pytest
import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from tests.reliability.figures import record_figure
from tests.reliability.fuzz_strategies import (
    HEAVY_EXAMPLES,
    LIGHT_EXAMPLES,
    broken_yaml,
    fuzz_settings,
    mutated_data,
    mutated_text,
)

REPO = Path(__file__).resolve().parents[2]
NPU_SAMPLES = REPO / "tests" / "inventory" / "samples"
TELEMETRY_FIXTURES = REPO / "tests" / "telemetry" / "fixtures"
EVAL_FIXTURES = REPO / "tests" / "evals" / "fixtures"

pytestmark = pytest.mark.django_db

# examples run, accepted, refused with a clear error, stored changes seen after a refusal: per input kind
TALLY: dict[str, Counter] = {}


def tally(kind: str, outcome: str) -> None:
    TALLY.setdefault(kind, Counter())[outcome] += 1


@pytest.fixture(autouse=True)
def _own_cache(own_cache_prefix):
    """Scrape rounds and NPU polls keep state in Redis under this test's own prefix."""


# --- inventory files ---------------------------------------------------------------------------------------------

INVENTORY = {
    "version": 1,
    "credentials": [{"name": "fuzz", "username": "simnode", "password": "pw-1"}],
    "clusters": [{"name": "fz", "description": "fuzzed", "nodes": [
        {"name": "n0", "address": "127.0.10.40", "ssh_port": 22, "ssh_user": "simnode", "credential": "fuzz",
         "hardware_model": "Atlas 800I A3", "npu_model": "Ascend910", "npu_count": 16,
         "labels": {"role": "prefill", "rack": "r1"}},
        {"name": "proxy", "address": "127.0.10.41", "npu_count": 0, "credential": "fuzz"}]}],
}
INVENTORY_CSV = ("cluster,name,address,ssh_port,ssh_user,credential,npu_count,labels\n"
                 "fz,n0,127.0.10.40,22,simnode,,16,role=prefill;rack=r1\n"
                 "fz,n1,127.0.10.42,22,simnode,,8,role=decode\n")


def stored_inventory() -> tuple:
    from apps.inventory.models import Cluster, Node, SshCredential

    return tuple(tuple(model.objects.order_by("pk").values_list()) for model in (SshCredential, Cluster, Node))


@pytest.fixture
def inventory_api(api_client_for):
    """An admin's API client, with an inventory already stored (a refused file must leave it as it is)."""
    from apps.inventory.services import inventory_import

    inventory_import(yaml.safe_dump(INVENTORY))
    return api_client_for("admin")


def check_inventory_import(client, text: str | bytes) -> None:
    before = stored_inventory()
    if isinstance(text, bytes):
        from django.core.files.uploadedfile import SimpleUploadedFile

        body, fmt = {"file": SimpleUploadedFile("inventory.yaml", text)}, "multipart"
    else:
        body, fmt = {"text": text}, "json"
    response = client.post("/api/inventory/import/", body, format=fmt)
    assert response.status_code in (200, 400), (response.status_code, response.content[:300])
    if response.status_code == 200:
        tally("inventory", "accepted")
        return
    errors = response.json()["errors"]
    assert errors, response.json()
    for error in errors:
        assert error["field"] and error["message"], error
        assert isinstance(error.get("line", 0), int), error
    assert stored_inventory() == before, "a refused inventory file changed what is stored"
    tally("inventory", "refused")


def inventory_inputs():
    return st.one_of(broken_yaml(INVENTORY), mutated_text(INVENTORY_CSV),
                     st.binary(max_size=64).map(lambda b: b"\xff" + b))


FOUND_IN_INVENTORY = [  # each raised a bare exception (a 500) before plainyaml refused it with its line
    "clusters:\n- name: c\n  nodes:\n  - {name: n, address: a, ssh_port: " + "9" * 5000 + "}\n",  # ValueError
    "version: 2001-13-45\n",  # ValueError from datetime.date
    "[" * 2000 + "]" * 2000,  # RecursionError
    "clusters: []\nclusters: [{name: x}]\n",  # silently took the second
]


def _inventory_examples(test):
    for text in FOUND_IN_INVENTORY:
        test = example(text=text)(test)
    return test


@_inventory_examples
@fuzz_settings(LIGHT_EXAMPLES)
@given(text=inventory_inputs())
def test_inventory_import_refuses_broken_files_clearly(inventory_api, text):
    check_inventory_import(inventory_api, text)


@pytest.mark.reliability
@fuzz_settings(HEAVY_EXAMPLES)
@given(text=inventory_inputs())
def test_inventory_import_refuses_broken_files_clearly_long(inventory_api, text):
    check_inventory_import(inventory_api, text)


def test_found_inventory_inputs_are_refused_naming_their_line():
    from apps.inventory.inventory_file import InventoryFileInvalid, parse_yaml

    expected = ["cannot read this value", "cannot read this value", "nested deeper", "duplicate key 'clusters'"]
    for text, words in zip(FOUND_IN_INVENTORY, expected, strict=True):
        with pytest.raises(InventoryFileInvalid) as caught:
            parse_yaml(text)
        assert words in caught.value.errors[0].message and caught.value.errors[0].line >= 1


# --- topology specs ----------------------------------------------------------------------------------------------

TOPOLOGY = yaml.safe_load((REPO / "examples" / "reference-topology-fixed.yaml").read_text())
REFERENCE_NODES = (("node0", 16), ("node1", 16), ("node2", 16), ("node3", 16), ("proxy", 0), ("bench", 0))


@pytest.fixture
def deployment(cluster, credential, make_user):
    from apps.deployments.services import deployment_create
    from apps.inventory.models import Node
    from tests.keys import TEST_HOST_KEY

    for i, (name, npus) in enumerate(REFERENCE_NODES):
        Node.objects.create(cluster=cluster, name=name, address=f"127.0.10.{40 + i}", credential=credential,
                            host_key=TEST_HOST_KEY, npu_count=npus)
    user = make_user("operator", "fuzzer")
    deployment = deployment_create(name="fuzzed", cluster=cluster, user=user, yaml_text=yaml.safe_dump(TOPOLOGY))
    deployment.fuzz_user = user
    return deployment


def stored_deployment(deployment) -> tuple:
    from apps.deployments.models import Deployment, Revision

    return (tuple(Deployment.objects.filter(pk=deployment.pk).values_list()),
            tuple(Revision.objects.filter(deployment=deployment).order_by("number").values_list()))


def check_revision(deployment, yaml_text: str | None = None, data=None) -> None:
    from apps.deployments.revision_checks import RevisionInvalid
    from apps.deployments.services import revision_create

    before = stored_deployment(deployment)
    try:
        revision_create(deployment=deployment, user=deployment.fuzz_user, yaml_text=yaml_text, data=data)
    except RevisionInvalid as exc:
        assert exc.problems
        for problem in exc.problems:
            assert problem.path and problem.message, problem
        assert stored_deployment(deployment) == before, "a refused spec changed the deployment or its revisions"
        tally("topology", "refused")
    else:
        tally("topology", "accepted")


FOUND_IN_SPECS = ["model: {path: /m, served_name: " + "9" * 5000 + "}\n", "[" * 2000 + "]" * 2000,
                  "model: {}\nmodel: {}\n",
                  # passed validation, then failed to store (Revision.served_model holds 200 characters)
                  yaml.safe_dump({**TOPOLOGY, "model": {**TOPOLOGY["model"], "served_name": "x" * 201}}),
                  # validation enumerated all 2**40 ranks (a web worker stuck for good)
                  yaml.safe_dump({**TOPOLOGY, "instances": [{**TOPOLOGY["instances"][0], "dp": 2**40}]})]


def _spec_examples(test):
    for text in FOUND_IN_SPECS:
        test = example(text=text, as_data=False)(test)
    return test


@_spec_examples
@fuzz_settings(LIGHT_EXAMPLES)
@given(text=broken_yaml(TOPOLOGY), as_data=st.booleans())
def test_revision_refuses_broken_specs_and_stores_nothing(deployment, text, as_data):
    data = yaml.safe_load(text) if as_data and _plain(text) else None
    check_revision(deployment, yaml_text=None if data is not None else text, data=data)


@pytest.mark.reliability
@fuzz_settings(HEAVY_EXAMPLES)
@given(data=mutated_data(TOPOLOGY, max_changes=5))
def test_revision_refuses_broken_spec_data_long(deployment, data):
    check_revision(deployment, data=data)


@pytest.mark.reliability
@fuzz_settings(HEAVY_EXAMPLES)
@given(text=broken_yaml(TOPOLOGY))
def test_revision_refuses_broken_spec_yaml_long(deployment, text):
    check_revision(deployment, yaml_text=text)


def _plain(text: str):
    """The data behind a YAML text when it loads at all (the form and JSON paths get data, not text)."""
    try:
        return yaml.safe_load(text)
    except (yaml.YAMLError, ValueError, RecursionError):
        return None


# --- npu-smi info --------------------------------------------------------------------------------------------------

NPU_TABLES = sorted(NPU_SAMPLES.glob("*_info.txt"))


@pytest.fixture
def polled_node(node):
    """A node whose NPU rows discovery stored from the A3 sample."""
    from apps.inventory.npu_rows import npu_rows_store
    from apps.inventory.npu_smi import npu_smi_parse_info

    npu_rows_store(node, npu_smi_parse_info((NPU_SAMPLES / "full_a3_16die_info.txt").read_text()))
    return node


def npu_rows(node) -> tuple:
    from apps.inventory.models import Npu

    return tuple(Npu.objects.filter(node=node).order_by("logical_id").values_list())


def check_npu_smi(node, text: str) -> None:
    from django.db import transaction

    from apps.inventory.npu_polling import NpuPollRound, _store_one
    from apps.inventory.npu_rows import npu_rows_store
    from apps.inventory.npu_smi import NpuSmiParseError, npu_smi_parse_info
    from sshexec import CommandResult, TargetResult

    try:
        info = npu_smi_parse_info(text)
    except NpuSmiParseError as exc:
        assert exc.line is None or 1 <= exc.line <= len(text.splitlines()) + 1, exc
        assert exc.expected and str(exc)
        before = npu_rows(node)
        result = TargetResult(node.name, "npu-smi info", CommandResult(0, text, "", 0.1), None)
        problem = _store_one(node, result, NpuPollRound())
        assert "cannot parse `npu-smi info`" in problem and "NPU readings kept" in problem, problem
        assert npu_rows(node) == before, "a poll that could not parse the table changed the NPU rows"
        tally("npu-smi", "refused")
        return
    # Parsed: both writers must store it (no value past the database's bounds), the poll and discovery.
    with transaction.atomic():
        npu_rows_store(node, info, refresh_only=True)
        npu_rows_store(node, info)
        transaction.set_rollback(True)
    tally("npu-smi", "accepted")


def npu_inputs():
    return st.sampled_from(NPU_TABLES).map(lambda p: p.read_text()).flatmap(mutated_text)


def _sample_with(old: str, new: str) -> str:
    return (NPU_SAMPLES / "full_a3_16die_info.txt").read_text().replace(old, new, 1)


FOUND_IN_NPU_SMI = [  # parsed, then failed in the database (integer out of range, a name over 64 characters)
    _sample_with("3186 / 65536", "3186 / 99999999999999999999"),
    _sample_with("| 0     Ascend910           |", "| 0     Ascend910" + "X" * 80 + " |"),
    _sample_with("| 0     0                   |", "| 0     99999999999         |"),
]


def _npu_examples(test):
    for text in FOUND_IN_NPU_SMI:
        test = example(text=text)(test)
    return test


@_npu_examples
@fuzz_settings(LIGHT_EXAMPLES * 2)
@given(text=npu_inputs())
def test_npu_smi_parse_refuses_broken_tables_and_keeps_rows(polled_node, text):
    check_npu_smi(polled_node, text)


@pytest.mark.reliability
@fuzz_settings(HEAVY_EXAMPLES)
@given(text=npu_inputs())
def test_npu_smi_parse_refuses_broken_tables_and_keeps_rows_long(polled_node, text):
    check_npu_smi(polled_node, text)


# --- Prometheus text -----------------------------------------------------------------------------------------------

PROXY_PAGE = """# HELP pdproxy_requests_total Requests.
# TYPE pdproxy_requests_total counter
pdproxy_requests_total 12.0
# TYPE pdproxy_edge_requests_total counter
pdproxy_edge_requests_total{decode="127.0.10.44:7100",prefill="127.0.10.40:7100"} 7.0
# TYPE pdproxy_edge_prompt_tokens_total counter
pdproxy_edge_prompt_tokens_total{decode="127.0.10.44:7100",prefill="127.0.10.40:7100"} 70.0
# TYPE pdproxy_backend_inflight gauge
pdproxy_backend_inflight{backend="127.0.10.40:7100",role="prefill"} 1.0
# TYPE pdproxy_backend_healthy gauge
pdproxy_backend_healthy{backend="127.0.10.40:7100",role="prefill"} 1.0
"""
PAGES = {"prefill": (TELEMETRY_FIXTURES / "engine-simcluster.txt").read_text(),
         "decode": (TELEMETRY_FIXTURES / "engine-vllm-connector.txt").read_text(),
         "proxy": PROXY_PAGE,
         "kv_pool": (TELEMETRY_FIXTURES / "mooncake-master-busy.txt").read_text()}


def check_exposition(role: str, text: str) -> bool:
    """The page parses and extracts, or fails with the scraper's own ExpositionError; True when it read."""
    from apps.telemetry.scrape import EXTRACTORS, READS, ExpositionError, parse_exposition

    try:
        EXTRACTORS[role](parse_exposition(text, READS[role]))
        EXTRACTORS[role](parse_exposition(text))  # the whole page, as when the filter falls back
    except ExpositionError as exc:
        assert str(exc)
        return False
    return True


def metrics_inputs():
    return st.sampled_from(sorted(PAGES)).flatmap(
        lambda role: st.tuples(st.just(role), mutated_text(PAGES[role]) | st.text(max_size=200)))


@fuzz_settings(LIGHT_EXAMPLES * 2)
@given(case=metrics_inputs())
def test_prometheus_parse_fails_only_with_its_own_error(case):
    tally("prometheus", "accepted" if check_exposition(*case) else "refused")


@pytest.mark.reliability
@fuzz_settings(HEAVY_EXAMPLES * 2)
@given(case=metrics_inputs())
def test_prometheus_parse_fails_only_with_its_own_error_long(case):
    tally("prometheus", "accepted" if check_exposition(*case) else "refused")


@pytest.fixture
def scraped(cluster):
    """A deployment with an engine and a proxy process: what a scrape round reads."""
    from apps.deployments.models import Deployment, Process

    deployment = Deployment.objects.create(name="scraped", cluster=cluster)
    processes = [Process(deployment=deployment, key="p0-dp0", role="prefill", instance="p0", address="127.0.10.40",
                         ports=[7100]),
                 Process(deployment=deployment, key="proxy", role="proxy", instance="proxy", address="127.0.10.44",
                         ports=[1999])]
    return deployment, processes, iter(range(1_000, 10**9, 10))


def scrape_round(scraped, engine_page: str) -> dict:
    from apps.telemetry.services import deployment_scrape

    deployment, processes, clock = scraped
    pages = {"7100": engine_page, "1999": PROXY_PAGE}
    at = float(next(clock))
    return deployment_scrape(deployment, processes, fetch=lambda url: pages[url.split(":")[-1].split("/")[0]],
                             now=lambda: at)


_PYTHON_ERROR = re.compile(r"^[A-Z]\w*(Error|Exception)\b")


@fuzz_settings(LIGHT_EXAMPLES // 2)
@given(page=mutated_text(PAGES["prefill"]))
def test_a_garbled_page_keeps_the_previous_rounds(scraped, page):
    """A good round, then a round whose engine page is broken: the round completes, the reason is the scraper's
    own, the proxy still reads, and the previous round stays in the history."""
    from django.core.cache import cache

    from apps.telemetry.selectors import history_key, live_key

    deployment = scraped[0]
    good = scrape_round(scraped, PAGES["prefill"])
    assert {t["key"]: t["status"] for t in good["targets"]} == {"p0-dp0": "ok", "proxy": "ok"}
    state = scrape_round(scraped, page)
    targets = {t["key"]: t for t in state["targets"]}
    assert targets["proxy"]["status"] == "ok" and targets["proxy"]["values"]
    assert targets["p0-dp0"]["status"] in ("ok", "garbled")
    assert not _PYTHON_ERROR.match(targets["p0-dp0"]["reason"]), targets["p0-dp0"]["reason"]
    history = cache.get(history_key(deployment.pk))
    assert [h["at"] for h in history[-2:]] == [good["at"], state["at"]], "the previous round left the history"
    assert cache.get(live_key(deployment.pk))["at"] == state["at"]
    tally("prometheus-round", "accepted" if targets["p0-dp0"]["status"] == "ok" else "refused")


# --- AISBench output folders --------------------------------------------------------------------------------------

RUN_FOLDERS = {"accuracy": next((EVAL_FIXTURES / "accuracy_ok" / "work").iterdir()),
               "performance": next((EVAL_FIXTURES / "perf_ok" / "work").iterdir())}


@st.composite
def broken_run_folder(draw):
    """(mode, [(relative file, new content or None to delete)]): one to three files of a good run folder changed."""
    mode = draw(st.sampled_from(sorted(RUN_FOLDERS)))
    root = RUN_FOLDERS[mode]
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    changes = []
    for name in draw(st.lists(st.sampled_from(files), min_size=1, max_size=3, unique=True)):
        path = root / name
        op = draw(st.sampled_from(["delete", "binary", "text", "text", "json", "json", "sqlite"]))
        if op == "delete":
            changes.append((name, None))
        elif op == "binary":
            changes.append((name, draw(st.binary(max_size=200))))
        elif op == "json" and path.suffix in (".json", ".jsonl"):
            lines = path.read_text().splitlines() if path.suffix == ".jsonl" else [path.read_text()]
            i = draw(st.integers(0, len(lines) - 1))
            data = draw(mutated_data(json.loads(lines[i])))
            lines[i] = json.dumps(data) if path.suffix == ".jsonl" else json.dumps(data, indent=1)
            changes.append((name, "\n".join(lines).encode()))
        elif op == "sqlite" and path.suffix == ".db":
            rows = draw(st.lists(st.tuples(st.one_of(st.integers(-2, 8), st.text(max_size=3), st.none()),
                                           st.one_of(st.binary(max_size=40), st.text(max_size=5), st.integers(),
                                                     st.floats(), st.none())), max_size=4))
            changes.append((name, ("sqlite", rows)))
        elif path.suffix != ".db":
            changes.append((name, draw(mutated_text(path.read_text())).encode()))
    return mode, changes


def _write_db(path: Path, rows) -> None:
    path.unlink(missing_ok=True)
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE numpy_store (id, arr_blob)")
        conn.executemany("INSERT INTO numpy_store VALUES (?, ?)", rows)
    conn.close()


def check_run_folder(mode: str, changes) -> None:
    from apps.evals.aisbench.output_parser import OutputError, judge, parse_accuracy, parse_performance

    with tempfile.TemporaryDirectory(prefix="pdcp-fuzz-aisbench-") as tmp:
        work = Path(tmp) / "work"
        run = work / RUN_FOLDERS[mode].name
        shutil.copytree(RUN_FOLDERS[mode], run)
        for name, content in changes:
            if content is None:
                (run / name).unlink()
            elif isinstance(content, tuple):
                _write_db(run / name, content[1])
            else:
                (run / name).write_bytes(content)
        try:
            (parse_accuracy if mode == "accuracy" else parse_performance)(run)
        except OutputError as exc:
            assert Path(exc.path).is_relative_to(run) and exc.problem, exc
            assert str(exc).startswith(exc.path)
            tally("aisbench", "refused")
        else:
            tally("aisbench", "accepted")
        verdict = judge(work, mode)  # what the evaluate job calls first: a verdict, never an exception
        assert verdict.ok or verdict.reasons


def _run_examples(test):
    perf_details = "performances/mock-chat/synthetic6_details.jsonl"
    line = json.loads((RUN_FOLDERS["performance"] / perf_details).read_text().splitlines()[0])
    summary = next(str(p.relative_to(RUN_FOLDERS["accuracy"])) for p in RUN_FOLDERS["accuracy"].glob("summary/*.csv"))
    found = [  # each raised a bare exception before its fix
        ("accuracy", [("results/mock-chat/aime4.json", b"[" * 100_000)]),  # RecursionError
        ("accuracy", [("results/mock-chat/aime4.json", json.dumps(
            {"details": {"\u00b2": {"predictions": [], "references": [], "correct": []}}}).encode())]),  # ValueError
        ("accuracy", [(summary, b"dataset,version,metric,mode,m\n" + b"x" * 200_000 + b"\n")]),  # csv.Error
        ("accuracy", [(summary, b"dataset,version,metric,mode," + b"m" * 300 + b"\naime4,1,accuracy,gen,75\n")]),
        # OSError (file name too long); a model "../.." read files outside the run folder
        ("accuracy", [(summary, b"dataset,version,metric,mode,../../..\naime4,1,accuracy,gen,75\n")]),
        ("performance", [("performances/mock-chat/synthetic6.json",
                          b'{"E2EL": {"total": ' + b"9" * 5000 + b"}}")]),  # ValueError (int digit limit)
        ("performance", [("performances/mock-chat/synthetic6.csv",
                          b"Performance Parameters,Stage,Average,Min,Max,Median,P75,P90,P99,N\n"
                          b"E2EL,total,1 ms,1 ms,1 ms,1 ms,1 ms,1 ms,1 ms,1e999\n")]),  # OverflowError
        ("performance", [(perf_details, json.dumps({**line, "time_points": {"__db_ref__": [1]}}).encode())]),
        ("performance", [("performances/mock-chat/db_data/1995815d.db", ("sqlite", [(1, b"\x93NUMPY\x02\x00ab")]))]),
        ("performance", [("performances/mock-chat/db_data/1995815d.db", ("sqlite", [(1, "text"), (2, None)]))]),
    ]
    for mode, changes in found:
        test = example(case=(mode, changes))(test)
    return test


@_run_examples
@fuzz_settings(LIGHT_EXAMPLES)
@given(case=broken_run_folder())
def test_aisbench_output_parser_names_the_bad_file(case):
    check_run_folder(*case)


@pytest.mark.reliability
@fuzz_settings(HEAVY_EXAMPLES)
@given(case=broken_run_folder())
def test_aisbench_output_parser_names_the_bad_file_long(case):
    check_run_folder(*case)


# --- imported results: summary files and console output ---------------------------------------------------------

IMPORT_SAMPLES = sorted([*EVAL_FIXTURES.glob("accuracy_ok/work/*/summary/summary_*"),
                         *EVAL_FIXTURES.glob("forms/*/work/*/summary/summary_*"),
                         *EVAL_FIXTURES.glob("forms/*/console.txt"), EVAL_FIXTURES / "accuracy_ok" / "console.txt",
                         EVAL_FIXTURES / "perf_ok" / "console.txt"])


@st.composite
def broken_import(draw):
    """(file name, bytes): a recorded summary file or console output with one to three line-level changes."""
    path = draw(st.sampled_from(IMPORT_SAMPLES))
    return path.name, draw(mutated_text(path.read_text())).encode()


def check_import(name: str, data: bytes) -> None:
    from apps.evals.aisbench.output_parser import OutputError, read_pasted, read_upload

    for read, where in ((lambda: read_upload(name, data), name), (lambda: read_pasted(data.decode()), "pasted text")):
        try:
            results = read()
        except OutputError as exc:
            assert exc.path.startswith(where) and exc.problem, exc
            tally("import", "refused")
        else:
            assert results.accuracy or results.performance
            tally("import", "accepted")


@fuzz_settings(LIGHT_EXAMPLES)
@given(case=broken_import())
def test_import_readers_name_the_bad_file(case):
    check_import(*case)


@pytest.mark.reliability
@fuzz_settings(HEAVY_EXAMPLES)
@given(case=broken_import())
def test_import_readers_name_the_bad_file_long(case):
    check_import(*case)


# --- the figures --------------------------------------------------------------------------------------------------

def record(figure, case: str, command: str) -> None:
    counts = {kind: dict(c) for kind, c in sorted(TALLY.items())}
    total = sum(sum(c.values()) for c in TALLY.values())
    words = ", ".join(f"{kind} {sum(c.values())} ({c['refused']} refused)" for kind, c in sorted(TALLY.items()))
    figure(case,
           held="every broken input was accepted or refused with the parser's own error naming its line/field/file; "
                "no other exception; after each refusal the stored inventory, the deployment's revisions, the NPU "
                "rows and the previous scrape round were unchanged",
           figure=f"{total} examples: {words}; 0 unexpected exceptions, 0 stored changes after a refusal",
           command=command,
           values={"examples": total, "by_kind": counts, "unexpected_exceptions": 0, "stored_changes_after_refusal": 0})


@pytest.fixture(scope="module", autouse=True)
def record_the_figure(request):
    """After the module: what its fuzz tests ran, as the light figure or, when the long ones ran, the long one."""
    yield
    if not TALLY:
        return
    ran = [item for item in request.session.items if item.module is request.module]
    if any(item.get_closest_marker("reliability") for item in ran):
        record(record_figure, "fuzz-inputs-long", 'make reliability PYTEST_ARGS="-k test_fuzz_inputs"')
    else:
        record(record_figure, "fuzz-inputs", 'make test PYTEST_ARGS="tests/reliability/test_fuzz_inputs.py"')
