"""Writes of the facts a turn states: the write of what an extractor found, shared by an
append (inline) and a deferred run, and ``turn_facts_extract``, the worker's deferred run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.utils import timezone

from memory import aio, cache
from memory.appends import fact_cap_warn
from memory.conf import conf
from memory.exceptions import MemoryUnavailable, database_guard
from memory.extraction.base import ExtractedFact, LazyFacts, extractor_get
from memory.extraction.base import logger as extraction_logger
from memory.extraction.merge import facts_apply
from memory.models import Fact, Owner, PendingExtraction, Turn, fact_live
from memory.payloads import fact_payload
from memory.services.common import fact_write, field_check, owner_lock, service_transaction
from memory.validators import validate_fact_key, validate_json_value, validate_owner_id


def _facts_savepoint_failed(message: str, turn: Turn, owner_id: str) -> None:
    """Log ``message`` for a turn's facts that failed in their savepoint: the turn is stored without
    them. Re-raises when the connection failed too (the turn cannot commit either)."""
    if transaction.get_rollback() or connection.closed_in_transaction:
        raise
    extraction_logger.exception(message, turn.seq, owner_id)


def _turn_facts_write(
    owner: Owner,
    turn: Turn,
    current: Mapping[str, Any],
    found: list[ExtractedFact],
) -> list[Fact]:
    """Merge ``found`` into the owner's ``current`` facts and write, with the turn as their
    source, each value that changed; return those facts. Runs under the owner lock."""
    changed: list[Fact] = []
    room: int | None = None
    for key, value in facts_apply(current, found).items():
        if key not in current:
            if room is None:
                room = (
                    conf.MAX_FACTS
                    - Fact.objects.filter(fact_live(timezone.now()), owner=owner).count()
                )
            if room <= 0:
                fact_cap_warn(key, turn.seq, owner.external_id)
                continue
        try:
            validate_fact_key(key)
            validate_json_value(value)
        except ValidationError as e:
            extraction_logger.warning(
                "Extracted fact %r of turn %s of %r dropped: %s",
                key,
                turn.seq,
                owner.external_id,
                " ".join(e.messages),
            )
            continue
        written = fact_write(
            owner,
            key,
            value,
            session_id=turn.session_id,
            source_turn_seq=turn.seq,
            at=turn.created_at,
            actor="extractor",
        )
        if written is not None:
            changed.append(written[0])
            if written[1] and room is not None:
                room -= 1
    return changed


def turn_facts_extract(*, owner_id: str, seq: int) -> list[Fact]:
    """Run the deferred fact extraction of the owner's turn ``seq``; return the facts it changed.

    Runs in a worker: the extractor with no transaction or lock, then a short write under the
    owner's lock, as inline. The owner's earlier pending turns go first; a fact changed after the
    turn is not overwritten. Idempotent: a turn done or gone writes nothing and returns ``[]``; a
    turn linked meanwhile is extracted for its new owner. A failing extractor is logged. Raises
    ``MemoryUnavailable`` when the database cannot be reached; the turn stays pending.
    """
    field_check("user_id", validate_owner_id, owner_id)
    with database_guard():
        target_pk = (
            PendingExtraction.objects.filter(turn__owner__external_id=owner_id, turn__seq=seq)
            .values_list("pk", flat=True)
            .first()
        )
    return [] if target_pk is None else pending_extraction_run(pending_pk=target_pk)


aturn_facts_extract = aio.twin(turn_facts_extract)


def pending_extraction_run(*, pending_pk: int) -> list[Fact]:
    """``turn_facts_extract`` of the turn of ``PendingExtraction`` ``pending_pk``. A record done
    already does nothing; one whose turn is gone is deleted."""
    changed: list[Fact] = []
    while True:
        with database_guard():
            # NOTE: re-read each round: a link may have moved the turn to another owner.
            target = (
                PendingExtraction.objects.filter(pk=pending_pk)
                .values_list("turn__owner_id", "turn__seq")
                .first()
            )
            if target is None:
                # Done, or its turn is gone: then the record goes.
                PendingExtraction.objects.filter(pk=pending_pk).delete()
                break
            # NOTE: each round deletes a record or finds it moved or gone, so the loop ends.
            pending = (
                PendingExtraction.objects.filter(turn__owner_id=target[0], turn__seq__lte=target[1])
                .select_related("turn", "turn__owner")
                .order_by("turn__seq")
                .first()
            )
        if pending is None:
            break
        changed += _pending_extract(pending)
    return changed


def _pending_extract(pending: PendingExtraction) -> list[Fact]:
    """Run the extractor on one pending turn, then write its facts under the owner lock."""
    turn = pending.turn
    owner_id = turn.owner.external_id
    found: list[ExtractedFact] = []
    try:
        extractor = extractor_get()
        if extractor is not None:
            with database_guard():
                facts = LazyFacts(
                    lambda: dict(
                        Fact.objects.filter(
                            fact_live(timezone.now()), owner=turn.owner
                        ).values_list("key", "value")
                    )
                )
                found = list(extractor.extract(turn.content, facts=facts))
    except MemoryUnavailable:
        raise
    except Exception:
        extraction_logger.exception(
            "Fact extraction failed for turn %s of %r; the turn is stored without facts.",
            turn.seq,
            owner_id,
        )
    with service_transaction():
        owner = owner_lock(owner_id, create=False)
        # NOTE: re-read under the lock: done, removed or moved meanwhile.
        held = PendingExtraction.objects.filter(pk=pending.pk).select_related("turn").first()
        if owner is None or held is None or held.turn.owner_id != owner.pk:
            return []
        turn = held.turn
        held.delete()
        if not found:
            return []
        rows = list(
            Fact.objects.filter(
                fact_live(timezone.now()), owner=owner, key__in={f.key for f in found}
            ).values_list("key", "value", "source_turn_seq", "updated_at")
        )
        # NOTE: a value set after this turn stays, as it would inline.
        newer = {
            key
            for key, _, source, at in rows
            if (source > turn.seq if source is not None else at > turn.created_at)
        }
        current = {key: value for key, value, _, _ in rows if key not in newer}
        try:
            with transaction.atomic():
                changed = _turn_facts_write(
                    owner, turn, current, [f for f in found if f.key not in newer]
                )
        except Exception:
            _facts_savepoint_failed(
                "Writing the facts of turn %s of %r failed; the turn is stored without facts.",
                turn,
                owner_id,
            )
            return []
        if changed:
            cache.owner_changed(owner, facts=[fact_payload(f) for f in changed])
        return changed
