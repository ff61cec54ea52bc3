"""Writes of a whole owner: forget it (or every owner idle too long), drop its cached copy,
link an anonymous owner into a known one."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import NamedTuple

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import (
    BigIntegerField,
    Case,
    Count,
    F,
    Max,
    Min,
    Value,
    When,
)
from django.db.models.functions import Greatest, Least
from django.utils import timezone

from memory import aio, cache
from memory.conf import conf
from memory.exceptions import database_guard
from memory.models import (
    CacheInvalidation,
    Fact,
    FactVersion,
    Owner,
    OwnerLink,
    Session,
    Turn,
    fact_live,
)
from memory.services.common import (
    admin_log_scrub,
    facts_cap_check,
    field_check,
    owner_lock,
    service_transaction,
    sessions_uncount,
)
from memory.services.embedding_triggers import embedding_due
from memory.services.summary_triggers import _summary_link
from memory.signals import memory_forgotten
from memory.validators import (
    dots_only,
    validate_owner_id,
)


def memory_forget(*, owner_id: str) -> bool:
    """Forget the owner: delete every turn, fact, fact version and session, then its cache.

    Returns whether there was anything to forget. The admin's log entries about the owner go in the
    same transaction. After commit the cached copy becomes a content-free floor, so no rehydration
    in flight brings it back. Raises ``MemoryUnavailable`` when the database cannot be reached; then
    nothing changed.
    """
    field_check("user_id", validate_owner_id, owner_id)
    with service_transaction():
        owner = owner_lock(owner_id, create=False)
        if owner is None:
            return False
        _forget_locked(owner)
        return True


def _forget_locked(owner: Owner) -> None:
    """``memory_forget`` of an owner whose row this transaction holds locked."""
    owner_id = owner.external_id
    admin_log_scrub(owner)
    with cache.owner_write(owner) as write:
        # NOTE: the owner row, and its dirty mark, goes: this row is the durable record that its
        # cached copy must still go.
        pending = CacheInvalidation.objects.create(external_id=owner_id, stamp=owner.stamp)
        write.drop(outbox_pk=pending.pk)
    owner.delete()
    transaction.on_commit(
        lambda: memory_forgotten.send(sender=Owner, owner_id=owner_id), robust=True
    )


amemory_forget = aio.twin(memory_forget)


# Owner ids ``owners_forget_idle`` reads per query.
IDLE_PAGE = 500


def owners_forget_idle(*, prefix: str, idle_for: dt.timedelta, limit: int | None = None) -> int:
    """Forget, as ``memory_forget`` does, every owner whose id starts with ``prefix`` and that no
    write touched for longer than ``idle_for``; return how many went.

    Oldest first, one transaction per owner, idleness checked again under its lock; at most
    ``limit`` owners when given. Raises ``ValidationError`` for an empty ``prefix`` or a
    non-positive ``idle_for``, and ``MemoryUnavailable`` when the database cannot be reached
    (owners already forgotten stay forgotten).
    """
    if not isinstance(prefix, str) or not prefix:
        raise ValidationError({"prefix": ["Give the prefix of the owner ids to forget."]})
    if not isinstance(idle_for, dt.timedelta) or idle_for <= dt.timedelta(0):
        raise ValidationError({"idle_for": ["Give a positive time."]})
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValidationError({"limit": ["Ensure this value is greater than or equal to 1."]})
    forgotten = 0
    while limit is None or forgotten < limit:
        cutoff = timezone.now() - idle_for
        with database_guard():
            page = list(
                Owner.objects.filter(external_id__startswith=prefix, updated_at__lt=cutoff)
                .order_by("updated_at")
                .values_list("external_id", flat=True)[:IDLE_PAGE]
            )
        if not page:
            return forgotten
        for owner_id in page:
            if limit is not None and forgotten >= limit:
                break
            with service_transaction():
                owner = owner_lock(owner_id, create=False)
                if owner is None or owner.updated_at >= cutoff:
                    continue
                _forget_locked(owner)
            forgotten += 1
        if len(page) < IDLE_PAGE:
            return forgotten
    return forgotten


aowners_forget_idle = aio.twin(owners_forget_idle)


def cache_drop(*, owner_id: str) -> bool:
    """Drop the owner's cached copy so that the next read rehydrates; return whether Redis
    confirmed. Needs no database write; never raises for a Redis failure."""
    field_check("user_id", validate_owner_id, owner_id)
    return cache.owner_invalidate(owner_id)


acache_drop = aio.twin(cache_drop)


class LinkResult(NamedTuple):
    """What ``memory_link`` moved: turns, and facts whose value the known owner took."""

    turns_moved: int
    facts_moved: int


def _source_turn_seqs_follow(owner: Owner, seqs: Mapping[int, int]) -> None:
    """Point the owner's ``source_turn_seq`` values at their turns' new seqs (``seqs``: old to new);
    a seq ``seqs`` lacks (a deleted turn) becomes NULL."""
    sources = [
        model.objects.filter(owner=owner, source_turn_seq__isnull=False)
        for model in (Fact, FactVersion)
    ]
    # NOTE: one statement per table, so a new seq is never mistaken for an old one.
    source_turn_seq = (
        Case(
            *[When(source_turn_seq=old, then=Value(new)) for old, new in seqs.items()],
            default=Value(None),
            output_field=BigIntegerField(),
        )
        if seqs
        else Value(None, output_field=BigIntegerField())
    )
    for rows in sources:
        rows.update(source_turn_seq=source_turn_seq)


def _referenced_seqs(owner: Owner) -> set[int]:
    """The seqs of the owner's turns that its facts and fact versions name."""
    return {
        seq
        for model in (Fact, FactVersion)
        for seq in model.objects.filter(owner=owner, source_turn_seq__isnull=False)
        .values_list("source_turn_seq", flat=True)
        .distinct()
        if seq is not None
    }


def _facts_link(source: Owner, target: Owner) -> int:
    """Give ``target`` the facts of ``source`` it lacks or has older; return how many.

    A fact taken brings its history, renumbered after the target's versions. An expired fact is
    none: the source's is not offered, and the target's gives way to any.
    """
    now = timezone.now()
    kept = {fact.key: fact for fact in Fact.objects.filter(owner=target)}
    offered = {fact.key: fact for fact in Fact.objects.filter(fact_live(now), owner=source)}
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
        if mine is not None and (
            theirs is None
            or (
                (mine.expires_at is None or mine.expires_at > now)
                and theirs.updated_at <= mine.updated_at
            )
        ):
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
            mine.expires_at = theirs.expires_at
            mine.save()
        taken += 1
    return taken


def _turns_renumber(ids: list[int], target: Owner) -> list[tuple[int, int]]:
    """Give the turns ``ids`` to ``target`` as seqs after its last, in order; return each one's (old
    seq, new seq). The caller holds both owners' row locks."""
    table = connection.ops.quote_name(Turn._meta.db_table)
    if connection.vendor == "postgresql":
        # NOTE: one statement renumbers and moves the batch: no append can slip in between.
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET owner_id = %s, seq = %s + ranked.rn"
                f" FROM (SELECT id, seq, ROW_NUMBER() OVER (ORDER BY seq) AS rn FROM {table}"
                f" WHERE id IN ({', '.join(['%s'] * len(ids))})) AS ranked"
                f" WHERE {table}.id = ranked.id RETURNING ranked.seq, {table}.seq",
                [target.pk, target.last_seq, *ids],
            )
            return [(int(old), int(new)) for old, new in cursor.fetchall()]
    # NOTE: SQLite cannot name the FROM table in RETURNING: read the old seqs first.
    olds = list(Turn.objects.filter(pk__in=ids).order_by("seq").values_list("pk", "seq"))
    news = {pk: target.last_seq + rank for rank, (pk, _) in enumerate(olds, start=1)}
    Turn.objects.filter(pk__in=ids).update(
        owner=target,
        seq=Case(
            *[When(pk=pk, then=Value(new)) for pk, new in news.items()],
            output_field=BigIntegerField(),
        ),
    )
    return [(old, news[pk]) for pk, old in olds]


def _turns_link(source: Owner, target: Owner, limit: int) -> list[tuple[int, int]]:
    """Move the ``limit`` oldest turns of ``source`` to ``target`` after the target's last, with
    their sessions' counts; return each moved turn's (old seq, new seq). Idempotency keys the target
    already uses are cleared."""
    ids = list(
        Turn.objects.filter(owner=source).order_by("seq").values_list("pk", flat=True)[:limit]
    )
    if not ids:
        return []
    batch = Turn.objects.filter(pk__in=ids)
    batch.filter(
        idempotency_key__in=Turn.objects.filter(owner=target, idempotency_key__isnull=False).values(
            "idempotency_key"
        ),
    ).update(idempotency_key=None)
    sessions = list(
        batch.order_by()
        .values("session_id")
        .annotate(turns=Count("pk"), first=Min("created_at"), last=Max("created_at"))
        .values_list("session_id", "turns", "first", "last")
    )
    moved = _turns_renumber(ids, target)
    for session_id, turns, first, last in sessions:
        updated = Session.objects.filter(owner=target, session_id=session_id).update(
            turn_count=F("turn_count") + turns,
            first_seen=Least("first_seen", Value(first)),
            last_seen=Greatest("last_seen", Value(last)),
        )
        if not updated:
            Session.objects.create(
                owner=target,
                session_id=session_id,
                first_seen=first,
                last_seen=last,
                turn_count=turns,
            )
    sessions_uncount(source, {session_id: turns for session_id, turns, _, _ in sessions})
    return moved


class _LinkStep(NamedTuple):
    """What one transaction of a link did: turns it moved, facts it took, whether it ended."""

    turns_moved: int
    facts_moved: int
    done: bool


def _link_step(owner_id: str, from_owner_id: str) -> _LinkStep:
    """One transaction of ``memory_link``: move a batch of turns; the last one also merges the
    facts and forgets the anonymous owner."""
    with service_transaction():
        if not Owner.objects.filter(external_id=from_owner_id).exists():
            return _LinkStep(0, 0, True)
        # NOTE: links lock their two owners in one order, so they never wait on each other in a
        # cycle.
        locked = {
            oid: owner_lock(oid, create=oid == owner_id)
            for oid in sorted((owner_id, from_owner_id))
        }
        source, target = locked[from_owner_id], locked[owner_id]
        assert target is not None
        if source is None:
            # Linked or forgotten meanwhile; undo creating the target, if this did.
            transaction.set_rollback(True)
            return _LinkStep(0, 0, True)
        offered = list(Fact.objects.filter(owner=source).values_list("key", flat=True))
        # NOTE: a key made only of dots is refused, before any batch, until it was renamed.
        dotted = sorted(key for key in offered if dots_only(key))
        if dotted:
            raise ValidationError(
                {
                    "from_user_id": [
                        "The user to link holds facts whose keys are made only of dots "
                        f"({', '.join(dotted)}); rename them first: manage.py memory_fact_keys "
                        "--rename."
                    ]
                }
            )
        # NOTE: the facts the owner lacks become theirs: past MAX_FACTS the link is refused
        # before this batch, as any write past it is (this batch moves nothing).
        facts_cap_check(target, offered, field="from_user_id")
        progress = OwnerLink.objects.filter(source=source).first()
        # NOTE: a link into another owner, cut off, starts over: moved turns stay where they went.
        seqs = progress.seqs if progress is not None and progress.target_id == target.pk else {}
        referenced = _referenced_seqs(source)
        moved = _turns_link(source, target, conf.LINK_BATCH_TURNS)
        seqs = {**seqs, **{str(old): new for old, new in moved if old in referenced}}
        cache.owner_drop(target, turns=len(moved))
        last = not Turn.objects.filter(owner=source).exists()
        _summary_link(source, target, [new for _, new in moved], last=last)
        if not last:
            OwnerLink.objects.update_or_create(
                source=source, defaults={"target": target, "seqs": seqs}
            )
            cache.owner_drop(source)
            return _LinkStep(len(moved), 0, False)
        _source_turn_seqs_follow(source, {int(old): new for old, new in seqs.items()})
        facts_moved = _facts_link(source, target)
        memory_forget(owner_id=from_owner_id)
        return _LinkStep(len(moved), facts_moved, True)


def memory_link(*, owner_id: str, from_owner_id: str) -> LinkResult:
    """Merge the memory of ``from_owner_id`` (an anonymous visitor) into ``owner_id``, then forget
    ``from_owner_id``; return how many turns and facts this call moved.

    Turns follow the owner's in order; for a key both hold, the value updated last wins. In batches
    of ``MEMORY["LINK_BATCH_TURNS"]`` turns, one transaction each; linking again finishes a link cut
    off (docs/python-api.md, "Linking"). Raises ``ValidationError`` for a bad id, a link to itself,
    a dot-only fact key or a link past ``MEMORY["MAX_FACTS"]`` (nothing changed), and
    ``MemoryUnavailable`` when the database cannot be reached (committed batches stay moved).
    """
    field_check("user_id", validate_owner_id, owner_id)
    field_check("from_user_id", validate_owner_id, from_owner_id)
    if owner_id == from_owner_id:
        raise ValidationError({"from_user_id": ["A user cannot be linked to itself."]})
    turns_moved = 0
    while True:
        step = _link_step(owner_id, from_owner_id)
        turns_moved += step.turns_moved
        if step.done:
            if turns_moved:
                # NOTE: the moved turns' vectors went with the anonymous owner: embed them again.
                embedding_due(owner_id)
            return LinkResult(turns_moved, step.facts_moved)


amemory_link = aio.twin(memory_link)
