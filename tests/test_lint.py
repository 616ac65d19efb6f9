"""The code base stays lint-clean (ruff, configured in pyproject.toml): CI fails on a new warning."""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.procs  # every test here starts processes or servers

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    ruff = Path(sys.executable).parent / "ruff"
    result = subprocess.run([str(ruff), "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-1000:]


def test_migrations_match_the_models():
    result = subprocess.run([sys.executable, "manage.py", "makemigrations", "--check", "--dry-run"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
