"""Tests of ``users/{user_id}/sessions/``: the labels of a user's turns, most recent first, in
pages of ``limit`` linked by an opaque ``cursor``; and the index that keeps each page flat."""

from __future__ import annotations

import base64

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory import selectors, services
from memory.models import Session

pytestmark = pytest.mark.django_db

SESSIONS = "/api/memory/users/wang/sessions/"


def walk(client, url):
    """Every page from ``url`` on, following ``next``; the pages' results."""
    pages = []
    while url is not None:
        response = client.get(url)
        assert response.status_code == 200
        body = response.json()
        assert set(body) == {"results", "next"}
        pages.append(body["results"])
        url = body["next"]
    return pages


@pytest.fixture
def sessions(django_capture_on_commit_callbacks):
    """Wang's sessions s00..s11, one turn each; s03..s08 all last seen at one instant (as a
    coarse clock or a link's merge gives), the rest each at its own."""
    with django_capture_on_commit_callbacks(execute=True):
        for i in range(12):
            services.turn_append(owner_id="wang", session_id=f"s{i:02}", role="user", content="x")
    tie = Session.objects.get(session_id="s03").last_seen
    Session.objects.filter(session_id__in=[f"s{i:02}" for i in range(3, 9)]).update(last_seen=tie)
    ordered = Session.objects.order_by("-last_seen", "session_id")
    return list(ordered.values_list("session_id", flat=True))


def test_sessions_list_labels_with_their_span_and_count(
    owner_client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        for session_id in ("laptop", "phone", "laptop", "reconnect-42"):
            services.turn_append(owner_id="wang", session_id=session_id, role="user", content="x")
    response = owner_client.get(SESSIONS)
    assert response.status_code == 200
    assert response.json()["next"] is None
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
    response = service_client.get("/api/memory/users/nobody/sessions/")
    assert response.json() == {"results": [], "next": None}


@pytest.mark.parametrize("limit", [1, 2, 3, 5, 6, 7, 11, 12, 13])
def test_following_next_yields_every_session_once_in_order(owner_client, sessions, limit):
    pages = walk(owner_client, f"{SESSIONS}?limit={limit}")
    assert [s["session_id"] for page in pages for s in page] == sessions
    assert [len(page) for page in pages[:-1]] == [limit] * (len(pages) - 1)
    assert 1 <= len(pages[-1]) <= limit


def test_next_is_an_absolute_url_that_keeps_the_limit(owner_client, sessions):
    first = owner_client.get(f"{SESSIONS}?limit=4").json()
    assert first["next"].startswith(f"http://testserver{SESSIONS}?")
    assert "limit=4" in first["next"]
    second = owner_client.get(first["next"]).json()
    assert len(second["results"]) == 4


def test_limit_defaults_to_50(owner_client, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        for i in range(51):
            services.turn_append(owner_id="wang", session_id=f"s{i}", role="user", content="x")
    [first, second] = walk(owner_client, SESSIONS)
    assert (len(first), len(second)) == (50, 1)


def _cursor(*key):
    return base64.urlsafe_b64encode(str(list(key)).replace("'", '"').encode()).decode()


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "501"}, "limit"),
        ({"limit": "x"}, "limit"),
        ({"limit": ""}, "limit"),
        ({"cursor": ""}, "cursor"),
        ({"cursor": "not base64!"}, "cursor"),
        ({"cursor": "x" * 1025}, "cursor"),
        ({"cursor": base64.urlsafe_b64encode(b"\xff\xfe").decode()}, "cursor"),
        ({"cursor": _cursor(3)}, "cursor"),
        ({"cursor": _cursor("2026-01-01T00:00:00+00:00")}, "cursor"),
        ({"cursor": _cursor("yesterday", "s1")}, "cursor"),
        ({"cursor": _cursor("2026-01-01T00:00:00", "s1")}, "cursor"),
        ({"cursor": _cursor("2026-01-01T00:00:00+00:00", 5)}, "cursor"),
        ({"cursor": "s\x00"}, "cursor"),
    ],
)
def test_bad_page_params_are_400(owner_client, sessions, params, field):
    response = owner_client.get(SESSIONS, params)
    assert response.status_code == 400
    assert list(response.json()) == [field]


def test_largest_limit_is_accepted(owner_client, sessions):
    response = owner_client.get(SESSIONS, {"limit": 500})
    assert len(response.json()["results"]) == 12


def test_python_api_pages_with_cursors(sessions):
    first = selectors.session_list(owner_id="wang", limit=5)
    second = selectors.session_list(owner_id="wang", limit=5, cursor=first.next_cursor)
    results, cursor = selectors.session_list(owner_id="wang", limit=5, cursor=second.next_cursor)
    assert cursor is None
    assert [s["session_id"] for s in first.results + second.results + results] == sessions


@pytest.mark.parametrize("limit", [0, 501, True, "5"])
def test_python_api_refuses_a_bad_limit(db, limit):
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError) as raised:
        selectors.session_list(owner_id="wang", limit=limit)
    assert set(raised.value.message_dict) == {"limit"}


def test_a_deep_page_starts_at_the_cursor_in_the_index(sessions):
    """The next page's query starts its index scan at the cursor (no rows skipped over)."""
    cursor = selectors.session_list(owner_id="wang", limit=7).next_cursor
    with CaptureQueriesContext(connection) as queries:
        selectors.session_list(owner_id="wang", limit=3, cursor=cursor)
    [sql] = [q["sql"] for q in queries if '"memory_session"' in q["sql"]]
    with connection.cursor() as cursor:
        # NOTE: twelve rows are cheapest read any way and sorted; what matters is whether an
        # index serves this order and starts at the cursor, as it must for a million rows.
        for method in ("seqscan", "bitmapscan", "sort"):
            cursor.execute(f"SET LOCAL enable_{method} = off")
        cursor.execute(f"EXPLAIN {sql}")
        plan = "\n".join(row[0] for row in cursor.fetchall())
    [scan] = [line for line in plan.splitlines() if "memory_session" in line and "Scan" in line]
    index_cond = plan.splitlines()[plan.splitlines().index(scan) + 1]
    assert "memory_session_page_idx" in scan
    assert "Sort" not in plan
    assert "Index Cond" in index_cond
    assert "last_seen <=" in index_cond


def test_a_session_seen_again_moves_to_the_front(
    owner_client, sessions, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        services.turn_append(owner_id="wang", session_id="s00", role="user", content="x")
    first = owner_client.get(f"{SESSIONS}?limit=2").json()["results"]
    assert [(s["session_id"], s["turn_count"]) for s in first] == [("s00", 2), ("s11", 1)]


def _flip(cursor: str) -> str:
    """``cursor`` with its last character changed (still of the cursor's alphabet)."""
    return cursor[:-1] + ("A" if cursor[-1] != "A" else "B")


def test_a_made_up_cursor_is_400(owner_client, sessions):
    """A cursor is opaque, taken from ``next``: one a client built itself, shaped as the
    server's own (a position in the listing), is refused (issue 23)."""
    first = owner_client.get(SESSIONS, {"limit": 3}).json()
    for made_up in (
        _cursor("2099-01-01T00:00:00+00:00", "").rstrip("="),
        _cursor("2000-01-01T00:00:00+00:00", "s05").rstrip("="),
    ):
        response = owner_client.get(SESSIONS, {"cursor": made_up})
        assert response.status_code == 400
        assert response.json() == {"cursor": ["Invalid cursor."]}
    assert owner_client.get(first["next"]).status_code == 200


def test_a_tampered_cursor_or_one_of_another_listing_is_400(service_client, sessions):
    cursor = selectors.session_list(owner_id="wang", limit=3).next_cursor
    services.turn_append(owner_id="li", session_id="web", role="user", content="x")
    services.fact_put(owner_id="wang", key="name", value="v1")
    services.fact_put(owner_id="wang", key="name", value="v2")
    history = selectors.fact_history(owner_id="wang", key="name", limit=1).next_cursor
    assert cursor is not None and history is not None
    for owner, params in [
        ("wang", {"cursor": _flip(cursor)}),
        ("li", {"cursor": cursor}),  # another owner's
        ("wang", {"cursor": history}),  # a fact history's
    ]:
        response = service_client.get(f"/api/memory/users/{owner}/sessions/", params)
        assert response.status_code == 400, params
        assert response.json() == {"cursor": ["Invalid cursor."]}
    assert service_client.get(SESSIONS, {"cursor": cursor}).status_code == 200


def test_python_api_refuses_a_made_up_cursor(sessions):
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError) as raised:
        selectors.session_list(owner_id="wang", cursor=_cursor("2099-01-01T00:00:00+00:00", ""))
    assert raised.value.message_dict == {"cursor": ["Invalid cursor."]}
