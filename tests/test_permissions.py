"""Who may reach which memory, over every endpoint: anonymous callers, the owner, another user,
service callers and staff; the owner mapping as a setting; and throttling."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient
from rest_framework.throttling import UserRateThrottle

from memory import services
from memory.models import Fact, FactVersion, Owner, Session, Turn

pytestmark = pytest.mark.django_db

SECRET = "SECRET-of"

# (method, path under users/{user_id}/, body, status for a caller allowed to reach that user)
ENDPOINTS = [
    ("post", "turns/", {"session_id": "s", "role": "user", "content": "x"}, 201),
    ("get", "turns/", None, 200),
    ("get", "context/", None, 200),
    ("get", "facts/", None, 200),
    ("patch", "facts/", {"facts": {"likes": ["golf"]}}, 200),
    ("put", "facts/name/", {"value": "new"}, 200),
    ("delete", "facts/name/", None, 204),
    ("get", "facts/name/history/", None, 200),
    ("get", "sessions/", None, 200),
    ("get", "search/?q=secret", None, 200),
    ("post", "link/", {"from_user_id": "anon-7f3a"}, 200),
    ("delete", "", None, 204),
]
ENDPOINT_IDS = [f"{method} {path or '/'}" for method, path, _, _ in ENDPOINTS]
# NOTE: an ordinary user reaches no anonymous owner, so cannot link one: only a service can.
OWNER_STATUS = {"post link/": 404}


@pytest.fixture
def memories(django_capture_on_commit_callbacks):
    """Wang, Li and an anonymous visitor each have a turn, a fact and a session, all holding
    a secret."""
    with django_capture_on_commit_callbacks(execute=True):
        for owner_id in ("wang", "li", "anon-7f3a"):
            services.turn_append(
                owner_id=owner_id, session_id=f"{SECRET}-{owner_id}", role="user", content=SECRET
            )
            services.fact_put(owner_id=owner_id, key="name", value=f"{SECRET}-{owner_id}")


def snapshot(owner_id):
    return [
        list(model.objects.filter(owner__external_id=owner_id).values())
        for model in (Turn, Fact, FactVersion, Session)
    ]


def call(client, method, owner_id, path, body, capture):
    with capture(execute=True):
        return getattr(client, method)(f"/api/memory/users/{owner_id}/{path}", body, format="json")


@pytest.mark.parametrize(("method", "path", "body", "ok"), ENDPOINTS, ids=ENDPOINT_IDS)
def test_anonymous_caller_is_refused(
    anon_client, memories, django_capture_on_commit_callbacks, method, path, body, ok
):
    before = snapshot("wang")
    response = call(anon_client, method, "wang", path, body, django_capture_on_commit_callbacks)
    assert response.status_code in (401, 403)
    assert SECRET.encode() not in response.content
    assert snapshot("wang") == before


@pytest.mark.parametrize(("method", "path", "body", "ok"), ENDPOINTS, ids=ENDPOINT_IDS)
def test_owner_reaches_their_own_memory(
    owner_client, memories, django_capture_on_commit_callbacks, method, path, body, ok
):
    response = call(owner_client, method, "wang", path, body, django_capture_on_commit_callbacks)
    assert response.status_code == OWNER_STATUS.get(f"{method} {path}", ok)


@pytest.mark.parametrize(("method", "path", "body", "ok"), ENDPOINTS, ids=ENDPOINT_IDS)
@pytest.mark.parametrize(("caller", "target"), [("owner_client", "li"), ("other_client", "wang")])
def test_another_users_memory_is_404_and_reveals_nothing(
    request, memories, django_capture_on_commit_callbacks, caller, target, method, path, body, ok
):
    client = request.getfixturevalue(caller)
    before = snapshot(target)
    response = call(client, method, target, path, body, django_capture_on_commit_callbacks)
    stranger = call(client, method, "ghost", path, body, django_capture_on_commit_callbacks)
    assert response.status_code == 404
    assert response.json() == {"detail": "Not found."}
    assert SECRET.encode() not in response.content
    # NOTE: a user who has memory and one who has none look the same from outside.
    assert (stranger.status_code, stranger.content) == (response.status_code, response.content)
    assert snapshot(target) == before
    assert not Owner.objects.filter(external_id="ghost").exists()


@pytest.mark.parametrize(("method", "path", "body", "ok"), ENDPOINTS, ids=ENDPOINT_IDS)
@pytest.mark.parametrize("caller", ["service_client", "staff_client"])
def test_service_callers_reach_every_memory(
    request, memories, django_capture_on_commit_callbacks, caller, method, path, body, ok
):
    client = request.getfixturevalue(caller)
    for owner_id in ("wang", "li"):
        response = call(client, method, owner_id, path, body, django_capture_on_commit_callbacks)
        assert response.status_code == ok


@pytest.fixture
def staff_client(staff_user):
    client = APIClient()
    client.force_authenticate(staff_user)
    return client


def test_token_authentication(owner_user, memories):
    token = Token.objects.create(user=owner_user)
    client = APIClient()
    assert client.get("/api/memory/users/wang/facts/").status_code == 401
    response = client.get("/api/memory/users/wang/facts/", HTTP_AUTHORIZATION=f"Token {token.key}")
    assert response.status_code == 200
    bad = client.get("/api/memory/users/wang/facts/", HTTP_AUTHORIZATION="Token nope")
    assert bad.status_code == 401


def owner_by_email(user):
    """An owner mapping of a host site: users reach the memory named by their e-mail."""
    return user.email or None


def test_owner_mapping_is_a_setting(memory_settings, memories):
    user = User.objects.create_user("someone", email="li", password="pw")
    client = APIClient()
    client.force_authenticate(user)
    with memory_settings(OWNER_RESOLVER="tests.test_permissions.owner_by_email"):
        assert client.get("/api/memory/users/li/facts/").status_code == 200
        assert client.get("/api/memory/users/someone/facts/").status_code == 404


def test_health_is_open_to_everyone(anon_client, owner_client, service_client):
    for client in (anon_client, owner_client, service_client):
        assert client.get("/api/memory/health/").status_code == 200


def test_user_rate_throttle_answers_429(owner_client, monkeypatch):
    monkeypatch.setitem(UserRateThrottle.THROTTLE_RATES, "user", "2/minute")
    statuses = [owner_client.get("/api/memory/users/wang/facts/").status_code for _ in range(3)]
    assert statuses == [200, 200, 429]


def test_demo_settings_read_throttle_rates_from_the_environment(monkeypatch):
    settings_file = Path(__file__).resolve().parent.parent / "memoryproj" / "settings.py"
    monkeypatch.delenv("MEMORY_THROTTLE_USER", raising=False)
    monkeypatch.delenv("MEMORY_THROTTLE_ANON", raising=False)
    defaults = runpy.run_path(str(settings_file))["REST_FRAMEWORK"]["DEFAULT_THROTTLE_RATES"]
    monkeypatch.setenv("MEMORY_THROTTLE_USER", "5/second")
    monkeypatch.setenv("MEMORY_THROTTLE_ANON", "")
    chosen = runpy.run_path(str(settings_file))["REST_FRAMEWORK"]["DEFAULT_THROTTLE_RATES"]
    assert defaults == {"user": "10000/hour", "anon": "1000/hour"}
    assert chosen == {"user": "5/second", "anon": None}
