"""Tests of ``DELETE users/{user_id}/``: forgetting a user, in the database and the cache."""

from __future__ import annotations

import pytest

from memory import services
from memory.models import Fact, FactVersion, Owner, Session, Turn

pytestmark = pytest.mark.django_db

USER = "/api/memory/users/wang/"


@pytest.fixture
def two_users(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        for owner_id in ("wang", "li"):
            services.turn_append(owner_id=owner_id, session_id="s", role="user", content="hi")
            services.fact_put(owner_id=owner_id, key="name", value=owner_id)
            services.fact_put(owner_id=owner_id, key="name", value=owner_id.upper())


def rows(owner_id):
    return [
        model.objects.filter(owner__external_id=owner_id).count()
        for model in (Turn, Fact, FactVersion, Session)
    ]


def test_forget_deletes_everything_of_the_user_only(
    owner_client, two_users, django_capture_on_commit_callbacks
):
    assert rows("wang") == [1, 1, 2, 1]
    with django_capture_on_commit_callbacks(execute=True):
        response = owner_client.delete(USER)
    assert response.status_code == 204
    assert response.content == b""
    assert rows("wang") == [0, 0, 0, 0]
    assert not Owner.objects.filter(external_id="wang").exists()
    assert rows("li") == [1, 1, 2, 1]


def test_forget_empties_a_cached_context(
    owner_client, two_users, django_capture_on_commit_callbacks
):
    owner_client.get(f"{USER}context/")
    assert owner_client.get(f"{USER}context/").json()["source"] == "cache"
    with django_capture_on_commit_callbacks(execute=True):
        owner_client.delete(USER)
    context = owner_client.get(f"{USER}context/").json()
    assert (context["facts"], context["turns"]) == ({}, [])
    assert owner_client.get(f"{USER}facts/").json() == {"facts": []}
    assert owner_client.get(f"{USER}facts/name/history/").status_code == 404


def test_forget_of_an_unknown_user_is_204(service_client, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = service_client.delete("/api/memory/users/nobody/")
    assert response.status_code == 204


def test_forgotten_user_starts_again_at_seq_1(
    owner_client, two_users, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        owner_client.delete(USER)
        response = owner_client.post(
            f"{USER}turns/", {"session_id": "s", "role": "user", "content": "again"}, format="json"
        )
    assert response.json()["seq"] == 1
    assert [t["content"] for t in owner_client.get(f"{USER}context/").json()["turns"]] == ["again"]
