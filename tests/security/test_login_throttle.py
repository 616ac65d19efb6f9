"""Brute-force limit on password logins (issue 8, item 7): per user name and address, and per address; 429 with
Retry-After on the API, a clear message on the login pages; a locked-out caller is refused even with the right
password; a success resets the count."""

import pytest
from django.test import Client
from rest_framework.test import APIClient

from apps.accounts import login_throttle

pytestmark = pytest.mark.django_db
RIGHT = "s3cret-pass-word"


@pytest.fixture(autouse=True)
def limits(settings):
    settings.LOGIN_MAX_FAILURES = 3
    settings.LOGIN_MAX_FAILURES_PER_IP = 10
    settings.LOGIN_LOCKOUT_MINUTES = 15


@pytest.fixture
def alice(make_user):
    return make_user("viewer", "alice", password=RIGHT)


def token(username, password, ip="10.0.0.1"):
    return APIClient().post("/api/auth/token/", {"username": username, "password": password}, format="json",
                            REMOTE_ADDR=ip)


def test_the_token_endpoint_locks_out_with_429_and_retry_after_even_for_the_right_password(alice):
    assert [token("alice", "wrong").status_code for _ in range(2)] == [401, 401]
    locked = token("alice", "wrong")
    assert locked.status_code == 429
    assert 0 < int(locked["Retry-After"]) <= 15 * 60
    assert "Too many failed attempts: try again in 15 minutes" in locked.json()["detail"]
    assert token("alice", RIGHT).status_code == 429
    assert token("alice", RIGHT, ip="10.0.0.2").status_code == 200  # another address has its own count


def test_a_success_resets_the_count(alice):
    assert [token("alice", "wrong").status_code for _ in range(2)] == [401, 401]
    assert token("alice", RIGHT).status_code == 200
    assert [token("alice", "wrong").status_code for _ in range(3)] == [401, 401, 429]


def test_the_lockout_ends_after_the_window(alice, monkeypatch):
    for _ in range(3):
        token("alice", "wrong")
    assert token("alice", RIGHT).status_code == 429
    start = login_throttle.now()
    monkeypatch.setattr(login_throttle, "now", lambda: start + 15 * 60 + 1)
    assert token("alice", RIGHT).status_code == 200


def test_one_address_trying_many_names_is_capped(make_user):
    make_user("viewer", "bob", password=RIGHT)
    for i in range(10):
        token(f"user{i}", "wrong", ip="10.0.0.9")
    assert token("bob", RIGHT, ip="10.0.0.9").status_code == 429
    assert token("bob", RIGHT, ip="10.0.0.10").status_code == 200


def test_the_login_page_says_so_and_refuses_the_right_password(alice):
    browser = Client(REMOTE_ADDR="10.0.0.3")
    first = browser.post("/login/", {"username": "alice", "password": "wrong"})
    assert first.status_code == 200 and "Wrong user name or password." in first.content.decode()
    for _ in range(2):
        page = browser.post("/login/", {"username": "alice", "password": "wrong"})
    assert "Too many failed attempts: try again in 15 minutes." in page.content.decode()
    page = browser.post("/login/", {"username": "alice", "password": RIGHT})
    assert page.status_code == 200 and "Too many failed attempts" in page.content.decode()
    assert "_auth_user_id" not in browser.session


def test_the_admin_login_page_is_limited_too(django_user_model):
    django_user_model.objects.create_superuser("root", password=RIGHT)
    browser = Client(REMOTE_ADDR="10.0.0.4")
    for _ in range(3):
        browser.post("/admin/login/", {"username": "root", "password": "wrong"})
    page = browser.post("/admin/login/", {"username": "root", "password": RIGHT})
    assert page.status_code == 200 and "Too many failed attempts" in page.content.decode()
    assert "_auth_user_id" not in browser.session


def test_a_body_that_is_not_an_object_is_a_400_not_a_500():
    response = APIClient().post("/api/auth/token/", [1, 2], format="json", REMOTE_ADDR="10.0.0.5")
    assert response.status_code == 400
