"""Writes of turns: append, with the extraction of its facts (inline, or a record and a task for a
deferred extractor), an operator's delete and prune."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from contextlib import nullcontext
from typing import Any

from django.core.exceptions import ValidationError
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import (
    QuerySet,
)
from django.utils import timezone

from memory import aio, cache
from memory.appends import (
    AppendAccess,
    AppendPlan,
    SummaryCount,
    TurnInput,
    retry_checked,
    summary_count,
)
from memory.exceptions import (
    database_guard,
)
from memory.extraction.base import LazyFacts, extractor_deferred, extractor_get
from memory.extraction.base import logger as extraction_logger
from memory.extraction.merge import facts_apply
from memory.models import (
    ROLES,
    Fact,
    Owner,
    PendingExtraction,
    Role,
    Turn,
    fact_live,
)
from memory.payloads import fact_payload, turn_payload
from memory.postgres.turn_append import turn_append_call
from memory.services.common import (
    field_check,
    owner_lock,
    service_transaction,
    session_touch,
    sessions_uncount,
)
from memory.services.embedding_triggers import embedding_due
from memory.services.summary_triggers import _summary_due, _summary_enqueue
from memory.services.turn_facts import _facts_savepoint_failed, _turn_facts_write
from memory.validators import (
    validate_content,
    validate_fact_key,
    validate_idempotency_key,
    validate_json_value,
    validate_metadata,
    validate_owner_id,
    validate_session_id,
)


def turn_append(
    *,
    owner_id: str,
    session_id: str,
    role: str,
    content: str,
    metadata: Mapping[str, Any] | None = None,
    idempotency_key: str | None = None,
) -> Turn:
    """Append a turn to the owner's history and return it, with the owner's next ``seq``.

    ``seq`` is 1, 2, 3... per owner in commit order, with no gap or repeat under concurrent writers.
    A repeated ``idempotency_key`` with the same input returns the turn first stored; with other
    input it raises ``IdempotencyKeyReused``. A user turn goes through ``MEMORY["FACT_EXTRACTOR"]``
    (docs/python-api.md) and counts toward the next summary refresh (docs/summaries.md). Raises
    ``ValidationError`` ({field: messages}) for bad input and ``MemoryUnavailable`` when the
    database cannot be reached; then nothing was stored.
    """
    db = connections[DEFAULT_DB_ALIAS]
    return _turn_append(
        owner_id,
        session_id,
        role,
        content,
        metadata,
        idempotency_key,
        fast=db.vendor == "postgresql",
        db=db,
    )


def turn_append_reached(access: AppendAccess, **turn: Any) -> Turn:
    """``turn_append(**turn)`` for a caller checked by ``access`` (``AppendAccess``): on
    PostgreSQL in the append's own statement; on any other path, or before anything else is
    read, by ``access.require()``. The caller settles ``access`` if this raises first."""
    db = connections[DEFAULT_DB_ALIAS]
    turn = {"metadata": None, "idempotency_key": None, **turn}
    return _turn_append(**turn, fast=db.vendor == "postgresql", db=db, access=access)


def _turn_append(
    owner_id: str,
    session_id: str,
    role: str,
    content: str,
    metadata: Mapping[str, Any] | None,
    idempotency_key: str | None,
    *,
    fast: bool,
    db: BaseDatabaseWrapper | None = None,
    access: AppendAccess | None = None,
) -> Turn:
    """``turn_append`` after its checks and extraction plan: with ``fast`` the one-statement path
    unless a planned fact moved meanwhile, else ``_turn_append_django``. ``db``: the default
    database's connection, when the caller has it; ``access``: as ``turn_append_reached``."""
    if db is None:
        db = connections[DEFAULT_DB_ALIAS]
    metadata = dict(metadata) if metadata is not None else {}
    field_check("user_id", validate_owner_id, owner_id)
    field_check("session_id", validate_session_id, session_id)
    if role not in ROLES:
        raise ValidationError({"role": [f'"{role}" is not a valid choice.']})
    field_check("content", validate_content, content)
    field_check("metadata", validate_metadata, metadata)
    if idempotency_key is not None:
        field_check("idempotency_key", validate_idempotency_key, idempotency_key)
    # NOTE: once, before any lock: the general path merges this plan, never reruns it.
    plan = _turn_facts_plan(owner_id, role, content, db, access)
    new = TurnInput(owner_id, session_id, role, content, metadata, idempotency_key)
    count = summary_count(content)
    if fast:
        with cache.service_write(), database_guard():
            done = turn_append_call(new, plan, count, dirty=cache.enabled(), db=db, access=access)
            if done is not None and done.owner is not None:
                cache.owner_changed(
                    done.owner,
                    turns=[turn_payload(done.turn)],
                    facts=done.facts,
                    stamp_taken=done.stamp_taken,
                    db=db,
                )
        if done is not None:
            if done.pending_pk is not None:
                _extraction_enqueue(done.pending_pk)
            if done.summary_pk is not None:
                _summary_enqueue(done.summary_pk)
            embedding_due(owner_id)
            return done.turn
    if access is not None:
        access.require()
    turn = _turn_append_django(new, plan, count)
    embedding_due(owner_id)
    return turn


def _turn_append_django(new: TurnInput, plan: AppendPlan, count: SummaryCount) -> Turn:
    """The append of checked input through the ORM, under the owner's row lock: the
    specification of ``memory.postgres.turn_append`` (tests/test_postgres.py), and the path
    off PostgreSQL or after a fact of ``plan`` moved."""
    with service_transaction():
        owner = owner_lock(new.owner_id, create=True)
        if new.idempotency_key is not None:
            # NOTE: under the owner's lock: a racing duplicate waits for the first to commit, then
            # finds it.
            existing = Turn.objects.filter(owner=owner, idempotency_key=new.idempotency_key)
            if (found := existing.first()) is not None:
                return retry_checked(found, new)
        with cache.owner_write(owner, turns=1) as write:
            fields = new._asdict()
            del fields["owner_id"]
            turn = Turn.objects.create(
                owner=owner, seq=owner.last_seq, created_at=timezone.now(), **fields
            )
            session_touch(owner, new.session_id, turn.created_at)
            facts = _turn_facts_merge(owner, turn, plan)
            _turn_summary_count(owner, count, turn.created_at)
            write.delta(turns=[turn_payload(turn)], facts=[fact_payload(f) for f in facts])
        return turn


aturn_append = aio.twin(turn_append)


_NOTHING = AppendPlan()


def _extraction_enqueue(pending_pk: int) -> None:
    """Enqueue the task of a ``PendingExtraction`` after the current transaction commits."""
    # NOTE: imported here: only a site with a deferred extractor needs django-tasks.
    from memory.services.deferred import extraction_enqueue

    transaction.on_commit(lambda: extraction_enqueue(pending_pk=pending_pk), robust=True)


def _turn_summary_count(owner: Owner, count: SummaryCount, at: Any) -> None:
    """Add the turn's tokens to the owner's (locked) ``summary_tokens``; once they reach
    ``count.after``, record the refresh due and enqueue it after commit (the ORM twin of
    ``memory_turn_append()``'s ``UPDATE``)."""
    if count.after is None:
        return
    owner.summary_tokens += count.tokens
    Owner.objects.filter(pk=owner.pk).update(summary_tokens=owner.summary_tokens)
    if owner.summary_tokens >= count.after:
        _summary_due(owner, at)


def _turn_facts_plan(
    owner_id: str,
    role: str,
    content: str,
    db: BaseDatabaseWrapper,
    access: AppendAccess | None = None,
) -> AppendPlan:
    """Run the inline extractor on a user turn, before the transaction and holding no lock, and
    merge its findings into the owner's current facts of those keys. A bad fact is logged and
    dropped; a failing extractor is logged, and the turn is stored without facts. ``access`` is
    required before the owner's facts are read."""

    refused: list[Exception] = []

    def facts_read(**keys: Any) -> dict[str, Any]:
        if access is not None:
            try:
                access.require()
            except Exception as e:
                refused.append(e)
                raise
        return dict(
            Fact.objects.filter(
                fact_live(timezone.now()), owner__external_id=owner_id, **keys
            ).values_list("key", "value")
        )

    if role != Role.USER:
        return _NOTHING
    try:
        extractor = extractor_get()
        if extractor is None:
            return _NOTHING
        if extractor_deferred(extractor):
            return AppendPlan(defer=True)
        held = LazyFacts(facts_read)
        # NOTE: inside a caller's transaction, a failing query must not abort it.
        with transaction.atomic() if db.in_atomic_block else nullcontext():
            found = list(extractor.extract(content, facts=held))
            if not found:
                return _NOTHING
            keys = {fact.key for fact in found}
            current = (
                {key: value for key, value in held.items() if key in keys}
                if held.loaded
                else facts_read(key__in=keys)
            )
    except Exception:
        if refused:
            raise refused[0] from None
        extraction_logger.exception(
            "Fact extraction failed for a turn of %r; the turn is stored without facts.",
            owner_id,
        )
        return _NOTHING
    changes = []
    for key, value in facts_apply(current, found).items():
        try:
            validate_fact_key(key)
            validate_json_value(value)
        except ValidationError as e:
            extraction_logger.warning(
                "Extracted fact %r of a turn of %r dropped: %s",
                key,
                owner_id,
                " ".join(e.messages),
            )
            continue
        changes.append({"key": key, "value": value, "had": key in current, "was": current.get(key)})
    return AppendPlan(found=tuple(found), facts=changes or None)


def _turn_facts_merge(owner: Owner, turn: Turn, plan: AppendPlan) -> list[Fact]:
    """On the general path, under the owner's lock: write what ``_turn_facts_plan`` planned for this
    turn; return the facts that changed.

    Each fact is written in a savepoint: a failing one is logged to ``memory.extraction`` and rolled
    back alone, so the turn still commits; a bad fact, or a new key past ``MEMORY["MAX_FACTS"]``, is
    skipped. A deferred extractor gets a ``PendingExtraction`` and, after commit, a task.
    """
    if plan.defer:
        # NOTE: outside a savepoint: the turn and its record commit together, or neither does.
        _turn_extraction_defer(turn)
        return []
    if not plan.found:
        return []
    try:
        with transaction.atomic():
            current = dict(
                Fact.objects.filter(
                    fact_live(timezone.now()), owner=owner, key__in={f.key for f in plan.found}
                ).values_list("key", "value")
            )
            return _turn_facts_write(owner, turn, current, list(plan.found))
    except Exception:
        _facts_savepoint_failed(
            "Writing the facts of turn %s of %r failed; the turn is stored without facts.",
            turn,
            owner.external_id,
        )
        return []


def _turn_extraction_defer(turn: Turn) -> None:
    """Record, in the turn's transaction, that its extraction is due; enqueue it after commit."""
    pending = PendingExtraction.objects.create(
        turn=turn, created_at=turn.created_at, enqueued_at=turn.created_at
    )
    _extraction_enqueue(pending.pk)


def turn_delete(*, owner_id: str, seq: int) -> bool:
    """Delete one turn (an operator's correction); return whether it existed.

    The other turns keep their ``seq``; the session's count drops by one (an empty session goes).
    The cached copy is dropped after commit. Raises ``MemoryUnavailable`` when the database cannot
    be reached.
    """
    field_check("user_id", validate_owner_id, owner_id)
    with service_transaction():
        owner = owner_lock(owner_id, create=False)
        turn = Turn.objects.filter(owner=owner, seq=seq).first() if owner else None
        if owner is None or turn is None:
            return False
        turn.delete()
        sessions_uncount(owner, {turn.session_id: 1})
        cache.owner_drop(owner)
        return True


aturn_delete = aio.twin(turn_delete)


def _prunable_turns(
    owner: Owner, *, before: dt.datetime | None, below_seq: int | None
) -> QuerySet[Turn]:
    """The owner's turns that a prune removes: created before ``before`` and below ``below_seq``."""
    turns = Turn.objects.filter(owner=owner)
    if before is not None:
        turns = turns.filter(created_at__lt=before)
    if below_seq is not None:
        turns = turns.filter(seq__lt=below_seq)
    return turns


def _keep_last_floor(owner: Owner, keep_last: int | None) -> int | None:
    """The lowest ``seq`` among the owner's last ``keep_last`` turns (``None``: no bound)."""
    if keep_last is None:
        return None
    if keep_last == 0:
        # Keep nothing; every seq is below this one.
        return owner.last_seq + 1
    newest = Turn.objects.filter(owner=owner).order_by("-seq").values_list("seq", flat=True)
    floor = list(newest[keep_last - 1 : keep_last])
    # An owner with at most ``keep_last`` turns keeps them all (0 is below every seq).
    return floor[0] if floor else 0


def turns_prune(
    *,
    owner_id: str,
    before: dt.datetime | None = None,
    keep_last: int | None = None,
    batch_size: int = 1000,
    dry_run: bool = False,
) -> int:
    """Delete the owner's turns created before ``before`` and not among its last ``keep_last``.

    Each criterion given must hold; at least one is required. Returns how many turns were deleted
    (with ``dry_run``, would be; nothing changes). At most ``batch_size`` turns per transaction,
    oldest first, under the owner's row lock; each batch drops the cached copy after commit. The
    other turns keep their ``seq``. Raises ``ValidationError`` for bad input and
    ``MemoryUnavailable`` when the database cannot be reached; committed batches stay deleted.
    """
    field_check("user_id", validate_owner_id, owner_id)
    if before is None and keep_last is None:
        raise ValidationError({"before": ["Give an age, a number of turns to keep, or both."]})
    if keep_last is not None and (isinstance(keep_last, bool) or keep_last < 0):
        raise ValidationError({"keep_last": ["Ensure this value is greater than or equal to 0."]})
    if isinstance(batch_size, bool) or batch_size < 1:
        raise ValidationError({"batch_size": ["Ensure this value is greater than or equal to 1."]})
    if dry_run:
        with database_guard():
            owner = Owner.objects.filter(external_id=owner_id).first()
            if owner is None:
                return 0
            below = _keep_last_floor(owner, keep_last)
            return int(_prunable_turns(owner, before=before, below_seq=below).count())
    deleted = 0
    owner_pk: int | None = None
    below_seq: int | None = None
    while True:
        with service_transaction():
            owner = owner_lock(owner_id, create=False)
            # NOTE: an owner forgotten, and maybe re-created, between two batches is another
            # owner whose seqs start again at 1: the floor found for the first means nothing.
            if owner is None or owner_pk not in (None, owner.pk):
                return deleted
            if owner_pk is None:
                owner_pk = owner.pk
                # NOTE: fixed at the first batch: turns appended during the prune only add to what
                # is kept.
                below_seq = _keep_last_floor(owner, keep_last)
            rows = list(
                _prunable_turns(owner, before=before, below_seq=below_seq)
                .order_by("seq")
                .values_list("pk", "session_id")[:batch_size]
            )
            if not rows:
                return deleted
            Turn.objects.filter(pk__in=[pk for pk, _ in rows]).delete()
            per_session: dict[str, int] = {}
            for _, session_id in rows:
                per_session[session_id] = per_session.get(session_id, 0) + 1
            sessions_uncount(owner, per_session)
            cache.owner_drop(owner)
        deleted += len(rows)
        if len(rows) < batch_size:
            return deleted


aturns_prune = aio.twin(turns_prune)
