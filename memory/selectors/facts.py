"""Facts: the current ones and one of them (through the Redis copy), a fact's history, keys to
repair."""

from __future__ import annotations

import functools

from django.core.exceptions import ValidationError
from django.db.models import F

from memory import aio, cache
from memory.exceptions import FactNotFound, database_guard
from memory.models import Fact, FactVersion, StoreVector
from memory.payloads import (
    FactPayload,
    FactVersionPayload,
    fact_version_payload,
)
from memory.selectors.context import database_read
from memory.selectors.pages import (
    DEFAULT_PAGE_SIZE,
    Page,
    check_limit,
    check_owner,
    cursor_decode,
    cursor_encode,
    owner_pk,
)
from memory.validators import validate_held_fact_key


@database_guard()
def fact_list(*, owner_id: str) -> list[FactPayload]:
    """All facts of the owner, by key, read through the cached copy. Raises ``MemoryUnavailable``
    when the database is needed and cannot be reached."""
    check_owner(owner_id)
    memory, _ = cache.read_through(
        owner_id=owner_id, turns=0, load=functools.partial(database_read, owner_id)
    )
    return memory.facts


@aio.twin_of(fact_list)
async def afact_list(*, owner_id: str) -> list[FactPayload]:
    check_owner(owner_id)
    with database_guard():
        memory, _ = await cache.aread_through(
            owner_id=owner_id, turns=0, load=functools.partial(database_read, owner_id)
        )
    return memory.facts


def _fact_key_check(key: str) -> None:
    try:
        validate_held_fact_key(key)
    except ValidationError as e:
        raise ValidationError({"key": e.messages}) from e


def _fact_pick(facts: list[FactPayload], key: str) -> FactPayload:
    for fact in facts:
        if fact["key"] == key:
            return fact
    raise FactNotFound(key)


def fact_get(*, owner_id: str, key: str) -> FactPayload:
    """The owner's current fact ``key``, read through the cached copy.

    Raises ``FactNotFound`` when there is none (or it expired), ``ValidationError`` ({"user_id" |
    "key": messages}) for bad input, and ``MemoryUnavailable`` when the database is needed and
    cannot be reached.
    """
    check_owner(owner_id)
    _fact_key_check(key)
    return _fact_pick(fact_list(owner_id=owner_id), key)


@aio.twin_of(fact_get)
async def afact_get(*, owner_id: str, key: str) -> FactPayload:
    check_owner(owner_id)
    _fact_key_check(key)
    return _fact_pick(await afact_list(owner_id=owner_id), key)


@database_guard()
def fact_history(
    *, owner_id: str, key: str, limit: int = DEFAULT_PAGE_SIZE, cursor: str | None = None
) -> Page[FactVersionPayload]:
    """A page of the versions of one fact of the owner, newest first, and the next page's cursor
    (``None`` on the last). The first page is empty only if the key never existed.

    ``limit`` is 1-500; ``cursor`` a ``next_cursor`` of an earlier page; every page costs the same
    (keyset). Raises ``ValidationError`` ({"user_id" | "key" | "limit" | "cursor": messages}) for
    bad input and ``MemoryUnavailable`` when the database cannot be reached.
    """
    check_owner(owner_id)
    _fact_key_check(key)
    check_limit(limit)
    versions = FactVersion.objects.filter(owner_id=owner_pk(owner_id), key=key)
    if cursor is not None:
        (before,) = cursor_decode(cursor, ("history", owner_id, key), (int,))
        versions = versions.filter(version__lt=before)
    rows = list(versions.order_by("-version")[: limit + 1])
    page = [fact_version_payload(version) for version in rows[:limit]]
    more = len(rows) > limit
    next_cursor = cursor_encode(("history", owner_id, key), page[-1]["version"]) if more else None
    return Page(page, next_cursor)


afact_history = aio.twin(fact_history)

# Every key made only of dots (1-64 of them): the keys check memory.W010 looks for.
DOT_KEYS = tuple("." * n for n in range(1, 65))


@database_guard()
def fact_dot_key_list(*, limit: int = 1000) -> list[tuple[str, str]]:
    """Up to ``limit`` ``(owner_id, key)`` pairs of facts whose key is only dots, by owner and key
    (one scan). Raises ``MemoryUnavailable`` when the database cannot be reached."""
    facts = Fact.objects.filter(key__in=DOT_KEYS).order_by("owner__external_id", "key")
    return list(facts.values_list("owner__external_id", "key")[:limit])


afact_dot_key_list = aio.twin(fact_dot_key_list)


def store_vectors_get(*, owner_id: str, model: str) -> dict[str, list[list[float]]]:
    """The owner's vectors of ``model`` by fact key, of each fact's current version only. Raises
    ``ValidationError`` for a bad owner id, ``MemoryUnavailable`` when the database cannot be
    reached."""
    check_owner(owner_id)
    found: dict[str, list[list[float]]] = {}
    with database_guard():
        rows = StoreVector.objects.filter(
            fact__owner__external_id=owner_id, model=model, version=F("fact__version")
        ).values_list("fact__key", "vector")
        for key, vector in rows:
            found.setdefault(key, []).append(vector)
    return found


astore_vectors_get = aio.twin(store_vectors_get)
