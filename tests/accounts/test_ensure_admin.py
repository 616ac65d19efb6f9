"""`manage.py ensure_admin`: a returning user learns where the password is, and can reset it on the dev setup."""

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

pytestmark = pytest.mark.django_db


@pytest.fixture
def data_dir(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    return tmp_path


def _run(*args) -> str:
    out = io.StringIO()
    call_command("ensure_admin", *args, stdout=out)
    return out.getvalue()


def test_a_generated_password_is_kept_private_and_pointed_to_on_the_next_run(data_dir, monkeypatch):
    monkeypatch.delenv("PDCP_ADMIN_PASSWORD", raising=False)
    first = _run()
    kept = data_dir / "admin-password"
    password = kept.read_text().strip()
    assert password in first and kept.stat().st_mode & 0o777 == 0o600
    assert get_user_model().objects.get(username="admin").check_password(password)
    second = _run()
    assert str(kept) in second and password not in second


def test_pdcp_admin_password_resets_an_existing_admin_in_development(data_dir, monkeypatch, settings):
    settings.PRODUCTION = False
    monkeypatch.delenv("PDCP_ADMIN_PASSWORD", raising=False)
    _run()
    monkeypatch.setenv("PDCP_ADMIN_PASSWORD", "a-new-long-password")
    assert "password reset" in _run()
    assert get_user_model().objects.get(username="admin").check_password("a-new-long-password")
    assert not (data_dir / "admin-password").exists()  # the old generated one no longer works: gone
    monkeypatch.delenv("PDCP_ADMIN_PASSWORD")
    assert "PDCP_ADMIN_PASSWORD=<new> make run" in _run()


def test_production_resets_only_when_asked(data_dir, monkeypatch, settings):
    settings.PRODUCTION = True
    monkeypatch.setenv("PDCP_ADMIN_PASSWORD", "first-password-123")
    _run()
    monkeypatch.setenv("PDCP_ADMIN_PASSWORD", "second-password-456")
    assert "ignored" in _run()
    user = get_user_model().objects.get(username="admin")
    assert user.check_password("first-password-123")
    _run("--reset-password")
    user.refresh_from_db()
    assert user.check_password("second-password-456")
