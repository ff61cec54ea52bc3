"""Catching up on cache updates that did not land: the outbox replay behind "nothing stale".

Every write marks its owner ``cache_dirty`` in its own transaction and clears the mark once
Redis confirmed the update. An owner still dirty after ``RECONCILE_GRACE`` seconds (Redis was
unreachable, paused, or the process died between commit and cache update) gets its cached copy
dropped here before any process trusts the cache again.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time

from django.db import DatabaseError, connection
from django.utils import timezone

from memory import metrics, store
from memory.conf import conf
from memory.models import CacheInvalidation, Owner

logger = logging.getLogger("memory.store")

BATCH = 500


class _Schedule:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.next_at = 0.0
        # owner pk -> (owner id, stamp, pending CacheInvalidation pk of a forget or None)
        self.local: dict[int, tuple[str, int, int | None]] = {}


_schedule = _Schedule()


def reset() -> None:
    """Forget this process's pending work and schedule (tests, a forked worker)."""
    _schedule.reset()


def owner_dirty_clear(*, owner_pk: int, stamp: int) -> None:
    """Clear the owner's dirty mark if no later write happened; never raises."""
    try:
        if connection.vendor == "postgresql" and not connection.in_atomic_block:
            # NOTE: committed without waiting for the WAL flush, which took longer than the
            # update itself (docs/performance.md). A crash may lose this update: the owner then
            # stays marked and its copy is dropped by a later reconcile, the safe direction.
            # The setting is local to this statement's own transaction, hence not in a caller's.
            with connection.cursor() as cursor:
                cursor.execute(
                    "WITH async AS (SELECT set_config('synchronous_commit', 'off', true))"
                    f" UPDATE {Owner._meta.db_table} SET cache_dirty = false FROM async"
                    " WHERE id = %s AND stamp = %s",
                    [owner_pk, stamp],
                )
        else:
            Owner.objects.filter(pk=owner_pk, stamp=stamp).update(cache_dirty=False)
    except DatabaseError as e:
        logger.warning("Could not clear the cache mark of owner %s: %s", owner_pk, e)


def invalidation_done(*, pk: int) -> None:
    """Delete a forget's pending-drop record once Redis confirmed the drop; never raises."""
    try:
        CacheInvalidation.objects.filter(pk=pk).delete()
    except DatabaseError as e:
        logger.warning("Could not delete pending cache drop %s: %s", pk, e)


def owner_remember(
    *, owner_pk: int, owner_id: str, stamp: int, pending_pk: int | None = None
) -> None:
    """Note that this process could not update the owner's cached copy (retried first)."""
    with _schedule.lock:
        _schedule.local[owner_pk] = (owner_id, stamp, pending_pk)


def reconcile_due() -> bool:
    """Whether this process should replay pending cache updates before trusting the cache."""
    if not store.enabled():
        return False
    if _schedule.local or store.suspect():
        return True
    return time.monotonic() >= _schedule.next_at


def cache_reconcile(*, grace: float | None = None) -> int:
    """Drop the cached copy of every owner whose cache update did not land; return how many.

    First this process's own failed updates, then owners left ``cache_dirty`` (and forgotten
    owners left in ``CacheInvalidation``) for more than ``grace`` seconds, by default
    ``MEMORY["RECONCILE_GRACE"]``: a write's own update normally lands milliseconds after its
    commit. Stops quietly while Redis is unreachable (reads then come from the database
    anyway) and when the database fails. Never raises.
    """
    if not store.enabled():
        return 0
    with _schedule.lock:
        _schedule.next_at = time.monotonic() + conf.RECONCILE_INTERVAL
        local = dict(_schedule.local)
    dropped = 0
    for owner_pk, entry in local.items():
        owner_id, stamp, pending_pk = entry
        if not store.memory_drop(owner_id=owner_id, stamp=stamp):
            return dropped
        with _schedule.lock:
            if _schedule.local.get(owner_pk) == entry:
                del _schedule.local[owner_pk]
        if pending_pk is not None:
            invalidation_done(pk=pending_pk)
        else:
            owner_dirty_clear(owner_pk=owner_pk, stamp=stamp)
        dropped += 1
        metrics.cache_event("reconcile_drops")
    if grace is None:
        grace = conf.RECONCILE_GRACE
    cutoff = timezone.now() - dt.timedelta(seconds=grace)
    try:
        forgotten = list(
            CacheInvalidation.objects.filter(created_at__lte=cutoff)
            .order_by("created_at")
            .values_list("pk", "external_id", "stamp")[:BATCH]
        )
        dirty = list(
            Owner.objects.filter(cache_dirty=True, updated_at__lte=cutoff)
            .order_by("updated_at")
            .values_list("pk", "external_id", "stamp")[:BATCH]
        )
    except DatabaseError as e:
        logger.warning("Could not read owners with pending cache updates: %s", e)
        return dropped
    for pk, owner_id, stamp in forgotten:
        if not store.memory_drop(owner_id=owner_id, stamp=stamp):
            return dropped
        invalidation_done(pk=pk)
        dropped += 1
        metrics.cache_event("reconcile_drops")
    for owner_pk, owner_id, stamp in dirty:
        if not store.memory_drop(owner_id=owner_id, stamp=stamp):
            return dropped
        owner_dirty_clear(owner_pk=owner_pk, stamp=stamp)
        dropped += 1
        metrics.cache_event("reconcile_drops")
    if dropped:
        logger.info(
            "Dropped %d cached cop%s whose update had not landed.",
            dropped,
            "y" if dropped == 1 else "ies",
        )
    return dropped
