"""Production hardening: `check --deploy` clean with production settings, HTTPS settings from the environment,
an image without the developer's data or secrets that runs as a non-root user, and a ceiling on page size."""

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def production_env(tmp_path, **overrides) -> dict:
    from cryptography.fernet import Fernet

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SECURE_", "SECRET_KEY", "PDCP_SECRETS_KEY",
                                                                     "DATABASE_URL", "ALLOWED_HOSTS", "DEBUG"))}
    env.update(PDCP_MODE="production", SECRET_KEY=secrets.token_urlsafe(50), ALLOWED_HOSTS="pd.example.com",
               PDCP_SECRETS_KEY=Fernet.generate_key().decode(), DATABASE_URL=f"sqlite:///{tmp_path}/db.sqlite3",
               PDCP_DATA_DIR=str(tmp_path), **overrides)
    return env


def manage(env, *args):
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=180)


def printed(result) -> str:
    return (result.stdout.strip().splitlines() or [""])[-1]  # after shell's "N objects imported" note


def warnings_of(result) -> set[str]:
    return set(re.findall(r"\(([a-z_.]+\.W\d+)\)", result.stdout + result.stderr))


@pytest.mark.procs
def test_check_deploy_is_clean_with_production_settings(tmp_path):
    result = manage(production_env(tmp_path, SECURE_HSTS_PRELOAD="true"), "check", "--deploy", "--fail-level",
                    "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert warnings_of(result) == set()


@pytest.mark.procs
def test_production_defaults_leave_only_the_preload_opt_in(tmp_path):
    """Preloading HSTS is a commitment the operator makes (SECURE_HSTS_PRELOAD); everything else is on."""
    result = manage(production_env(tmp_path), "check", "--deploy")
    assert warnings_of(result) == {"security.W021"}, result.stdout + result.stderr


@pytest.mark.procs
def test_https_settings_come_from_the_environment(tmp_path):
    code = ("from django.conf import settings as s; print(s.SECURE_SSL_REDIRECT, s.SECURE_HSTS_SECONDS, "
            "s.SECURE_HSTS_INCLUDE_SUBDOMAINS, s.SECURE_HSTS_PRELOAD, s.SECURE_PROXY_SSL_HEADER)")
    defaults = manage(production_env(tmp_path), "shell", "-c", code)
    assert printed(defaults) == "True 31536000 True False ('HTTP_X_FORWARDED_PROTO', 'https')", defaults.stderr
    custom = manage(production_env(tmp_path, SECURE_SSL_REDIRECT="false", SECURE_HSTS_SECONDS="3600",
                                   SECURE_HSTS_INCLUDE_SUBDOMAINS="no", SECURE_PROXY_SSL_HEADER="X-Scheme: https"),
                    "shell", "-c", code)
    assert printed(custom) == "False 3600 False False ('HTTP_X_SCHEME', 'https')", custom.stderr
    off = manage(production_env(tmp_path, SECURE_PROXY_SSL_HEADER="none"), "shell", "-c", code)
    assert printed(off).endswith("None"), off.stderr


@pytest.mark.procs
def test_development_stays_on_plain_http(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SECURE_", "PDCP_MODE", "DATABASE_URL"))}
    env.update(DATABASE_URL=f"sqlite:///{tmp_path}/db.sqlite3", PDCP_DATA_DIR=str(tmp_path))
    result = manage(env, "shell", "-c", "from django.conf import settings as s; print(s.SECURE_SSL_REDIRECT, "
                                        "s.SECURE_HSTS_SECONDS, s.SECURE_PROXY_SSL_HEADER)")
    assert printed(result) == "False 0 None", result.stderr


@pytest.mark.procs
@pytest.mark.parametrize("name, value", [("SECURE_HSTS_SECONDS", "a year"), ("SECURE_HSTS_SECONDS", "-5"),
                                         ("SECURE_PROXY_SSL_HEADER", "X-Forwarded-Proto"),
                                         ("SECURE_PROXY_SSL_HEADER", "X Forwarded: https"),
                                         ("SECURE_SSL_REDIRECT", "sometimes")])
def test_a_bad_https_setting_is_refused_by_name(tmp_path, name, value):
    result = manage(production_env(tmp_path, **{name: value}), "check")
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert name in last and value in last, result.stderr


def dockerignore_excludes(path: str) -> bool:
    """Docker's rule: the last pattern that matches the path or one of its parent directories wins."""
    excluded = False
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.lstrip("!").strip("/")
        regex = re.escape(pattern).replace(r"\*\*/", "(?:.*/)?").replace(r"\*\*", ".*").replace(r"\*", "[^/]*") \
            .replace(r"\?", "[^/]")
        parts = path.split("/")
        if any(re.fullmatch(regex, "/".join(parts[:n])) for n in range(1, len(parts) + 1)):
            excluded = not negate
    return excluded


@pytest.mark.parametrize("path", ["data/controlplane.sqlite3", "data/secrets.key", "data/simcluster/state.json",
                                  ".git/HEAD", ".venv/bin/python", "apps/jobs/__pycache__/runner.cpython-311.pyc",
                                  "bench/results/run.json", "elsewhere/old.sqlite3", "some/dir/secrets.key",
                                  ".pytest_cache/v/cache", ".ruff_cache/x", "pd_controlplane.egg-info/PKG-INFO",
                                  ".env", "staticfiles/app.css", "celerybeat-schedule"])
def test_the_image_leaves_out_data_secrets_and_caches(path):
    assert dockerignore_excludes(path), path


@pytest.mark.parametrize("path", ["manage.py", "pyproject.toml", "controlplane/settings.py", "apps/jobs/runner.py",
                                  "templates/base.html", "static/favicon.svg", "pdproxy/__init__.py",
                                  "simcluster/__init__.py", "examples/reference-cluster.yaml"])
def test_the_image_keeps_what_it_runs(path):
    assert (ROOT / path).exists(), path
    assert not dockerignore_excludes(path), path


def test_the_image_installs_every_package_the_project_declares():
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    install = next(i for i, line in enumerate(lines) if line.startswith("RUN pip install"))
    copied = {line.split()[1] for line in lines[:install] if line.startswith("COPY ")}
    assert {pattern.rstrip("*") for pattern in declared} <= copied


def test_the_image_runs_as_a_non_root_user():
    lines = [line.split() for line in (ROOT / "Dockerfile").read_text().splitlines() if line.strip()]
    users = [words[1] for words in lines if words[0] == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")


@pytest.mark.django_db
def test_a_page_is_never_longer_than_max_limit(api_client_for):
    from apps.inventory.models import Cluster
    from controlplane.pagination import Pagination

    Cluster.objects.bulk_create(Cluster(name=f"c{i:04d}") for i in range(Pagination.max_limit + 20))
    client = api_client_for("viewer")
    page = client.get("/api/clusters/", {"limit": 100000}).json()
    assert page["count"] == Pagination.max_limit + 20
    assert len(page["results"]) == Pagination.max_limit == 500
    assert len(client.get("/api/clusters/").json()["results"]) == 50
