"""Who may reach which memory, over every endpoint: anonymous and inactive callers, the owner,
another user, staff with and without the service permission, superusers; the owner mapping as a
setting; and throttling."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
from django.contrib.auth.models import Group, Permission, User
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from memory import services
from memory.models import Fact, FactVersion, Owner, Session, Turn
from memory.permissions import can_reach, is_service_caller
from memory.throttling import UserRateThrottle

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


def _user(username, *, perm=False, **flags):
    user = User.objects.create_user(username, password="pw", **flags)
    if perm:
        user.user_permissions.add(Permission.objects.get(codename="access_all_memories"))
    return User.objects.get(pk=user.pk)


# Each kind of caller, and what it gets on wang's memory: refused (401/403), owner (wang's
# own), foreign (404, as for an owner that does not exist) or service (every owner).
CALLERS = {
    "anonymous": (lambda: None, "refused"),
    "owner": (lambda: _user("wang"), "owner"),
    "other user": (lambda: _user("li"), "foreign"),
    "staff without the permission": (lambda: _user("ops", is_staff=True), "foreign"),
    "staff with the permission": (lambda: _user("ops", is_staff=True, perm=True), "service"),
    "user with the permission": (lambda: _user("svc", perm=True), "service"),
    "superuser": (lambda: _user("root", is_staff=True, is_superuser=True), "service"),
    "inactive superuser": (
        lambda: _user("root", is_staff=True, is_superuser=True, is_active=False),
        "refused",
    ),
    "inactive owner": (lambda: _user("wang", is_active=False), "refused"),
}


def client_of(kind):
    user = CALLERS[kind][0]()
    client = APIClient()
    if user is not None:
        # NOTE: forced, so that an inactive user gets as far as the permission check (Token
        # and session authentication already refuse one: test_inactive_users_token_is_refused).
        client.force_authenticate(user)
    return client


@pytest.mark.parametrize(("method", "path", "body", "ok"), ENDPOINTS, ids=ENDPOINT_IDS)
@pytest.mark.parametrize("kind", list(CALLERS))
def test_every_kind_of_caller_on_every_endpoint(
    memories, django_capture_on_commit_callbacks, kind, method, path, body, ok
):
    client, expected = client_of(kind), CALLERS[kind][1]
    before = {owner_id: snapshot(owner_id) for owner_id in ("wang", "li")}
    response = call(client, method, "wang", path, body, django_capture_on_commit_callbacks)
    if expected == "refused":
        assert response.status_code in (401, 403)
        assert SECRET.encode() not in response.content
        assert snapshot("wang") == before["wang"]
    elif expected == "owner":
        assert response.status_code == OWNER_STATUS.get(f"{method} {path}", ok)
    elif expected == "foreign":
        stranger = call(client, method, "ghost", path, body, django_capture_on_commit_callbacks)
        assert response.status_code == 404
        assert response.json() == {"detail": "Not found."}
        assert SECRET.encode() not in response.content
        # NOTE: a user who has memory and one who has none look the same from outside.
        assert (stranger.status_code, stranger.content) == (response.status_code, response.content)
        assert snapshot("wang") == before["wang"]
        assert not Owner.objects.filter(external_id="ghost").exists()
    else:
        assert response.status_code == ok
        other = call(client, method, "li", path, body, django_capture_on_commit_callbacks)
        assert other.status_code == ok
    if expected != "service":
        assert snapshot("li") == before["li"]


@pytest.mark.parametrize(("method", "path", "body", "ok"), ENDPOINTS, ids=ENDPOINT_IDS)
def test_owner_cannot_reach_another_users_memory(
    owner_client, memories, django_capture_on_commit_callbacks, method, path, body, ok
):
    before = snapshot("li")
    response = call(owner_client, method, "li", path, body, django_capture_on_commit_callbacks)
    assert response.status_code == 404
    assert SECRET.encode() not in response.content
    assert snapshot("li") == before


@pytest.mark.parametrize(("method", "path", "body", "ok"), ENDPOINTS, ids=ENDPOINT_IDS)
def test_staff_without_the_permission_is_an_ordinary_user(
    staff_user, memories, django_capture_on_commit_callbacks, method, path, body, ok
):
    client = APIClient()
    client.force_authenticate(staff_user)
    with django_capture_on_commit_callbacks(execute=True):
        services.fact_put(owner_id="ops", key="name", value="Ops")
    response = call(client, method, "ops", path, body, django_capture_on_commit_callbacks)
    assert response.status_code == OWNER_STATUS.get(f"{method} {path}", ok)


def test_the_permission_through_a_group_makes_a_service_caller(memories):
    group = Group.objects.create(name="chat backends")
    group.permissions.add(Permission.objects.get(codename="access_all_memories"))
    user = User.objects.create_user("backend", password="pw")
    user.groups.add(group)
    client = APIClient()
    client.force_authenticate(user)
    assert client.get("/api/memory/users/li/facts/").status_code == 200
    user.groups.remove(group)
    client.force_authenticate(User.objects.get(pk=user.pk))
    assert client.get("/api/memory/users/li/facts/").status_code == 404


def test_inactive_users_token_is_refused(memories):
    user = _user("root", is_superuser=True, is_active=False)
    token = Token.objects.create(user=user)
    client = APIClient()
    response = client.get("/api/memory/users/wang/facts/", HTTP_AUTHORIZATION=f"Token {token.key}")
    assert response.status_code == 401
    assert SECRET.encode() not in response.content


def test_is_service_caller_needs_the_permission(db):
    assert not is_service_caller(_user("ops", is_staff=True))
    assert is_service_caller(_user("ops2", is_staff=True, perm=True))
    assert is_service_caller(_user("root", is_superuser=True))
    assert not is_service_caller(_user("root2", is_superuser=True, is_active=False))
    assert not can_reach(_user("wang", is_active=False), "wang")


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


def test_user_rate_throttle_answers_429(owner_client, monkeypatch, fresh_window):
    monkeypatch.setitem(UserRateThrottle.THROTTLE_RATES, "user", "2/minute")
    statuses = [owner_client.get("/api/memory/users/wang/facts/").status_code for _ in range(3)]
    assert statuses == [200, 200, 429]


def test_demo_settings_read_throttle_rates_from_the_environment(monkeypatch):
    settings_file = Path(__file__).resolve().parent.parent / "memoryproj" / "settings.py"
    scopes = ("USER", "ANON", "CHAT_SESSION", "CHAT_ADDRESS", "CHAT_NEW")
    for scope in scopes:
        monkeypatch.delenv(f"MEMORY_THROTTLE_{scope}", raising=False)
    defaults = runpy.run_path(str(settings_file))["REST_FRAMEWORK"]["DEFAULT_THROTTLE_RATES"]
    monkeypatch.setenv("MEMORY_THROTTLE_USER", "5/second")
    monkeypatch.setenv("MEMORY_THROTTLE_ANON", "")
    monkeypatch.setenv("MEMORY_THROTTLE_CHAT_NEW", "3/day")
    chosen = runpy.run_path(str(settings_file))["REST_FRAMEWORK"]["DEFAULT_THROTTLE_RATES"]
    assert defaults == {
        "user": "10000/hour",
        "anon": "1000/hour",
        "chat_session": "20/minute",
        "chat_address": "60/minute",
        "chat_new": "20/hour",
    }
    assert chosen == {**defaults, "user": "5/second", "anon": None, "chat_new": "3/day"}


def test_the_one_query_service_check_agrees_with_has_perm(db):
    """Under ModelBackend the service check is one statement of ours; it must answer as
    ``has_perm`` does, whether the permission is held directly, through a group, or not."""
    from django.contrib.auth.models import Group, Permission
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from memory.permissions import is_service_caller

    access = Permission.objects.get(codename="access_all_memories")
    other = Permission.objects.get(codename="view_owner")
    users = {
        "none": User.objects.create_user("u-none"),
        "direct": User.objects.create_user("u-direct"),
        "group": User.objects.create_user("u-group"),
        "other": User.objects.create_user("u-other"),
    }
    users["direct"].user_permissions.add(access)
    granting, unrelated = Group.objects.create(name="svc"), Group.objects.create(name="ops")
    granting.permissions.add(access)
    unrelated.permissions.add(other)
    users["group"].groups.add(granting)
    users["other"].groups.add(unrelated)
    users["other"].user_permissions.add(other)
    for name, user in users.items():
        fresh = User.objects.get(pk=user.pk)
        with CaptureQueriesContext(connection) as queries:
            ours = is_service_caller(fresh)
        assert len(queries) == 1
        assert ours == User.objects.get(pk=user.pk).has_perm("memory.access_all_memories"), name
    assert [is_service_caller(u) for u in users.values()] == [False, True, True, False]
