"""Concurrent writers to one owner, as threads and as separate processes: ``seq`` is exactly
1..N in commit order, nothing is lost, and the cached context equals the database."""

from __future__ import annotations

import json
import threading

import pytest
from django.db import connection

from memory import cache, selectors, services
from memory.models import Owner, Session, Turn
from tests import instance

pytestmark = pytest.mark.django_db(transaction=True)


class Thread(threading.Thread):
    """A thread with its own database connection, closed when it ends; keeps its result."""

    def __init__(self, target, *args) -> None:
        super().__init__()
        self._call = (target, args)
        self.result = None
        self.error: BaseException | None = None

    def run(self) -> None:
        target, args = self._call
        try:
            self.result = target(*args)
        except BaseException as e:
            self.error = e
        finally:
            connection.close()


def _writer(owner_id: str, session_id: str, count: int) -> list[int]:
    return [
        services.turn_append(
            owner_id=owner_id, session_id=session_id, role="user", content=f"{session_id} {i}"
        ).seq
        for i in range(count)
    ]


def _poller(owner_id: str, stop: threading.Event) -> list[int]:
    """Reads "everything after the last seq I saw", as a client streaming history would."""
    seen: list[int] = []
    while True:
        done = stop.is_set()
        page, _ = selectors.turn_list(
            owner_id=owner_id, after=seen[-1] if seen else None, limit=500
        )
        seen += [turn["seq"] for turn in page]
        if done and not page:
            return seen


def test_concurrent_appends_from_threads_number_1_to_n_in_commit_order():
    selectors.context_get(owner_id="wang")  # a warm (empty) copy that every delta must keep right
    stop = threading.Event()
    poller = Thread(_poller, "wang", stop)
    poller.start()
    writers = [Thread(_writer, "wang", f"device-{i}", 50) for i in range(8)]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    stop.set()
    poller.join()
    assert all(thread.error is None for thread in [*writers, poller])
    seqs = sorted(seq for thread in writers for seq in thread.result)
    assert seqs == list(range(1, 401))
    for thread in writers:
        assert thread.result == sorted(thread.result)
    # NOTE: a reader polling "after the last seq I saw" skips nothing: seq is commit order.
    assert poller.result == list(range(1, 401))
    assert list(Turn.objects.order_by("seq").values_list("seq", flat=True)) == seqs
    assert sum(Session.objects.values_list("turn_count", flat=True)) == 400
    # NOTE: each write's dirty mark was cleared after Redis confirmed it (in autocommit, here).
    assert Owner.objects.get(external_id="wang").cache_dirty is False
    database = selectors.context.database_read("wang", 50)[0]
    # NOTE: deltas that reach Redis out of commit order drop the copy instead of applying;
    # the first read may therefore rehydrate. Either way both reads equal the database.
    first = selectors.context_get(owner_id="wang", turns=50)
    second = selectors.context_get(owner_id="wang", turns=50)
    assert second["source"] == "cache"
    assert first["turns"] == second["turns"] == database.turns


def test_concurrent_appends_from_separate_processes():
    selectors.context_get(owner_id="wang")
    procs = [instance.spawn("append", "wang", "40", f"instance-{i}") for i in range(4)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    assert sorted(seq for seqs in results for seq in seqs) == list(range(1, 161))
    # Every instance reads the same context, from its own process and Redis pool.
    theirs = instance.run("context", "wang", "30")
    ours = selectors.context_get(owner_id="wang", turns=30)
    assert theirs["turns"] == ours["turns"] == selectors.context.database_read("wang", 30)[0].turns
    assert [t["seq"] for t in ours["turns"]] == list(range(131, 161))


def test_cold_read_stampede_rehydrates_once():
    """Many concurrent cold reads of one owner (a popular user after a flush) wait for one
    rehydration instead of all reading the database."""
    for i in range(30):
        services.turn_append(owner_id="wang", session_id="s", role="user", content=f"t{i}")
    cache.copy.copy_evict(owner_id="wang")
    before = cache.stats()["counters"].get("rehydrations", 0)
    barrier = threading.Barrier(16)

    def read() -> list[int]:
        barrier.wait()
        return [t["seq"] for t in selectors.context_get(owner_id="wang")["turns"]]

    readers = [Thread(read) for _ in range(16)]
    for thread in readers:
        thread.start()
    for thread in readers:
        thread.join()
    assert all(thread.error is None for thread in readers)
    assert all(thread.result == list(range(11, 31)) for thread in readers)
    assert cache.stats()["counters"]["rehydrations"] - before <= 2
