"""The database history a copy is stamped on (memory.cache.history, rule 9): a copy of another
history is never read, sync or async; a fill whose history changed while it read the database
is not stored; no copy is used past the lease of a history the database no longer confirms;
and the replica rule's comparison of stamps (memory.cache.replica)."""

from __future__ import annotations

import time

import pytest
from asgiref.sync import async_to_sync
from django.db import connection

from memory import cache, selectors, services
from memory.cache import history
from memory.cache.replica import replica_current
from memory.exceptions import MemoryUnavailable


def turns_of(context) -> list[str]:
    return [turn["content"] for turn in context["turns"]]


def on_history(epoch: str) -> None:
    """Make this process trust ``epoch`` as the database's history (what a process that last
    reached the old primary believes)."""
    with history._state.lock:
        history._state.epoch, history._state.confirmed_at = epoch, time.monotonic()


@pytest.mark.django_db
def test_a_copy_of_another_history_is_never_read_sync_or_async(write):
    with write():
        services.turn_append(owner_id="wang", session_id="s", role="user", content="kept")
    on_history("0ld0ld00")
    with write():
        services.turn_append(owner_id="wang", session_id="s", role="user", content="LOST")
    selectors.context_get(owner_id="wang")
    assert selectors.context_get(owner_id="wang")["source"] == "cache"
    # The copy holds "LOST"; the database, standing in for the promoted standby, does not (raw
    # SQL: the copy is told nothing, as it is told nothing of a failover).
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM memory_turn WHERE content = 'LOST'")
    assert turns_of(selectors.context_get(owner_id="wang")) == ["kept", "LOST"]
    history.reset()  # the next read confirms the database's own history
    for context in (
        selectors.context_get(owner_id="wang"),
        async_to_sync(selectors.acontext_get)(owner_id="wang"),
        selectors.context_get(owner_id="wang"),
    ):
        assert turns_of(context) == ["kept"]
    assert context["source"] == "cache"
    assert history.history_current() != "0ld0ld00"


@pytest.mark.django_db
def test_a_fill_whose_history_changed_while_it_read_is_not_stored(write, redis_client):
    with write():
        services.turn_append(owner_id="wang", session_id="s", role="user", content="hello")
    epoch = history.history_epoch()
    assert epoch is not None
    read = selectors.context.database_read

    def load(n: int):
        answer = read("wang", n)
        on_history("pr0m0ted")  # a promotion seen while the database was read
        return answer

    snapshot, source = cache.read_through(owner_id="wang", turns=20, load=load)
    assert (source, [t["content"] for t in snapshot.turns]) == ("database", ["hello"])
    for name in (epoch, cache.runs.named("pr0m0ted", ask=True)):
        assert redis_client.hget(cache.keys.owner_key("wang", name), "rev") is None


def test_no_copy_is_served_past_the_lease_of_a_history_the_database_no_longer_confirms(
    transactional_db, wang_chat, memory_settings, dead_database
):
    with memory_settings(HISTORY_LEASE=0.2):
        history.reset()
        on_history(history.SINGLE)
        # NOTE: the copy is filled under the history trusted now; then the database goes.
        warm = cache.copy.copy_fill(
            owner_id="wang",
            loaded=cache.Loaded(cache.Snapshot(stamp=31, turns=[], facts=[]), True),
            epoch=history.history_epoch(),
        )
        assert warm is cache.copy.Fill.UNCLAIMED
        assert selectors.fact_list(owner_id="wang") == []  # within the lease: the copy
        time.sleep(0.25)
        with pytest.raises(MemoryUnavailable):
            selectors.fact_list(owner_id="wang")
        with pytest.raises(MemoryUnavailable):
            async_to_sync(selectors.afact_list)(owner_id="wang")


def test_warm_reads_ask_the_database_nothing_while_the_repairer_renews_the_lease(
    transactional_db, wang_chat, memory_settings, django_assert_num_queries
):
    with memory_settings(REPAIR_THREAD=True, HISTORY_LEASE=1.0):
        cache.reset()
        try:
            selectors.context_get(owner_id="wang")  # confirms the history, fills, starts it
            started = time.monotonic()
            # NOTE: for well over two leases: a lease the repairer did not renew would be
            # confirmed here, by a query of this thread.
            with django_assert_num_queries(0):
                while time.monotonic() - started < 2.5 * history.conf.HISTORY_LEASE:
                    assert selectors.context_get(owner_id="wang")["source"] == "cache"
                    time.sleep(0.02)
        finally:
            thread = cache.repair._state.thread
            cache.reset()
            cache.repair._state.wake.set()  # the repairer thread ends, closing its connection
            if thread is not None:
                thread.join(timeout=10)


def test_the_slot_of_an_owner_needs_no_database():
    # NOTE: no database access in this test: routing a key to its cluster node must not ask.
    tag = cache.keys.owner_tag("wang")
    assert tag.startswith("{") and tag.endswith("}") and "wang" not in tag
    assert cache.keys.owner_key("wang", "1a2b3c4d").endswith(f":h1a2b3c4d:{tag}")


@pytest.mark.parametrize(
    ("primary", "replica", "current"),
    [
        (7, 7, True),  # the replica replayed the owner's last write
        (7, 9, True),  # and a later one
        (7, 5, False),  # behind
        (7, 0, False),  # has not replayed the owner's creation
        (0, 0, True),  # nobody holds the owner
        (0, 5, False),  # has not replayed a forget (or the re-creation came after the check)
    ],
)
def test_a_replica_is_current_only_at_the_primarys_stamp_or_later(primary, replica, current):
    assert replica_current(primary=primary, replica=replica) is current


def test_the_repairer_waits_on_when_a_renewal_raises(monkeypatch, caplog, memory_settings):
    from memory.cache import repair

    calls: list[int] = []

    def broken() -> None:
        calls.append(1)
        raise RuntimeError("not a database error")

    monkeypatch.setattr(repair, "history_due", lambda: True)
    monkeypatch.setattr(repair, "history_probe", broken)
    # A wait of many quarter-leases renews (and fails) more than once, and returns, even on a
    # loaded machine; not woken by what an earlier test left.
    repair._state.wake.clear()
    with memory_settings(HISTORY_LEASE=0.2):
        repair._repairer_wait(0.6)
    assert len(calls) >= 2
    assert "could not renew the history" in caplog.text
