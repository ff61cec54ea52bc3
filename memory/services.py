"""Writes to an owner's memory: the app's public Python API for changing it.

Every service runs in one transaction under the owner's row lock, commits to the database
first, and only then (``transaction.on_commit``) updates the Redis copy. A write that raises
stored nothing; a Redis failure never fails a write (see ``memory.reconcile``).
"""

from __future__ import annotations

import contextvars
import datetime as dt
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Literal, NamedTuple, overload

from django.core.exceptions import ValidationError
from django.db import connection, transaction
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

from memory import extraction, reconcile, store
from memory.conf import conf
from memory.exceptions import (
    FactNotFound,
    FactVersionConflict,
    IdempotencyKeyReused,
    database_guard,
)
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
        facts = _turn_facts_extract(owner, turn) if role == Role.USER else []
        _cache_update(
            owner, prev, turns=[turn_payload(turn)], facts=[fact_payload(f) for f in facts]
        )
        return turn


def _turn_facts_extract(owner: Owner, turn: Turn) -> list[Fact]:
    """Write the facts the configured extractor finds in a user turn; return those that changed.

    Runs in a savepoint: an extractor that raises (a bad path, a model that timed out) or a
    fact write that fails is logged to ``memory.extraction`` and rolled back alone, so that the
    turn still commits. A fact with a bad key or value is logged and skipped, and so is a new
    key once the owner holds ``MEMORY["MAX_FACTS"]`` facts (the cap never fails a turn).
    """
    changed: list[Fact] = []
    try:
        extractor = extraction.extractor_get()
        if extractor is None:
            return []
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
        prev = _owner_bump(owner)
        fact, created = written
        _cache_update(owner, prev, facts=[fact_payload(fact)])
        return fact, created


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
            _owner_bump(owner)
            _cache_update(owner, 0, drop=True)
        deleted += len(rows)
        if len(rows) < batch_size:
            return deleted


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
    changes nothing. Raises ``ValidationError`` for a bad id or an owner linked to itself and
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
        base = target.last_seq
        _source_turn_seqs_follow(source, base)
        facts_moved = _facts_link(source, target)
        turns_moved = _turns_link(source, target, base)
        _sessions_link(source, target)
        _owner_bump(target, turns=turns_moved)
        _cache_update(target, 0, drop=True)
        memory_forget(owner_id=from_owner_id)
        return LinkResult(turns_moved, facts_moved)
