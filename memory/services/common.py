"""What every write shares: its transaction, input checks, the owner's row lock, sessions'
counts, one fact's write, the facts cap and the admin log's scrub."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Literal, overload

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import (
    F,
    JSONField,
    Value,
)
from django.utils import timezone

from memory import cache, codec
from memory.conf import conf
from memory.exceptions import (
    database_guard,
)
from memory.models import (
    Fact,
    FactVersion,
    Owner,
    Session,
    Turn,
    fact_live,
)


@contextmanager
def service_transaction() -> Iterator[None]:
    """One service's transaction; a lost database becomes ``MemoryUnavailable``."""
    with cache.service_write(), database_guard(), transaction.atomic():
        yield


def field_check(field: str, validator: Any, value: Any) -> None:
    try:
        validator(value)
    except ValidationError as e:
        raise ValidationError({field: e.messages}) from e


@overload
def owner_lock(owner_id: str, *, create: Literal[True]) -> Owner: ...
@overload
def owner_lock(owner_id: str, *, create: bool) -> Owner | None: ...
def owner_lock(owner_id: str, *, create: bool) -> Owner | None:
    """The owner's row, locked until commit; created first when ``create``."""
    if create:
        owner, _ = Owner.objects.select_for_update().get_or_create(external_id=owner_id)
        return owner
    return Owner.objects.select_for_update().filter(external_id=owner_id).first()


def session_touch(owner: Owner, session_id: str, at: Any, turns: int = 1) -> None:
    updated = Session.objects.filter(owner=owner, session_id=session_id).update(
        last_seen=at, turn_count=F("turn_count") + turns
    )
    if not updated:
        Session.objects.create(
            owner=owner, session_id=session_id, first_seen=at, last_seen=at, turn_count=turns
        )


def sessions_uncount(owner: Owner, removed: Mapping[str, int]) -> None:
    """Lower session counts after turns were deleted; a session left with none goes."""
    for session_id, count in removed.items():
        Session.objects.filter(owner=owner, session_id=session_id).update(
            turn_count=F("turn_count") - count
        )
    Session.objects.filter(owner=owner, turn_count__lte=0).delete()


def facts_cap_check(owner: Owner, keys: Collection[str], *, field: str) -> None:
    """Raise ``ValidationError`` ({field: message}) if setting ``keys`` would leave the owner
    with more than ``MEMORY["MAX_FACTS"]`` facts (expired ones not counted). Call under the
    owner's lock."""
    facts = Fact.objects.filter(fact_live(timezone.now()), owner=owner)
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


def fact_write(
    owner: Owner,
    key: str,
    value: Any,
    *,
    session_id: str | None,
    source_turn_seq: int | None,
    at: Any,
    actor: str,
    expires_at: Any = None,
) -> tuple[Fact, bool] | None:
    """Set one fact under the owner lock, its version recording ``actor``; ``None`` when value
    and expiry are unchanged. Without ``expires_at`` it no longer expires; an expired fact is set
    anew."""
    fact = Fact.objects.filter(owner=owner, key=key).first()
    expired = fact is not None and fact.expires_at is not None and fact.expires_at <= timezone.now()
    created = fact is None or expired
    if fact is None:
        # NOTE: a deleted key's versions go on, so an If-Match of the old fact never matches the
        # new.
        last = (
            FactVersion.objects.filter(owner=owner, key=key)
            .order_by("-version")
            .values_list("version", flat=True)
            .first()
        )
        fact = Fact(owner=owner, key=key, version=(last or 0) + 1)
    elif not expired and codec.json_equal(fact.value, value) and fact.expires_at == expires_at:
        # NOTE: JSON's equality, not Python's: ``true`` over ``1`` is a change.
        return None
    else:
        fact.version += 1
    # NOTE: JSON null is a value; Django would write a bare None as SQL NULL (a 500 here).
    fact.value = Value(None, JSONField()) if value is None else value
    fact.session_id = session_id
    fact.source_turn_seq = source_turn_seq
    fact.updated_at = at
    fact.expires_at = expires_at
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
        actor=actor,
        expires_at=expires_at,
    )
    return fact, created


def admin_log_scrub(owner: Owner) -> int:
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
        # NOTE: LogEntry.object_id is text; one subquery per model, bounded by the owner's rows.
        pks = model.objects.filter(owner=owner).values_list(Cast("pk", TextField()))
        about |= Q(content_type=types[model], object_id__in=pks)
    deleted, _ = LogEntry.objects.filter(about).delete()
    return deleted


def fact_remove(owner: Owner, fact: Fact, *, at: Any, actor: str) -> None:
    """Delete one fact under the owner lock, leaving its last, ``deleted``, version."""
    FactVersion.objects.create(
        owner=owner,
        key=fact.key,
        value=None,
        version=fact.version + 1,
        session_id=None,
        source_turn_seq=None,
        deleted=True,
        updated_at=at,
        actor=actor,
    )
    fact.delete()
