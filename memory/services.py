"""Writes to an owner's memory: the app's public Python API for changing it.

Every service runs in one transaction under the owner's row lock, commits to the database
first, and only then (``transaction.on_commit``) updates the Redis copy. A write that raises
stored nothing; a Redis failure never fails a write (see ``memory.reconcile``).
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from memory import reconcile, store
from memory.exceptions import FactNotFound, FactVersionConflict, database_guard
from memory.models import CacheInvalidation, Fact, FactVersion, Owner, Role, Session, Turn
from memory.payloads import FactPayload, TurnPayload, fact_payload, turn_payload
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

# NOTE: set while a service writes, so that the signal safety net (memory.signals) leaves
# the cache to the service's own on-commit update.
in_service: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "memory_in_service", default=False
)


@contextmanager
def _service() -> Iterator[None]:
    """One service's transaction; a lost database becomes ``MemoryUnavailable``."""
    token = in_service.set(True)
    try:
        with database_guard(), transaction.atomic():
            yield
    finally:
        in_service.reset(token)


def _check(field: str, validator: Any, value: Any) -> None:
    try:
        validator(value)
    except ValidationError as e:
        raise ValidationError({field: e.messages}) from e


def _owner_lock(owner_id: str, *, create: bool) -> Owner | None:
    """The owner's row, locked until commit; created first when ``create``."""
    if create:
        owner, _ = Owner.objects.select_for_update().get_or_create(external_id=owner_id)
        return owner
    return Owner.objects.select_for_update().filter(external_id=owner_id).first()


def _owner_bump(owner: Owner, *, turns: int = 0) -> int:
    """Give this change a new stamp (and reserve ``turns`` seqs); return the previous stamp.

    Postgres draws the stamp from the sequence ``memory_stamp_seq``, so stamps grow across a
    forget and a re-creation of the same owner id; other databases count per owner.
    """
    prev = owner.stamp
    now = timezone.now()
    dirty = store.enabled()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {Owner._meta.db_table} SET stamp = nextval('memory_stamp_seq'),"
                " last_seq = last_seq + %s, cache_dirty = cache_dirty OR %s, updated_at = %s"
                " WHERE id = %s RETURNING stamp, last_seq",
                [turns, dirty, now, owner.pk],
            )
            owner.stamp, owner.last_seq = cursor.fetchone()
    else:
        owner.stamp += 1
        owner.last_seq += turns
        owner.cache_dirty = owner.cache_dirty or dirty
        owner.updated_at = now
        Owner.objects.filter(pk=owner.pk).update(
            stamp=owner.stamp,
            last_seq=owner.last_seq,
            cache_dirty=owner.cache_dirty,
            updated_at=now,
        )
    return prev


def _cache_update(
    owner: Owner,
    prev_stamp: int,
    *,
    turns: list[TurnPayload] | None = None,
    facts: list[FactPayload] | None = None,
    deleted_keys: list[str] | None = None,
    drop: bool = False,
    pending_pk: int | None = None,
) -> None:
    """After commit, bring the owner's cached copy up to this write, or record that it could not."""
    if not store.enabled():
        return
    owner_pk, owner_id, stamp = owner.pk, owner.external_id, owner.stamp

    def update() -> None:
        if drop:
            ok = store.memory_drop(owner_id=owner_id, stamp=stamp)
        else:
            ok = store.memory_apply(
                owner_id=owner_id,
                prev_stamp=prev_stamp,
                stamp=stamp,
                turns=turns or [],
                facts=facts or [],
                deleted_keys=deleted_keys or [],
            )
        if ok and pending_pk is not None:
            reconcile.invalidation_done(pk=pending_pk)
        elif ok:
            reconcile.owner_dirty_clear(owner_pk=owner_pk, stamp=stamp)
        else:
            reconcile.owner_remember(
                owner_pk=owner_pk, owner_id=owner_id, stamp=stamp, pending_pk=pending_pk
            )

    transaction.on_commit(update, robust=True)


def _session_touch(owner: Owner, session_id: str, at: Any, turns: int = 1) -> None:
    updated = Session.objects.filter(owner=owner, session_id=session_id).update(
        last_seen=at, turn_count=F("turn_count") + turns
    )
    if not updated:
        Session.objects.create(
            owner=owner, session_id=session_id, first_seen=at, last_seen=at, turn_count=turns
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
    """Append a turn to the owner's history and return it, with the next ``seq`` of the owner.

    ``seq`` is 1, 2, 3... per owner in commit order, with no gap or repeat under any number of
    concurrent writers. A repeated ``idempotency_key`` stores nothing and returns the turn
    first stored under it. Raises ``ValidationError`` ({field: messages}) for bad input and
    ``MemoryUnavailable`` when the database cannot be reached; then nothing was stored.
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
    with _service():
        owner = _owner_lock(owner_id, create=True)
        assert owner is not None
        if idempotency_key is not None:
            existing = Turn.objects.filter(owner=owner, idempotency_key=idempotency_key).first()
            if existing is not None:
                return existing
        prev = _owner_bump(owner, turns=1)
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
        _cache_update(owner, prev, turns=[turn_payload(turn)])
        return turn


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
    fact.value = value
    fact.session_id = session_id
    fact.source_turn_seq = source_turn_seq
    fact.updated_at = at
    fact.save()
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
    Raises ``ValidationError`` for bad input and ``MemoryUnavailable`` when the database cannot
    be reached; then nothing was stored.
    """
    _check("user_id", validate_owner_id, owner_id)
    _check("key", validate_fact_key, key)
    _check("value", validate_json_value, value)
    if session_id is not None:
        _check("session_id", validate_session_id, session_id)
    with _service():
        owner = _owner_lock(owner_id, create=True)
        assert owner is not None
        if expected_version is not None:
            current = (
                Fact.objects.filter(owner=owner, key=key).values_list("version", flat=True).first()
            )
            if current != expected_version:
                raise FactVersionConflict(key, expected_version, current)
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
        prev = _owner_bump(owner)
        fact, created = written
        _cache_update(owner, prev, facts=[fact_payload(fact)])
        return fact, created


def facts_merge(
    *, owner_id: str, facts: Mapping[str, Any], session_id: str | None = None
) -> list[Fact]:
    """Set several facts of the owner in one transaction; return all its facts, by key.

    Each changed key gets a new version; unchanged values and other keys stay as they are.
    Raises ``ValidationError`` ({"facts": {key: messages}}) for bad input and
    ``MemoryUnavailable`` when the database cannot be reached; then nothing was stored.
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
        assert owner is not None
        at = timezone.now()
        changed = []
        for key, value in facts.items():
            written = _fact_write(
                owner, key, value, session_id=session_id, source_turn_seq=None, at=at
            )
            if written is not None:
                changed.append(written[0])
        if changed:
            prev = _owner_bump(owner)
            _cache_update(owner, prev, facts=[fact_payload(fact) for fact in changed])
        return list(Fact.objects.filter(owner=owner).order_by("key"))


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
        prev = _owner_bump(owner)
        _cache_update(owner, prev, deleted_keys=[key])


def turn_delete(*, owner_id: str, seq: int) -> bool:
    """Delete one turn (an operator's correction); return whether it existed.

    The other turns keep their ``seq``; the turn's session count drops by one. The cached copy
    is dropped after commit, so the next read rehydrates. Raises ``MemoryUnavailable`` when the
    database cannot be reached.
    """
    with _service():
        owner = _owner_lock(owner_id, create=False)
        turn = Turn.objects.filter(owner=owner, seq=seq).first() if owner else None
        if owner is None or turn is None:
            return False
        turn.delete()
        Session.objects.filter(owner=owner, session_id=turn.session_id).update(
            turn_count=F("turn_count") - 1
        )
        _owner_bump(owner)
        _cache_update(owner, 0, drop=True)
        return True


def memory_forget(*, owner_id: str) -> bool:
    """Forget the owner: delete every turn, fact, fact version and session, then its cache.

    Returns whether there was anything to forget. After commit the cached copy is replaced by
    a content-free floor for a minute, so that a rehydration in flight cannot bring it back.
    Raises ``MemoryUnavailable`` when the database cannot be reached; then nothing changed.
    """
    _check("user_id", validate_owner_id, owner_id)
    with _service():
        owner = _owner_lock(owner_id, create=False)
        if owner is None:
            return False
        _owner_bump(owner)
        # NOTE: the owner row goes, and with it its dirty mark; this row is the durable
        # record that its cached copy must still go, deleted once Redis confirmed.
        pending = CacheInvalidation.objects.create(external_id=owner_id, stamp=owner.stamp)
        _cache_update(owner, 0, drop=True, pending_pk=pending.pk)
        owner.delete()
        transaction.on_commit(
            lambda: memory_forgotten.send(sender=Owner, owner_id=owner_id), robust=True
        )
        return True


def cache_drop(*, owner_id: str) -> bool:
    """Drop the owner's cached copy so that the next read rehydrates; return whether Redis
    confirmed. Needs no database write; never raises for a Redis failure."""
    _check("user_id", validate_owner_id, owner_id)
    stamp = Owner.objects.filter(external_id=owner_id).values_list("stamp", flat=True).first()
    return store.memory_drop(owner_id=owner_id, stamp=stamp or 0)
