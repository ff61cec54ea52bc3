"""Reads of an owner's memory: the app's public Python API for looking at it.

``context_get`` reads through the Redis copy and rehydrates it from the database on any miss;
the other selectors read the database. A lost database raises ``MemoryUnavailable``; Redis
failures are never seen by callers.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator
from typing import Any, Literal, TypedDict

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import DatabaseError, connection
from django.db.models import BigIntegerField, QuerySet, Value
from django.db.models.functions import Cast
from psycopg import Pipeline

from memory import codec, reconcile, search, store
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
    isoformat,
    session_payload,
    turn_payload_from_row,
)
from memory.validators import validate_fact_key, validate_owner_id

# A reader waiting for another's rehydration polls after 5 ms, then twice as long each time.
FILL_POLL_SECONDS = 0.005
FILL_POLL_MAX_SECONDS = 0.05


class HealthLatency(TypedDict):
    database: float
    cache: float | None


class HealthPayload(TypedDict):
    database: Literal["ok", "down"]
    cache: Literal["ok", "down", "disabled"]
    latency_ms: HealthLatency


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

    Three queries whatever the history length (the (owner, seq) index serves the turns); on
    PostgreSQL with psycopg 3 they go in one round trip.
    """
    if _postgres_read_usable():
        return _postgres_read(owner_id, turns)
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


def _postgres_read_usable() -> bool:
    """Whether ``_postgres_read`` can serve: PostgreSQL through psycopg 3 with pipeline mode,
    and aware datetimes (which it writes as UTC)."""
    if connection.vendor != "postgresql" or not settings.USE_TZ:
        return False
    connection.ensure_connection()
    return hasattr(connection.connection, "pipeline") and Pipeline.is_supported()


def _utc(column: str) -> str:
    # NOTE: text of a fixed shape whatever the session's DateStyle; _iso() finishes it.
    return f"to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US')"


def _iso(text: str) -> str:
    """``isoformat()`` of the aware UTC datetime ``_utc()`` wrote (``payloads.isoformat``)."""
    return (text[:-7] if text.endswith(".000000") else text) + "Z"


@functools.cache
def _postgres_read_sql() -> tuple[str, str, str]:
    """The three statements of ``_postgres_read``, written once from the models' tables."""
    q = connection.ops.quote_name
    owner, turn, fact = (q(model._meta.db_table) for model in (Owner, Turn, Fact))
    owner_pk = f"(SELECT id FROM {owner} WHERE external_id = %s)"
    turn_columns = [*map(q, TURN_FIELDS[:-1]), _utc(q(TURN_FIELDS[-1]))]
    fact_columns = [*map(q, FACT_FIELDS[:3]), _utc(q(FACT_FIELDS[3])), q(FACT_FIELDS[4])]
    return (
        f"SELECT stamp FROM {owner} WHERE external_id = %s",
        f"SELECT {', '.join(turn_columns)} FROM {turn}"
        f" WHERE owner_id = {owner_pk} ORDER BY seq DESC LIMIT %s",
        f"SELECT {', '.join(fact_columns)} FROM {fact}"
        f" WHERE owner_id = {owner_pk} ORDER BY {q('key')}",
    )


def _postgres_read(owner_id: str, turns: int) -> tuple[store.CachedMemory, bool]:
    """``_database_read`` in one round trip, with the payloads built straight from the rows.

    NOTE: building the three querysets cost the ORM more than the database took to answer
    them, and parsing timestamps only to format them again cost as much (docs/performance.md).
    So the SQL is written once; psycopg's pipeline mode sends the three statements together;
    timestamps arrive as text. The owner's pk is a scalar subquery, so that no statement waits
    for another and the turns are still read backwards along the (owner, seq) index.
    """
    owner_sql, turns_sql, facts_sql = _postgres_read_sql()
    cursors = [connection.cursor() for _ in range(3)]
    try:
        # NOTE: errors of pipelined statements surface when the pipeline syncs, outside
        # Django's cursor wrapper: they are wrapped here into django.db errors like any query's.
        with connection.wrap_database_errors:
            with connection.connection.pipeline():
                cursors[0].execute(owner_sql, [owner_id])
                cursors[1].execute(turns_sql, [owner_id, turns])
                cursors[2].execute(facts_sql, [owner_id])
            owner_rows, rows, fact_rows = (cursor.fetchall() for cursor in cursors)
    finally:
        for cursor in cursors:
            cursor.close()
    if not owner_rows:
        return store.CachedMemory(stamp=0, turns=[], facts=[]), True
    rows.reverse()
    # NOTE: jsonb arrives as text (Django's loader). Decoded with orjson, as the cached copy
    # is: every value was written through memory.validators, which orjson could encode.
    turn_list: list[TurnPayload] = [
        {
            "seq": seq,
            "session_id": session_id,
            "role": role,
            "content": content,
            "metadata": codec.loads(metadata),
            "created_at": _iso(created_at),
        }
        for seq, session_id, role, content, metadata, created_at in rows
    ]
    facts: list[FactPayload] = [
        {
            "key": key,
            "value": codec.loads(value),
            "session_id": session_id,
            "updated_at": _iso(updated_at),
            "version": version,
        }
        for key, value, session_id, updated_at, version in fact_rows
    ]
    memory = store.CachedMemory(stamp=owner_rows[0][0], turns=turn_list, facts=facts)
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


class _Flights:
    """The rehydrations this process is running, by owner: a reader that finds one waits on it
    instead of polling Redis."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: dict[str, threading.Event] = {}

    def start(self, owner_id: str) -> threading.Event:
        done = threading.Event()
        with self.lock:
            self.running.setdefault(owner_id, done)
        return done

    def end(self, owner_id: str, done: threading.Event) -> None:
        with self.lock:
            if self.running.get(owner_id) is done:
                del self.running[owner_id]
        done.set()

    def get(self, owner_id: str) -> threading.Event | None:
        return self.running.get(owner_id)


_flights = _Flights()


def _wait_for_fill(owner_id: str, turns: int) -> store.CachedMemory | store.Miss | None:
    """Another reader is rehydrating this owner: wait for its copy, for at most
    ``FILL_WAIT_MS``. Returns the copy; or a ``Miss`` with a fill token when that reader's
    lock went without leaving a copy (its fill was refused) and this one took it over; or
    ``None``: read the database yourself.

    A rehydration in this process is waited on directly; one in another process is polled
    for in Redis, backing off.
    """
    deadline = time.monotonic() + conf.FILL_WAIT_MS / 1000
    delay = FILL_POLL_SECONDS
    # NOTE: a hundred threads polling every 10 ms kept the one rehydrating thread of their own
    # process off the CPU until they all gave up and read the database (docs/performance.md).
    while (remaining := deadline - time.monotonic()) > 0:
        running = _flights.get(owner_id)
        if running is not None:
            running.wait(remaining)
        else:
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, FILL_POLL_MAX_SECONDS)
        # NOTE: only the cache is trusted, never the other reader's rows: its fill is refused
        # if a write moved the owner on meanwhile, and then this reader takes over.
        cached = store.memory_read(owner_id=owner_id, turns=turns)
        if cached is None or isinstance(cached, store.CachedMemory) or cached.fill_token:
            return cached
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
                if isinstance(waited, store.CachedMemory):
                    return _context(owner_id, waited, "cache")
                if waited is not None:
                    cached = waited
            if cached.fill_token is None:
                return _context(owner_id, _rehydrate(owner_id, n, None), "database")
            running = _flights.start(owner_id)
            try:
                memory = _rehydrate(owner_id, n, cached.fill_token)
            finally:
                _flights.end(owner_id, running)
            return _context(owner_id, memory, "database")
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


def _elapsed_ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


def health_get() -> HealthPayload:
    """Whether the database answers a query and the cache a PING, and how many milliseconds
    each took (also when it failed: a timeout shows as such); the cache's is None when no
    cache is configured. Never raises."""
    started = time.perf_counter()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        database: Literal["ok", "down"] = "ok"
    except DatabaseError:
        database = "down"
        # NOTE: drop the broken connection so that the next request reconnects by itself.
        connection.close()
    database_ms = _elapsed_ms(started)
    started = time.perf_counter()
    cache = store.ping()
    cache_ms = None if cache == "disabled" else _elapsed_ms(started)
    return {
        "database": database,
        "cache": cache,
        "latency_ms": {"database": database_ms, "cache": cache_ms},
    }


def owner_dirty_count(*, limit: int) -> int:
    """How many owners have a cache update Redis has not confirmed, counted up to ``limit``
    (one index-only scan of the partial index on ``cache_dirty``). Raises ``DatabaseError``
    when the database fails."""
    return Owner.objects.filter(cache_dirty=True)[:limit].count()


def owner_exists(*, owner_id: str) -> bool:
    """Whether the database holds anything of this owner."""
    return Owner.objects.filter(external_id=owner_id).exists()


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
    """How much the database holds of the owner, or ``None`` when it holds nothing.

    One query per table; counting turns reads the owner's slice of the (owner, seq) index, so
    it takes longer, not more queries, as history grows. Raises ``MemoryUnavailable`` when the
    database cannot be reached.
    """
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


@database_guard()
def owner_recent_list(*, limit: int) -> list[str]:
    """The ids of the ``limit`` owners written to most recently, newest first (one index scan).

    Raises ``MemoryUnavailable`` when the database cannot be reached.
    """
    owners = Owner.objects.order_by("-updated_at").values_list("external_id", flat=True)
    return list(owners[:limit])


def owner_id_iter(*, min_last_seq: int = 0, chunk_size: int = 1000) -> Iterator[str]:
    """Every owner id whose ``last_seq`` is above ``min_last_seq``, in primary-key order.

    Reads ``chunk_size`` ids per query (keyset on the primary key), so that a long walk holds
    no cursor or transaction open and sees owners created meanwhile. Raises
    ``MemoryUnavailable`` when the database cannot be reached.
    """
    after = 0
    while True:
        with database_guard():
            rows = list(
                Owner.objects.filter(pk__gt=after, last_seq__gt=min_last_seq)
                .order_by("pk")
                .values_list("pk", "external_id")[:chunk_size]
            )
        for pk, owner_id in rows:
            after = pk
            yield owner_id
        if len(rows) < chunk_size:
            return


@database_guard()
def stats_get() -> StatsPayload:
    """Row counts of the app's tables, and the cache's state, counters and memory in Redis.

    Counts are exact (``COUNT(*)``), as slow as a scan of each table. ``cache`` is
    ``store.stats()``: ``{"cache": "disabled"}``, ``{"cache": "down", ...}`` or ``{"cache": "ok",
    "keys", "memory_bytes", "counters", ...}``; Redis failures never raise. Raises
    ``MemoryUnavailable`` when the database cannot be reached.
    """
    return {
        "owners": Owner.objects.count(),
        "sessions": Session.objects.count(),
        "turns": Turn.objects.count(),
        "facts": Fact.objects.count(),
        "cache": store.stats(),
    }


def _owner_turns(owner_pk: int) -> QuerySet[Turn]:
    # NOTE: a bigint, not a bare number: Postgres reads 42 as an integer, and the GIN indexes
    # (btree_gin's bigint class) serve ``owner_id = 42::bigint`` only.
    return Turn.objects.filter(owner_id=Cast(Value(owner_pk), BigIntegerField()))


@database_guard()
def turn_search(*, owner_id: str, q: str, limit: int = 20) -> list[TurnPayload]:
    """The owner's turns whose content matches ``q``: best match first, newest first among equals.

    ``q`` is 1-200 characters of free text, stripped, and never query syntax. Every English word
    of it must match, in any case and form ("Played" finds "play"); Chinese, Japanese and
    Korean text matches where the content holds it, with no spaces needed ("篮球" finds
    "我喜欢打篮球"). When the words match no turn, turns with similar words are returned (a typo,
    or the start of a word). ``limit`` is 1-100. Only the owner's own turns are searched; an
    unknown owner has none. Two or three queries, each served by a GIN index that leads with
    the owner. Raises ``ValidationError`` ({"q" | "limit" | "user_id": messages}) for bad input
    and ``MemoryUnavailable`` when the database cannot be reached.
    """
    _check_owner(owner_id)
    q = search.clean_query(q)
    limit = search.clean_limit(limit)
    owner_pk = Owner.objects.filter(external_id=owner_id).values_list("pk", flat=True).first()
    if owner_pk is None:
        return []
    turns = _owner_turns(owner_pk)
    rows = list(search.turns_matching(turns, q).values_list(*TURN_FIELDS)[:limit])
    if not rows:
        similar = search.turns_similar(turns, q)
        if similar is not None:
            rows = list(similar.values_list(*TURN_FIELDS)[:limit])
    return [turn_payload_from_row(row) for row in rows]


@database_guard()
def turn_search_queryset(*, q: str, queryset: QuerySet[Turn] | None = None) -> QuerySet[Turn]:
    """The turns of ``queryset`` (every owner's by default) that match ``q`` as in
    ``turn_search``, annotated with ``search_rank`` and ordered best first (for the admin).

    Runs one query to decide between matches and the similar-words fallback; the result is a
    lazy queryset. Raises ``ValidationError`` ({"q": messages}) for a bad ``q`` and
    ``MemoryUnavailable`` when the database cannot be reached.
    """
    q = search.clean_query(q)
    turns = Turn.objects.all() if queryset is None else queryset
    matches = search.turns_matching(turns, q)
    similar = search.turns_similar(turns, q)
    if similar is not None and not matches.exists():
        return similar
    return matches


__all__ = [
    "context_get",
    "fact_history",
    "fact_list",
    "health_get",
    "owner_dirty_count",
    "owner_exists",
    "owner_id_iter",
    "owner_recent_list",
    "owner_summary_get",
    "session_list",
    "stats_get",
    "turn_list",
    "turn_search",
    "turn_search_queryset",
]
