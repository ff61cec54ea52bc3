"""The database side of the protocol: stamps drawn in each write's transaction, the dirty marks that
outlive a lost cache update, and the owner's current stamp. Times are the database's clock."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable

from django.db import DatabaseError, connection
from django.db.models import F
from django.db.models.functions import Now
from django.utils import timezone

from memory.cache.client import enabled
from memory.models import CacheInvalidation, Owner

logger = logging.getLogger("memory.cache")


def stamp_take(owner: Owner, *, turns: int = 0) -> int:
    """Give this change of ``owner`` (locked, in its write's transaction) a new stamp, reserve
    ``turns`` seqs, and mark it dirty while a cache is configured; return the previous stamp.

    On PostgreSQL the stamp comes from ``memory_stamp_seq``, so it grows across a forget and a
    re-creation; elsewhere it counts per owner. ``memory_turn_append()`` does the same in SQL.
    """
    prev = owner.stamp
    dirty = enabled()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {Owner._meta.db_table} SET prev_stamp = stamp,"
                " stamp = nextval('memory_stamp_seq'),"
                " last_seq = last_seq + %s, cache_dirty = cache_dirty OR %s,"
                " updated_at = statement_timestamp()"
                " WHERE id = %s RETURNING stamp, last_seq, updated_at",
                [turns, dirty, owner.pk],
            )
            owner.stamp, owner.last_seq, owner.updated_at = cursor.fetchone()
    else:
        now = timezone.now()
        owner.stamp += 1
        owner.last_seq += turns
        owner.cache_dirty = owner.cache_dirty or dirty
        owner.updated_at = now
        Owner.objects.filter(pk=owner.pk).update(
            prev_stamp=prev,
            stamp=owner.stamp,
            last_seq=owner.last_seq,
            cache_dirty=owner.cache_dirty,
            updated_at=now,
        )
    return prev


def stamp_take_by_pk(owner_pk: int) -> tuple[str, int] | None:
    """``stamp_take`` for an ORM write that holds no owner row: returns the owner's id and new stamp
    (``None``: no such owner)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {Owner._meta.db_table} SET prev_stamp = stamp,"
                " stamp = nextval('memory_stamp_seq'),"
                " cache_dirty = true, updated_at = statement_timestamp()"
                " WHERE id = %s RETURNING external_id, stamp",
                [owner_pk],
            )
            row = cursor.fetchone()
        return (row[0], row[1]) if row else None
    updated = Owner.objects.filter(pk=owner_pk).update(
        prev_stamp=F("stamp"), stamp=F("stamp") + 1, cache_dirty=True, updated_at=timezone.now()
    )
    if not updated:
        return None
    external_id, stamp = Owner.objects.values_list("external_id", "stamp").get(pk=owner_pk)
    return external_id, stamp


def stamp_get(owner_id: str) -> int:
    """The owner's current stamp in the database; 0 for an owner it does not hold."""
    # NOTE: raw SQL: building the queryset cost more than the query.
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT stamp FROM {Owner._meta.db_table} WHERE external_id = %s", [owner_id]
        )
        row = cursor.fetchone()
    return row[0] if row else 0


def dirty_clear(confirmed: Iterable[tuple[int, int]], *, quiet: bool = False) -> None:
    """Clear the dirty mark of each ``(owner pk, stamp)`` Redis confirmed, unless a later write
    marked it again. One statement; never raises (an error is logged unless ``quiet``; the marks
    stay)."""
    pairs = sorted(set(confirmed))
    if not pairs:
        return
    try:
        if connection.vendor == "postgresql" and not connection.in_atomic_block:
            # NOTE: no WAL flush wait: a lost clear leaves the owner marked, the safe direction.
            values = ", ".join(["(%s::bigint, %s::bigint)"] * len(pairs))
            with connection.cursor() as cursor:
                cursor.execute(
                    "WITH async AS (SELECT set_config('synchronous_commit', 'off', true)),"
                    f" done (id, stamp) AS (VALUES {values})"
                    f" UPDATE {Owner._meta.db_table} AS o SET cache_dirty = false"
                    " FROM async, done WHERE o.id = done.id AND o.stamp = done.stamp",
                    [n for pair in pairs for n in pair],
                )
        else:
            for owner_pk, stamp in pairs:
                Owner.objects.filter(pk=owner_pk, stamp=stamp).update(cache_dirty=False)
    except DatabaseError as e:
        if not quiet:
            logger.warning("Could not clear the cache marks of %d owners: %s", len(pairs), e)


def outbox_done(pk: int) -> None:
    """Delete a forget's pending-drop record once Redis confirmed the drop; never raises."""
    try:
        CacheInvalidation.objects.filter(pk=pk).delete()
    except DatabaseError as e:
        logger.warning("Could not delete pending cache drop %s: %s", pk, e)


def overdue(
    *, grace: float, limit: int
) -> tuple[list[tuple[int, str, int]], list[tuple[int, str, int]]]:
    """Forgotten owners with a pending drop, and dirty owners, older than ``grace`` seconds of the
    database's clock: ``(pk, owner id, stamp)``, oldest first, at most ``limit`` of each. Raises
    ``DatabaseError``."""
    cutoff = Now() - dt.timedelta(seconds=grace)
    forgotten = list(
        CacheInvalidation.objects.filter(created_at__lte=cutoff)
        .order_by("created_at")
        .values_list("pk", "external_id", "stamp")[:limit]
    )
    dirty = list(
        Owner.objects.filter(cache_dirty=True, updated_at__lte=cutoff)
        .order_by("updated_at")
        .values_list("pk", "external_id", "stamp")[:limit]
    )
    return forgotten, dirty
