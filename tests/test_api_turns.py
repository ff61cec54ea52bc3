"""Tests of ``users/{user_id}/turns/``: appending turns (idempotently) and paging through them."""

from __future__ import annotations

import json
import logging
import threading

import pytest
from django.db import OperationalError, connection, transaction
from rest_framework.test import APIClient

from memory import selectors, services
from memory.models import Fact, Owner, Session, Turn

pytestmark = pytest.mark.django_db

TURNS = "/api/memory/users/wang/turns/"


def post_turn(client, content="hello", *, path=TURNS, headers=None, **fields):
    body = {"session_id": "tab-1", "role": "user", "content": content, **fields}
    return client.post(path, body, format="json", headers=headers or {})


def test_post_turn_answers_201_with_the_turn(owner_client, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = post_turn(owner_client, "hello", metadata={"lang": "en"})
    assert response.status_code == 201
    body = response.json()
    assert set(body) == {"seq", "session_id", "role", "content", "metadata", "created_at"}
    assert (body["seq"], body["session_id"], body["role"], body["content"]) == (
        1,
        "tab-1",
        "user",
        "hello",
    )
    assert body["metadata"] == {"lang": "en"}
    assert body["created_at"].endswith("Z")
    assert Turn.objects.get(owner__external_id="wang").content == "hello"


def test_post_turn_numbers_turns_per_user(
    owner_client, service_client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        seqs = [post_turn(owner_client, f"t{i}").json()["seq"] for i in range(3)]
        other = post_turn(service_client, "x", path="/api/memory/users/li/turns/").json()["seq"]
    assert seqs == [1, 2, 3]
    assert other == 1


def test_metadata_defaults_to_an_empty_object(owner_client, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = post_turn(owner_client)
    assert response.json()["metadata"] == {}


def test_empty_content_is_a_turn(owner_client, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = post_turn(owner_client, "", role="assistant")
    assert response.status_code == 201
    assert response.json()["content"] == ""


def test_non_ascii_is_kept_as_is(owner_client, django_capture_on_commit_callbacks):
    text = "我叫王建国，我喜欢打篮球 🏀"
    with django_capture_on_commit_callbacks(execute=True):
        response = post_turn(owner_client, text, metadata={"备注": "中文"})
    assert response["Content-Type"].startswith("application/json")
    assert text.encode() in response.content
    listed = owner_client.get(TURNS).json()["results"][0]
    assert (listed["content"], listed["metadata"]) == (text, {"备注": "中文"})


def test_content_up_to_the_limit_is_accepted(owner_client, memory_settings):
    with memory_settings(MAX_TURN_CHARS=10):
        assert post_turn(owner_client, "x" * 10).status_code == 201
        response = post_turn(owner_client, "x" * 11)
    assert response.status_code == 400
    assert response.json() == {"content": ["Ensure this field has no more than 10 characters."]}
    assert Turn.objects.count() == 1


def test_an_idempotent_retry_of_a_float_the_database_keeps_as_an_integer_is_a_retry(
    owner_client, django_capture_on_commit_callbacks
):
    """``jsonb`` keeps ``1e16`` as ``10000000000000000``: a retry that sends it again is
    still the same request."""
    headers = {"Idempotency-Key": "req-big"}
    with django_capture_on_commit_callbacks(execute=True):
        first = post_turn(owner_client, headers=headers, metadata={"n": 1e16, "m": [1.5e17]})
        retry = post_turn(owner_client, headers=headers, metadata={"n": 1e16, "m": [1.5e17]})
    assert (first.status_code, retry.status_code) == (201, 201)
    assert retry.json()["seq"] == first.json()["seq"] == 1
    assert Turn.objects.count() == 1


def test_idempotency_key_retry_answers_the_first_turn(
    owner_client, django_capture_on_commit_callbacks
):
    headers = {"Idempotency-Key": "req-42"}
    with django_capture_on_commit_callbacks(execute=True):
        first = post_turn(owner_client, "hello", headers=headers, metadata={"n": 1})
        retry = post_turn(owner_client, "hello", headers=headers, metadata={"n": 1})
        other = post_turn(owner_client, "next", headers={"Idempotency-Key": "req-43"})
    assert first.status_code == retry.status_code == 201
    assert retry.json() == first.json()
    assert other.json()["seq"] == 2
    assert Turn.objects.count() == 2
    assert Session.objects.get().turn_count == 2


@pytest.mark.parametrize(
    "changed",
    [
        {"session_id": "tab-2"},
        {"role": "assistant"},
        {"content": "hello, again"},
        {"metadata": {"n": 2}},
        {"metadata": {}},
        # NOTE: JSON types, not Python's ==: true is not 1, 1.0 is not 1 (issue 21).
        {"metadata": {"n": True}},
        {"metadata": {"n": 1.0}},
        {"metadata": {"n": "1"}},
        {"metadata": {"n": [1]}},
    ],
)
def test_idempotency_key_with_another_body_is_422_and_stores_nothing(
    owner_client, django_capture_on_commit_callbacks, changed
):
    headers = {"Idempotency-Key": "req-42"}
    body = {"content": "hello", "metadata": {"n": 1}}
    with django_capture_on_commit_callbacks(execute=True):
        first = post_turn(owner_client, headers=headers, **body)
        reused = post_turn(owner_client, headers=headers, **{**body, **changed})
        retry = post_turn(owner_client, headers=headers, **body)
    assert reused.status_code == 422
    assert list(reused.json()) == ["detail"]
    assert "req-42" in reused.json()["detail"]
    assert (retry.status_code, retry.json()) == (201, first.json())
    assert list(Turn.objects.values_list("seq", "content")) == [(1, "hello")]
    assert Session.objects.get().turn_count == 1
    context = owner_client.get("/api/memory/users/wang/context/").json()
    assert [turn["content"] for turn in context["turns"]] == ["hello"]


@pytest.mark.parametrize("key", ["", "x" * 129, "é", "tab\there"])
def test_bad_idempotency_key_is_400_and_stores_nothing(owner_client, key):
    response = owner_client.post(
        TURNS,
        {"session_id": "s", "role": "user", "content": "x"},
        format="json",
        HTTP_IDEMPOTENCY_KEY=key,
    )
    assert response.status_code == 400
    assert list(response.json()) == ["Idempotency-Key"]
    assert Turn.objects.count() == 0


def test_longest_idempotency_key_is_accepted(owner_client, django_capture_on_commit_callbacks):
    key = "".join(chr(c) for c in range(0x20, 0x7F))[:128].ljust(128, "~")
    with django_capture_on_commit_callbacks(execute=True):
        response = post_turn(owner_client, headers={"Idempotency-Key": key})
    assert response.status_code == 201
    assert Turn.objects.get().idempotency_key == key


@pytest.fixture
def history(django_capture_on_commit_callbacks):
    """Wang's 7 turns, alternating between two sessions (odd seqs on "a")."""
    with django_capture_on_commit_callbacks(execute=True):
        for i in range(7):
            services.turn_append(
                owner_id="wang",
                session_id="a" if i % 2 == 0 else "b",
                role="user",
                content=f"turn {i + 1}",
            )


def test_list_turns_oldest_first(owner_client, history):
    response = owner_client.get(TURNS)
    assert response.status_code == 200
    body = response.json()
    assert [t["seq"] for t in body["results"]] == [1, 2, 3, 4, 5, 6, 7]
    assert body["next"] is None


def test_list_turns_pages_with_an_absolute_next_url(owner_client, history):
    first = owner_client.get(TURNS, {"limit": 3}).json()
    assert [t["seq"] for t in first["results"]] == [1, 2, 3]
    assert first["next"] == f"http://testserver{TURNS}?after=3&limit=3"
    second = owner_client.get(first["next"]).json()
    third = owner_client.get(second["next"]).json()
    assert [t["seq"] for t in second["results"]] == [4, 5, 6]
    assert [t["seq"] for t in third["results"]] == [7]
    assert third["next"] is None


def test_list_turns_of_one_session_keeps_the_filter_in_next(owner_client, history):
    first = owner_client.get(TURNS, {"session_id": "a", "limit": 2}).json()
    assert [t["seq"] for t in first["results"]] == [1, 3]
    assert "session_id=a" in first["next"]
    second = owner_client.get(first["next"]).json()
    assert [t["seq"] for t in second["results"]] == [5, 7]
    assert second["next"] is None


def test_list_turns_after_a_seq(owner_client, history):
    body = owner_client.get(TURNS, {"after": 5}).json()
    assert [t["seq"] for t in body["results"]] == [6, 7]


def test_a_page_stops_at_max_page_bytes_of_content_and_next_goes_on(
    owner_client, memory_settings, write
):
    with write():
        for i in range(10):
            services.turn_append(
                owner_id="wang", session_id="s", role="assistant", content=f"{i}" * 3000
            )
        services.turn_append(owner_id="wang", session_id="s", role="assistant", content="x" * 9000)
    seen, pages = [], []
    with memory_settings(MAX_PAGE_BYTES=10_000):
        url = f"{TURNS}?limit=500"
        while url is not None:
            body = owner_client.get(url).json()
            pages.append([t["seq"] for t in body["results"]])
            seen += body["results"]
            url = body["next"]
        # A turn larger than the budget alone still has a page of its own.
        alone = owner_client.get(f"{TURNS}?after=10").json()
    assert pages == [[1, 2, 3], [4, 5, 6], [7, 8, 9], [10], [11]]
    assert [t["seq"] for t in seen] == list(range(1, 12))
    assert [t["seq"] for t in alone["results"]] == [11]
    assert alone["next"] is None
    # The Python API pages by count alone unless asked.
    assert len(selectors.turn_list(owner_id="wang", limit=500)[0]) == 11


def test_list_turns_of_an_unknown_user_is_empty(service_client):
    body = service_client.get("/api/memory/users/nobody/turns/").json()
    assert body == {"results": [], "next": None}


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 501}, "limit"),
        ({"limit": -1}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"limit": "1.5"}, "limit"),
        ({"limit": "9" * 40}, "limit"),
        ({"limit": "9" * 2000}, "limit"),
        ({"after": -1}, "after"),
        ({"after": "x"}, "after"),
        ({"after": str(2**63)}, "after"),
        ({"after": "9" * 5000}, "after"),
        ({"session_id": "x" * 129}, "session_id"),
        ({"session_id": "a\x00b"}, "session_id"),
        ({"session_id": ""}, "session_id"),
        ({"limit": ""}, "limit"),
        ({"after": ""}, "after"),
    ],
)
def test_bad_list_params_are_400(owner_client, params, field):
    response = owner_client.get(TURNS, params)
    assert response.status_code == 400
    assert field in response.json()


def test_largest_after_is_accepted(owner_client, history):
    response = owner_client.get(TURNS, {"after": 2**63 - 1, "limit": 500})
    assert response.json() == {"results": [], "next": None}


def test_lost_database_on_write_is_503_and_stores_nothing(owner_client, monkeypatch):
    # NOTE: a unit test of the 503 mapping alone; the real outage is tested with a real server.
    def lost(**kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(services, "turn_append", lost)
    response = post_turn(owner_client)
    assert response.status_code == 503
    assert set(response.json()) == {"detail"}
    assert "server closed" not in response.json()["detail"]
    assert Owner.objects.count() == 0


def test_turn_body_is_json(owner_client):
    response = owner_client.post(
        TURNS,
        json.dumps({"session_id": "s", "role": "user", "content": "x"}),
        content_type="text/plain",
    )
    assert response.status_code == 415
    assert Turn.objects.count() == 0


class _Poster(threading.Thread):
    """POSTs one turn as wang from its own thread and connection (closed when it ends)."""

    def __init__(self, user, body, key) -> None:
        super().__init__()
        self.user, self.body, self.key = user, body, key
        self.response = None

    def run(self) -> None:
        try:
            client = APIClient()
            client.force_authenticate(self.user)
            self.response = post_turn(client, headers={"Idempotency-Key": self.key}, **self.body)
        finally:
            connection.close()


def _post_while_locked(user, bodies, key="req-7"):
    """Start one POST per body while wang's owner row is locked, so that they are all in
    flight at once (each waiting on the lock, as seen in pg_stat_activity); then let them go."""
    posters = [_Poster(user, body, key) for body in bodies]
    with transaction.atomic():
        Owner.objects.select_for_update().get(external_id="wang")
        for poster in posters:
            poster.start()
        waiting = 0
        while waiting < len(posters) and any(p.is_alive() for p in posters):
            with connection.cursor() as cursor:
                # NOTE: inside a transaction, pg_stat_activity is read once unless cleared.
                cursor.execute("SELECT pg_stat_clear_snapshot()")
                cursor.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
                )
                waiting = cursor.fetchone()[0]
    for poster in posters:
        poster.join()
    return [poster.response for poster in posters]


@pytest.mark.django_db(transaction=True)
def test_concurrent_duplicates_store_exactly_one_turn(owner_user):
    services.turn_append(owner_id="wang", session_id="tab-1", role="user", content="first")
    responses = _post_while_locked(owner_user, [{"content": "hello"}] * 4)
    assert [r.status_code for r in responses] == [201] * 4
    assert {r.json()["seq"] for r in responses} == {2}
    assert list(Turn.objects.order_by("seq").values_list("seq", "content")) == [
        (1, "first"),
        (2, "hello"),
    ]
    assert Session.objects.get().turn_count == 2


@pytest.mark.django_db(transaction=True)
def test_concurrent_mismatching_duplicates_store_one_and_refuse_the_other(owner_user):
    services.turn_append(owner_id="wang", session_id="tab-1", role="user", content="first")
    responses = _post_while_locked(owner_user, [{"content": "yes"}, {"content": "no"}])
    assert sorted(r.status_code for r in responses) == [201, 422]
    [stored] = [r.json() for r in responses if r.status_code == 201]
    assert Turn.objects.filter(seq=2).get().content == stored["content"]
    assert Turn.objects.count() == 2


def test_extracted_facts_past_max_facts_are_skipped_and_the_turn_stored(
    owner_client, memory_settings, django_capture_on_commit_callbacks, caplog
):
    with memory_settings(MAX_FACTS=2), django_capture_on_commit_callbacks(execute=True):
        services.facts_merge(owner_id="wang", facts={"name": "Wang", "note": "x"})
        with caplog.at_level(logging.WARNING, logger="memory.extraction"):
            response = post_turn(owner_client, "My name is Li Wei. I live in Lagos")
    assert response.status_code == 201
    assert Turn.objects.get().content == "My name is Li Wei. I live in Lagos"
    facts = owner_client.get("/api/memory/users/wang/context/").json()["facts"]
    # NOTE: a key already held still changes; only a new one is refused.
    assert facts == {"name": "Li Wei", "note": "x"}
    [record] = [r for r in caplog.records if "MAX_FACTS" in r.getMessage()]
    assert "'location'" in record.getMessage()
    assert record.levelno == logging.WARNING


def test_extracted_facts_fill_up_to_max_facts(
    owner_client, memory_settings, django_capture_on_commit_callbacks
):
    with memory_settings(MAX_FACTS=2), django_capture_on_commit_callbacks(execute=True):
        services.fact_put(owner_id="wang", key="note", value="x")
        post_turn(owner_client, "My name is Li Wei. I live in Lagos. I work as a teacher")
    assert sorted(Fact.objects.values_list("key", flat=True)) == ["name", "note"]
