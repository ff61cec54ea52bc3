"""Reads of an owner's memory: the app's public Python API for looking at it.

``context_get`` reads through the Redis copy and rehydrates it from the database on any miss;
the other selectors read the database. A lost database raises ``MemoryUnavailable``; Redis
failures are never seen by callers.
"""

from __future__ import annotations

import time
from typing import Literal, TypedDict

from django.core.exceptions import ValidationError
from django.db import DatabaseError, connection

from memory import reconcile, store
from memory.conf import conf
from memory.exceptions import database_guard
from memory.models import Fact, FactVersion, Owner, Session, Turn
from memory.payloads import (
    FACT_FIELDS,
    TURN_FIELDS,
    ContextPayload,
    FactPayload,
    FactVersionPayload,
    SessionPayload,
    TurnPayload,
    fact_payload_from_row,
    fact_version_payload,
    session_payload,
    turn_payload_from_row,
)
from memory.validators import validate_fact_key, validate_owner_id

FILL_POLL_SECONDS = 0.01


class HealthPayload(TypedDict):
    database: Literal["ok", "down"]
    cache: Literal["ok", "down", "disabled"]


def _check_owner(owner_id: str) -> None:
    try:
        validate_owner_id(owner_id)
    except ValidationError as e:
        raise ValidationError({"user_id": e.messages}) from e


def _context(
    owner_id: str, memory: store.CachedMemory, source: Literal["cache", "database"]
) -> ContextPayload:
    return {
        "user_id": owner_id,
        "facts": {fact["key"]: fact["value"] for fact in memory.facts},
        "turns": memory.turns,
        "source": source,
    }


def _tail(turns: list[TurnPayload], n: int) -> list[TurnPayload]:
    return turns[max(len(turns) - n, 0) :] if n else []


def _database_read(owner_id: str, turns: int) -> tuple[store.CachedMemory, bool]:
    """The owner's stamp, last ``turns`` turns and facts; and whether those are all its turns.

    Three queries whatever the history length (the (owner, seq) index serves the turns).
    """
    row = Owner.objects.filter(external_id=owner_id).values_list("pk", "stamp").first()
    if row is None:
        return store.CachedMemory(stamp=0, turns=[], facts=[]), True
    owner_pk, stamp = row
    rows = list(
        Turn.objects.filter(owner_id=owner_pk).order_by("-seq").values_list(*TURN_FIELDS)[:turns]
    )
    rows.reverse()
    facts = [
        fact_payload_from_row(fact)
        for fact in Fact.objects.filter(owner_id=owner_pk).order_by("key").values_list(*FACT_FIELDS)
    ]
    memory = store.CachedMemory(
        stamp=stamp, turns=[turn_payload_from_row(turn) for turn in rows], facts=facts
    )
    return memory, len(rows) < turns


def _rehydrate(owner_id: str, turns: int, fill_token: str | None) -> store.CachedMemory:
    """Read the owner from the database, store a copy in Redis, return the last ``turns``."""
    depth = conf.CACHE_TURNS
    memory, complete = _database_read(owner_id, max(turns, depth + 1))
    store.health.count("rehydrations")
    store.memory_fill(
        owner_id=owner_id,
        stamp=memory.stamp,
        turns=_tail(memory.turns, depth),
        facts=memory.facts,
        complete=complete,
        fill_token=fill_token,
    )
    return store.CachedMemory(
        stamp=memory.stamp, turns=_tail(memory.turns, turns), facts=memory.facts
    )


def _wait_for_fill(owner_id: str, turns: int) -> store.CachedMemory | None:
    """Another process is rehydrating this owner: poll the cache for its copy, briefly."""
    deadline = time.monotonic() + conf.FILL_WAIT_MS / 1000
    while time.monotonic() < deadline:
        time.sleep(FILL_POLL_SECONDS)
        cached = store.memory_read(owner_id=owner_id, turns=turns, claim_fill=False)
        if isinstance(cached, store.CachedMemory):
            return cached
        if cached is None:
            return None
    return None


@database_guard()
def context_get(*, owner_id: str, turns: int | None = None) -> ContextPayload:
    """What a chat backend puts before the model: the owner's facts and last ``turns`` turns.

    ``turns`` defaults to ``MEMORY["CONTEXT_TURNS"]`` and may be 0..``MAX_CONTEXT_TURNS``.
    A warm cache answers in one Redis call and no query (``source: "cache"``). A miss, an
    expired, evicted or flushed key, or a Redis that fails all give the same facts and turns
    from the database (``source: "database"``), a bounded number of queries whatever the
    history length; the copy is then rehydrated. Concurrent cold reads of one owner wait for a
    single rehydration. An unknown owner has an empty context. Raises ``ValidationError`` for a
    bad owner id or turn count and ``MemoryUnavailable`` when the database cannot be reached.
    """
    _check_owner(owner_id)
    n = conf.CONTEXT_TURNS if turns is None else turns
    if not isinstance(n, int) or not 0 <= n <= conf.MAX_CONTEXT_TURNS:
        raise ValidationError(
            {"turns": [f"Ensure this value is between 0 and {conf.MAX_CONTEXT_TURNS}."]}
        )
    if store.enabled():
        if reconcile.reconcile_due():
            reconcile.cache_reconcile()
        cached = store.memory_read(owner_id=owner_id, turns=n)
        if isinstance(cached, store.CachedMemory):
            return _context(owner_id, cached, "cache")
        if isinstance(cached, store.Miss):
            if cached.fill_token is None and conf.FILL_WAIT_MS > 0:
                waited = _wait_for_fill(owner_id, n)
                if waited is not None:
                    return _context(owner_id, waited, "cache")
            return _context(owner_id, _rehydrate(owner_id, n, cached.fill_token), "database")
    memory, _ = _database_read(owner_id, n)
    return _context(owner_id, memory, "database")


@database_guard()
def fact_list(*, owner_id: str) -> list[FactPayload]:
    """All facts of the owner, by key; from the cached copy when there is one.

    Raises ``MemoryUnavailable`` when the database is needed and cannot be reached.
    """
    _check_owner(owner_id)
    if store.enabled():
        cached = store.memory_read(owner_id=owner_id, turns=0, claim_fill=False)
        if isinstance(cached, store.CachedMemory):
            return cached.facts
    return [
        fact_payload_from_row(row)
        for row in Fact.objects.filter(owner__external_id=owner_id)
        .order_by("key")
        .values_list(*FACT_FIELDS)
    ]


@database_guard()
def fact_history(*, owner_id: str, key: str) -> list[FactVersionPayload]:
    """Every version of one fact of the owner, newest first (empty if it never existed)."""
    _check_owner(owner_id)
    try:
        validate_fact_key(key)
    except ValidationError as e:
        raise ValidationError({"key": e.messages}) from e
    versions = FactVersion.objects.filter(owner__external_id=owner_id, key=key).order_by("-version")
    return [fact_version_payload(version) for version in versions]


@database_guard()
def turn_list(
    *,
    owner_id: str,
    session_id: str | None = None,
    after: int | None = None,
    limit: int = 50,
) -> tuple[list[TurnPayload], bool]:
    """A page of the owner's turns, oldest first, with ``seq > after``; and whether more follow.

    Keyset pagination on (owner, seq): every page costs the same however deep it is.
    ``session_id`` keeps only the turns labelled with it.
    """
    _check_owner(owner_id)
    turns = Turn.objects.filter(owner__external_id=owner_id)
    if session_id is not None:
        turns = turns.filter(session_id=session_id)
    if after is not None:
        turns = turns.filter(seq__gt=after)
    rows = list(turns.order_by("seq").values_list(*TURN_FIELDS)[: limit + 1])
    return [turn_payload_from_row(row) for row in rows[:limit]], len(rows) > limit


@database_guard()
def session_list(*, owner_id: str) -> list[SessionPayload]:
    """The owner's sessions, most recently seen first."""
    _check_owner(owner_id)
    sessions = Session.objects.filter(owner__external_id=owner_id).order_by(
        "-last_seen", "session_id"
    )
    return [session_payload(session) for session in sessions]


def health_get() -> HealthPayload:
    """Whether the database answers a query and the cache a PING. Never raises."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        database: Literal["ok", "down"] = "ok"
    except DatabaseError:
        database = "down"
        # NOTE: drop the broken connection so that the next request reconnects by itself.
        connection.close()
    return {"database": database, "cache": store.ping()}


def owner_exists(*, owner_id: str) -> bool:
    """Whether the database holds anything of this owner."""
    return Owner.objects.filter(external_id=owner_id).exists()


__all__ = [
    "context_get",
    "fact_history",
    "fact_list",
    "health_get",
    "owner_exists",
    "session_list",
    "turn_list",
]
