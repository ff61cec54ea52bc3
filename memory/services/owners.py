"""Writes of a whole owner: forget it, drop its cached copy, link an anonymous owner into a
known one."""

from __future__ import annotations

from typing import NamedTuple

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import (
    BigIntegerField,
    Case,
    F,
    Max,
    Value,
    When,
)
from django.db.models.functions import Greatest, Least

from memory import aio, cache
from memory.models import (
    CacheInvalidation,
    Fact,
    FactVersion,
    Owner,
    Session,
    Turn,
)
from memory.services._common import (
    _admin_log_scrub,
    _check,
    _facts_cap_check,
    _owner_lock,
    _service,
)
from memory.signals import memory_forgotten
from memory.validators import (
    dots_only,
    validate_owner_id,
)


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
    changes nothing. Raises ``ValidationError`` for a bad id, an owner linked to itself, an
    anonymous owner holding a fact key made only of dots (``fact_dot_keys_rename`` renames
    it), or a link that would leave the owner with more than ``MEMORY["MAX_FACTS"]`` facts, and
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
        offered = list(Fact.objects.filter(owner=source).values_list("key", flat=True))
        # NOTE: a key made only of dots (stored before keys of dots alone were refused) is not
        # written into the owner: the link is refused whole until it was renamed.
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
        # whole, as any write past it is (nothing moved; the anonymous owner stays).
        _facts_cap_check(target, offered, field="from_user_id")
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
