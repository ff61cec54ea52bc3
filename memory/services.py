"""Writes to an owner's memory: the app's public Python API for changing it.

Every service runs in one transaction under the owner's row lock, commits to the database
first, and only then (``transaction.on_commit``) updates the Redis copy. A write that raises
stored nothing; a Redis failure never fails a write (``memory.cache`` states the protocol).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any, Literal, NamedTuple, overload

from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.db.models import (
    BigIntegerField,
    Case,
    F,
    JSONField,
    Max,
    QuerySet,
    Value,
    When,
)
from django.db.models.functions import Greatest, Least
from django.utils import timezone

from memory import aio, cache, codec, extraction
from memory.conf import conf
from memory.exceptions import (
    FactNotFound,
    FactVersionConflict,
    IdempotencyKeyReused,
    MemoryUnavailable,
    database_guard,
)
from memory.models import (
    CacheInvalidation,
    Fact,
    FactVersion,
    Owner,
    PendingExtraction,
    Role,
    Session,
    Turn,
)
from memory.payloads import fact_payload, turn_payload
from memory.signals import memory_forgotten
from memory.validators import (
    validate_content,
    validate_fact_key,
    validate_idempotency_key,
    validate_json_value,
    validate_metadata,
    validate_owner_id,
    validate_session_id,
)


@contextmanager
def _service() -> Iterator[None]:
    """One service's transaction; a lost database becomes ``MemoryUnavailable``."""
    with cache.service_write(), database_guard(), transaction.atomic():
        yield


def _check(field: str, validator: Any, value: Any) -> None:
    try:
        validator(value)
    except ValidationError as e:
        raise ValidationError({field: e.messages}) from e


@overload
def _owner_lock(owner_id: str, *, create: Literal[True]) -> Owner: ...
@overload
def _owner_lock(owner_id: str, *, create: bool) -> Owner | None: ...
def _owner_lock(owner_id: str, *, create: bool) -> Owner | None:
    """The owner's row, locked until commit; created first when ``create``."""
    if create:
        owner, _ = Owner.objects.select_for_update().get_or_create(external_id=owner_id)
        return owner
    return Owner.objects.select_for_update().filter(external_id=owner_id).first()


def _session_touch(owner: Owner, session_id: str, at: Any, turns: int = 1) -> None:
    updated = Session.objects.filter(owner=owner, session_id=session_id).update(
        last_seen=at, turn_count=F("turn_count") + turns
    )
    if not updated:
        Session.objects.create(
            owner=owner, session_id=session_id, first_seen=at, last_seen=at, turn_count=turns
        )


def _sessions_uncount(owner: Owner, removed: Mapping[str, int]) -> None:
    """Lower session counts after turns were deleted; a session left with none goes."""
    for session_id, count in removed.items():
        Session.objects.filter(owner=owner, session_id=session_id).update(
            turn_count=F("turn_count") - count
        )
    Session.objects.filter(owner=owner, turn_count__lte=0).delete()


def turn_append(
    *,
    owner_id: str,
    session_id: str,
    role: str,
    content: str,
    metadata: Mapping[str, Any] | None = None,
    idempotency_key: str | None = None,
) -> Turn:
    """Append a turn to the owner's history and return it, with the next ``seq`` of the owner.

    ``seq`` is 1, 2, 3... per owner in commit order, with no gap or repeat under any number of
    concurrent writers. A repeated ``idempotency_key`` with the same ``session_id``, ``role``,
    ``content`` and ``metadata`` stores nothing and returns the turn first stored under it; with
    any of them different it raises ``IdempotencyKeyReused`` and stores nothing. Raises
    ``ValidationError`` ({field: messages}) for bad input and ``MemoryUnavailable`` when the
    database cannot be reached; then nothing was stored.

    A user turn also goes through ``MEMORY["FACT_EXTRACTOR"]`` in the same transaction: the
    facts it states are written with the turn's ``session_id`` and ``seq`` (``source_turn_seq``).
    An extractor that fails is logged and the turn is stored without facts; a retried
    ``idempotency_key`` extracts nothing again.
    """
    metadata = dict(metadata) if metadata is not None else {}
    _check("user_id", validate_owner_id, owner_id)
    _check("session_id", validate_session_id, session_id)
    if role not in Role.values:
        raise ValidationError({"role": [f'"{role}" is not a valid choice.']})
    _check("content", validate_content, content)
    _check("metadata", validate_metadata, metadata)
    if idempotency_key is not None:
        _check("idempotency_key", validate_idempotency_key, idempotency_key)
    if connection.vendor == "postgresql":
        found = _turn_facts_find(owner_id, role, content)
        if found is None:
            with cache.service_write(), database_guard():
                turn = _turn_append_statement(
                    owner_id, session_id, role, content, metadata, idempotency_key
                )
            if turn is not None:
                return turn
    with _service():
        owner = _owner_lock(owner_id, create=True)
        if idempotency_key is not None:
            # NOTE: under the owner's lock, so a duplicate in flight waits for the first to
            # commit and then finds its turn here: one turn is stored, however many race.
            existing = Turn.objects.filter(owner=owner, idempotency_key=idempotency_key).first()
            if existing is not None:
                if (existing.session_id, existing.role, existing.content, existing.metadata) != (
                    session_id,
                    role,
                    content,
                    metadata,
                ):
                    raise IdempotencyKeyReused(idempotency_key, existing)
                return existing
        prev = cache.stamp_take(owner, turns=1)
        turn = Turn.objects.create(
            owner=owner,
            seq=owner.last_seq,
            session_id=session_id,
            role=role,
            content=content,
            metadata=metadata,
            idempotency_key=idempotency_key,
            created_at=timezone.now(),
        )
        _session_touch(owner, session_id, turn.created_at)
        facts = _turn_facts_extract(owner, turn) if role == Role.USER else []
        cache.write_commit(
            owner, prev, turns=[turn_payload(turn)], facts=[fact_payload(f) for f in facts]
        )
        return turn


aturn_append = aio.twin(turn_append)


def _turn_facts_find(owner_id: str, role: str, content: str) -> list[Any] | None:
    """What the inline extractor finds in a user turn, before any write: ``None`` when there
    is nothing to write (not a user turn, no extractor, nothing found), else a list (empty for
    a deferred extractor, whose record the turn's transaction must write). An extractor that
    fails is left to ``_turn_facts_extract``, which logs it inside the turn's transaction.

    NOTE: the facts the extractor is shown are read without the owner's lock; only what it
    finds is applied under it, to the facts read then (``facts_apply``).
    """
    if role != Role.USER:
        return None
    try:
        extractor = extraction.extractor_get()
        if extractor is None:
            return None
        if extraction.extractor_deferred(extractor):
            return []
        facts = extraction.LazyFacts(
            lambda: dict(
                Fact.objects.filter(owner__external_id=owner_id).values_list("key", "value")
            )
        )
        if connection.in_atomic_block:
            # NOTE: inside a caller's transaction, a query of the extractor that fails must not
            # abort it; in autocommit (the usual request) it aborts nothing and costs nothing.
            with transaction.atomic():
                found = list(extractor.extract(content, facts=facts))
        else:
            found = list(extractor.extract(content, facts=facts))
    except Exception:
        return []
    return found or None


def _turn_append_statement(
    owner_id: str,
    session_id: str,
    role: str,
    content: str,
    metadata: dict[str, Any],
    idempotency_key: str | None,
) -> Turn | None:
    """``turn_append`` with nothing else to write, as one statement: find the turn first
    stored under ``idempotency_key``, or else lock and bump the owner (a new stamp and seq,
    ``cache.stamp_take_cte``), touch the session and insert the turn. In autocommit that is its
    own transaction and one round trip (two when a retry of the same key is in flight).
    Returns the turn, or ``None`` when the owner does not exist yet (the caller takes the
    general path, which creates it). Raises ``IdempotencyKeyReused`` as ``turn_append`` does.

    NOTE: the path of nearly every append, so it is written out: the ORM's lock, update,
    insert, session update and extraction savepoint cost nine round trips (docs/performance.md).
    """
    q = connection.ops.quote_name
    owners, turns, sessions = (q(m._meta.db_table) for m in (Owner, Turn, Session))
    at = timezone.now()
    sql = (
        f"WITH existing AS (SELECT t.id, t.owner_id, t.seq, t.session_id, t.role, t.content,"
        f" t.metadata::text, t.created_at FROM {turns} t JOIN {owners} o ON t.owner_id = o.id"
        " WHERE o.external_id = %(owner_id)s AND %(key)s::varchar IS NOT NULL"
        " AND t.idempotency_key = %(key)s::varchar),"
        f" {cache.stamp_take_cte(unless='EXISTS (SELECT 1 FROM existing)')},"
        f" touched AS (INSERT INTO {sessions}"
        " (owner_id, session_id, first_seen, last_seen, turn_count)"
        " SELECT id, %(session_id)s, %(at)s, %(at)s, 1 FROM bumped"
        " ON CONFLICT (owner_id, session_id) DO UPDATE SET last_seen = EXCLUDED.last_seen,"
        f" turn_count = {sessions}.turn_count + 1),"
        f" inserted AS (INSERT INTO {turns}"
        " (owner_id, seq, session_id, role, content, metadata, idempotency_key, created_at)"
        " SELECT id, last_seq, %(session_id)s, %(role)s, %(content)s, %(metadata)s::jsonb,"
        " %(key)s::varchar, %(at)s FROM bumped RETURNING id, owner_id, seq)"
        " SELECT true, inserted.id, inserted.owner_id, inserted.seq, bumped.stamp,"
        " bumped.prev_stamp, NULL, NULL, NULL, NULL, NULL FROM inserted, bumped"
        " UNION ALL SELECT false, id, owner_id, seq, NULL, NULL, session_id, role, content,"
        " metadata, created_at FROM existing"
    )
    params = {
        "owner_id": owner_id,
        "key": idempotency_key,
        "turns": 1,
        "dirty": cache.enabled(),
        "session_id": session_id,
        "at": at,
        "role": role,
        "content": content,
        "metadata": codec.dumps(metadata).decode(),
    }
    for attempt in (1, 2):
        try:
            # NOTE: a savepoint only inside a caller's transaction (in autocommit a failed
            # statement aborts nothing), so that a duplicate in flight can be retried.
            savepoint = transaction.atomic() if connection.in_atomic_block else nullcontext()
            with savepoint, connection.cursor() as cursor:
                cursor.execute(sql, params)
                row = cursor.fetchone()
            break
        except IntegrityError:
            # NOTE: a retry of the same key committed after this statement's snapshot was
            # taken; the statement stored nothing (it is atomic). Run it again: it finds that
            # turn. Only an idempotent append can meet this, and only once.
            if idempotency_key is None or attempt == 2:
                raise
    if row is None:
        return None
    if not row[0]:
        existing = _turn_loaded(
            id=row[1],
            owner_id=row[2],
            seq=row[3],
            session_id=row[6],
            role=row[7],
            content=row[8],
            metadata=codec.loads(row[9]),
            idempotency_key=idempotency_key,
            created_at=row[10],
        )
        if (existing.session_id, existing.role, existing.content, existing.metadata) != (
            session_id,
            role,
            content,
            metadata,
        ):
            raise IdempotencyKeyReused(idempotency_key, existing)  # type: ignore[arg-type]
        return existing
    _, turn_pk, owner_pk, seq, stamp, prev = row[:6]
    turn = _turn_loaded(
        id=turn_pk,
        owner_id=owner_pk,
        seq=seq,
        session_id=session_id,
        role=role,
        content=content,
        metadata=metadata,
        idempotency_key=idempotency_key,
        created_at=at,
    )
    owner = Owner(pk=owner_pk, external_id=owner_id, stamp=stamp)
    cache.write_commit(owner, prev, turns=[turn_payload(turn)])
    return turn


def _turn_loaded(**fields: Any) -> Turn:
    """A ``Turn`` for a row this module read or wrote with its own SQL, as the ORM loads one."""
    turn = Turn(**fields)
    turn._state.adding = False
    turn._state.db = connection.alias
    return turn


def _turn_facts_extract(owner: Owner, turn: Turn) -> list[Fact]:
    """Write the facts the configured extractor finds in a user turn; return those that changed.

    Runs in a savepoint: an extractor that raises (a bad path, a model that timed out) or a
    fact write that fails is logged to ``memory.extraction`` and rolled back alone, so that the
    turn still commits. A fact with a bad key or value is logged and skipped, and so is a new
    key once the owner holds ``MEMORY["MAX_FACTS"]`` facts (the cap never fails a turn). A
    deferred extractor is not run here: the turn gets a ``PendingExtraction`` record, and
    after commit a task for it (``turn_facts_extract`` in a worker).
    """
    try:
        extractor = extraction.extractor_get()
        if extractor is None:
            return []
        if not extraction.extractor_deferred(extractor):
            with transaction.atomic():
                facts = extraction.LazyFacts(
                    lambda: dict(Fact.objects.filter(owner=owner).values_list("key", "value"))
                )
                found = list(extractor.extract(turn.content, facts=facts))
                if not found:
                    return []
                current = dict(
                    Fact.objects.filter(owner=owner, key__in={f.key for f in found}).values_list(
                        "key", "value"
                    )
                )
                return _turn_facts_write(owner, turn, current, found)
    except Exception:
        # NOTE: the savepoint rolled back only the facts; a connection that failed with them
        # cannot commit the turn either, so that failure is the caller's (MemoryUnavailable).
        if transaction.get_rollback() or connection.closed_in_transaction:
            raise
        extraction.logger.exception(
            "Fact extraction failed for turn %s of %r; the turn is stored without facts.",
            turn.seq,
            owner.external_id,
        )
        return []
    # NOTE: outside the savepoint: the turn and its record commit together, or neither does.
    _turn_extraction_defer(turn)
    return []


def _turn_facts_write(
    owner: Owner,
    turn: Turn,
    current: Mapping[str, Any],
    found: list[extraction.ExtractedFact],
) -> list[Fact]:
    """Merge ``found`` into the owner's ``current`` facts and write, with the turn as their
    source, each value that changed; return those facts. Runs under the owner lock."""
    changed: list[Fact] = []
    room: int | None = None
    for key, value in extraction.facts_apply(current, found).items():
        if key not in current:
            if room is None:
                room = conf.MAX_FACTS - Fact.objects.filter(owner=owner).count()
            if room <= 0:
                extraction.logger.warning(
                    "Extracted fact %r of turn %s of %r skipped: the owner holds "
                    "MEMORY['MAX_FACTS'] (%s) facts.",
                    key,
                    turn.seq,
                    owner.external_id,
                    conf.MAX_FACTS,
                )
                continue
        try:
            validate_fact_key(key)
            validate_json_value(value)
        except ValidationError as e:
            extraction.logger.warning(
                "Extracted fact %r of turn %s of %r dropped: %s",
                key,
                turn.seq,
                owner.external_id,
                " ".join(e.messages),
            )
            continue
        written = _fact_write(
            owner,
            key,
            value,
            session_id=turn.session_id,
            source_turn_seq=turn.seq,
            at=turn.created_at,
        )
        if written is not None:
            changed.append(written[0])
            if written[1] and room is not None:
                room -= 1
    return changed


def _turn_extraction_defer(turn: Turn) -> None:
    """Record, in the turn's transaction, that its extraction is due; enqueue it after commit."""
    pending = PendingExtraction.objects.create(
        turn=turn, created_at=turn.created_at, enqueued_at=turn.created_at
    )
    # NOTE: imported here, so that django-tasks is needed only by a site with a deferred
    # extractor. A crash before the enqueue leaves the record for ``memory_extract --pending``.
    from memory.extraction import deferred

    pending_pk = pending.pk
    transaction.on_commit(lambda: deferred.extraction_enqueue(pending_pk=pending_pk), robust=True)


def turn_facts_extract(*, owner_id: str, seq: int) -> list[Fact]:
    """Run the deferred fact extraction of the owner's turn ``seq``; return the facts it changed.

    Called by the worker's task (``memory.extraction.deferred``), never inside a request. The
    extractor runs with no transaction open and no lock held; the owner's row lock is taken
    only for the short write after it, which goes through the same path as an inline
    extraction (facts with the turn's ``session_id`` and ``source_turn_seq``, then the same
    cache update). Turns of the owner still pending before ``seq`` are extracted first, so
    facts land in the order the user stated them; a fact changed after the turn (by a later
    turn or a direct write) is not overwritten by it.

    Idempotent: a turn whose extraction is done (or that is gone: deleted, its owner
    forgotten) writes nothing and returns ``[]``; a turn linked to another owner meanwhile is
    extracted for that owner. An extractor that raises is logged and the turn is left without
    facts, as inline. Raises ``MemoryUnavailable`` when the database cannot be reached; then
    the turn stays pending and is retried.
    """
    _check("user_id", validate_owner_id, owner_id)
    changed: list[Fact] = []
    with database_guard():
        target_pk = (
            PendingExtraction.objects.filter(turn__owner__external_id=owner_id, turn__seq=seq)
            .values_list("pk", flat=True)
            .first()
        )
    while target_pk is not None:
        with database_guard():
            # NOTE: re-read each round: a link may have moved the turn to another owner.
            target = (
                PendingExtraction.objects.filter(pk=target_pk)
                .values_list("turn__owner_id", "turn__seq")
                .first()
            )
            if target is None:
                break
            # NOTE: one turn at a time, the owner's oldest pending first; each round either
            # deletes a record or finds it moved or gone, so the loop ends.
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
    found: list[extraction.ExtractedFact] = []
    try:
        extractor = extraction.extractor_get()
        if extractor is not None:
            with database_guard():
                facts = extraction.LazyFacts(
                    lambda: dict(Fact.objects.filter(owner=turn.owner).values_list("key", "value"))
                )
                found = list(extractor.extract(turn.content, facts=facts))
    except MemoryUnavailable:
        raise
    except Exception:
        extraction.logger.exception(
            "Fact extraction failed for turn %s of %r; the turn is stored without facts.",
            turn.seq,
            owner_id,
        )
    with _service():
        owner = _owner_lock(owner_id, create=False)
        # NOTE: re-read under the lock: another run may have done it, a forget or prune
        # removed its turn, or a link moved the turn to another owner (the caller's next
        # round finds it there).
        pending = PendingExtraction.objects.filter(pk=pending.pk).select_related("turn").first()
        if owner is None or pending is None or pending.turn.owner_id != owner.pk:
            return []
        turn = pending.turn
        pending.delete()
        if not found:
            return []
        rows = list(
            Fact.objects.filter(owner=owner, key__in={f.key for f in found}).values_list(
                "key", "value", "source_turn_seq", "updated_at"
            )
        )
        # NOTE: a value set after this turn (by a later turn, or a direct write) stays, as
        # it would have had the extraction run inline.
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
            if transaction.get_rollback() or connection.closed_in_transaction:
                raise
            extraction.logger.exception(
                "Writing the facts of turn %s of %r failed; the turn is stored without facts.",
                turn.seq,
                owner_id,
            )
            return []
        if changed:
            prev = cache.stamp_take(owner)
            cache.write_commit(owner, prev, facts=[fact_payload(f) for f in changed])
        return changed


def _facts_cap_check(owner: Owner, keys: Collection[str], *, field: str) -> None:
    """Raise ``ValidationError`` ({field: message}) if setting ``keys`` would leave the owner
    with more than ``MEMORY["MAX_FACTS"]`` facts. Call under the owner's row lock, so that no
    other write can add a fact between this count and the commit."""
    facts = Fact.objects.filter(owner=owner)
    new = len(set(keys) - set(facts.filter(key__in=keys).values_list("key", flat=True)))
    if not new:
        return
    limit, held = conf.MAX_FACTS, facts.count()
    if held + new > limit:
        raise ValidationError(
            {
                field: [
                    f"A user holds at most {limit} facts (MEMORY['MAX_FACTS']); this user holds "
                    f"{held} and this write adds {new}. Delete facts first; nothing was stored."
                ]
            }
        )


def _fact_write(
    owner: Owner,
    key: str,
    value: Any,
    *,
    session_id: str | None,
    source_turn_seq: int | None,
    at: Any,
) -> tuple[Fact, bool] | None:
    """Set one fact under the owner lock; ``None`` when the value is unchanged."""
    fact = Fact.objects.filter(owner=owner, key=key).first()
    created = fact is None
    if fact is None:
        # NOTE: a key deleted before continues its version count, so its history stays unique
        # and an If-Match naming a version of the deleted fact can never match the new one.
        last = (
            FactVersion.objects.filter(owner=owner, key=key)
            .order_by("-version")
            .values_list("version", flat=True)
            .first()
        )
        fact = Fact(owner=owner, key=key, version=(last or 0) + 1)
    elif fact.value == value:
        return None
    else:
        fact.version += 1
    # NOTE: JSON null is a value; Django would write a bare None as SQL NULL (a 500 here).
    fact.value = Value(None, JSONField()) if value is None else value
    fact.session_id = session_id
    fact.source_turn_seq = source_turn_seq
    fact.updated_at = at
    fact.save()
    fact.value = value
    FactVersion.objects.create(
        owner=owner,
        key=key,
        value=value,
        version=fact.version,
        session_id=session_id,
        source_turn_seq=source_turn_seq,
        updated_at=at,
    )
    return fact, created


def fact_put(
    *,
    owner_id: str,
    key: str,
    value: Any,
    session_id: str | None = None,
    expected_version: int | None = None,
    source_turn_seq: int | None = None,
) -> tuple[Fact, bool]:
    """Set one fact of the owner; return it and whether it was created.

    Its ``version`` grows by one on every change; the same value again changes nothing. With
    ``expected_version``, raises ``FactVersionConflict`` unless the fact is at that version.
    Raises ``ValidationError`` for bad input, or ({"key": message}) when a new key would pass
    ``MEMORY["MAX_FACTS"]``, and ``MemoryUnavailable`` when the database cannot be reached;
    then nothing was stored.
    """
    _check("user_id", validate_owner_id, owner_id)
    _check("key", validate_fact_key, key)
    _check("value", validate_json_value, value)
    if session_id is not None:
        _check("session_id", validate_session_id, session_id)
    with _service():
        owner = _owner_lock(owner_id, create=True)
        if expected_version is not None:
            current = (
                Fact.objects.filter(owner=owner, key=key).values_list("version", flat=True).first()
            )
            if current != expected_version:
                raise FactVersionConflict(key, expected_version, current)
        _facts_cap_check(owner, [key], field="key")
        prev = owner.stamp
        written = _fact_write(
            owner,
            key,
            value,
            session_id=session_id,
            source_turn_seq=source_turn_seq,
            at=timezone.now(),
        )
        if written is None:
            return Fact.objects.get(owner=owner, key=key), False
        prev = cache.stamp_take(owner)
        fact, created = written
        cache.write_commit(owner, prev, facts=[fact_payload(fact)])
        return fact, created


afact_put = aio.twin(fact_put)


def facts_merge(
    *, owner_id: str, facts: Mapping[str, Any], session_id: str | None = None
) -> list[Fact]:
    """Set several facts of the owner in one transaction; return all its facts, by key.

    Each changed key gets a new version; unchanged values and other keys stay as they are.
    The result is bounded: at most ``MEMORY["MAX_FACTS"]`` facts of at most
    ``MEMORY["MAX_JSON_BYTES"]`` each. Raises ``ValidationError`` ({"facts": {key: messages}})
    for bad input, or ({"facts": message}) when the new keys would take the owner past
    ``MAX_FACTS`` (the whole merge is refused), and ``MemoryUnavailable`` when the database
    cannot be reached; then nothing was stored.
    """
    _check("user_id", validate_owner_id, owner_id)
    if session_id is not None:
        _check("session_id", validate_session_id, session_id)
    errors: dict[str, list[str]] = {}
    for key, value in facts.items():
        try:
            validate_fact_key(key)
            validate_json_value(value)
        except ValidationError as e:
            errors[str(key)] = e.messages
    if errors:
        raise ValidationError({"facts": [errors]})
    with _service():
        owner = _owner_lock(owner_id, create=True)
        _facts_cap_check(owner, list(facts), field="facts")
        at = timezone.now()
        changed = []
        for key, value in facts.items():
            written = _fact_write(
                owner, key, value, session_id=session_id, source_turn_seq=None, at=at
            )
            if written is not None:
                changed.append(written[0])
        if changed:
            prev = cache.stamp_take(owner)
            cache.write_commit(owner, prev, facts=[fact_payload(fact) for fact in changed])
        return list(Fact.objects.filter(owner=owner).order_by("key"))


afacts_merge = aio.twin(facts_merge)


def fact_delete(*, owner_id: str, key: str, expected_version: int | None = None) -> None:
    """Delete one fact of the owner, leaving a last ``deleted`` version in its history.

    Raises ``FactNotFound`` when there is none, ``FactVersionConflict`` when
    ``expected_version`` is not current, ``MemoryUnavailable`` when the database cannot be
    reached; then nothing changed.
    """
    _check("user_id", validate_owner_id, owner_id)
    _check("key", validate_fact_key, key)
    with _service():
        owner = _owner_lock(owner_id, create=False)
        fact = Fact.objects.filter(owner=owner, key=key).first() if owner else None
        if owner is None or fact is None:
            raise FactNotFound(key)
        if expected_version is not None and fact.version != expected_version:
            raise FactVersionConflict(key, expected_version, fact.version)
        FactVersion.objects.create(
            owner=owner,
            key=key,
            value=None,
            version=fact.version + 1,
            session_id=None,
            source_turn_seq=None,
            deleted=True,
            updated_at=timezone.now(),
        )
        fact.delete()
        prev = cache.stamp_take(owner)
        cache.write_commit(owner, prev, deleted_keys=[key])


afact_delete = aio.twin(fact_delete)


def turn_delete(*, owner_id: str, seq: int) -> bool:
    """Delete one turn (an operator's correction); return whether it existed.

    The other turns keep their ``seq``; the turn's session count drops by one (a session left
    with no turn goes). The cached copy
    is dropped after commit, so the next read rehydrates. Raises ``MemoryUnavailable`` when the
    database cannot be reached.
    """
    _check("user_id", validate_owner_id, owner_id)
    with _service():
        owner = _owner_lock(owner_id, create=False)
        turn = Turn.objects.filter(owner=owner, seq=seq).first() if owner else None
        if owner is None or turn is None:
            return False
        turn.delete()
        _sessions_uncount(owner, {turn.session_id: 1})
        cache.stamp_take(owner)
        cache.write_commit(owner, 0, drop=True)
        return True


aturn_delete = aio.twin(turn_delete)


def _admin_log_scrub(owner: Owner) -> int:
    """Delete the Django admin's log entries about ``owner``: those of its owner row (by pk, or
    by the owner id as their ``object_repr``, which covers an earlier owner of the same id) and
    of its sessions, turns, facts and fact versions (by pk); return how many went.

    Nothing when ``django.contrib.admin`` is not installed. Runs in the caller's transaction.
    """
    # NOTE: imported here: the app works without the admin, and this decides at call time.
    from django.apps import apps

    if not apps.is_installed("django.contrib.admin"):
        return 0
    from django.contrib.admin.models import LogEntry
    from django.contrib.contenttypes.models import ContentType
    from django.db.models import Q, TextField
    from django.db.models.functions import Cast

    types = ContentType.objects.get_for_models(Owner, Session, Turn, Fact, FactVersion)
    about = Q(content_type=types[Owner]) & (
        Q(object_id=str(owner.pk)) | Q(object_repr=owner.external_id)
    )
    for model in (Session, Turn, Fact, FactVersion):
        # NOTE: LogEntry.object_id is text; one subquery per model, bounded by the owner's rows
        # (which the forget deletes anyway).
        pks = model.objects.filter(owner=owner).values_list(Cast("pk", TextField()))
        about |= Q(content_type=types[model], object_id__in=pks)
    deleted, _ = LogEntry.objects.filter(about).delete()
    return deleted


def memory_forget(*, owner_id: str) -> bool:
    """Forget the owner: delete every turn, fact, fact version and session, then its cache.

    Returns whether there was anything to forget. The admin's log entries about the owner and
    its rows go in the same transaction, so "Recent actions" never names a forgotten owner (the
    admin records the forget itself without the id). After commit the cached copy is replaced
    by a content-free floor for a minute, so that a rehydration in flight cannot bring it back.
    Raises ``MemoryUnavailable`` when the database cannot be reached; then nothing changed.
    """
    _check("user_id", validate_owner_id, owner_id)
    with _service():
        owner = _owner_lock(owner_id, create=False)
        if owner is None:
            return False
        _admin_log_scrub(owner)
        cache.stamp_take(owner)
        # NOTE: the owner row goes, and with it its dirty mark; this row is the durable
        # record that its cached copy must still go, deleted once Redis confirmed.
        pending = CacheInvalidation.objects.create(external_id=owner_id, stamp=owner.stamp)
        cache.write_commit(owner, 0, drop=True, outbox_pk=pending.pk)
        owner.delete()
        transaction.on_commit(
            lambda: memory_forgotten.send(sender=Owner, owner_id=owner_id), robust=True
        )
        return True


amemory_forget = aio.twin(memory_forget)


def cache_drop(*, owner_id: str) -> bool:
    """Drop the owner's cached copy so that the next read rehydrates; return whether Redis
    confirmed. Needs no database write; never raises for a Redis failure."""
    _check("user_id", validate_owner_id, owner_id)
    return cache.copy_drop(owner_id=owner_id, stamp=cache.stamp_get(owner_id))


acache_drop = aio.twin(cache_drop)


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
        # NOTE: keep nothing; every seq is below this one.
        return owner.last_seq + 1
    newest = Turn.objects.filter(owner=owner).order_by("-seq").values_list("seq", flat=True)
    floor = list(newest[keep_last - 1 : keep_last])
    # NOTE: an owner with at most ``keep_last`` turns keeps them all (0 is below every seq).
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

    Each criterion given must hold for a turn to go; at least one is required. Returns how
    many turns were deleted (with ``dry_run``, how many would be, and nothing changes). Deletes
    at most ``batch_size`` turns per transaction, oldest first, each under the owner's row lock
    (so appends of that owner wait for one batch at most, and no table lock is taken); each
    batch lowers its sessions' ``turn_count``, bumps the owner's stamp and drops its cached copy
    after commit, so the next read rehydrates. The other turns keep their ``seq``. Raises
    ``ValidationError`` for bad input and ``MemoryUnavailable`` when the database cannot be
    reached; batches committed before that stay deleted.
    """
    _check("user_id", validate_owner_id, owner_id)
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
        with _service():
            owner = _owner_lock(owner_id, create=False)
            # NOTE: an owner forgotten, and maybe re-created, between two batches is another
            # owner whose seqs start again at 1: the floor found for the first means nothing.
            if owner is None or owner_pk not in (None, owner.pk):
                return deleted
            if owner_pk is None:
                owner_pk = owner.pk
                # NOTE: fixed at the first batch: turns appended during the prune are newer
                # than every turn it removes, so they only add to what is kept.
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
            _sessions_uncount(owner, per_session)
            cache.stamp_take(owner)
            cache.write_commit(owner, 0, drop=True)
        deleted += len(rows)
        if len(rows) < batch_size:
            return deleted


aturns_prune = aio.twin(turns_prune)


class LinkResult(NamedTuple):
    """What ``memory_link`` moved: turns, and facts whose value the known owner took."""

    turns_moved: int
    facts_moved: int


def _source_turn_seqs_follow(owner: Owner, base: int) -> None:
    """Point the owner's ``source_turn_seq`` values at the seqs its turns get after ``base``."""
    sources = [
        model.objects.filter(owner=owner, source_turn_seq__isnull=False)
        for model in (Fact, FactVersion)
    ]
    referenced = {seq for rows in sources for seq in rows.values_list("source_turn_seq", flat=True)}
    if not referenced:
        return
    seqs = Turn.objects.filter(owner=owner).order_by("seq").values_list("seq", flat=True)
    renumbered = {seq: base + rank for rank, seq in enumerate(seqs, 1) if seq in referenced}
    # NOTE: one statement per table, so that a new seq is never taken for an old one; a turn
    # deleted since leaves NULL rather than a number that now names another turn.
    source_turn_seq = (
        Case(
            *[When(source_turn_seq=old, then=Value(new)) for old, new in renumbered.items()],
            default=Value(None),
            output_field=BigIntegerField(),
        )
        if renumbered
        else Value(None, output_field=BigIntegerField())
    )
    for rows in sources:
        rows.update(source_turn_seq=source_turn_seq)


def _facts_link(source: Owner, target: Owner) -> int:
    """Give ``target`` the facts of ``source`` it lacks or has older; return how many.

    A fact taken brings its history, renumbered after the target's versions of its key, and
    becomes the target's current version. Where the target's value stays, the source's history
    of that key is left to be forgotten with the source.
    """
    kept = {fact.key: fact for fact in Fact.objects.filter(owner=target)}
    offered = {fact.key: fact for fact in Fact.objects.filter(owner=source)}
    keys = set(offered) | set(
        FactVersion.objects.filter(owner=source).values_list("key", flat=True)
    )
    last_versions = dict(
        FactVersion.objects.filter(owner=target, key__in=keys)
        .values("key")
        .annotate(last=Max("version"))
        .values_list("key", "last")
    )
    taken = 0
    for key in sorted(keys):
        mine, theirs = kept.get(key), offered.get(key)
        if mine is not None and (theirs is None or theirs.updated_at <= mine.updated_at):
            continue
        offset = last_versions.get(key, 0)
        FactVersion.objects.filter(owner=source, key=key).update(
            owner=target, version=F("version") + offset
        )
        if theirs is None:
            continue
        if mine is None:
            Fact.objects.filter(pk=theirs.pk).update(owner=target, version=F("version") + offset)
        else:
            mine.value = theirs.value
            mine.version = theirs.version + offset
            mine.session_id = theirs.session_id
            mine.source_turn_seq = theirs.source_turn_seq
            mine.updated_at = theirs.updated_at
            mine.save()
        taken += 1
    return taken


def _turns_link(source: Owner, target: Owner, base: int) -> int:
    """Move every turn of ``source`` to ``target`` as seqs ``base + 1...``, in order; return
    how many. Idempotency keys the target already uses are cleared on the moved turns."""
    Turn.objects.filter(
        owner=source,
        idempotency_key__in=Turn.objects.filter(owner=target, idempotency_key__isnull=False).values(
            "idempotency_key"
        ),
    ).update(idempotency_key=None)
    table = connection.ops.quote_name(Turn._meta.db_table)
    # NOTE: one statement renumbers and moves them all, so a turn appended to the source
    # after this transaction cannot slip in between (it waits for the source's row lock).
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET owner_id = %s, seq = %s + ranked.rn"
            f" FROM (SELECT id, ROW_NUMBER() OVER (ORDER BY seq) AS rn FROM {table}"
            f" WHERE owner_id = %s) AS ranked WHERE {table}.id = ranked.id",
            [target.pk, base, source.pk],
        )
        return int(cursor.rowcount)


def _sessions_link(source: Owner, target: Owner) -> None:
    """Give ``target`` the sessions of ``source``; a session id both have is merged."""
    targets = Session.objects.filter(owner=target).values("session_id")
    for session in Session.objects.filter(owner=source, session_id__in=targets):
        Session.objects.filter(owner=target, session_id=session.session_id).update(
            turn_count=F("turn_count") + session.turn_count,
            first_seen=Least("first_seen", Value(session.first_seen)),
            last_seen=Greatest("last_seen", Value(session.last_seen)),
        )
    Session.objects.filter(owner=source).exclude(session_id__in=targets).update(owner=target)


def memory_link(*, owner_id: str, from_owner_id: str) -> LinkResult:
    """Merge the memory of ``from_owner_id`` (an anonymous visitor) into ``owner_id``, then
    forget ``from_owner_id``; return how many turns and facts moved.

    Its turns follow the owner's, in their order, ``seq`` continuing the owner's. A fact the
    owner lacks is copied; for a key both have, the value updated last wins (on a tie, the
    owner's), the anonymous value as a new version of the owner's fact. A fact taken keeps its
    history, its versions renumbered after the owner's; where the owner's value stays, the
    anonymous history of that key is forgotten. Sessions of one id merge (counts add up),
    ``source_turn_seq`` follows its turn, and idempotency keys the owner already used are
    cleared on the moved turns. The anonymous owner is then forgotten as ``memory_forget``
    does, and after commit both cached copies are dropped.

    One transaction under both owners' row locks, taken in the order of their ids: appends to
    either owner meanwhile wait, then continue after the moved turns (the owner's) or on a new
    anonymous owner (the anonymous one's); no turn is lost and no seq skipped or repeated.
    Linking again moves nothing: an unknown ``from_owner_id`` gives ``LinkResult(0, 0)`` and
    changes nothing. Raises ``ValidationError`` for a bad id, an owner linked to itself, or a
    link that would leave the owner with more than ``MEMORY["MAX_FACTS"]`` facts, and
    ``MemoryUnavailable`` when the database cannot be reached; then nothing changed.
    """
    _check("user_id", validate_owner_id, owner_id)
    _check("from_user_id", validate_owner_id, from_owner_id)
    if owner_id == from_owner_id:
        raise ValidationError({"from_user_id": ["A user cannot be linked to itself."]})
    with _service():
        if not Owner.objects.filter(external_id=from_owner_id).exists():
            return LinkResult(0, 0)
        # NOTE: every link locks its two owners in this one order, so links never wait on each
        # other in a cycle; appends and other writes hold one owner's lock only.
        locked = {
            oid: _owner_lock(oid, create=oid == owner_id)
            for oid in sorted((owner_id, from_owner_id))
        }
        source, target = locked[from_owner_id], locked[owner_id]
        assert target is not None
        if source is None:
            # NOTE: linked or forgotten meanwhile; undo creating the target, if this did.
            transaction.set_rollback(True)
            return LinkResult(0, 0)
        # NOTE: the facts the owner lacks become theirs: past MAX_FACTS the link is refused
        # whole, as any write past it is (nothing moved; the anonymous owner stays).
        _facts_cap_check(
            target,
            list(Fact.objects.filter(owner=source).values_list("key", flat=True)),
            field="from_user_id",
        )
        base = target.last_seq
        _source_turn_seqs_follow(source, base)
        facts_moved = _facts_link(source, target)
        turns_moved = _turns_link(source, target, base)
        _sessions_link(source, target)
        cache.stamp_take(target, turns=turns_moved)
        cache.write_commit(target, 0, drop=True)
        memory_forget(owner_id=from_owner_id)
        return LinkResult(turns_moved, facts_moved)


amemory_link = aio.twin(memory_link)


__all__ = [
    "LinkResult",
    "acache_drop",
    "afact_delete",
    "afact_put",
    "afacts_merge",
    "amemory_forget",
    "amemory_link",
    "aturn_append",
    "aturn_delete",
    "aturns_prune",
    "cache_drop",
    "fact_delete",
    "fact_put",
    "facts_merge",
    "memory_forget",
    "memory_link",
    "turn_append",
    "turn_delete",
    "turns_prune",
]
