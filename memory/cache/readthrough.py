"""The read side of the protocol: serve a copy only once it passed the validity step, else read
the database and rehydrate, one reader per owner, with every fill verified after it is stored.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Literal, TypeVar

from django.db import DatabaseError
from django.utils import timezone

from memory.cache.client import Outcome, breaker, enabled
from memory.cache.copy import (
    Fill,
    Hit,
    Loaded,
    Miss,
    ReadResult,
    Snapshot,
    copy_drop,
    copy_fill,
    copy_read,
)
from memory.cache.history import history_epoch, history_trusted
from memory.cache.repair import Pending, pending_for, remember, repairer_ensure
from memory.cache.runs import run_kept
from memory.cache.stamps import stamp_get
from memory.conf import conf
from memory.payloads import facts_live

Source = Literal["cache", "database"]
# ``load(n)``: the owner's stamp, last ``n`` turns and facts from the database, and whether
# those are all of its turns. Raises what the database raises.
Loader = Callable[[int], Loaded]

# A reader waiting for another's rehydration polls after 5 ms, then twice as long each time.
FILL_POLL_SECONDS = 0.005
FILL_POLL_MAX_SECONDS = 0.05


class Refused:
    """A copy that failed the validity step: an unconfirmed update of this process (``stale``
    False), or a stamp that is not the database's (``stale`` True)."""

    def __init__(self, *, stale: bool) -> None:
        self.stale = stale


def copy_valid(
    owner_id: str, result: ReadResult, *, suspect: bool | None = None, epoch: str | None = None
) -> ReadResult | Refused:
    """The validity step every read served from a copy passes.

    Refused when the read, named ``epoch``, did not reach the server run it names (``runs``);
    while this process holds an unconfirmed update of the owner; and, while it is suspect
    (``MEMORY["SUSPECT_WINDOW"]``), unless its stamp is the owner's in the database (one query).
    ``suspect``: that state as the caller read it (``None``: read it now). Raises what the database
    raises.
    """
    if not isinstance(result, Hit):
        return result
    if not run_kept(epoch):
        breaker.count("run_refused")
        return Refused(stale=True)
    if pending_for(owner_id):
        return Refused(stale=False)
    if suspect is None:
        suspect = breaker.suspect()
    if suspect and stamp_get(owner_id) != result.snapshot.stamp:
        breaker.count("stale_refused")
        return Refused(stale=True)
    return result


def cache_lookup(
    owner_id: str, turns: int, *, epoch: str, claim_fill: bool = True
) -> ReadResult | Refused:
    """One validated read of the owner's copy on the database history ``epoch`` (see
    ``copy_read`` and ``copy_valid``)."""
    repairer_ensure()
    return copy_valid(
        owner_id,
        copy_read(owner_id=owner_id, turns=turns, claim_fill=claim_fill, epoch=epoch),
        epoch=epoch,
    )


class _Flights:
    """The rehydrations this process is running, by owner, for its readers to wait on."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: dict[str, threading.Event] = {}

    def start(self, owner_id: str) -> threading.Event:
        done = threading.Event()
        with self.lock:
            self.running.setdefault(owner_id, done)
        return done

    def end(self, owner_id: str, done: threading.Event) -> None:
        with self.lock:
            if self.running.get(owner_id) is done:
                del self.running[owner_id]
        done.set()

    def get(self, owner_id: str) -> threading.Event | None:
        return self.running.get(owner_id)


_flights = _Flights()


_T = TypeVar("_T")


def _tail(turns: list[_T], n: int) -> list[_T]:
    return turns[max(len(turns) - n, 0) :] if n else []


def fill_verify(owner_id: str, stamp: int, epoch: str | None = None) -> bool:
    """After a fill at ``stamp`` was stored without its claim, check it against the owner's
    stamp in the database; a fill that a write overtook is dropped again. Returns whether it
    stands. This, not the floor, keeps a stale fill out.
    """
    try:
        current = stamp_get(owner_id)
    except DatabaseError:
        current = -1
    if current == stamp:
        return True
    breaker.count("fills_reverted")
    if not copy_drop(owner_id=owner_id, stamp=max(current, stamp), epoch=epoch):
        remember(Pending(owner_pk=None, owner_id=owner_id, stamp=max(current, stamp)))
    return False


def _rehydrate(
    owner_id: str, turns: int, load: Loader, fill_token: str | None, epoch: str
) -> Snapshot:
    """Read the owner from the database, store a verified copy under ``epoch``, return the
    last ``turns``."""
    depth = conf.CACHE_TURNS
    snapshot, complete = load(max(turns, depth + 1))
    breaker.count("rehydrations")
    result = Snapshot(
        snapshot.stamp, _tail(snapshot.turns, turns), snapshot.facts, snapshot.summary
    )
    if history_trusted() != epoch:
        # NOTE: the history changed (or went unconfirmed) while the database was read: the
        # rows may be of the history before it, and are stored under no name.
        breaker.count("fills_unconfirmed")
        return result
    cached = Snapshot(
        snapshot.stamp, _tail(snapshot.turns, depth), snapshot.facts, snapshot.summary
    )
    stored = copy_fill(
        owner_id=owner_id,
        loaded=Loaded(cached, complete and len(snapshot.turns) <= depth),
        fill_token=fill_token,
        epoch=epoch,
    )
    if stored is Fill.UNCLAIMED:
        fill_verify(owner_id, snapshot.stamp, epoch)
    elif stored is Outcome.TIMEOUT:
        # NOTE: a Redis that timed out may still run the fill once it answers again.
        remember(Pending(owner_pk=None, owner_id=owner_id, stamp=snapshot.stamp))
    return result


def _wait_for_fill(owner_id: str, turns: int, epoch: str) -> ReadResult | Refused | None:
    """Another reader is rehydrating this owner: wait for its copy, for at most
    ``FILL_WAIT_MS``. Returns the validated copy; or a ``Miss`` with a fill token when that
    reader's lock went without leaving a copy and this one took it over; or ``None``: read
    the database yourself.
    """
    deadline = time.monotonic() + conf.FILL_WAIT_MS / 1000
    delay = FILL_POLL_SECONDS
    # NOTE: waited on, not polled: pollers starved the rehydrating thread (docs/performance.md).
    while (remaining := deadline - time.monotonic()) > 0:
        running = _flights.get(owner_id)
        if running is not None:
            running.wait(remaining)
        else:
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, FILL_POLL_MAX_SECONDS)
        # NOTE: only the cache is trusted, never the other reader's rows: its fill is refused
        # if a write moved the owner on meanwhile, and then this reader takes over.
        result = cache_lookup(owner_id, turns, epoch=epoch)
        if not isinstance(result, Miss) or result.fill_token:
            return result
    return None


def snapshot_live(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` without the facts expired by now, on this process's clock.

    NOTE: rule 8 of ``memory.cache``: an expired fact leaves every copy at once, with no write.
    """
    if all(fact["expires_at"] is None for fact in snapshot.facts):
        return snapshot
    facts = facts_live(snapshot.facts, timezone.now())
    return snapshot if facts is snapshot.facts else dataclasses.replace(snapshot, facts=facts)


def read_through(*, owner_id: str, turns: int, load: Loader) -> tuple[Snapshot, Source]:
    """The owner's memory with its last ``turns`` turns, and where it was read from; expired facts
    excluded.

    A valid copy: one Redis round trip, no query. A miss rehydrates, one reader per owner, the
    others waiting (``FILL_WAIT_MS``). Too few turns, a refused copy, or Redis down: the database
    (``load``), with no fill unless the copy was stale. Raises what ``load`` raises; never a Redis
    error.
    """
    snapshot, source = _read_through(owner_id, turns, load)
    return snapshot_live(snapshot), source


def _read_through(owner_id: str, turns: int, load: Loader) -> tuple[Snapshot, Source]:
    if not enabled():
        return load(turns)[0], "database"
    epoch = history_epoch()
    if epoch is None:
        # NOTE: no history confirmed within the lease: the database is read as if Redis were down.
        breaker.count("history_unconfirmed")
        return load(turns)[0], "database"
    result = cache_lookup(owner_id, turns, epoch=epoch)
    if isinstance(result, Hit):
        return result.snapshot, "cache"
    if isinstance(result, Refused) and result.stale:
        return _rehydrate(owner_id, turns, load, None, epoch), "database"
    if not isinstance(result, Miss):
        return load(turns)[0], "database"
    if result.fill_token is None and conf.FILL_WAIT_MS > 0:
        waited = _wait_for_fill(owner_id, turns, epoch)
        if isinstance(waited, Hit):
            return waited.snapshot, "cache"
        if isinstance(waited, Miss):
            result = waited
        elif waited is not None and not (isinstance(waited, Refused) and waited.stale):
            return load(turns)[0], "database"
    if result.fill_token is None:
        return _rehydrate(owner_id, turns, load, None, epoch), "database"
    running = _flights.start(owner_id)
    try:
        return _rehydrate(owner_id, turns, load, result.fill_token, epoch), "database"
    finally:
        _flights.end(owner_id, running)
