"""Repair: cache updates that did not land are made good as soon as Redis answers again.

An unconfirmed update is remembered (its owner stays dirty) and retried every ``REPAIR_POLL``
seconds; every ``RECONCILE_INTERVAL`` the database is swept for owners left dirty (or forgotten)
past ``RECONCILE_GRACE``, by the database's clock. A repair is always a drop, never a fill.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time
from dataclasses import dataclass

from django.db import DatabaseError, connection

from memory.cache.client import breaker, enabled, shard_for
from memory.cache.copy import copy_drop, probe
from memory.cache.history import history_due, history_epoch, history_probe
from memory.cache.keys import owner_key
from memory.cache.stamps import dirty_clear, outbox_done, overdue
from memory.conf import conf

logger = logging.getLogger("memory.cache")

# Most owners one sweep reads of each kind; the rest wait for the next sweep.
BATCH = 500
# NOTE: the retry is also the probe that finds Redis back: it bounds how long a lost update outlives
# Redis's return.
REPAIR_POLL = 0.1
# NOTE: well under RECONCILE_GRACE, so a confirmed copy is never swept.
CLEAR_POLL = 0.5
# NOTE: a repair Redis refuses (WRONGTYPE, NOPERM) backs off, doubling up to this; an outage does
# not (the retry is the probe).
REPAIR_BACKOFF_MAX = 2.0


@dataclass(frozen=True)
class Pending:
    """A cache update of ``owner_id`` at ``stamp`` that Redis did not confirm: a write's (owner
    ``owner_pk`` stays dirty), a forget's (``outbox_pk`` row), or a timed-out fill's (neither)."""

    owner_pk: int | None
    owner_id: str
    stamp: int
    outbox_pk: int | None = None


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.pending: dict[str, Pending] = {}
            # The highest stamp Redis confirmed per owner (pk): only that one can still clear the
            # owner's mark, as stamps only grow.
            self.confirmed: dict[int, int] = {}
            self.next_sweep = 0.0
            self.thread: threading.Thread | None = None
            self.pid = os.getpid()
            self.sweeps = 0
            self.dropped = 0
            self.backoff = REPAIR_POLL


_state = _State()
breaker.listeners.append(_state.wake.set)


def reset() -> None:
    """Forget this process's pending repairs and schedule (tests, a forked worker)."""
    _state.reset()
    breaker.prober = None


def pending_for(owner_id: str) -> bool:
    """Whether this process holds an unconfirmed update of the owner: its copy is not served."""
    return bool(_state.pending) and owner_id in _state.pending


def pending_count() -> int:
    return len(_state.pending)


def remember(item: Pending) -> None:
    """Note a cache update Redis did not confirm, to be repaired as soon as it answers."""
    with _state.lock:
        held = _state.pending.get(item.owner_id)
        # NOTE: one drop at the highest stamp repairs every lost update of the owner.
        if held is None or held.stamp <= item.stamp:
            _state.pending[item.owner_id] = item
        backing_off = _state.backoff > REPAIR_POLL
    repairer_ensure()
    if not backing_off:
        _state.wake.set()


def confirmed(*, owner_pk: int, stamp: int, outbox_pk: int | None = None) -> None:
    """Redis confirmed the update of the owner at ``stamp``: clear its mark (or its outbox row),
    batched by the repairer when it runs."""
    if outbox_pk is not None:
        outbox_done(outbox_pk)
        return
    if _repairer_alive():
        with _state.lock:
            if stamp > _state.confirmed.get(owner_pk, 0):
                _state.confirmed[owner_pk] = stamp
        return
    dirty_clear([(owner_pk, stamp)])


def _confirmed_flush() -> None:
    with _state.lock:
        batch, _state.confirmed = _state.confirmed, {}
    dirty_clear(batch.items())


def _confirmed_flush_at_exit() -> None:
    """At normal exit, clear the confirmed marks not cleared yet, lest the next sweep drop good
    copies."""
    if _state.pid != os.getpid():
        return
    with _state.lock:
        batch, _state.confirmed = _state.confirmed, {}
    if batch:
        # NOTE: the interpreter is going away: whatever fails, the marks stay for a sweep.
        with contextlib.suppress(Exception):
            dirty_clear(batch.items(), quiet=True)


atexit.register(_confirmed_flush_at_exit)


def repair_pending() -> int:
    """Drop the copy of every owner whose update this process could not land; return how many.

    Unconfirmed drops, and other owners of a shard found down, wait for the next round. Never
    raises.
    """
    with _state.lock:
        items = list(_state.pending.values())
    done = 0
    drops = _Round()
    for item in items:
        if not drops.drop(item.owner_id, item.stamp):
            continue
        with _state.lock:
            if _state.pending.get(item.owner_id) == item:
                del _state.pending[item.owner_id]
        if item.outbox_pk is not None:
            outbox_done(item.outbox_pk)
        elif item.owner_pk is not None:
            dirty_clear([(item.owner_pk, item.stamp)])
        done += 1
    _state.dropped += done
    return done


def sweep(*, grace: float | None = None) -> int:
    """Drop the copy of every owner left dirty, or forgotten with its drop pending, for more than
    ``grace`` seconds (default ``MEMORY["RECONCILE_GRACE"]``) of the database's clock. Returns how
    many were dropped; stops quietly while Redis or the database fails. Never raises."""
    if not enabled():
        return 0
    _state.sweeps += 1
    try:
        forgotten, dirty = overdue(
            grace=conf.RECONCILE_GRACE if grace is None else grace, limit=BATCH
        )
    except DatabaseError as e:
        logger.warning("Could not read owners with pending cache updates: %s", e)
        return 0
    dropped = 0
    drops = _Round()
    for pk, owner_id, stamp in forgotten:
        if not drops.drop(owner_id, stamp):
            continue
        outbox_done(pk)
        dropped += 1
    cleared = []
    for owner_pk, owner_id, stamp in dirty:
        if not drops.drop(owner_id, stamp):
            continue
        cleared.append((owner_pk, stamp))
        dropped += 1
    dirty_clear(cleared)
    if dropped:
        breaker.count("reconcile_drops", dropped)
        # What is left is a writer that died, or an update Redis never took.
        logger.info(
            "Reconciled %d cached cop%s: a writer ended before confirming its update, so the"
            " copy was dropped and is read from the database again.",
            dropped,
            "y" if dropped == 1 else "ies",
        )
    _state.dropped += dropped
    return dropped


class _Round:
    """The drops of one round: after a drop found its shard down, the shard's other owners wait for
    the next round; a Redis error (a bug, too few replicas) stops nothing."""

    def __init__(self) -> None:
        self.down: set[str] = set()
        # NOTE: the keys of the history the database confirms now; none confirmed, no drop
        # (they wait, and their owners' copies are refused meanwhile: pending or unconfirmed).
        self.epoch = history_epoch()

    def drop(self, owner_id: str, stamp: int) -> bool:
        if self.epoch is None:
            return False
        shard = shard_for(owner_key(owner_id, self.epoch))
        if shard in self.down:
            return False
        if copy_drop(owner_id=owner_id, stamp=stamp, epoch=self.epoch):
            return True
        if breaker.is_down(shard):
            self.down.add(shard)
        return False


def run_once(*, grace: float | None = None) -> int:
    """One round of the repairer: this process's pending repairs, confirmed marks, and a
    sweep; return how many copies were dropped (tests drive this step by step). Never raises."""
    dropped = repair_pending() if _state.pending else 0
    _confirmed_flush()
    return dropped + sweep(grace=grace)


def _repairer_alive() -> bool:
    thread = _state.thread
    return thread is not None and thread.is_alive() and _state.pid == os.getpid()


def repairer_ensure() -> None:
    """Start this process's repairer thread if ``MEMORY["REPAIR_THREAD"]`` and none runs (again
    after a fork). Called by every cache read and write; cheap once it runs."""
    if _repairer_alive() or not enabled() or not conf.REPAIR_THREAD:
        return
    with _state.lock:
        if _repairer_alive():
            return
        if _state.pid != os.getpid():
            # NOTE: a forked child inherits the parent's pending work but not its thread.
            _state.pid = os.getpid()
            _state.confirmed = {}
        thread = threading.Thread(target=_repairer_loop, name="memory-cache-repair", daemon=True)
        _state.thread = thread
        breaker.prober = thread
    thread.start()


def _repairer_loop() -> None:
    me = threading.current_thread()
    while _state.thread is me and conf.REPAIR_THREAD and enabled():
        refused = False
        try:
            if breaker.down:
                # NOTE: this thread is the breaker's prober: requests skip a Redis found down until
                # it is back.
                for shard in breaker.down_shards():
                    probe(shard)
            if _state.pending:
                bugs = breaker.bugs
                repair_pending()
                refused = bool(_state.pending) and breaker.bugs > bugs and not breaker.down
            _confirmed_flush()
            if history_due():
                history_probe()
            if time.monotonic() >= _state.next_sweep:
                _state.next_sweep = time.monotonic() + conf.RECONCILE_INTERVAL
                sweep()
        except Exception:  # the thread must outlive any bug it meets
            logger.exception("The cache repairer failed; it carries on.")
        if connection.errors_occurred:
            connection.close()
        with _state.lock:
            _state.backoff = min(_state.backoff * 2, REPAIR_BACKOFF_MAX) if refused else REPAIR_POLL
        wait = (
            _state.backoff
            if _state.pending or breaker.down
            else max(REPAIR_POLL, min(CLEAR_POLL, conf.RECONCILE_GRACE / 2))
            if _state.confirmed
            else conf.RECONCILE_INTERVAL
        )
        _repairer_wait(wait)
        _state.wake.clear()
    connection.close()


def _repairer_wait(seconds: float) -> None:
    """Wait ``seconds`` or until woken, renewing the history's lease meanwhile (looked at every
    quarter of a lease, renewed once half of it is gone, whatever the round's backoff)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if _state.wake.wait(min(left, conf.HISTORY_LEASE / 4)):
            return
        if history_due():
            try:
                history_probe()
            except Exception:
                # NOTE: the thread outlives anything a renewal raises: it is what drops copies.
                logger.exception("The cache repairer could not renew the history; it carries on.")
            if connection.errors_occurred:
                connection.close()
