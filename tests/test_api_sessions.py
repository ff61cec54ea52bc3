"""Tests of ``users/{user_id}/sessions/``: the labels of a user's turns, most recent first."""

from __future__ import annotations

import pytest

from memory import services

pytestmark = pytest.mark.django_db

SESSIONS = "/api/memory/users/wang/sessions/"


def test_sessions_list_labels_with_their_span_and_count(
    owner_client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        for session_id in ("laptop", "phone", "laptop", "reconnect-42"):
            services.turn_append(owner_id="wang", session_id=session_id, role="user", content="x")
    response = owner_client.get(SESSIONS)
    assert response.status_code == 200
    results = response.json()["results"]
    assert [(s["session_id"], s["turn_count"]) for s in results] == [
        ("reconnect-42", 1),
        ("laptop", 2),
        ("phone", 1),
    ]
    assert set(results[0]) == {"session_id", "first_seen", "last_seen", "turn_count"}
    laptop = results[1]
    assert laptop["first_seen"] < laptop["last_seen"]


def test_sessions_only_label_turns(owner_client, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        for session_id in ("laptop", "phone"):
            owner_client.post(
                "/api/memory/users/wang/turns/",
                {"session_id": session_id, "role": "user", "content": f"from {session_id}"},
                format="json",
            )
    context = owner_client.get("/api/memory/users/wang/context/").json()
    assert [t["content"] for t in context["turns"]] == ["from laptop", "from phone"]
    assert len(owner_client.get(SESSIONS).json()["results"]) == 2


def test_sessions_of_an_unknown_user_are_empty(service_client):
    assert service_client.get("/api/memory/users/nobody/sessions/").json() == {"results": []}
