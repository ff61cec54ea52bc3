"""Reads of an owner's memory: the app's public Python API for looking at it.

``context_get`` reads through the Redis copy and rehydrates it from the database on any miss;
the other selectors read the database. A lost database raises ``MemoryUnavailable``; Redis
failures are never seen by callers.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import functools
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, Generic, Literal, NamedTuple, NotRequired, TypedDict, TypeVar

from asgiref.sync import sync_to_async
from django.core import signing
from django.core.exceptions import ValidationError
from django.db import DatabaseError, connection
from django.db.models import (
    BigIntegerField,
    Count,
    F,
    Func,
    IntegerField,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
)
from django.db.models.functions import Cast, Length
from django.utils import timezone
from django.utils.crypto import constant_time_compare

from memory import aio, cache, codec, search, tokens
from memory.conf import conf
from memory.exceptions import database_guard
from memory.models import Fact, FactVersion, Owner, Session, Turn
from memory.payloads import (
    FACT_FIELDS,
    TURN_FIELDS,
    ContextMessagesPayload,
    ContextPayload,
    FactPayload,
    FactVersionPayload,
    MessagePayload,
    SessionPayload,
    TurnPayload,
    fact_payload_from_row,
    fact_version_payload,
    isoformat,
    session_payload,
    turn_payload_from_row,
)
from memory.postgres import context_read
from memory.validators import validate_held_fact_key, validate_owner_id

# Items on one page of ``session_list`` and ``fact_history``: by default, and at most.
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
# Longest cursor accepted: a session id of 128 characters of 4 UTF-8 bytes each, in base64,
# and the signature: an HMAC-SHA256 in unpadded URL-safe base64.
MAX_CURSOR_CHARS = 1024
SIGNATURE_CHARS = 43

T = TypeVar("T")


class HealthLatency(TypedDict):
    database: float
    cache: float | None


class HealthPayload(TypedDict):
    database: Literal["ok", "down"]
    cache: Literal["ok", "down", "disabled"]
    latency_ms: HealthLatency
    cache_replicas: NotRequired[Literal["ok", "behind"]]


def _check_owner(owner_id: str) -> None:
    try:
        validate_owner_id(owner_id)
    except ValidationError as e:
        raise ValidationError({"user_id": e.messages}) from e


def _context(
    owner_id: str, memory: cache.Snapshot, source: Literal["cache", "database"]
) -> ContextPayload:
    return {
        "user_id": owner_id,
        "facts": {fact["key"]: fact["value"] for fact in memory.facts},
        "turns": memory.turns,
        "source": source,
    }


def _database_read(owner_id: str, turns: int) -> tuple[cache.Snapshot, bool]:
    """The owner's stamp, last ``turns`` turns and facts; and whether those are all its turns.

    Three queries whatever the history length (the (owner, seq) index serves the turns); on
    PostgreSQL with psycopg 3 they go in one round trip (``memory.postgres.context_read``).
    """
    if context_read.context_read_usable():
        return context_read.context_read(owner_id, turns)
    return _django_read(owner_id, turns)


def _django_read(owner_id: str, turns: int) -> tuple[cache.Snapshot, bool]:
    """``_database_read`` through the ORM: its specification, and its path off PostgreSQL."""
    row = Owner.objects.filter(external_id=owner_id).values_list("pk", "stamp").first()
    if row is None:
        return cache.Snapshot(stamp=0, turns=[], facts=[]), True
    owner_pk, stamp = row
    rows = list(
        Turn.objects.filter(owner_id=owner_pk).order_by("-seq").values_list(*TURN_FIELDS)[:turns]
    )
    rows.reverse()
    facts = [
        fact_payload_from_row(fact)
        for fact in Fact.objects.filter(owner_id=owner_pk).order_by("key").values_list(*FACT_FIELDS)
    ]
    memory = cache.Snapshot(
        stamp=stamp, turns=[turn_payload_from_row(turn) for turn in rows], facts=facts
    )
    return memory, len(rows) < turns


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
    n = _context_turns(owner_id, turns)
    memory, source = cache.read_through(
        owner_id=owner_id, turns=n, load=functools.partial(_database_read, owner_id)
    )
    return _context(owner_id, memory, source)


def _context_turns(owner_id: str, turns: int | None) -> int:
    """Check a context's arguments; return how many turns it holds."""
    _check_owner(owner_id)
    n = conf.CONTEXT_TURNS if turns is None else turns
    if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= conf.MAX_CONTEXT_TURNS:
        raise ValidationError(
            {"turns": [f"Ensure this value is between 0 and {conf.MAX_CONTEXT_TURNS}."]}
        )
    return n


@aio.twin_of(context_get)
async def acontext_get(*, owner_id: str, turns: int | None = None) -> ContextPayload:
    # NOTE: not aio.twin(context_get): a warm read is natively async (memory.cache.aio, no
    # thread hop); a cold one takes one hop into the same sync read path.
    n = _context_turns(owner_id, turns)
    with database_guard():
        memory, source = await cache.aread_through(
            owner_id=owner_id, turns=n, load=functools.partial(_database_read, owner_id)
        )
    return _context(owner_id, memory, source)


def _max_tokens_check(max_tokens: int | None) -> None:
    if max_tokens is not None and (
        not isinstance(max_tokens, int)
        or isinstance(max_tokens, bool)
        or not 1 <= max_tokens <= tokens.MAX_TOKENS
    ):
        raise ValidationError(
            {"max_tokens": [f"Ensure this value is between 1 and {tokens.MAX_TOKENS}."]}
        )


def _messages_turns(max_tokens: int | None, turns: int | None) -> int | None:
    """How many turns ``context_messages`` reads: as asked; with a budget, at most them all."""
    return conf.MAX_CONTEXT_TURNS if turns is None and max_tokens is not None else turns


def _facts_text(facts: dict[str, Any]) -> str:
    """The owner's facts as the text of the context's system message, one ``- key: value``
    line per fact, by key.

    A string is written as it is, Chinese included, unless it holds a line break or another
    control character: then, like any other value, it is written as JSON (non-ASCII kept), so
    that no value can pose as another line.
    """
    if not facts:
        return "Known facts about the user: none yet."
    lines = ["Known facts about the user:"]
    for key, value in facts.items():
        plain = isinstance(value, str) and value.isprintable()
        text = value if plain else codec.dumps(value).decode()
        lines.append(f"- {key}: {text}")
    return "\n".join(lines)


def _context_messages(context: ContextPayload, max_tokens: int | None) -> ContextMessagesPayload:
    """``context`` as model messages, its turns cut to ``max_tokens`` (see ``context_messages``)."""
    count = tokens.counter_remembering()
    system: MessagePayload = {"role": "system", "content": _facts_text(context["facts"])}
    used = count(system["content"])
    if max_tokens is not None and used > max_tokens:
        raise ValidationError(
            {
                "max_tokens": [
                    f"The user's facts alone take {used} tokens, more than {max_tokens}: "
                    "ask for at least that many."
                ]
            }
        )
    kept: list[MessagePayload] = []
    for turn in reversed(context["turns"]):
        cost = count(turn["content"])
        if max_tokens is not None and used + cost > max_tokens:
            # NOTE: the newest turns that fit, with no gap: an older, shorter turn after one
            # that did not fit would be a reply without its question.
            break
        used += cost
        kept.append({"role": turn["role"], "content": turn["content"]})
    kept.reverse()
    return {
        "user_id": context["user_id"],
        "messages": [system, *kept],
        "facts": context["facts"],
        "source": context["source"],
        "tokens": used,
    }


def context_messages(
    *, owner_id: str, max_tokens: int | None = None, turns: int | None = None
) -> ContextMessagesPayload:
    """The owner's context as the messages an LLM chat API takes, oldest first.

    The first message is ``{"role": "system", "content": ...}``, the facts as text (``- key:
    value`` lines, by key; "none yet" when there are none); then one ``{"role", "content"}``
    per turn, content kept exactly. Without ``max_tokens``, the turns are the last ``turns``
    (as for ``context_get``). With ``max_tokens`` (1..``tokens.MAX_TOKENS``), they are the
    newest of the last ``turns`` (default: ``MEMORY["MAX_CONTEXT_TURNS"]``) that fit in
    ``max_tokens`` together with the system message: whole turns, the newest first, stopping at
    the first one that does not fit, in their order. ``tokens`` is what the messages' contents
    count by ``MEMORY["TOKEN_COUNTER"]`` (roles and a chat API's per-message overhead are not
    counted); with ``max_tokens`` it is never above it. ``facts`` and ``source`` are the context's.

    Read through ``context_get`` (cache first, the same facts and turns when Redis fails).
    Raises ``ValidationError`` for a bad owner id, turn count or ``max_tokens``, and
    (``{"max_tokens": ...}``) when the facts' message alone exceeds ``max_tokens``: facts are
    never cut. Raises ``MemoryUnavailable`` when the database cannot be reached and
    ``ImproperlyConfigured`` for a bad ``MEMORY["TOKEN_COUNTER"]``.
    """
    _max_tokens_check(max_tokens)
    context = context_get(owner_id=owner_id, turns=_messages_turns(max_tokens, turns))
    return _context_messages(context, max_tokens)


@aio.twin_of(context_messages)
async def acontext_messages(
    *, owner_id: str, max_tokens: int | None = None, turns: int | None = None
) -> ContextMessagesPayload:
    _max_tokens_check(max_tokens)
    context = await acontext_get(owner_id=owner_id, turns=_messages_turns(max_tokens, turns))
    return _context_messages(context, max_tokens)


@database_guard()
def fact_list(*, owner_id: str) -> list[FactPayload]:
    """All facts of the owner, by key; read through the cached copy as ``context_get`` reads.

    Raises ``MemoryUnavailable`` when the database is needed and cannot be reached.
    """
    _check_owner(owner_id)
    memory, _ = cache.read_through(
        owner_id=owner_id, turns=0, load=functools.partial(_database_read, owner_id)
    )
    return memory.facts


@aio.twin_of(fact_list)
async def afact_list(*, owner_id: str) -> list[FactPayload]:
    # NOTE: natively async on a warm copy, as acontext_get.
    _check_owner(owner_id)
    with database_guard():
        memory, _ = await cache.aread_through(
            owner_id=owner_id, turns=0, load=functools.partial(_database_read, owner_id)
        )
    return memory.facts


class Page(NamedTuple, Generic[T]):
    """One page of a listing and the opaque cursor of the next one (``None``: the last page)."""

    results: list[T]
    next_cursor: str | None


def _cursor_signer(scope: tuple[str, ...]) -> signing.Signer:
    """The signer of one listing's cursors: ``scope`` names the listing and whose it is."""
    return signing.Signer(salt="memory.cursor:" + json.dumps(scope))


def _cursor_encode(scope: tuple[str, ...], *key: Any) -> str:
    """A cursor of the listing ``scope`` at the ordering key ``key``: the key, then its
    signature (HMAC-SHA256 with ``SECRET_KEY``), both URL-safe base64."""
    payload = base64.urlsafe_b64encode(codec.dumps(list(key))).decode("ascii").rstrip("=")
    return payload + _cursor_signer(scope).signature(payload)


def _cursor_decode(cursor: str, scope: tuple[str, ...], shape: tuple[type, ...]) -> list[Any]:
    """The ordering key a cursor of ``_cursor_encode`` for ``scope`` holds; a
    ``ValidationError`` if it is anything else (a cursor is opaque: clients only hand back the
    one from ``next``, of the same listing)."""
    try:
        if not isinstance(cursor, str) or not SIGNATURE_CHARS < len(cursor) <= MAX_CURSOR_CHARS:
            raise ValueError(cursor)
        payload, signature = cursor[:-SIGNATURE_CHARS], cursor[-SIGNATURE_CHARS:]
        # NOTE: signed, so that a cursor is only ever one this site handed out for this owner's
        # listing (and this fact's): made up, changed or taken from another listing, it is a 400.
        signer = _cursor_signer(scope)
        if not any(
            constant_time_compare(signature, signer.signature(payload, key))
            for key in (signer.key, *signer.fallback_keys)
        ):
            raise ValueError(cursor)
        key = codec.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        if not isinstance(key, list) or len(key) != len(shape):
            raise ValueError(cursor)
        for value, kind in zip(key, shape, strict=True):
            if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(cursor)
            if kind is str and not isinstance(value, str):
                raise ValueError(cursor)
        return key  # type: ignore[no-any-return]
    except (ValueError, TypeError, binascii.Error) as e:
        raise ValidationError({"cursor": ["Invalid cursor."]}) from e


def _owner_pk(owner_id: str) -> Subquery:
    # NOTE: a scalar subquery, not a join: with the owner's pk a parameter of the plan, the
    # index's order is the query's order, and a LIMIT stops the scan (a join sorted every row).
    return Subquery(Owner.objects.filter(external_id=owner_id).values("pk")[:1])


def _check_limit(limit: int) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE_SIZE:
        raise ValidationError({"limit": [f"Ensure this value is between 1 and {MAX_PAGE_SIZE}."]})


@database_guard()
def fact_history(
    *, owner_id: str, key: str, limit: int = DEFAULT_PAGE_SIZE, cursor: str | None = None
) -> Page[FactVersionPayload]:
    """A page of the versions of one fact of the owner, newest first, and the cursor of the
    next page (``None`` on the last one). The first page is empty only if the key never existed.

    ``limit`` is 1-500; ``cursor`` is a ``next_cursor`` of an earlier page. Keyset pagination on
    (owner, key, version), served by that unique index: every page costs the same however
    deep. Raises ``ValidationError`` ({"user_id" | "key" | "limit" | "cursor": messages}) for
    bad input and ``MemoryUnavailable`` when the database cannot be reached.
    """
    _check_owner(owner_id)
    try:
        validate_held_fact_key(key)
    except ValidationError as e:
        raise ValidationError({"key": e.messages}) from e
    _check_limit(limit)
    versions = FactVersion.objects.filter(owner_id=_owner_pk(owner_id), key=key)
    if cursor is not None:
        (before,) = _cursor_decode(cursor, ("history", owner_id, key), (int,))
        versions = versions.filter(version__lt=before)
    rows = list(versions.order_by("-version")[: limit + 1])
    page = [fact_version_payload(version) for version in rows[:limit]]
    more = len(rows) > limit
    next_cursor = _cursor_encode(("history", owner_id, key), page[-1]["version"]) if more else None
    return Page(page, next_cursor)


afact_history = aio.twin(fact_history)


@database_guard()
def turn_list(
    *,
    owner_id: str,
    session_id: str | None = None,
    after: int | None = None,
    limit: int = DEFAULT_PAGE_SIZE,
    max_bytes: int | None = None,
) -> tuple[list[TurnPayload], bool]:
    """A page of the owner's turns, oldest first, with ``seq > after``; and whether more follow.

    Keyset pagination on (owner, seq): every page costs the same however deep it is.
    ``session_id`` keeps only the turns labelled with it; ``limit`` is 1-500, as in the API.
    With ``max_bytes`` the page also ends before its turns' contents pass that many bytes
    (characters off PostgreSQL), but holds at least one turn: one more query, of the sizes
    alone (PostgreSQL reads them without the contents), and a long page costs what its bytes do.
    Raises ``ValidationError`` ({"user_id" | "after" | "limit" | "max_bytes": messages}) for
    bad input and ``MemoryUnavailable`` when the database cannot be reached.
    """
    _check_owner(owner_id)
    if after is not None and (isinstance(after, bool) or not isinstance(after, int) or after < 0):
        raise ValidationError({"after": ["Ensure this value is an integer >= 0."]})
    _check_limit(limit)
    if max_bytes is not None and (
        isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1
    ):
        raise ValidationError({"max_bytes": ["Ensure this value is an integer >= 1."]})
    turns = _turn_page_queryset(owner_id, session_id=session_id, after=after)
    if max_bytes is not None:
        sizes = list(turns.annotate(size=_content_bytes()).values_list("seq", "size")[: limit + 1])
        fit = _page_fit([size for _, size in sizes[:limit]], max_bytes)
        if fit < len(sizes):
            rows = list(turns.filter(seq__lte=sizes[fit - 1][0]).values_list(*TURN_FIELDS)[:fit])
            return [turn_payload_from_row(row) for row in rows], True
    rows = list(turns.values_list(*TURN_FIELDS)[: limit + 1])
    return [turn_payload_from_row(row) for row in rows[:limit]], len(rows) > limit


def _content_bytes() -> Func | Length:
    # NOTE: octet_length reads a long content's size from its TOAST pointer, not the content.
    if connection.vendor == "postgresql":
        return Func(F("content"), function="octet_length", output_field=IntegerField())
    return Length("content")


def _page_fit(sizes: list[int], max_bytes: int) -> int:
    """How many of the first ``sizes`` fit in ``max_bytes`` together; at least one."""
    used = 0
    for fit, size in enumerate(sizes):
        if fit and used + size > max_bytes:
            return fit
        used += size
    return len(sizes)


aturn_list = aio.twin(turn_list)


def _turn_page_queryset(
    owner_id: str, *, session_id: str | None, after: int | None
) -> QuerySet[Turn]:
    # NOTE: the owner's pk as a scalar subquery (``_owner_pk``), not a join on the owner: with
    # a join Postgres sorted every turn of the owner after ``after`` for each page; this way it
    # walks the (owner, seq) or (owner, session_id, seq) index and stops at ``limit``.
    turns = Turn.objects.filter(owner_id=_owner_pk(owner_id))
    if session_id is not None:
        turns = turns.filter(session_id=session_id)
    if after is not None:
        turns = turns.filter(seq__gt=after)
    return turns.order_by("seq")


@database_guard()
def session_list(
    *, owner_id: str, limit: int = DEFAULT_PAGE_SIZE, cursor: str | None = None
) -> Page[SessionPayload]:
    """A page of the owner's sessions, most recently seen first (by ``session_id`` among equal
    ``last_seen``), and the cursor of the next page (``None`` on the last one).

    ``limit`` is 1-500; ``cursor`` is a ``next_cursor`` of an earlier page. Following the
    cursors yields every session once. Keyset pagination on (owner, last_seen desc,
    session_id), served by the index ``memory_session_page_idx``: every page costs the same
    however deep. A session that gets a turn while a walk is under way moves to the front, so
    that walk may miss it (it is on the first page now). Raises ``ValidationError``
    ({"user_id" | "limit" | "cursor": messages}) for bad input and ``MemoryUnavailable`` when
    the database cannot be reached.
    """
    _check_owner(owner_id)
    _check_limit(limit)
    sessions = Session.objects.filter(owner_id=_owner_pk(owner_id))
    if cursor is not None:
        last_seen, session_id = _cursor_decode(cursor, ("sessions", owner_id), (str, str))
        try:
            seen = dt.datetime.fromisoformat(last_seen)
            if seen.tzinfo is None:
                raise ValueError(last_seen)
        except ValueError as e:
            raise ValidationError({"cursor": ["Invalid cursor."]}) from e
        # NOTE: the redundant ``last_seen <= seen`` is the index condition that starts the scan
        # at the cursor; the OR alone would be a filter over every newer session.
        sessions = sessions.filter(
            Q(last_seen__lt=seen) | Q(last_seen=seen, session_id__gt=session_id),
            last_seen__lte=seen,
        )
    rows = list(sessions.order_by("-last_seen", "session_id")[: limit + 1])
    page = [session_payload(session) for session in rows[:limit]]
    more = len(rows) > limit
    last = rows[limit - 1] if more else None
    if last is None:
        return Page(page, None)
    return Page(
        page, _cursor_encode(("sessions", owner_id), last.last_seen.isoformat(), last.session_id)
    )


asession_list = aio.twin(session_list)


def _elapsed_ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


def health_get() -> HealthPayload:
    """Whether the database answers a query and the cache a PING, and how many milliseconds
    each took (also when it failed: a timeout shows as such); the cache's is None when no
    cache is configured. With ``MEMORY["CACHE_REPLICAS"]``, ``cache_replicas`` says whether
    this process's last cache update reached its replicas. Never raises."""
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
    state = cache.ping()
    cache_ms = None if state == "disabled" else _elapsed_ms(started)
    health: HealthPayload = {
        "database": database,
        "cache": state,
        "latency_ms": {"database": database_ms, "cache": cache_ms},
    }
    if conf.CACHE_REPLICAS and state != "disabled":
        # NOTE: what this process's last replicated update found, not a probe of its own.
        health["cache_replicas"] = cache.replicas_state()
    return health


ahealth_get = aio.twin(health_get)


@database_guard()
def owner_dirty_count(*, limit: int) -> int:
    """How many owners have a cache update Redis has not confirmed, counted up to ``limit``
    (one index-only scan of the partial index on ``cache_dirty``). Raises
    ``MemoryUnavailable`` when the database cannot be reached (``DatabaseError`` for another
    failure of it)."""
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
    """How many turns the owner holds and how many characters their contents have together
    (``OwnerUsage(0, 0)`` for an unknown owner): one query over the owner's turns, so as slow
    as they are long; for checking a cap before a write, where the cap bounds it. Raises
    ``MemoryUnavailable`` when the database cannot be reached."""
    _check_owner(owner_id)
    totals = Turn.objects.filter(owner_id=_owner_pk(owner_id)).aggregate(
        turns=Count("pk"), chars=Sum(Length("content"))
    )
    return OwnerUsage(totals["turns"] or 0, totals["chars"] or 0)


aowner_usage_get = aio.twin(owner_usage_get)


@database_guard()
def owners_idle_count(*, prefix: str, idle_for: dt.timedelta) -> int:
    """How many owners ``services.owners_forget_idle`` would forget now: ids starting with
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


aowner_summary_get = aio.twin(owner_summary_get)


@database_guard()
def owner_recent_list(*, limit: int) -> list[str]:
    """The ids of the ``limit`` owners written to most recently, newest first (one index scan).

    Raises ``MemoryUnavailable`` when the database cannot be reached.
    """
    owners = Owner.objects.order_by("-updated_at").values_list("external_id", flat=True)
    return list(owners[:limit])


aowner_recent_list = aio.twin(owner_recent_list)


def owner_id_iter(*, min_last_seq: int = 0, chunk_size: int = 1000) -> Iterator[str]:
    """Every owner id whose ``last_seq`` is above ``min_last_seq``, in primary-key order.

    Reads ``chunk_size`` ids per query (keyset on the primary key), so that a long walk holds
    no cursor or transaction open and sees owners created meanwhile. Raises
    ``MemoryUnavailable`` when the database cannot be reached.
    """
    after = 0
    while True:
        rows = _owner_id_chunk(min_last_seq, after, chunk_size)
        for pk, owner_id in rows:
            after = pk
            yield owner_id
        if len(rows) < chunk_size:
            return


@database_guard()
def _owner_id_chunk(min_last_seq: int, after: int, chunk_size: int) -> list[tuple[int, str]]:
    """The next ``chunk_size`` (pk, owner id) of ``owner_id_iter`` after the pk ``after``."""
    return list(
        Owner.objects.filter(pk__gt=after, last_seq__gt=min_last_seq)
        .order_by("pk")
        .values_list("pk", "external_id")[:chunk_size]
    )


_aowner_id_chunk = sync_to_async(_owner_id_chunk, thread_sensitive=True)


@aio.twin_of(owner_id_iter)
async def aowner_id_iter(*, min_last_seq: int = 0, chunk_size: int = 1000) -> AsyncIterator[str]:
    # NOTE: one hop per chunk of ids, not per id.
    after = 0
    while True:
        rows = await _aowner_id_chunk(min_last_seq, after, chunk_size)
        for pk, owner_id in rows:
            after = pk
            yield owner_id
        if len(rows) < chunk_size:
            return


# Every key made only of dots (1-64 of them): the keys check memory.W010 looks for.
DOT_KEYS = tuple("." * n for n in range(1, 65))


@database_guard()
def fact_dot_key_list(*, limit: int = 1000) -> list[tuple[str, str]]:
    """Up to ``limit`` facts whose key is made only of dots, written before that rule, as
    ``(owner_id, key)`` pairs by owner id and key (``manage.py memory_fact_keys`` renames them).

    One statement over the fact table (it has no index on the key alone: a scan). Raises
    ``MemoryUnavailable`` when the database cannot be reached.
    """
    facts = Fact.objects.filter(key__in=DOT_KEYS).order_by("owner__external_id", "key")
    return list(facts.values_list("owner__external_id", "key")[:limit])


afact_dot_key_list = aio.twin(fact_dot_key_list)


@database_guard()
def stats_get() -> StatsPayload:
    """Row counts of the app's tables, and the cache's state, counters and memory in Redis.

    Counts are exact (``COUNT(*)``), as slow as a scan of each table. ``cache`` is
    ``cache.stats()``: ``{"cache": "disabled"}``, ``{"cache": "down", ...}`` or ``{"cache": "ok",
    "keys", "memory_bytes", "counters", ...}``; Redis failures never raise. Raises
    ``MemoryUnavailable`` when the database cannot be reached.
    """
    return {
        "owners": Owner.objects.count(),
        "sessions": Session.objects.count(),
        "turns": Turn.objects.count(),
        "facts": Fact.objects.count(),
        "cache": cache.stats(),
    }


astats_get = aio.twin(stats_get)


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
    unknown owner has none. Bounded work: the best of the newest 1,000 matches
    (``search.RANK_WINDOW``) are returned, and a typo is looked up in the owner's vocabulary;
    three to five statements, each served by an index that leads with the owner, in one
    transaction whose statements each run under ``MEMORY["SEARCH_TIMEOUT_MS"]``. Raises
    ``ValidationError`` ({"q" | "limit" | "user_id": messages}) for bad input,
    ``SearchTimeout`` when a statement ran past that limit (Postgres stopped it; nothing is
    held, the connection stays usable) and ``MemoryUnavailable`` when the database cannot be
    reached.
    """
    _check_owner(owner_id)
    q = search.clean_query(q)
    limit = search.clean_limit(limit)
    with search.search_transaction(using=Turn.objects.db, milliseconds=conf.SEARCH_TIMEOUT_MS):
        owner_pk = Owner.objects.filter(external_id=owner_id).values_list("pk", flat=True).first()
        if owner_pk is None:
            return []
        turns = _owner_turns(owner_pk)
        window = search.RANK_WINDOW
        matches = search.turns_matching(turns, q, window=window)
        rows = list(matches.values_list(*TURN_FIELDS)[:limit])
        if not rows:
            similar = search.turns_similar(turns, q, owner_pk=owner_pk, window=window)
            if similar is not None:
                rows = list(similar.values_list(*TURN_FIELDS)[:limit])
    return [turn_payload_from_row(row) for row in rows]


aturn_search = aio.twin(turn_search)

# NOTE: the name the issue asked for; the Django way names it aturn_search.
asearch = aturn_search


@database_guard()
def turn_search_queryset(*, q: str, queryset: QuerySet[Turn] | None = None) -> QuerySet[Turn]:
    """The turns of ``queryset`` (every owner's by default) that match ``q`` as in
    ``turn_search``, annotated with ``search_rank`` and ordered best first (for the admin).

    The words must match as they are (any form, any case): the similar-words fallback looks
    up one owner's vocabulary, and these turns may be anyone's. The result is a lazy queryset
    that ranks every match; nothing runs before it is read (the async twin reads it in its
    hop, so that async code may iterate it with ``for`` or ``async for``: narrow ``queryset``
    to bound it). Raises ``ValidationError`` ({"q": messages}) for a bad ``q``, and
    ``MemoryUnavailable`` when the database cannot be reached while the rows are read.
    """
    q = search.clean_query(q)
    turns = Turn.objects.all() if queryset is None else queryset
    return search.turns_matching(turns, q)


@database_guard()
def _turn_search_queryset_read(*, q: str, queryset: QuerySet[Turn] | None) -> QuerySet[Turn]:
    turns = turn_search_queryset(q=q, queryset=queryset)
    # NOTE: len() fills the queryset's result cache, here in the sync thread: iterating it
    # afterwards (``for``, ``async for``, ``len``, an index) runs no query in async code.
    len(turns)
    return turns


_aturn_search_queryset_read = sync_to_async(_turn_search_queryset_read, thread_sensitive=True)


@aio.twin_of(turn_search_queryset)
async def aturn_search_queryset(
    *, q: str, queryset: QuerySet[Turn] | None = None
) -> QuerySet[Turn]:
    # NOTE: not aio.twin: a lazy queryset out of the hop would run its query in the caller's
    # async code on a plain ``for`` (SynchronousOnlyOperation, issue 21).
    return await _aturn_search_queryset_read(q=q, queryset=queryset)


__all__ = [
    "Page",
    "acontext_get",
    "acontext_messages",
    "afact_history",
    "afact_list",
    "ahealth_get",
    "aowner_dirty_count",
    "aowner_exists",
    "aowner_id_iter",
    "aowner_recent_list",
    "aowner_summary_get",
    "aowner_usage_get",
    "aowners_idle_count",
    "asearch",
    "asession_list",
    "astats_get",
    "aturn_list",
    "aturn_search",
    "aturn_search_queryset",
    "context_get",
    "context_messages",
    "fact_history",
    "fact_list",
    "health_get",
    "owner_dirty_count",
    "owner_exists",
    "owner_id_iter",
    "owner_recent_list",
    "owner_summary_get",
    "owner_usage_get",
    "owners_idle_count",
    "session_list",
    "stats_get",
    "turn_list",
    "turn_search",
    "turn_search_queryset",
]
