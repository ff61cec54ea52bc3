"""Deferred work: the django-tasks tasks for a deferred extractor, a summary refresh, an owner's
embedding run and the expiry sweep; their enqueueing after commit, and the re-enqueueing of records
whose task never ran.

Needs django-tasks (the extra ``deferred``) and a task backend in ``TASKS``. Imported only when a
task is due, never by ``memory.services``.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.utils import timezone
from django_tasks import task

from memory.exceptions import database_guard
from memory.extraction.base import logger
from memory.models import PendingExtraction, PendingSummary
from memory.services.turn_facts import pending_extraction_run

# Records re-enqueued per statement by ``pending_enqueue``.
BATCH = 500


@task()
def extraction_run(pending_pk: int) -> int:
    """Extract the facts of the turn of ``PendingExtraction`` ``pending_pk``; return how many
    changed. A record done or gone does nothing. Raises ``MemoryUnavailable`` when the database
    cannot be reached; the record stays for ``memory_extract --pending``."""
    return len(pending_extraction_run(pending_pk=pending_pk))


def extraction_enqueue(*, pending_pk: int) -> bool:
    """Hand the task for one pending record to the task backend; return whether it took it.

    Called after the turn's commit. Never raises: a backend that fails (a broker down) is
    logged, and the record waits for ``memory_extract --pending``.
    """
    return _enqueue(extraction_run, pending_pk, "extraction", "memory_extract")


def _enqueue(run: Any, pending_pk: int, what: str, command: str) -> bool:
    """Enqueue ``run`` for a pending record; ``False`` (logged) when the backend fails."""
    try:
        run.enqueue(pending_pk)
    except Exception:
        logger.exception(
            "The %s of pending record %s could not be enqueued; "
            "`manage.py %s --pending` will enqueue it again.",
            what,
            pending_pk,
            command,
        )
        return False
    return True


def pending_enqueue(*, grace: dt.timedelta) -> int:
    """Enqueue again every pending extraction last enqueued more than ``grace`` ago; return how many
    the task backend took.

    Each record is claimed before its task is enqueued, so concurrent runs enqueue it once. Raises
    ``MemoryUnavailable`` when the database cannot be reached.
    """
    return _pending_enqueue(PendingExtraction, grace, extraction_enqueue)


def _pending_enqueue(
    model: type[PendingExtraction] | type[PendingSummary],
    grace: dt.timedelta,
    enqueue: Callable[..., bool],
) -> int:
    """``pending_enqueue``'s loop over ``model``'s records: claim a batch (skipping locked rows),
    hand each to ``enqueue``; return how many the backend took."""
    enqueued = 0
    last_pk = 0
    while True:
        now = timezone.now()
        with database_guard(), transaction.atomic():
            pks = list(
                model.objects.select_for_update(skip_locked=True)
                .filter(pk__gt=last_pk, enqueued_at__lt=now - grace)
                .order_by("pk")
                .values_list("pk", flat=True)[:BATCH]
            )
            model.objects.filter(pk__in=pks).update(enqueued_at=now)
        for pk in pks:
            enqueued += enqueue(pending_pk=pk)
        if len(pks) < BATCH:
            return enqueued
        last_pk = pks[-1]


@task()
def summary_run(pending_pk: int) -> int:
    """Refresh the summary of the owner of ``PendingSummary`` ``pending_pk``
    (``ops.summary_refresh``); return how many batches were written. Runs in the worker;
    a record already done or gone does nothing.

    Raises ``MemoryUnavailable`` when the database cannot be reached, and what the summarizer
    raises; the record stays and ``memory_summarize --pending`` enqueues it again.
    """
    from memory.services.summaries import summary_refresh

    with database_guard():
        owner_id = (
            PendingSummary.objects.filter(pk=pending_pk)
            .values_list("owner__external_id", flat=True)
            .first()
        )
    if owner_id is None:
        return 0
    return summary_refresh(owner_id=owner_id)


def summary_enqueue(*, pending_pk: int) -> bool:
    """Hand the refresh task of one ``PendingSummary`` to the task backend; return whether it
    took it. Called after the commit that created the record. Never raises: a backend that
    fails is logged, and the record waits for ``memory_summarize --pending``.
    """
    return _enqueue(summary_run, pending_pk, "summary refresh", "memory_summarize")


def summaries_pending_enqueue(*, grace: dt.timedelta) -> int:
    """``pending_enqueue`` for summary refreshes. Raises ``MemoryUnavailable`` when the database
    cannot be reached."""
    return _pending_enqueue(PendingSummary, grace, summary_enqueue)


@task()
def embedding_run(owner_id: str) -> int:
    """Embed the owner's facts and turns not embedded yet (``ops.turns_embed``); return
    how many turns.
    Runs in the worker. Raises ``MemoryUnavailable`` when the database cannot be reached and
    what the embedder raises; the turns stay behind for the owner's next run or
    ``memory_embed``.
    """
    from memory.services.embeddings import turns_embed

    return turns_embed(owner_id=owner_id)


def embedding_enqueue(*, owner_id: str, delay: float = 0.0) -> bool:
    """Hand the owner's embedding run to the task backend, after ``delay`` seconds where it can
    defer; return whether it took it. Never raises: a failing backend is logged."""
    try:
        run = embedding_run
        if delay > 0 and run.get_backend().supports_defer:
            run = run.using(run_after=timezone.now() + dt.timedelta(seconds=delay))
        run.enqueue(owner_id)
    except Exception:
        logging.getLogger("memory.recall").exception(
            "The embedding run of owner %r could not be enqueued; `manage.py memory_embed` "
            "will embed its turns.",
            owner_id,
        )
        return False
    return True


@task()
def facts_expire_run() -> int:
    """Delete the facts expired by now (``ops.facts_expire``); return how many went. Runs
    in the worker: enqueue it on a schedule (or run ``manage.py memory_expire`` from cron).

    Raises ``MemoryUnavailable`` when the database cannot be reached; the facts not deleted
    wait for the next run, absent from every read meanwhile.
    """
    from memory.services.expiry import facts_expire

    return facts_expire()
