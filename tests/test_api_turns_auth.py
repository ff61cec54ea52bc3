"""``POST users/{user_id}/turns/`` with a ``Token`` header on real PostgreSQL, where the append's
own statement reads the token, its user and the permission (``memory.views.access``): the same
answers as DRF's checks before it, in one round trip, and nothing written for a caller refused,
whatever was revoked just before."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from django.contrib.auth.models import Group, Permission, User
from django.db import close_old_connections, connection
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from memory.models import Owner, Turn
from tests.instance import database_url

pytestmark = pytest.mark.django_db(transaction=True)

BODY = {"session_id": "s", "role": "user", "content": "what is a good name for a cat?"}


def client_of(user: User) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


def elsewhere(sql: str, *params: Any) -> None:
    """Run ``sql`` on a connection of its own, committed before the next request starts."""
    with psycopg.connect(database_url(), autocommit=True) as other:
        other.execute(sql, list(params))


def turns_of(owner_id: str) -> int:
    return Turn.objects.filter(owner__external_id=owner_id).count()


@pytest.fixture
def access_all() -> Permission:
    return Permission.objects.get(codename="access_all_memories")


@pytest.fixture
def callers(access_all: Permission) -> dict[str, User]:
    """A caller of each kind: the owner ``wang`` themself, a holder of the permission directly
    or through a group, a superuser, a user without it, and an inactive holder."""
    users = {
        name: User.objects.create_user(username, is_superuser=name == "superuser")
        for name, username in [
            ("own", "wang"),
            ("direct", "svc"),
            ("group", "svc-group"),
            ("superuser", "root"),
            ("stranger", "li"),
            ("inactive", "old-svc"),
        ]
    }
    users["direct"].user_permissions.add(access_all)
    users["inactive"].user_permissions.add(access_all)
    users["inactive"].is_active = False
    users["inactive"].save()
    granting = Group.objects.create(name="services")
    granting.permissions.add(access_all)
    users["group"].groups.add(granting)
    # A group and a permission that grant nothing here.
    Group.objects.create(name="ops").permissions.add(Permission.objects.get(codename="view_owner"))
    users["stranger"].groups.add(Group.objects.get(name="ops"))
    return users


@pytest.mark.parametrize(
    ("caller", "status", "detail"),
    [
        ("own", 201, None),
        ("direct", 201, None),
        ("group", 201, None),
        ("superuser", 201, None),
        ("stranger", 404, "Not found."),
        ("inactive", 401, "User inactive or deleted."),
    ],
)
def test_each_caller_is_answered_as_drf_checks_answer(callers, caller, status, detail):
    response = client_of(callers[caller]).post("/api/memory/users/wang/turns/", BODY, format="json")
    assert response.status_code == status, response.content
    if detail is None:
        assert response.json()["seq"] == 1
        assert turns_of("wang") == 1
    else:
        assert response.json()["detail"] == detail
        assert not Owner.objects.filter(external_id="wang").exists()


def test_an_unknown_token_is_a_401_and_writes_nothing():
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token " + "0" * 40)
    response = client.post("/api/memory/users/wang/turns/", BODY, format="json")
    assert response.status_code == 401
    assert response.json()["detail"] == "Invalid token."
    assert response["WWW-Authenticate"] == "Token"
    assert not Owner.objects.filter(external_id="wang").exists()


def test_an_append_is_one_statement_that_reads_the_token(callers):
    client = client_of(callers["direct"])
    assert client.post("/api/memory/users/wang/turns/", BODY, format="json").status_code == 201
    close_old_connections()
    with CaptureQueriesContext(connection) as queries:
        response = client.post("/api/memory/users/wang/turns/", BODY, format="json")
    assert response.status_code == 201
    first, *rest = [q["sql"] for q in queries.captured_queries]
    assert "authtoken_token" in first and "memory_turn_append(" in first
    # NOTE: after it, only the cache's confirmation clearing the owner's dirty mark.
    assert all("cache_dirty = false" in sql for sql in rest)


Revoke = Callable[[User, Permission], None]
REVOKED: dict[str, tuple[Revoke, int, str]] = {
    "token deleted": (
        lambda user, _: elsewhere("DELETE FROM authtoken_token WHERE user_id = %s", user.pk),
        401,
        "Invalid token.",
    ),
    "user deactivated": (
        lambda user, _: elsewhere("UPDATE auth_user SET is_active = false WHERE id = %s", user.pk),
        401,
        "User inactive or deleted.",
    ),
    "permission removed": (
        lambda user, permission: elsewhere(
            "DELETE FROM auth_user_user_permissions WHERE user_id = %s AND permission_id = %s",
            user.pk,
            permission.pk,
        ),
        404,
        "Not found.",
    ),
}


@pytest.mark.parametrize("revoked", list(REVOKED))
def test_a_caller_revoked_before_the_statement_writes_nothing(callers, access_all, revoked):
    revoke, status, detail = REVOKED[revoked]
    client = client_of(callers["direct"])
    assert client.post("/api/memory/users/li/turns/", BODY, format="json").status_code == 201
    owner = Owner.objects.get(external_id="li")
    revoke(callers["direct"], access_all)
    close_old_connections()
    response = client.post("/api/memory/users/li/turns/", BODY, format="json")
    assert response.status_code == status, response.content
    assert response.json()["detail"] == detail
    assert turns_of("li") == 1
    assert Owner.objects.get(pk=owner.pk).stamp == owner.stamp


@pytest.mark.parametrize(
    ("caller", "status"), [("none", 401), ("stranger", 404), ("direct", 400), ("own", 400)]
)
@pytest.mark.parametrize(
    "bad",
    [
        {"body": {**BODY, "role": "robot"}},
        {"body": {"role": "user", "content": "hello"}},
        {"body": "not json", "format": None, "content_type": "application/json"},
        {"body": BODY, "HTTP_IDEMPOTENCY_KEY": "x" * 500},
    ],
    ids=["role", "no-session", "json", "idempotency-key"],
)
def test_bad_input_is_answered_after_the_checks(callers, caller, status, bad):
    """DRF's order: who is calling (401), then whether they reach the owner (404), then the
    input (400)."""
    if caller == "none":
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION="Token " + "0" * 40)
    else:
        client = client_of(callers[caller])
    options = {k: v for k, v in bad.items() if k != "body"}
    options.setdefault("format", "json")
    if options["format"] is None:
        del options["format"]
    response = client.post("/api/memory/users/wang/turns/", bad["body"], **options)
    assert response.status_code == status, response.content
    assert not Owner.objects.filter(external_id="wang").exists()


def test_a_turn_whose_facts_are_read_first_checks_the_caller_first(callers):
    """The extractor reads the owner's facts before the append: the caller is checked before
    that read, the ordinary way."""
    body = {**BODY, "content": "My name is Wang and I live in Shanghai"}
    assert (
        client_of(callers["stranger"])
        .post("/api/memory/users/wang/turns/", body, format="json")
        .status_code
        == 404
    )
    response = client_of(callers["own"]).post("/api/memory/users/wang/turns/", body, format="json")
    assert response.status_code == 201
    assert turns_of("wang") == 1
