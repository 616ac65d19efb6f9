"""apps/evals/aisbench imports no Django (nor anything outside the standard library and itself)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "apps" / "evals" / "aisbench"


def imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            modules.add(node.module)
    return modules


def test_every_module_imports_only_the_standard_library_and_the_package():
    sources = sorted(PACKAGE.glob("*.py"))
    assert len(sources) >= 8
    for path in sources:
        for module in imported_modules(path):
            top = module.split(".")[0]
            assert top in sys.stdlib_module_names or module.startswith("apps.evals.aisbench"), f"{path.name}: {module}"


@pytest.mark.procs
def test_importing_the_package_loads_no_django():
    code = ("import sys, importlib, pkgutil, apps.evals.aisbench as p\n"
            "for m in pkgutil.iter_modules(p.__path__): importlib.import_module('apps.evals.aisbench.' + m.name)\n"
            "assert not [m for m in sys.modules if m.split('.')[0] in ('django', 'rest_framework')], 'django'\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
