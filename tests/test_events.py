"""memory.selectors.events: a time relative to an event the owner told about, as a search's
range of dates."""

from __future__ import annotations

import pytest
from django.db import connection

from memory import selectors, services
from memory.models import Owner
from memory.selectors import events
from tests.test_api_search import _dated

pytestmark = pytest.mark.django_db


@pytest.fixture
def told():
    _dated(
        "wang",
        ("a", "2026-01-10T10:00:00Z", "new gadget today: a drone"),
        ("b", "2026-03-05T10:00:00Z", "new gadget today: a camera"),
        ("c", "2026-03-09T10:00:00Z", "our Lisbon trip is on Friday, so excited"),
        ("d", "2026-04-20T10:00:00Z", "new gadget today: a kindle"),
        ("e", "2026-02-01T10:00:00Z", "搬家了，新家在浦东"),
        ("f", "2026-01-05T10:00:00Z", "新玩意：买了个相机"),
        ("g", "2026-02-20T10:00:00Z", "新玩意：买了个音箱"),
    )
    said = services.turn_append(
        owner_id="wang", session_id="h", role="assistant", content="Enjoy Tokyo! Pack light."
    )
    with connection.cursor() as cursor:
        cursor.execute("UPDATE memory_turn SET created_at = '2026-04-25' WHERE id = %s", [said.pk])


def _found(q: str, **kwargs) -> list[str]:
    kwargs.setdefault("now", "2026-05-01")
    turns = selectors.turn_search(owner_id="wang", q=q, mode="text", **kwargs)
    # The turns that say what was got, not the event's.
    return [
        turn["content"]
        for turn in turns
        if "新玩意" in turn["content"] or "gadget" in turn["content"]
    ]


def test_a_window_around_the_event_the_owner_told_of(told):
    assert _found("which gadget the week before my Lisbon trip") == ["new gadget today: a camera"]
    assert _found("which gadget after my Lisbon trip") == ["new gadget today: a kindle"]
    assert _found("搬家以后买了什么新玩意") == ["新玩意：买了个音箱"]


def test_an_event_never_told_or_told_by_the_assistant_narrows_nothing(told):
    every = {
        "new gadget today: a drone",
        "new gadget today: a camera",
        "new gadget today: a kindle",
    }
    assert set(_found("which gadget the week before my Paris trip")) == every
    assert set(_found("which gadget the week before Tokyo")) == every
    assert len(_found("结婚以后买了什么新玩意")) == 2


def test_an_event_told_after_now_or_an_explicit_range_narrows_nothing(told):
    assert len(_found("which gadget the week before my Lisbon trip", now="2026-03-01")) == 3
    got = _found("which gadget the week before my Lisbon trip", after="2026-04-01")
    assert got == ["new gadget today: a kindle"]
    assert _found("which gadget before my Lisbon trip last month") == ["new gadget today: a kindle"]


def test_the_lookup_reads_a_bounded_number_of_the_owners_turns(told, django_assert_max_num_queries):
    filters, _ = selectors.search.search_filters("gadget before my Lisbon trip", now="2026-05-01")
    assert isinstance(filters, events.EventFilters)
    owner = Owner.objects.values_list("id", "embedded_seq", "last_seq").get(external_id="wang")
    with django_assert_max_num_queries(2):
        narrowed = events.event_narrowed(owner, filters)
    assert narrowed.after is None
    assert (
        narrowed.before is not None and narrowed.before.isoformat() == "2026-03-13T00:00:00+00:00"
    )


def test_the_context_recall_reads_an_event_too(told):
    recalled = selectors.search.turns_recalled(
        owner_id="wang",
        query="which gadget the week before my Lisbon trip",
        before_seq=None,
        limit=10,
        now="2026-05-01",
    )
    assert [t["content"] for t in recalled if "gadget" in t["content"]] == [
        "new gadget today: a camera"
    ]
