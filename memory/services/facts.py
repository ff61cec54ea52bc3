"""Writes of facts: set one, merge several, delete one; each a new version in the fact's
history."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping
from typing import Any

from django.core.exceptions import ValidationError
from django.utils import timezone

from memory import aio, cache
from memory.exceptions import (
    FactNotFound,
    FactVersionConflict,
)
from memory.models import (
    Fact,
    fact_live,
)
from memory.payloads import fact_payload
from memory.services.common import (
    fact_remove,
    fact_write,
    facts_cap_check,
    field_check,
    owner_lock,
    service_transaction,
)
from memory.services.embedding_triggers import embedding_due
from memory.validators import (
    dots_only,
    validate_actor,
    validate_expires_at,
    validate_fact_key,
    validate_held_fact_key,
    validate_json_value,
    validate_owner_id,
    validate_session_id,
)


def fact_put(
    *,
    owner_id: str,
    key: str,
    value: Any,
    session_id: str | None = None,
    expected_version: int | None = None,
    source_turn_seq: int | None = None,
    expires_at: dt.datetime | None = None,
    actor: str = "python",
) -> tuple[Fact, bool]:
    """Set one fact of the owner; return it and whether it was created.

    Each change is a new ``version`` recording ``actor``; the same value and expiry change nothing.
    With ``expires_at`` (aware, in the future) the fact is absent from every read from that instant;
    without, it never expires. An expired fact not swept yet counts as absent. Raises
    ``FactVersionConflict`` unless the fact is at ``expected_version`` (when given),
    ``ValidationError`` for bad input or ({"key": message}) for a new key past
    ``MEMORY["MAX_FACTS"]``, and ``MemoryUnavailable`` when the database cannot be reached; then
    nothing was stored.
    """
    field_check("user_id", validate_owner_id, owner_id)
    field_check("key", validate_fact_key, key)
    field_check("value", validate_json_value, value)
    field_check("actor", validate_actor, actor)
    if session_id is not None:
        field_check("session_id", validate_session_id, session_id)
    if expires_at is not None:
        field_check("expires_at", lambda at: validate_expires_at(at, timezone.now()), expires_at)
    with service_transaction():
        owner = owner_lock(owner_id, create=True)
        if expected_version is not None:
            current = (
                Fact.objects.filter(fact_live(timezone.now()), owner=owner, key=key)
                .values_list("version", flat=True)
                .first()
            )
            if current != expected_version:
                raise FactVersionConflict(key, expected_version, current)
        facts_cap_check(owner, [key], field="key")
        written = fact_write(
            owner,
            key,
            value,
            session_id=session_id,
            source_turn_seq=source_turn_seq,
            at=timezone.now(),
            actor=actor,
            expires_at=expires_at,
        )
        if written is None:
            return Fact.objects.get(owner=owner, key=key), False
        fact, created = written
        cache.owner_changed(owner, facts=[fact_payload(fact)])
        embedding_due(owner_id)
        return fact, created


afact_put = aio.twin(fact_put)


def facts_merge(
    *,
    owner_id: str,
    facts: Mapping[str, Any],
    session_id: str | None = None,
    actor: str = "python",
) -> list[Fact]:
    """Set several facts of the owner in one transaction; return all its facts, by key.

    Each changed key gets a new version (recording ``actor``) and no longer expires; other keys
    stay. Raises ``ValidationError`` ({"facts": {key: messages}}) for bad input, or ({"facts":
    message}) when the new keys would pass ``MAX_FACTS`` (the whole merge is refused), and
    ``MemoryUnavailable`` when the database cannot be reached; then nothing was stored.
    """
    field_check("user_id", validate_owner_id, owner_id)
    field_check("actor", validate_actor, actor)
    if session_id is not None:
        field_check("session_id", validate_session_id, session_id)
    errors: dict[str, list[str]] = {}
    for key, value in facts.items():
        try:
            validate_fact_key(key)
            validate_json_value(value)
        except ValidationError as e:
            errors[str(key)] = e.messages
    if errors:
        raise ValidationError({"facts": [errors]})
    with service_transaction():
        owner = owner_lock(owner_id, create=True)
        facts_cap_check(owner, list(facts), field="facts")
        at = timezone.now()
        changed = []
        for key, value in facts.items():
            written = fact_write(
                owner, key, value, session_id=session_id, source_turn_seq=None, at=at, actor=actor
            )
            if written is not None:
                changed.append(written[0])
        if changed:
            cache.owner_changed(owner, facts=[fact_payload(fact) for fact in changed])
            embedding_due(owner_id)
        return list(Fact.objects.filter(fact_live(timezone.now()), owner=owner).order_by("key"))


afacts_merge = aio.twin(facts_merge)


def fact_delete(
    *, owner_id: str, key: str, expected_version: int | None = None, actor: str = "python"
) -> None:
    """Delete one fact of the owner, leaving a last ``deleted`` version (recording ``actor``).

    Raises ``FactNotFound`` when there is none (or it expired), ``FactVersionConflict`` when
    ``expected_version`` is not current, ``MemoryUnavailable`` when the database cannot be reached;
    then nothing changed.
    """
    field_check("user_id", validate_owner_id, owner_id)
    field_check("key", validate_held_fact_key, key)
    field_check("actor", validate_actor, actor)
    with service_transaction():
        owner = owner_lock(owner_id, create=False)
        at = timezone.now()
        fact = Fact.objects.filter(fact_live(at), owner=owner, key=key).first() if owner else None
        if owner is None or fact is None:
            raise FactNotFound(key)
        if expected_version is not None and fact.version != expected_version:
            raise FactVersionConflict(key, expected_version, fact.version)
        fact_remove(owner, fact, at=at, actor=actor)
        cache.owner_changed(owner, deleted_keys=[key])


afact_delete = aio.twin(fact_delete)


def _dot_key_new(key: str, held: Collection[str]) -> str:
    """The new name of a key made only of dots, the first that ``held`` lacks."""
    base = {1: "dot", 2: "dotdot"}.get(len(key), f"dots-{len(key)}")
    name, n = base, 1
    while name in held:
        n += 1
        name = f"{base}-{n}"
    return name


def fact_dot_keys_rename(*, owner_id: str, actor: str = "python") -> dict[str, str]:
    """Rename the owner's facts whose key is made only of dots: ``.`` -> ``dot``, ``..`` ->
    ``dotdot``, more -> ``dots-<n>`` (``-2``, ``-3``... where taken). Return ``{old key: new
    key}``.

    History records a delete of the old key and a put of the new one, in one transaction. Raises
    ``MemoryUnavailable`` when the database cannot be reached; then nothing changed.
    """
    field_check("user_id", validate_owner_id, owner_id)
    field_check("actor", validate_actor, actor)
    with service_transaction():
        owner = owner_lock(owner_id, create=False)
        if owner is None:
            return {}
        facts = list(Fact.objects.filter(owner=owner).order_by("key"))
        held = {fact.key for fact in facts}
        at = timezone.now()
        renamed: dict[str, str] = {}
        written: list[Fact] = []
        for fact in facts:
            if not dots_only(fact.key):
                continue
            new_key = _dot_key_new(fact.key, held)
            held.add(new_key)
            value = fact.value
            fact_remove(owner, fact, at=at, actor=actor)
            moved = fact_write(
                owner,
                new_key,
                value,
                session_id=fact.session_id,
                source_turn_seq=fact.source_turn_seq,
                at=at,
                actor=actor,
                expires_at=fact.expires_at,
            )
            assert moved is not None
            written.append(moved[0])
            renamed[fact.key] = new_key
        if renamed:
            cache.owner_changed(
                owner,
                facts=[fact_payload(fact) for fact in written],
                deleted_keys=list(renamed),
            )
        return renamed


afact_dot_keys_rename = aio.twin(fact_dot_keys_rename)
