"""The layering as a test: import-linter checks the contracts in pyproject.toml ([tool.importlinter]); a copy of
the sources with one forbidden import planted must break exactly the contract that forbids it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("controlplane", "apps", "sshexec", "pdproxy", "simcluster", "plainyaml")
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo"], cwd=root, capture_output=True, text=True,
                          timeout=300, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "COLUMNS": "400"})


@pytest.mark.procs
def test_every_layering_contract_holds():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BROKEN" not in result.stdout and " KEPT" in result.stdout


@pytest.fixture(scope="module")
def source_copy(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sources")
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    for package in PACKAGES:
        shutil.copytree(ROOT / package, root / package,
                        ignore=shutil.ignore_patterns("__pycache__", "migrations", "templates", "static"))
    return root


PLANTED = [
    ("sshexec/pool.py", "from django.conf import settings", "import no Django", "sshexec.pool -> django"),
    ("pdproxy/balancer.py", "import apps.jobs.models", "import no Django", "pdproxy.balancer -> apps.jobs.models"),
    ("pdproxy/balancer.py", "import simcluster.spec", "never import each other", "pdproxy.balancer -> simcluster.spec"),
    ("apps/inventory/hccn/conf.py", "from django.conf import settings", "output parsers",
     "apps.inventory.hccn.conf -> django"),
    ("apps/inventory/models.py", "from apps.deployments import choices", "Apps form layers",
     "apps.inventory.models -> apps.deployments.choices"),
    ("apps/jobs/models.py", "import controlplane.urls", "Apps form layers", "apps.jobs.models -> controlplane.urls"),
    ("apps/deployments/topology/engine_rules.py", "import simcluster.engine.answers", "never depends on its simulator",
     "apps.deployments.topology.engine_rules -> simcluster.engine.answers"),
    ("controlplane/settings.py", "import simcluster.spec", "never depends on its simulator",
     "controlplane.settings -> simcluster.spec"),
]


@pytest.mark.procs
@pytest.mark.parametrize(("module", "line", "contract", "reported"), PLANTED, ids=[p[0] + ":" + p[1] for p in PLANTED])
def test_a_planted_forbidden_import_breaks_its_contract(source_copy, module, line, contract, reported):
    path = source_copy / module
    original = path.read_text()
    path.write_text(original + f"\n{line}  # planted by the test\n")
    try:
        result = lint_imports(source_copy)
    finally:
        path.write_text(original)
    assert result.returncode != 0
    broken = result.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken and reported in broken, result.stdout


def test_the_product_names_the_answer_books_the_simulator_has():
    """The sim profile checks a spec's answer book against its own list (the product never imports simcluster)."""
    from apps.deployments.topology.profiles.sim import ANSWER_BOOKS
    from simcluster.engine.answers import book_names

    assert sorted(ANSWER_BOOKS) == book_names()
