"""API tokens expire PDCP_TOKEN_TTL_HOURS after they were made (issue 8, item 12): 401 saying so, and the token
endpoints tell when."""

from datetime import timedelta

import pytest
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db
RIGHT = "s3cret-pass-word"


@pytest.fixture
def alice(make_user, settings):
    settings.API_TOKEN_TTL_HOURS = 720
    return make_user("viewer", "alice", password=RIGHT)


def obtain():
    return APIClient().post("/api/auth/token/", {"username": "alice", "password": RIGHT}, format="json")


def age(key: str, hours: float) -> None:
    Token.objects.filter(key=key).update(created=timezone.now() - timedelta(hours=hours))


def with_token(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def test_the_token_endpoint_returns_the_expiry(alice):
    body = obtain().json()
    made = Token.objects.get(key=body["token"]).created
    assert parse_datetime(body["expires"]) == made + timedelta(hours=720)


def test_an_expired_token_gets_401_saying_so(alice):
    key = obtain().json()["token"]
    assert with_token(key).get("/api/me/").status_code == 200
    age(key, 721)
    response = with_token(key).get("/api/me/")
    assert response.status_code == 401
    assert "API token expired at" in response.json()["detail"]
    assert response["WWW-Authenticate"] == "Token"


def test_asking_again_gives_the_same_token_until_it_expires_then_a_new_one(alice):
    key = obtain().json()["token"]
    age(key, 700)
    assert obtain().json()["token"] == key
    age(key, 721)
    fresh = obtain().json()["token"]
    assert fresh != key and with_token(fresh).get("/api/me/").status_code == 200


def test_the_token_endpoint_works_while_sending_an_expired_token(alice):
    key = obtain().json()["token"]
    age(key, 721)
    response = with_token(key).post("/api/auth/token/", {"username": "alice", "password": RIGHT}, format="json")
    assert response.status_code == 200 and response.json()["token"] != key


def test_a_rotated_token_shows_its_expiry(alice):
    key = obtain().json()["token"]
    response = with_token(key).post("/api/me/token/")
    assert response.status_code == 201 and response.json()["expires"] is not None


def test_zero_means_never(alice, settings):
    settings.API_TOKEN_TTL_HOURS = 0
    body = obtain().json()
    assert body["expires"] is None
    age(body["token"], 24 * 365 * 5)
    assert with_token(body["token"]).get("/api/me/").status_code == 200
