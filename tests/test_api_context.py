"""Tests of ``users/{user_id}/context/``: what a chat backend puts before the model, from the
cache or the database, and the same answer from the whole API with the cache down."""

from __future__ import annotations

import pytest
from django.db import InterfaceError, OperationalError

from memory import selectors
from memory.exceptions import MemoryUnavailable

pytestmark = pytest.mark.django_db

CONTEXT = "/api/memory/users/wang/context/"


def test_context_holds_facts_and_last_turns(owner_client, wang_chat):
    response = owner_client.get(CONTEXT)
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"user_id", "facts", "turns", "source"}
    assert body["user_id"] == "wang"
    assert body["facts"] == {"name": "Wang Jianguo"}
    assert [t["seq"] for t in body["turns"]] == list(range(11, 31))
    assert set(body["turns"][0]) == {
        "seq",
        "session_id",
        "role",
        "content",
        "metadata",
        "created_at",
    }


def test_context_is_read_from_the_database_then_the_cache(owner_client, wang_chat):
    cold = owner_client.get(CONTEXT).json()
    warm = owner_client.get(CONTEXT).json()
    assert (cold["source"], warm["source"]) == ("database", "cache")
    assert {**cold, "source": None} == {**warm, "source": None}


def test_warm_context_of_the_owner_needs_no_query(
    owner_client, wang_chat, django_assert_num_queries
):
    owner_client.get(CONTEXT)
    with django_assert_num_queries(0):
        assert owner_client.get(CONTEXT).json()["source"] == "cache"


@pytest.mark.parametrize(("turns", "seqs"), [(0, []), (1, [30]), (3, [28, 29, 30])])
def test_context_takes_a_turn_count(owner_client, wang_chat, turns, seqs):
    body = owner_client.get(CONTEXT, {"turns": turns}).json()
    assert [t["seq"] for t in body["turns"]] == seqs


def test_context_turns_up_to_200(owner_client, wang_chat):
    body = owner_client.get(CONTEXT, {"turns": 200}).json()
    assert [t["seq"] for t in body["turns"]] == list(range(1, 31))


def test_context_default_turns_come_from_settings(owner_client, wang_chat, memory_settings):
    with memory_settings(CONTEXT_TURNS=5):
        body = owner_client.get(CONTEXT).json()
    assert [t["seq"] for t in body["turns"]] == [26, 27, 28, 29, 30]


@pytest.mark.parametrize(
    "turns", ["-1", "201", "abc", "1.5", "1e3", "", "9" * 30, "9" * 5000, "0x10"]
)
def test_bad_turn_count_is_400(owner_client, wang_chat, turns):
    response = owner_client.get(CONTEXT, {"turns": turns})
    assert response.status_code == 400
    assert list(response.json()) == ["turns"]


def test_context_of_an_unknown_user_is_empty(service_client):
    body = service_client.get("/api/memory/users/nobody/context/").json()
    assert body == {"user_id": "nobody", "facts": {}, "turns": [], "source": "database"}


def test_context_sees_a_turn_posted_through_the_api(
    owner_client, wang_chat, django_capture_on_commit_callbacks
):
    assert owner_client.get(CONTEXT).json()["source"] == "database"
    with django_capture_on_commit_callbacks(execute=True):
        owner_client.post(
            "/api/memory/users/wang/turns/",
            {"session_id": "c", "role": "user", "content": "I live in Shanghai"},
            format="json",
        )
    body = owner_client.get(CONTEXT).json()
    assert body["source"] == "cache"
    assert body["turns"][-1]["content"] == "I live in Shanghai"


def test_context_with_the_cache_down_is_the_same(owner_client, wang_chat, dead_cache):
    body = owner_client.get(CONTEXT).json()
    again = owner_client.get(CONTEXT).json()
    assert body["source"] == again["source"] == "database"
    assert [t["seq"] for t in body["turns"]] == list(range(11, 31))
    assert body["facts"] == {"name": "Wang Jianguo"}


def _scenario(client, capture):
    """Every endpoint once, in an order where each answer depends on the writes before it."""
    user = "/api/memory/users/wang"
    answers = []
    with capture(execute=True):
        answers.append(
            client.post(
                f"{user}/turns/",
                {"session_id": "a", "role": "user", "content": "hi"},
                format="json",
            )
        )
        answers.append(
            client.post(
                f"{user}/turns/",
                {"session_id": "b", "role": "assistant", "content": "hello"},
                format="json",
                HTTP_IDEMPOTENCY_KEY="k",
            )
        )
        answers.append(
            client.post(
                f"{user}/turns/",
                {"session_id": "b", "role": "assistant", "content": "hello"},
                format="json",
                HTTP_IDEMPOTENCY_KEY="k",
            )
        )
        answers.append(client.put(f"{user}/facts/name/", {"value": "Wang"}, format="json"))
        answers.append(
            client.put(f"{user}/facts/name/", {"value": "Jim"}, format="json", HTTP_IF_MATCH="1")
        )
        answers.append(
            client.put(f"{user}/facts/name/", {"value": "Bob"}, format="json", HTTP_IF_MATCH="1")
        )
        answers.append(
            client.patch(f"{user}/facts/", {"facts": {"likes": ["golf"]}}, format="json")
        )
        answers.append(client.delete(f"{user}/facts/likes/"))
    for path in (
        "context/",
        "context/?turns=1",
        "turns/",
        "turns/?limit=1",
        "facts/",
        "facts/name/history/",
        "sessions/",
    ):
        answers.append(client.get(f"{user}/{path}"))
    answers.append(client.get(f"{user}/context/"))
    with capture(execute=True):
        answers.append(client.delete(f"{user}/"))
    answers.append(client.get(f"{user}/context/"))
    return answers


def _comparable(response):
    """An answer without what legitimately differs between runs: times and the read's source."""

    def strip(value):
        if isinstance(value, dict):
            return {
                k: strip(v)
                for k, v in value.items()
                if k not in {"created_at", "updated_at", "first_seen", "last_seen", "source"}
            }
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return response.status_code, strip(response.json()) if response.content else None


def test_api_answers_the_same_with_the_cache_down(
    owner_client, django_capture_on_commit_callbacks, request
):
    up = [_comparable(r) for r in _scenario(owner_client, django_capture_on_commit_callbacks)]
    request.getfixturevalue("dead_cache")
    down = [_comparable(r) for r in _scenario(owner_client, django_capture_on_commit_callbacks)]
    assert down == up
    assert [status for status, _ in up][:8] == [201, 201, 201, 201, 200, 412, 200, 204]


@pytest.mark.parametrize(
    "error",
    [
        OperationalError("could not connect to server"),
        InterfaceError("connection already closed"),
        MemoryUnavailable("The database is unavailable"),
    ],
)
def test_lost_database_is_503(owner_client, monkeypatch, error):
    # NOTE: a unit test of the 503 mapping alone; the real outage is tested with a real server.
    def lost(**kwargs):
        raise error

    monkeypatch.setattr(selectors, "context_get", lost)
    response = owner_client.get(CONTEXT)
    assert response.status_code == 503
    assert set(response.json()) == {"detail"}
    assert "connect" not in response.json()["detail"]
