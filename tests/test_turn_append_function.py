"""Tests of the append's one call (``memory_turn_append()``, migrations 0008 and 0010): the
facts an inline extractor finds written in the same round trip, the fall back to the locked
path when a fact changed meanwhile (JSON types count), and the prepared statement, on real
Postgres and Redis."""

from __future__ import annotations

import itertools
import json
import logging
import threading
from collections.abc import Mapping
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, connection, transaction
from django.db.models.signals import post_init
from django.test.utils import CaptureQueriesContext

from memory import db, selectors, services
from memory.conf import conf
from memory.extraction import ExtractedFact, RuleBasedExtractor
from memory.models import Fact, FactVersion, Owner, Turn
from memory.postgres import turn_append

pytestmark = pytest.mark.django_db(transaction=True)


def append(content: str, owner_id: str = "wang", **kwargs: Any) -> Turn:
    return services.turn_append(
        owner_id=owner_id, session_id="tab-1", role="user", content=content, **kwargs
    )


def statements(queries: CaptureQueriesContext) -> list[str]:
    # NOTE: without the repairer thread (as in this suite) the dirty mark is cleared inline,
    # in a statement of its own after the cache update; a server's repairer batches it.
    return [q["sql"] for q in queries if "synchronous_commit" not in q["sql"]]


def test_facts_found_cost_one_round_trip_more():
    append("hello")
    selectors.context_get(owner_id="wang")
    with CaptureQueriesContext(connection) as queries:
        turn = append("My name is Wang Jianguo and I like basketball")
    # The current values of the keys found, then the one call that writes turn and facts.
    assert len(statements(queries)) == 2, statements(queries)
    facts = {f.key: f for f in Fact.objects.filter(owner__external_id="wang")}
    assert facts["name"].value == "Wang Jianguo"
    assert facts["likes"].value == ["basketball"]
    assert {(f.session_id, f.source_turn_seq, f.version) for f in facts.values()} == {
        ("tab-1", turn.seq, 1)
    }
    assert FactVersion.objects.filter(owner__external_id="wang").count() == 2
    context = selectors.context_get(owner_id="wang")
    assert context["source"] == "cache"
    assert context["facts"] == {"name": "Wang Jianguo", "likes": ["basketball"]}


def test_a_new_key_continues_the_versions_of_a_deleted_one():
    append("My name is Wang Jianguo")
    services.fact_delete(owner_id="wang", key="name")
    append("My name is Wang Jianguo")
    fact = Fact.objects.get(owner__external_id="wang", key="name")
    # 1 set, 2 deleted, 3 set again by the turn.
    assert fact.version == 3
    versions = FactVersion.objects.filter(owner__external_id="wang", key="name")
    assert list(versions.order_by("version").values_list("version", "deleted")) == [
        (1, False),
        (2, True),
        (3, False),
    ]


def test_a_list_fact_merges_into_what_the_owner_holds():
    append("I like basketball")
    append("I also like chess")
    assert Fact.objects.get(owner__external_id="wang", key="likes").value == [
        "basketball",
        "chess",
    ]
    assert Fact.objects.get(owner__external_id="wang", key="likes").version == 2


def test_new_keys_past_max_facts_are_skipped_and_logged(memory_settings, caplog):
    with memory_settings(MAX_FACTS=1):
        append("I like basketball")
        with caplog.at_level(logging.WARNING, logger="memory.extraction"):
            turn = append("My name is Wang Jianguo")
    assert turn.seq == 2
    assert set(Fact.objects.filter(owner__external_id="wang").values_list("key", flat=True)) == {
        "likes"
    }
    assert "'name' of turn 2 of 'wang' skipped" in caplog.text


def owner_locked(owner_id: str = "wang") -> bool:
    """Whether a transaction holds the owner's row lock, asked from another connection."""
    found = []

    def probe() -> None:
        try:
            with transaction.atomic():
                Owner.objects.select_for_update(nowait=True).filter(external_id=owner_id).first()
            found.append(False)
        except DatabaseError:
            found.append(True)
        finally:
            connection.close()

    other = threading.Thread(target=probe)
    other.start()
    other.join()
    return found[0]


class MeddlingExtractor(RuleBasedExtractor):
    """The rules, but the first time they look at the owner's facts another connection adds to
    the owner's likes before the append takes its lock. Notes, per call, whether the owner's
    row was locked then (``locked``)."""

    calls = 0
    locked: list[bool] = []

    def extract(self, text: str, *, facts: Mapping[str, Any] | None = None) -> list[ExtractedFact]:
        MeddlingExtractor.calls += 1
        MeddlingExtractor.locked.append(owner_locked())
        if facts is not None and MeddlingExtractor.calls == 1:
            dict(facts)
            other = threading.Thread(target=self.add_chess)
            other.start()
            other.join()
        return super().extract(text, facts=facts)

    @staticmethod
    def add_chess() -> None:
        try:
            services.fact_put(
                owner_id="wang", key="likes", value=["tennis", "chess"], session_id="other"
            )
        finally:
            connection.close()


def test_a_fact_changed_between_its_read_and_the_lock_is_merged_under_the_lock(memory_settings):
    append("I like tennis")
    MeddlingExtractor.calls, MeddlingExtractor.locked = 0, []
    with memory_settings(FACT_EXTRACTOR="tests.test_turn_append_function.MeddlingExtractor"):
        turn = append("I like basketball")
    # Once, before the lock (issue 21: the general path ran it again, under the lock); its
    # merge found stale there is merged again under the lock, the extractor not run again.
    assert MeddlingExtractor.locked == [False]
    assert MeddlingExtractor.calls == 1
    fact = Fact.objects.get(owner__external_id="wang", key="likes")
    # 1 the first turn, 2 the other connection, 3 this turn: nothing lost, nothing twice.
    assert (fact.value, fact.version, fact.source_turn_seq) == (
        ["tennis", "chess", "basketball"],
        3,
        turn.seq,
    )
    assert list(Turn.objects.filter(owner__external_id="wang").values_list("seq", flat=True)) == [
        1,
        2,
    ]
    assert selectors.context_get(owner_id="wang")["facts"]["likes"] == [
        "tennis",
        "chess",
        "basketball",
    ]


class RetypingExtractor:
    """Sets ``ratio`` to ``1.0``; the first time it looks at the owner's facts another
    connection sets ``ratio`` from ``1`` to ``1.0`` before the append takes its lock."""

    calls = 0

    def extract(self, text: str, *, facts: Mapping[str, Any]) -> list[ExtractedFact]:
        RetypingExtractor.calls += 1
        if RetypingExtractor.calls == 1:
            dict(facts)
            other = threading.Thread(target=self.retype)
            other.start()
            other.join()
        return [ExtractedFact("ratio", 1.0)]

    @staticmethod
    def retype() -> None:
        try:
            services.fact_put(owner_id="wang", key="ratio", value=1.0)
        finally:
            connection.close()


def test_a_fact_retyped_between_its_read_and_the_lock_is_a_change_of_the_fact(memory_settings):
    """``jsonb``'s ``=`` takes ``1`` and ``1.0`` for one value; the function compares as the
    Python side does (migration 0010), so it sees the fact moved and the general path finds
    the turn's value already there: no second version of the same value."""
    services.fact_put(owner_id="wang", key="ratio", value=1)
    RetypingExtractor.calls = 0
    with memory_settings(FACT_EXTRACTOR="tests.test_turn_append_function.RetypingExtractor"):
        append("ratio is one")
    fact = Fact.objects.get(owner__external_id="wang", key="ratio")
    assert (repr(fact.value), fact.version) == ("1.0", 2)
    versions = FactVersion.objects.filter(owner__external_id="wang", key="ratio")
    assert [repr(v) for v in versions.order_by("version").values_list("value", flat=True)] == [
        "1",
        "1.0",
    ]


def test_the_function_takes_a_fact_of_another_json_type_for_a_changed_one():
    services.fact_put(owner_id="wang", key="ratio", value=1.0)
    for was, conflict in [(1, True), (True, True), ("1.0", True), (1.0, False)]:
        facts = [{"key": "ratio", "value": 2, "had": True, "was": was}]
        with connection.cursor() as cursor:
            cursor.execute(
                turn_append._APPEND_CALL,
                [
                    "wang",
                    "s",
                    "user",
                    "x",
                    "{}",
                    None,
                    False,
                    "2026-01-01T00:00Z",
                    False,
                    json.dumps(facts),
                    200,
                    0,
                    None,
                ],
            )
            row = cursor.fetchone()
        assert row[1] is conflict, was


def _call(cursor: Any, owner_id: str, session_id: str = "s") -> tuple[Any, ...]:
    cursor.execute(
        turn_append._APPEND_CALL,
        [owner_id, session_id, "user", "x", "{}", None, False, "2026-01-01T00:00Z", False, None,
         200, 0, None],
    )  # fmt: skip
    created, _, _, _, seq, stamp, prev_stamp = cursor.fetchone()[:7]
    assert created
    return seq, stamp, prev_stamp


def _params() -> dict[str, Any]:
    """psycopg's connection parameters of the test database (Django's, password and options
    included), for plain psycopg connections of their own: without Django's cursor and adapters."""
    params = connection.get_connection_params()
    return {k: v for k, v in params.items() if k not in {"cursor_factory", "context"}}


def test_an_append_that_waited_on_the_owner_takes_the_stamp_the_other_left():
    """The append without key or facts takes the owner's lock with its UPDATE; one that waited
    for another append's lock reports as taken before the stamp that append left, takes the seq
    after its seq, and draws its own stamp once it holds the lock: above one drawn while it
    waited."""
    import psycopg

    params = _params()
    with psycopg.connect(**params) as first, psycopg.connect(**params, autocommit=True) as other:
        (pid,) = other.execute("SELECT pg_backend_pid()").fetchone()  # type: ignore[misc]
        _call(other.cursor(), "wang")  # the owner exists: the UPDATE path, not the insert
        first_seq, first_stamp, _ = _call(first.cursor(), "wang")  # uncommitted: holds the lock
        got: list[tuple[Any, ...]] = []
        waiting = threading.Thread(target=lambda: got.append(_call(other.cursor(), "wang", "t")))
        waiting.start()
        with connection.cursor() as cursor:
            for _ in range(500):
                cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
                if cursor.fetchone() == ("Lock",):
                    break
                threading.Event().wait(0.01)
            else:
                raise AssertionError("the second append never waited for the owner's lock")
            cursor.execute("SELECT nextval('memory_stamp_seq')")
            (drawn_meanwhile,) = cursor.fetchone()
        first.commit()
        waiting.join(10)
    ((seq, stamp, prev_stamp),) = got
    assert (seq, prev_stamp) == (first_seq + 1, first_stamp) and stamp > first_stamp
    # NOTE: a stamp drawn before the wait would be below this one, and could commit after a
    # later writer's: stamps would not grow in the owner's commit order.
    assert stamp > drawn_meanwhile
    assert Owner.objects.get(external_id="wang").stamp == stamp
    assert Turn.objects.filter(owner__external_id="wang").count() == 3


def test_concurrent_appends_to_one_owner_chain_their_stamps_in_seq_order():
    """Appends of one owner from several connections at once: seqs 1..n with no gap, and in
    seq order each append's stamp grows and its stamp taken before is the previous append's."""
    import psycopg

    params = _params()
    got: list[tuple[Any, ...]] = []
    lock = threading.Lock()

    def writer() -> None:
        with psycopg.connect(**params, autocommit=True) as own:
            for _ in range(15):
                row = _call(own.cursor(), "busy")
                with lock:
                    got.append(row)

    with psycopg.connect(**params, autocommit=True) as first:
        got.append(_call(first.cursor(), "busy"))  # the owner exists: every writer updates it
    writers = [threading.Thread(target=writer) for _ in range(6)]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join(60)
    got.sort()
    assert [seq for seq, _, _ in got] == list(range(1, 6 * 15 + 2))
    for (_, before, _), (_, stamp, prev_stamp) in itertools.pairwise(got):
        assert prev_stamp == before and stamp > before
    owner = Owner.objects.get(external_id="busy")
    assert (owner.stamp, owner.prev_stamp) == (got[-1][1], got[-1][2])


def test_a_new_session_is_inserted_and_a_known_one_updated():
    with connection.cursor() as cursor:
        for session_id in ("s", "s", "t", "s"):
            _call(cursor, "wang", session_id)
    counts = dict(
        Owner.objects.get(external_id="wang").sessions.values_list("session_id", "turn_count")
    )
    assert counts == {"s": 3, "t": 1}


def test_the_returned_turn_is_the_stored_one_as_the_orm_loads_it():
    turn = append("hello there", metadata={"k": [1]})
    stored = Turn.objects.get(pk=turn.pk)
    names = [f.attname for f in Turn._meta.concrete_fields]
    assert [getattr(turn, n) for n in names] == [getattr(stored, n) for n in names]
    assert not turn._state.adding and turn._state.db == stored._state.db
    assert turn.owner.external_id == "wang"


def test_a_receiver_of_post_init_sees_the_returned_turn():
    seen: list[Turn] = []

    def receiver(sender: type[Turn], instance: Turn, **kwargs: Any) -> None:
        seen.append(instance)

    post_init.connect(receiver, sender=Turn)
    try:
        turn = append("hello there")
    finally:
        post_init.disconnect(receiver, sender=Turn)
    assert seen and seen[-1] is turn


def prepared_appends() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall() if "memory_turn_append" in row[0]]


@pytest.fixture
def preparing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(db._Prepared, "works", True)


def test_the_append_is_prepared_once_per_connection(preparing):
    for i in range(3):
        append(f"turn {i}")
    assert len(prepared_appends()) == 1
    # NOTE: Django's setting is left as it was: nothing else is ever prepared.
    assert connection.connection.prepare_threshold is None


def test_a_new_connection_prepares_it_again(preparing):
    append("first")
    connection.close()
    append("second")
    assert len(prepared_appends()) == 1
    assert list(Turn.objects.values_list("seq", flat=True).order_by("seq")) == [1, 2]


def test_a_lost_prepared_statement_is_sent_again_unprepared(preparing, caplog):
    append("first")
    assert prepared_appends()
    # What a transaction-mode pooler does: the next statement meets a server without it.
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")
    with caplog.at_level(logging.WARNING, logger="memory.db"):
        turn = append("second")
    assert turn.seq == 2
    assert "lost a prepared statement" in caplog.text
    assert not db._Prepared.works
    append("third")
    assert prepared_appends() == []
    assert list(Turn.objects.values_list("seq", flat=True).order_by("seq")) == [1, 2, 3]


def test_prepared_statements_can_be_turned_off(preparing, memory_settings):
    with memory_settings(PREPARED_STATEMENTS=False):
        append("first")
        append("second")
    assert prepared_appends() == []


def test_a_transaction_pooler_turns_preparing_off_unless_it_is_asked_for(
    preparing, memory_settings
):
    with memory_settings(POOLER="transaction"):
        append("first")
    assert prepared_appends() == []
    with memory_settings(POOLER="transaction", PREPARED_STATEMENTS=True):
        append("second")
    assert len(prepared_appends()) == 1


def test_prepared_statements_must_be_a_bool(memory_settings):
    with (
        memory_settings(PREPARED_STATEMENTS="yes"),
        pytest.raises(ImproperlyConfigured, match="PREPARED_STATEMENTS"),
    ):
        assert conf.PREPARED_STATEMENTS
