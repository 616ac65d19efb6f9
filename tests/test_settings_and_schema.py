"""Start-up configuration, the OpenAPI schema, and the production compose file."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def run_check(env_overrides):
    env = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "PDCP_SECRETS_KEY", "DATABASE_URL",
                                                            "ALLOWED_HOSTS")}
    env.update(env_overrides)
    return subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.procs
def test_production_refuses_to_start_without_a_required_setting_and_names_it():
    result = run_check({"PDCP_MODE": "production"})
    assert result.returncode != 0
    assert "SECRET_KEY is required when PDCP_MODE=production" in result.stderr
    result = run_check({"PDCP_MODE": "production", "SECRET_KEY": "x" * 50, "DATABASE_URL": "sqlite:////tmp/x.db",
                        "ALLOWED_HOSTS": "pd.example.com"})
    assert result.returncode != 0 and "PDCP_SECRETS_KEY is required" in result.stderr


@pytest.mark.procs
def test_production_starts_with_everything_set(tmp_path):
    from cryptography.fernet import Fernet

    result = run_check({"PDCP_MODE": "production", "SECRET_KEY": "x" * 50, "ALLOWED_HOSTS": "pd.example.com",
                        "PDCP_SECRETS_KEY": Fernet.generate_key().decode(),
                        "DATABASE_URL": f"sqlite:///{tmp_path}/db.sqlite3", "PDCP_DATA_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr


@pytest.mark.django_db
def test_schema_lists_every_endpoint(api_client_for):
    from django.urls import get_resolver

    schema = yaml.safe_load(api_client_for("viewer").get("/api/schema/").content)
    paths = set(schema["paths"])
    for name in ("/api/clusters/", "/api/nodes/{id}/discover/", "/api/nodes/{id}/pin-host-key/", "/api/npus/",
                 "/api/credentials/", "/api/jobs/{id}/events/", "/api/jobs/{id}/cancel/", "/api/audit/",
                 "/api/users/", "/api/inventory/import/", "/api/inventory/export/", "/api/me/",
                 "/api/evals/runs/", "/api/evals/runs/{id}/", "/api/evals/runs/{id}/cancel/",
                 "/api/evals/runs/{id}/resume/", "/api/evals/runs/{id}/samples/", "/api/evals/compare/",
                 "/api/evals/sweeps/", "/api/evals/sweeps/{id}/", "/api/evals/datasets/"):
        assert name in paths, name
    routed = {str(p.pattern) for p in get_resolver("controlplane.api_urls").url_patterns}
    assert len(paths) >= len(routed) - 4  # router root, format suffixes


@pytest.mark.django_db
def test_docs_page_loads_no_cdn(client, make_user):
    make_user("viewer", username="reader")
    client.login(username="reader", password="s3cret-pass-word")
    page = client.get("/api/docs/").content.decode()
    assert "swagger-ui" in page
    external = [u for u in re.findall(r'(?:src|href)="([^"]+)"', page) if u.startswith(("http:", "https:", "//"))]
    assert external == []


@pytest.mark.django_db
def test_ui_pages_load_no_cdn(client, make_user):
    make_user("viewer", username="reader")
    client.login(username="reader", password="s3cret-pass-word")
    page = client.get("/").content.decode()
    assert not re.search(r'(?:src|href)="(?:https?:)?//', page)
    assert client.get("/static/vendor/plotly.min.js").status_code == 200


def test_compose_file_matches_the_settings():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert {"postgres", "redis", "web", "worker", "beat"} <= set(compose["services"])
    env = compose["x-app"]["environment"]
    settings_text = (ROOT / "controlplane" / "settings.py").read_text()
    read_by_settings = set(re.findall(r'env_(?:str|bool|list)\("([A-Z_]+)"', settings_text))
    assert set(env) - {"PDCP_MODE", "PDCP_DATA_DIR"} <= read_by_settings
    required = set(re.findall(r'env_str\("([A-Z_]+)"[^)]*required_in_production=True', settings_text))
    assert required <= set(env) | {"ALLOWED_HOSTS"}
    assert "ALLOWED_HOSTS" in env
    for name in ("web", "worker", "beat"):
        assert compose["services"][name]["environment"]["PDCP_MODE"] == "production"
