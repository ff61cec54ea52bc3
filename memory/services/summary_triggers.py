"""What makes a summary refresh due: an append's count passing the threshold (the ORM path), a
link's moved turns; the record and the task's enqueue after commit."""

from __future__ import annotations

import datetime as dt
from importlib.util import find_spec

from django.db import transaction
from django.utils import timezone

from memory import tokens
from memory.conf import conf
from memory.models import Owner, PendingSummary, Summary, Turn


def _summary_enqueue(pending_pk: int) -> None:
    """Enqueue the refresh of a ``PendingSummary`` after the current transaction commits."""
    if find_spec("django_tasks") is None:
        # NOTE: memory.W012 says so at startup; the record waits for memory_summarize.
        return
    # NOTE: imported here: django-tasks only where a refresh is due.
    from memory.services.deferred import summary_enqueue

    transaction.on_commit(lambda: summary_enqueue(pending_pk=pending_pk), robust=True)


def _summary_due(owner: Owner, at: dt.datetime) -> None:
    """Record, in the current transaction under the owner's lock, that its refresh is due, and
    enqueue it after commit; an owner with a record already gets nothing new."""
    pending, created = PendingSummary.objects.get_or_create(
        owner=owner, defaults={"created_at": at, "enqueued_at": at}
    )
    if created:
        _summary_enqueue(pending.pk)


def _summary_link(source: Owner, target: Owner, moved: list[int], *, last: bool) -> None:
    """In a link's batch (both owners locked): add the moved turns' tokens to the target's count; in
    the last batch, make its refresh due past the threshold or when the source had a summary."""
    if conf.SUMMARIZER is None:
        return
    if moved:
        count = tokens.counter_remembering()
        contents = Turn.objects.filter(owner=target, seq__in=moved).values_list(
            "content", flat=True
        )
        target.summary_tokens += sum(count(content) for content in contents)
        Owner.objects.filter(pk=target.pk).update(summary_tokens=target.summary_tokens)
    if last and (
        target.summary_tokens >= conf.SUMMARY_AFTER_TOKENS
        or Summary.objects.filter(owner=source).exists()
    ):
        _summary_due(target, timezone.now())
