"""Tests of ``users/{user_id}/link/``: an anonymous user's memory moved to a known user, who
must be reachable by the caller as well as the anonymous user; otherwise 404 and no change."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from rest_framework.test import APIClient

from memory import selectors, services
from memory.models import Owner, Turn

pytestmark = pytest.mark.django_db

LINK = "/api/memory/users/wang/link/"
ANON = "anon-7f3a"


@pytest.fixture
def visitor(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        services.turn_append(owner_id="wang", session_id="s", role="user", content="hello")
        for content in ("I like basketball", "see you"):
            services.turn_append(owner_id=ANON, session_id="s", role="user", content=content)


def _unchanged() -> None:
    assert Turn.objects.filter(owner__external_id=ANON).count() == 2
    assert Turn.objects.filter(owner__external_id="wang").count() == 1


def test_service_caller_links_an_anonymous_user(
    service_client, visitor, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = service_client.post(LINK, {"from_user_id": ANON}, format="json")
    assert response.status_code == 200
    assert response.json() == {"turns_moved": 2, "facts_moved": 1}
    context = service_client.get("/api/memory/users/wang/context/").json()
    assert [(t["seq"], t["content"]) for t in context["turns"]] == [
        (1, "hello"),
        (2, "I like basketball"),
        (3, "see you"),
    ]
    assert context["facts"] == {"likes": ["basketball"]}
    assert service_client.get(f"/api/memory/users/{ANON}/turns/").json()["results"] == []


def test_linking_again_moves_nothing(service_client, visitor, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        first = service_client.post(LINK, {"from_user_id": ANON}, format="json")
        second = service_client.post(LINK, {"from_user_id": ANON}, format="json")
    assert first.json()["turns_moved"] == 2
    assert (second.status_code, second.json()) == (200, {"turns_moved": 0, "facts_moved": 0})
    assert [t["seq"] for t in selectors.turn_list(owner_id="wang")[0]] == [1, 2, 3]


def test_staff_may_link_only_with_the_service_permission(staff_user, visitor):
    client = APIClient()
    client.force_authenticate(staff_user)
    assert client.post(LINK, {"from_user_id": ANON}, format="json").status_code == 404
    _unchanged()
    staff_user.user_permissions.add(Permission.objects.get(codename="access_all_memories"))
    client.force_authenticate(User.objects.get(pk=staff_user.pk))
    response = client.post(LINK, {"from_user_id": ANON}, format="json")
    assert response.json() == {"turns_moved": 2, "facts_moved": 1}


def test_user_who_cannot_reach_the_anonymous_user_gets_404(owner_client, visitor):
    # wang reaches wang, but not anon-7f3a: linking would read another owner's memory.
    response = owner_client.post(LINK, {"from_user_id": ANON}, format="json")
    assert response.status_code == 404
    _unchanged()


def test_user_who_cannot_reach_the_target_gets_404(other_client, visitor):
    response = other_client.post(LINK, {"from_user_id": ANON}, format="json")
    assert response.status_code == 404
    _unchanged()


def test_other_user_cannot_pull_a_memory_into_theirs(other_client, visitor):
    response = other_client.post(
        "/api/memory/users/li/link/", {"from_user_id": "wang"}, format="json"
    )
    assert response.status_code == 404
    _unchanged()
    assert not Owner.objects.filter(external_id="li").exists()


def test_anonymous_caller_is_refused(anon_client, visitor):
    response = anon_client.post(LINK, {"from_user_id": ANON}, format="json")
    assert response.status_code in (401, 403)
    _unchanged()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "from_user_id"),
        ({"from_user_id": ""}, "from_user_id"),
        ({"from_user_id": "bad id!"}, "from_user_id"),
        ({"from_user_id": "x" * 129}, "from_user_id"),
        ({"from_user_id": 42}, "from_user_id"),
        ({"from_user_id": None}, "from_user_id"),
        ({"from_user_id": "wang"}, "from_user_id"),
    ],
)
def test_bad_body_is_400_and_changes_nothing(service_client, visitor, body, field):
    response = service_client.post(LINK, body, format="json")
    assert response.status_code == 400
    assert field in response.json()
    _unchanged()


def test_body_that_is_not_json_is_refused(service_client, visitor):
    response = service_client.post(LINK, "from_user_id=anon", content_type="text/plain")
    assert response.status_code in (400, 415)
    bad = service_client.post(LINK, "{", content_type="application/json")
    assert bad.status_code == 400
    _unchanged()
