"""Owners as operators see them: dirty counts, usage, idle ones, summaries, ids, table stats."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Iterator
from typing import Any, NamedTuple, TypedDict

from asgiref.sync import sync_to_async
from django.db.models import (
    Count,
    Sum,
)
from django.db.models.functions import Length
from django.utils import timezone

from memory import aio, cache
from memory.exceptions import database_guard
from memory.models import Fact, FactVersion, Owner, Session, Turn
from memory.payloads import (
    isoformat,
)
from memory.selectors.pages import check_owner, owner_pk


@database_guard()
def owner_dirty_count(*, limit: int) -> int:
    """How many owners have a cache update Redis has not confirmed, counted up to ``limit`` (an
    index-only scan). Raises ``MemoryUnavailable`` when the database cannot be reached."""
    return Owner.objects.filter(cache_dirty=True)[:limit].count()


aowner_dirty_count = aio.twin(owner_dirty_count)


@database_guard()
def owner_exists(*, owner_id: str) -> bool:
    """Whether the database holds anything of this owner. Raises ``MemoryUnavailable`` when
    the database cannot be reached."""
    return Owner.objects.filter(external_id=owner_id).exists()


aowner_exists = aio.twin(owner_exists)


class OwnerUsage(NamedTuple):
    """What an owner holds: turns, and the characters of their contents."""

    turns: int
    chars: int


@database_guard()
def owner_usage_get(*, owner_id: str) -> OwnerUsage:
    """How many turns the owner holds and their contents' characters (``OwnerUsage(0, 0)`` for an
    unknown owner): one query, as slow as the history is long. Raises ``MemoryUnavailable`` when the
    database cannot be reached."""
    check_owner(owner_id)
    totals = Turn.objects.filter(owner_id=owner_pk(owner_id)).aggregate(
        turns=Count("pk"), chars=Sum(Length("content"))
    )
    return OwnerUsage(totals["turns"] or 0, totals["chars"] or 0)


aowner_usage_get = aio.twin(owner_usage_get)


@database_guard()
def owners_idle_count(*, prefix: str, idle_for: dt.timedelta) -> int:
    """How many owners ``ops.owners_forget_idle`` would forget now: ids starting with
    ``prefix``, no write for longer than ``idle_for``. Raises ``MemoryUnavailable`` when the
    database cannot be reached."""
    cutoff = timezone.now() - idle_for
    return Owner.objects.filter(external_id__startswith=prefix, updated_at__lt=cutoff).count()


aowners_idle_count = aio.twin(owners_idle_count)


class OwnerSummary(TypedDict):
    owner_id: str
    last_seq: int
    turns: int
    sessions: int
    facts: int
    fact_versions: int
    created_at: str
    updated_at: str


class StatsPayload(TypedDict):
    owners: int
    sessions: int
    turns: int
    facts: int
    cache: dict[str, Any]


@database_guard()
def owner_summary_get(*, owner_id: str) -> OwnerSummary | None:
    """How much the database holds of the owner, or ``None`` when it holds nothing: one query per
    table. Raises ``MemoryUnavailable`` when the database cannot be reached."""
    owner = Owner.objects.filter(external_id=owner_id).first()
    if owner is None:
        return None
    return {
        "owner_id": owner.external_id,
        "last_seq": owner.last_seq,
        "turns": Turn.objects.filter(owner=owner).count(),
        "sessions": Session.objects.filter(owner=owner).count(),
        "facts": Fact.objects.filter(owner=owner).count(),
        "fact_versions": FactVersion.objects.filter(owner=owner).count(),
        "created_at": isoformat(owner.created_at),
        "updated_at": isoformat(owner.updated_at),
    }


aowner_summary_get = aio.twin(owner_summary_get)


@database_guard()
def owner_recent_list(*, limit: int) -> list[str]:
    """The ids of the ``limit`` owners written to most recently, newest first (one index scan).
    Raises ``MemoryUnavailable`` when the database cannot be reached."""
    owners = Owner.objects.order_by("-updated_at").values_list("external_id", flat=True)
    return list(owners[:limit])


aowner_recent_list = aio.twin(owner_recent_list)


def owner_id_iter(*, min_last_seq: int = 0, chunk_size: int = 1000) -> Iterator[str]:
    """Every owner id whose ``last_seq`` is above ``min_last_seq``, in primary-key order, read
    ``chunk_size`` per query (no cursor held open). Raises ``MemoryUnavailable`` when the database
    cannot be reached."""
    after: int | None = 0
    while after is not None:
        ids, after = _chunk_ids(_owner_id_chunk(min_last_seq, after, chunk_size), chunk_size)
        yield from ids


@database_guard()
def _owner_id_chunk(min_last_seq: int, after: int, chunk_size: int) -> list[tuple[int, str]]:
    """The next ``chunk_size`` (pk, owner id) of ``owner_id_iter`` after the pk ``after``."""
    return list(
        Owner.objects.filter(pk__gt=after, last_seq__gt=min_last_seq)
        .order_by("pk")
        .values_list("pk", "external_id")[:chunk_size]
    )


def _chunk_ids(rows: list[tuple[int, str]], chunk_size: int) -> tuple[list[str], int | None]:
    """A chunk's owner ids, and the pk the next chunk starts after (``None``: none follows)."""
    return [owner_id for _, owner_id in rows], rows[-1][0] if len(rows) == chunk_size else None


_aowner_id_chunk = sync_to_async(_owner_id_chunk, thread_sensitive=True)


@aio.twin_of(owner_id_iter)
async def aowner_id_iter(*, min_last_seq: int = 0, chunk_size: int = 1000) -> AsyncIterator[str]:
    after: int | None = 0
    while after is not None:
        rows = await _aowner_id_chunk(min_last_seq, after, chunk_size)
        ids, after = _chunk_ids(rows, chunk_size)
        for owner_id in ids:
            yield owner_id


@database_guard()
def stats_get() -> StatsPayload:
    """Row counts of the app's tables (exact, a scan each), and ``cache.stats()``: the cache's
    state, counters and memory in Redis, which never raises. Raises ``MemoryUnavailable`` when the
    database cannot be reached."""
    return {
        "owners": Owner.objects.count(),
        "sessions": Session.objects.count(),
        "turns": Turn.objects.count(),
        "facts": Fact.objects.count(),
        "cache": cache.stats(),
    }


astats_get = aio.twin(stats_get)
