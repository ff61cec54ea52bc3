"""The sweep of expired facts (every read omits them already): ``facts_expire`` deletes them in
bounded pages, each leaving a last ``deleted`` version by ``"expiry"``."""

from __future__ import annotations

import datetime as dt

from django.core.exceptions import ValidationError
from django.db.models import Q
from django.utils import timezone

from memory import aio, cache
from memory.exceptions import database_guard
from memory.models import Fact, Owner
from memory.services.common import fact_remove, service_transaction

# Expired facts ``facts_expire`` reads per statement (and deletes per owner's transaction).
EXPIRE_BATCH = 500


def facts_expire(*, batch_size: int = EXPIRE_BATCH, limit: int | None = None) -> int:
    """Delete every fact expired when the sweep starts, as ``fact_delete`` does (actor
    ``"expiry"``); return how many went.

    Pages of ``batch_size`` on the partial index of expiring facts; one short transaction per
    owner, re-read under its lock (a fact written again meanwhile stays). With ``limit``, stops
    after the page that reached it. Raises ``ValidationError`` for a bad ``batch_size`` or
    ``limit`` and ``MemoryUnavailable`` when the database cannot be reached; deleted facts stay
    deleted.
    """
    for name, number in (("batch_size", batch_size), ("limit", limit)):
        if number is not None and (
            isinstance(number, bool) or not isinstance(number, int) or number < 1
        ):
            raise ValidationError({name: ["Ensure this value is an integer of at least 1."]})
    now = timezone.now()
    deleted = 0
    after: tuple[dt.datetime | None, int] | None = None
    while True:
        expired = Fact.objects.filter(expires_at__lte=now)
        if after is not None:
            expired = expired.filter(
                Q(expires_at__gt=after[0]) | Q(expires_at=after[0], pk__gt=after[1]),
                expires_at__gte=after[0],
            )
        with database_guard():
            rows = list(
                expired.order_by("expires_at", "pk").values_list("expires_at", "pk", "owner_id")[
                    :batch_size
                ]
            )
        by_owner: dict[int, list[int]] = {}
        for _, pk, owner_pk in rows:
            by_owner.setdefault(owner_pk, []).append(pk)
        for owner_pk, pks in by_owner.items():
            deleted += _owner_facts_expire(owner_pk, pks, now)
        if len(rows) < batch_size or (limit is not None and deleted >= limit):
            return deleted
        after = (rows[-1][0], rows[-1][1])


def _owner_facts_expire(owner_pk: int, pks: list[int], now: dt.datetime) -> int:
    """Delete the facts ``pks`` of one owner that are still expired at ``now``."""
    with service_transaction():
        owner = Owner.objects.select_for_update().filter(pk=owner_pk).first()
        if owner is None:
            return 0
        facts = list(
            Fact.objects.filter(owner=owner, pk__in=pks, expires_at__lte=now).order_by("key")
        )
        at = timezone.now()
        for fact in facts:
            fact_remove(owner, fact, at=at, actor="expiry")
        if facts:
            cache.owner_changed(owner, deleted_keys=[fact.key for fact in facts])
        return len(facts)


afacts_expire = aio.twin(facts_expire)
