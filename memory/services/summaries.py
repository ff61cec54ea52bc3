"""Writes of summaries: an owner's refresh, in bounded batches each its own transaction, run by
the deferred task of ``memory.services.deferred`` (or ``manage.py memory_summarize``)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection
from django.db.models import F, Value
from django.db.models.functions import Greatest
from django.utils import timezone

from memory import aio, cache, recall, tokens
from memory.conf import conf
from memory.exceptions import database_guard
from memory.models import Owner, PendingSummary, Summary, Turn
from memory.payloads import TURN_FIELDS, turn_payload_from_row
from memory.recall.summarizer import summarizer_get
from memory.services.common import field_check, service_transaction
from memory.validators import validate_owner_id

logger = logging.getLogger("memory.recall")

# The first key of the advisory lock a refresh holds per owner ("mems"); the second is the
# owner's pk.
LOCK_CLASS = 0x6D656D73


@contextmanager
def _refresh_lock(owner_pk: int) -> Iterator[bool]:
    """Whether this process holds the owner's refresh lock inside the block: a session advisory lock
    on PostgreSQL, released with the connection. Elsewhere, or behind a transaction pooler, always
    (the batch check still writes each batch once)."""
    if connection.vendor != "postgresql" or conf.POOLER == "transaction":
        # NOTE: behind a transaction pooler a session lock may outlive its session; two refreshes
        # may then both call the summarizer, and the batch check writes one.
        yield True
        return
    key = [LOCK_CLASS, owner_pk % 2147483647]
    with database_guard(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", key)
        (held,) = cursor.fetchone()
    try:
        yield bool(held)
    finally:
        if held:
            with database_guard(), connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", key)


def summary_refresh(*, owner_id: str) -> int:
    """Bring the owner's summary up to its newest turn; return how many batches were written.

    Hands ``MEMORY["SUMMARY_BATCH_TURNS"]`` turns at a time, with the summary so far, to
    ``MEMORY["SUMMARIZER"]``, outside any transaction; each result is written under the owner's lock
    only if the summary has not moved, so no turn is summarised twice or skipped. One refresh per
    owner at a time (a second returns 0). Ends, deleting ``PendingSummary``, once the tokens after
    the summary are below ``MEMORY["SUMMARY_AFTER_TOKENS"]``. Raises ``ValidationError`` for a bad
    owner id, ``MemoryUnavailable`` when the database cannot be reached, and what the summarizer
    raises; written batches stay, and a rerun continues after them.
    """
    field_check("user_id", validate_owner_id, owner_id)
    summarizer = summarizer_get()
    with database_guard():
        owner_pk = Owner.objects.filter(external_id=owner_id).values_list("pk", flat=True).first()
    if owner_pk is None:
        return 0
    if summarizer is None:
        with database_guard():
            PendingSummary.objects.filter(owner_id=owner_pk).delete()
        return 0
    with _refresh_lock(owner_pk) as held:
        if not held:
            return 0
        return _refresh_locked(owner_pk, summarizer)


def _refresh_locked(owner_pk: int, summarizer: recall.Summarizer) -> int:
    count = tokens.counter_remembering()
    written = 0
    target: int | None = None
    while True:
        with database_guard():
            last_seq = Owner.objects.filter(pk=owner_pk).values_list("last_seq", flat=True).first()
            if last_seq is None:
                return written
            target = last_seq if target is None else target
            previous, through = Summary.objects.filter(owner_id=owner_pk).values_list(
                "text", "through_seq"
            ).first() or (None, 0)
            rows = list(
                Turn.objects.filter(owner_id=owner_pk, seq__gt=through, seq__lte=target)
                .order_by("seq")
                .values_list(*TURN_FIELDS)[: conf.SUMMARY_BATCH_TURNS]
            )
        if not rows:
            if _refresh_done(owner_pk, target):
                return written
            # Appends while this ran took the owner past the threshold again.
            target = None
            continue
        turns = [turn_payload_from_row(row) for row in rows]
        text = summarizer(previous, turns)
        if not isinstance(text, str):
            raise TypeError(f"MEMORY['SUMMARIZER'] returned {type(text).__name__}, not str.")
        counted = sum(count(turn["content"]) for turn in turns)
        if _batch_write(owner_pk, through, turns[-1]["seq"], text, count(text), counted):
            written += 1


def _batch_write(
    owner_pk: int, through: int, through_seq: int, text: str, text_tokens: int, counted: int
) -> bool:
    """Write one batch's summary if the owner's summary is still at ``through``; whether it was."""
    with service_transaction():
        owner = Owner.objects.select_for_update().filter(pk=owner_pk).first()
        if owner is None:
            return False
        stored = Summary.objects.select_for_update().filter(owner=owner).first()
        if (stored.through_seq if stored is not None else 0) != through:
            # Another refresh got there first.
            return False
        summary = stored if stored is not None else Summary(owner=owner)
        summary.text, summary.through_seq, summary.tokens = text, through_seq, text_tokens
        summary.updated_at = timezone.now()
        summary.save()
        Owner.objects.filter(pk=owner.pk).update(
            summary_tokens=Greatest(F("summary_tokens") - counted, Value(0))
        )
        cache.owner_drop(owner)
    return True


def _refresh_done(owner_pk: int, target: int) -> bool:
    """Whether the refresh, which found no turn left up to ``target``, is done: the owner has
    no turn past ``target``, or its tokens after the summary are below the threshold. Then its
    record goes, under the owner's lock in the check's transaction."""
    with service_transaction():
        owner = Owner.objects.select_for_update().filter(pk=owner_pk).first()
        if owner is None:
            return True
        if owner.last_seq <= target:
            Owner.objects.filter(pk=owner.pk).update(summary_tokens=0)
        elif owner.summary_tokens >= conf.SUMMARY_AFTER_TOKENS:
            return False
        PendingSummary.objects.filter(owner=owner).delete()
        return True


asummary_refresh = aio.twin(summary_refresh)
