"""Any test file, or any pair of them, collects on its own: test helpers are imported by their full name
(tests.<package>.<module>), never as bare top-level modules that only resolve once collection order has put their
directory on sys.path."""

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def test_every_test_directory_is_a_package():
    missing = sorted(str(d.relative_to(TESTS.parent)) for d in {p.parent for p in TESTS.rglob("*.py")}
                     if not (d / "__init__.py").exists() and "__pycache__" not in d.parts)
    assert not missing, f"test directories without __init__.py (their modules are not tests.<pkg>.<mod>): {missing}"


def bare_helper_imports(source: str, helper_names: set[str]) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found += [(node.lineno, name) for name in names if name.split(".")[0] in helper_names]
    return found


def test_helpers_are_imported_by_their_full_name():
    helper_names = {p.stem for p in TESTS.rglob("*.py")} - {"__init__"}
    offenders = [f"{path.relative_to(TESTS.parent)}:{line}: import of {name}"
                 for path in sorted(TESTS.rglob("*.py"))
                 for line, name in bare_helper_imports(path.read_text(), helper_names)]
    assert not offenders, "import test helpers as tests.<package>.<module>:\n" + "\n".join(offenders)


def test_the_check_sees_a_bare_import():
    source = "import os\nfrom simtest_helpers import ssh_run\nfrom tests.simcluster.simtest_helpers import x\n"
    assert bare_helper_imports(source, {"simtest_helpers", "conftest"}) == [(2, "simtest_helpers")]
    assert bare_helper_imports("from conftest import completion\n", {"conftest"}) == [(1, "conftest")]


def test_an_unmarked_test_can_start_no_process_and_no_server():
    import socket
    import subprocess

    from tests.procs_guard import StartsAProcess

    with pytest.raises(StartsAProcess, match="mark it @pytest.mark.procs"):
        subprocess.run(["true"], check=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        with pytest.raises(StartsAProcess, match="listening socket"):
            s.listen()


@pytest.mark.procs
def test_a_procs_test_may():
    import subprocess

    assert subprocess.run(["true"], check=False).returncode == 0


def test_process_tests_sharing_simulated_addresses_are_scheduled_as_one_unit():
    from tests.xdist_groups import scope_of

    one = "tests/sshexec/test_ssh_pool.py::test_fan_out_bound_is_respected"
    assert scope_of(one) == scope_of("tests/inventory/test_discovery.py::test_missing_npu_smi_is_a_clear_message")
    assert scope_of(one) != scope_of("tests/deployments/test_jobs_sim.py::test_keep_on_failure_leaves_the_processes")
    playground = scope_of("tests/deployments/test_playground_sim.py::t")
    assert playground == scope_of("tests/e2e/test_playground_in_browser.py::t")  # .90-.94
    assert playground != scope_of("tests/e2e/test_pdcp_script.py::t")  # .183-.188, and a Redis database of its own
    assert scope_of("tests/e2e/test_pdcp_script.py::t") == scope_of("tests/e2e/test_deploy_in_browser.py::t")
    # Files that start nothing, and the proxy's (ephemeral ports), go test by test.
    free = ("tests/deployments/test_validation.py::test_x", "tests/pdproxy/test_flow.py::test_x")
    assert [scope_of(nodeid) for nodeid in free] == list(free)


def test_each_worker_s_browser_stack_flushes_a_redis_database_of_its_own(monkeypatch):
    from tests.e2e.conftest import e2e_redis_db

    monkeypatch.delenv("PDCP_E2E_REDIS_DB", raising=False)
    databases = []
    for worker in ("gw0", "gw1", "gw2", "gw3"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        databases.append(e2e_redis_db())
    assert databases == ["14", "13", "12", "11"]
    monkeypatch.setenv("PDCP_E2E_REDIS_DB", "9")
    assert e2e_redis_db() == "9"
