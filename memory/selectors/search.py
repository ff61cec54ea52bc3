"""Search over an owner's turns: by words (full text), by meaning (the turns' vectors), or both."""

from __future__ import annotations

import logging
import math
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from contextlib import nullcontext
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import connections
from django.db.models import (
    BigIntegerField,
    QuerySet,
    Value,
)
from django.db.models.functions import Cast
from django.utils import timezone

from memory import aio, fusion, ranking, search, when
from memory.conf import conf
from memory.exceptions import SearchTimeout, SearchUnavailable, database_guard
from memory.models import Owner, Turn
from memory.payloads import (
    TurnPayload,
    turn_payload_from_row,
)
from memory.recall import embedders, vectors
from memory.selectors.events import EventFilters, event_narrowed
from memory.selectors.pages import check_owner

logger = logging.getLogger("memory.recall")


def owner_turns(owner_pk: int) -> QuerySet[Turn]:
    # NOTE: a bigint, not a bare number: the GIN indexes (btree_gin) serve ``owner_id =
    # 42::bigint``.
    return Turn.objects.filter(owner_id=Cast(Value(owner_pk), BigIntegerField()))


# The ways ``turn_search`` ranks: by words, by meaning (embeddings), or both fused.
MODES = ("text", "semantic", "hybrid")
# NOTE: each ranking hybrid fuses is this long at most (reciprocal rank fusion, Cormack et al.).
FUSION_CANDIDATES = 50
FUSION_K = 60
# NOTE: the best this many of each ranking bring their session neighbours (the turns just before
# and after) in as candidates: a question's words often match the turn beside the answer.
NEIGHBOURED = 1


def semantic_on() -> bool:
    """Whether search by meaning is available: an embedder set and the vector table there."""
    return vectors.embeddings_on(Turn.objects.db)


def semantic_off_reason() -> str:
    """Why search by meaning is off, and how to turn it on, in a sentence or two."""
    from django.db import connections

    from memory.extras import extra_install

    if conf.EMBEDDER is None:
        user = getattr(settings, "MEMORY", None) or {}
        if isinstance(user, dict) and "EMBEDDER" in user:
            return (
                "MEMORY['EMBEDDER'] is None; set it to an embedder's dotted path "
                "(docs/recall.md), the built-in one is 'memory.recall.embedders.multilingual_e5'."
            )
        return (
            f"no embedder is installed; install the built-in one with {extra_install('semantic')}."
        )
    connection = connections[Turn.objects.db]
    if connection.vendor != "postgresql":
        return (
            f"the vectors live in PostgreSQL with pgvector, and this database is "
            f"{connection.display_name}; run on PostgreSQL (the demo: DATABASE_URL=postgres://...) "
            "with pgvector installed, then manage.py migrate (docs/recall.md)."
        )
    return (
        "this PostgreSQL has no pgvector, or not the vector table; install pgvector on the "
        "server, then run manage.py memory_embed --setup and manage.py memory_embed "
        "(docs/recall.md)."
    )


def search_mode(mode: str | None) -> str:
    """``mode`` checked: default ``hybrid`` where search by meaning is on, else ``text``. Raises
    ``ValidationError`` ({"mode": ...}) for an unknown mode, or one that needs embeddings where they
    are off."""
    if mode is None or mode == "":
        return "hybrid" if semantic_on() else "text"
    if mode not in MODES:
        raise ValidationError(
            {"mode": [f'"{mode}" is not a valid choice: text, semantic, hybrid.']}
        )
    if mode != "text" and not semantic_on():
        raise ValidationError(
            {
                "mode": [
                    f"Search by meaning is off here: {semantic_off_reason()} "
                    f"Until then mode={mode} is unavailable; mode=text works."
                ]
            }
        )
    return mode


# NOTE: a search embeds its query on one of these threads while the request thread reads the
# database (the embedder's engine lets the GIL go); a burst waits its turn, each search at most
# until MEMORY["QUERY_EMBED_TIMEOUT_MS"].
EMBED_THREADS = 4
_EMBED_THREADS = ThreadPoolExecutor(
    max_workers=EMBED_THREADS, thread_name_prefix="memory-query-embed"
)


def _after_fork() -> None:
    # NOTE: a child has none of its parent's threads, which the pool would count as idle and wait
    # for: a pool of its own.
    global _EMBED_THREADS
    _EMBED_THREADS = ThreadPoolExecutor(
        max_workers=EMBED_THREADS, thread_name_prefix="memory-query-embed"
    )


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)

# An owner as a search reads it: (pk, embedded_seq, last_seq).
OwnerRow = tuple[int, int, int]

# NOTE: an embedder's first query in a process may load its model (the built-in one: about a
# second); until it has answered once here, a query's embedding is waited for this long.
FIRST_ANSWER_SECONDS = 30.0
# The embedders (by name) that have answered a query in this process.
_ANSWERED: set[str] = set()
# NOTE: an agent's loop asks again each step; kept per owner so timing leaks nothing.
_RECENT_QUERIES = embedders.RecentVectors(size=256, longest=search.MAX_QUERY_CHARS)


def queries_forget() -> None:
    """Forget the recent queries' vectors: a measurement's next searches embed their queries."""
    _RECENT_QUERIES.clear()


def _embedded(embedder: Any, key: tuple[str, str, str], beside: bool) -> list[float]:
    with embedders.query_beside_database() if beside else nullcontext():
        vector = embedders.query_embed(embedder, key[-1])
    _RECENT_QUERIES.put(key, vector)
    return vector


class QueryEmbedding:
    """The vector of a search's query ``text``, embedded on a thread from the search's begin (or
    reused from ``_RECENT_QUERIES``). ``vector()`` waits ``MEMORY["QUERY_EMBED_TIMEOUT_MS"]``
    (``FIRST_ANSWER_SECONDS`` before the embedder's first answer); past it or on an error, a
    ``required`` one raises ``SearchTimeout`` or ``SearchUnavailable``, another logs and answers
    ``None``."""

    def __init__(self, owner_id: str, text: str, *, required: bool) -> None:
        embedder = embedders.embedder_get()
        assert embedder is not None
        self.text = text
        self.required = required
        self.milliseconds = conf.QUERY_EMBED_TIMEOUT_MS
        self._name = embedders.embedder_name(embedder)
        key = (owner_id, self._name, text)
        self._known = _RECENT_QUERIES.get(key)
        self._future: Future[list[float]] | None = None
        if self._known is None:
            wait = self.milliseconds / 1000
            if self._name not in _ANSWERED:
                wait = max(wait, FIRST_ANSWER_SECONDS)
            self._deadline = time.monotonic() + wait
            # NOTE: a search by meaning alone waits for it; any other reads the database
            # meanwhile, on the core a second thread of the embedder's would take.
            self._future = _EMBED_THREADS.submit(_embedded, embedder, key, not required)

    def vector(self) -> list[float] | None:
        """The query's vector (see the class for failures)."""
        if self._future is None:
            return self._known
        try:
            vector = self._future.result(timeout=max(0.0, self._deadline - time.monotonic()))
            _ANSWERED.add(self._name)
            return vector
        except FuturesTimeout as e:
            self._future.cancel()
            if self.required:
                raise SearchTimeout(self.milliseconds) from e
            logger.warning(
                "The embedder took longer than %d ms on a search query; searching by words.",
                self.milliseconds,
            )
        except Exception as e:
            if self.required:
                logger.exception("The embedder failed on a search query.")
                raise SearchUnavailable("Search by meaning failed: the embedder raised.") from e
            logger.exception("The embedder failed on a search query; searching by words.")
        return None

    def cancel(self) -> None:
        """Drop it unused: it is not embedded where it has not started yet."""
        if self._future is not None:
            self._future.cancel()


def query_embedding(owner_id: str, text: str, mode: str) -> QueryEmbedding | None:
    """The query's embedding, begun, for a search by ``mode`` of the owner's turns: none for
    ``text``."""
    if mode == "text":
        return None
    return QueryEmbedding(owner_id, text, required=mode == "semantic")


def _candidates(
    owner: OwnerRow,
    q: str,
    mode: str,
    query: QueryEmbedding | None,
    depth: int,
    filters: ranking.TurnFilters,
    walk_set: bool = False,
) -> tuple[list[fusion.Candidate], str]:
    """The turns either ranking finds among its best ``depth``, with their features; and the
    mode that ranked them (``text`` where the query's embedding failed; ``<mode> plain``: the
    owner compared uncentred). ``walk_set``: as ``ranked_turns``."""
    owner_pk, embedded, last_seq = owner
    using = Turn.objects.db
    turns = filters.queryset(owner_turns(owner_pk))
    if connections[using].vendor != "postgresql":
        ranked = ranking.words_ranked_python(turns, q, depth=depth)
        return [
            fusion.Candidate(row[0], row[1:], None, coverage) for row, coverage in ranked
        ], "text"
    top_seq = last_seq if filters.before_seq is None else min(last_seq, filters.before_seq - 1)
    words = None
    terms: list[str] = []
    pks: list[int] = []
    if mode != "semantic":
        words = ranking.words_ranked(
            using=using, owner_pk=owner_pk, q=q, top_seq=top_seq, depth=depth, filters=filters
        )
        terms = sorted(words.idf)
        pks = list(words.pks)
    vector = None if query is None else query.vector()
    model = None
    measure = None
    heads: list[int] = []
    if vector is not None:
        embedder = embedders.embedder_get()
        assert embedder is not None
        model = embedders.embedder_name(embedder)
        centre = vectors.owner_centre(using, owner_pk, model, embedded=embedded)
        measure = vectors.Centred(vector, centre)
        mode += "" if centre else " plain"
        nearest = vectors.vectors_nearest(
            using,
            owner_pk,
            model,
            vector,
            depth,
            embedded=embedded,
            filters=filters,
            measure=measure,
            walk_set=walk_set,
        )
        seen = set(pks)
        pks += [pk for pk, _ in nearest if pk not in seen]
        heads = pks[:NEIGHBOURED] + [pk for pk, _ in nearest[:NEIGHBOURED]]
    elif mode == "hybrid":
        mode = "text"
    similar = False
    if not pks and mode == "text":
        fallback = search.turns_similar(turns, q, owner_pk=owner_pk, window=search.RANK_WINDOW)
        if fallback is not None:
            pks = list(fallback.values_list("pk", flat=True)[:depth])
            similar = True
    if not pks:
        return [], mode
    rows = ranking.turns_features(
        using=using,
        owner_pk=owner_pk,
        pks=pks,
        terms=terms,
        model=model,
        vector=None if measure is None else measure.query_text,
        measure=measure,
        alike=fusion.ALIKE,
        heads=heads,
    )
    found: list[fusion.Candidate] = []
    for pk, *fields, length, held, distance, plain, crowding, alike in rows:
        cosine = None if distance is None else 1.0 - float(distance)
        if similar:
            coverage = fusion.SIMILAR_COVERAGE
        elif words is not None:
            coverage = words.coverage(length or 0, held) * ranking.as_written(q, fields[3])
        else:
            coverage = 0.0
        crowd = None if crowding is None else float(crowding)
        c = fusion.Candidate(pk, tuple(fields), cosine, coverage, crowd)
        c.plain = None if plain is None else 1.0 - float(plain)
        c.alike = frozenset(alike or ())
        found.append(c)
    return found, mode


def _with_context(owner_pk: int, results: list[TurnPayload]) -> None:
    """Give each result ``context``: the turns just before and after it in its session, but those
    among the results."""
    if not results:
        return
    shown = {turn["seq"] for turn in results}
    wanted = {turn["seq"] + step for turn in results for step in (-1, 1)} - shown
    rows = ranking.turns_at(using=Turn.objects.db, owner_pk=owner_pk, seqs=sorted(wanted))
    near = {row[0]: turn_payload_from_row(row) for row in rows}
    for turn in results:
        around = [near.get(turn["seq"] - 1), near.get(turn["seq"] + 1)]
        turn["context"] = [  # type: ignore[typeddict-unknown-key]
            other
            for other in around
            if other is not None and other["session_id"] == turn["session_id"]
        ]


def _depth(limit: int) -> int:
    """How many turns each ranking finds for ``limit`` results."""
    return max(limit * 3, FUSION_CANDIDATES)


def ranked_turns(
    owner: OwnerRow,
    q: str,
    mode: str,
    query: QueryEmbedding | None,
    limit: int,
    *,
    filters: ranking.TurnFilters | None = None,
    min_score: float | None = None,
    context: bool = True,
    walk_set: bool = False,
) -> list[TurnPayload]:
    """The owner's best ``limit`` turns for ``q`` by ``mode``, in the caller's search transaction
    (``walk_set``: with ``vectors.walk_settings(_depth(limit))``); ``owner`` as ``_OWNER_SQL``
    reads it."""
    filters = filters or ranking.TurnFilters()
    depth = _depth(limit)
    candidates, mode = _candidates(owner, q, mode, query, depth, filters, walk_set)
    results = []
    dated = filters.after is not None or filters.before is not None
    for c in fusion.ranked(candidates, mode, limit, q, dated=dated):
        score = fusion.score_of(c.score_logit)
        if min_score is not None and score < min_score:
            continue
        payload = turn_payload_from_row(c.row)
        payload["score"] = round(score, 6)  # type: ignore[typeddict-unknown-key]
        results.append(payload)
    if context:
        _with_context(owner[0], results)
    return results


# An owner as a search reads it (``OwnerRow``), with its settings.
_OWNER_SQL = f"SELECT id, embedded_seq, last_seq FROM {Owner._meta.db_table} WHERE external_id = %s"


def search_filters(
    q: str,
    *,
    after: Any = None,
    before: Any = None,
    now: Any = None,
    before_seq: int | None = None,
) -> tuple[ranking.TurnFilters, str]:
    """The turns a search of ``q`` keeps and the text it matches: ``after`` (inclusive) and
    ``before`` (exclusive) as ISO-8601, narrowed by a time ``q`` names against ``now`` (default:
    this server's clock), whose words then leave the text matched; else, without either, by a
    time relative to an event ``q`` names (``EventFilters``, dated in the search). Raises
    ``ValidationError`` ({"after" | "before" | "now": ...}) for a bad date; an empty range keeps
    nothing."""
    after_at = when.when_parse(after, field="after")
    before_at = when.when_parse(before, field="before")
    now_at = when.when_parse(now, field="now") or timezone.now()
    named, text = when.when_in_query(q, now_at)
    if named is not None:
        start = named[0] if after_at is None else max(after_at, named[0])
        end = named[1] if before_at is None else min(before_at, named[1])
        # A time named in words that the explicit range excludes yields to the range.
        if start < end:
            after_at, before_at = start, end
        else:
            text = q
    elif after_at is None and before_at is None and (event := when.event_in_query(q)):
        return EventFilters(event=event, now=now_at, before_seq=before_seq), text
    filters = ranking.TurnFilters(before_seq=before_seq, after=after_at, before=before_at)
    return filters, text


def clean_min_score(min_score: Any) -> float | None:
    """``min_score`` itself (``None`` for none); ``ValidationError({"min_score": ...})`` unless a
    number in [0, 1]."""
    if min_score is None:
        return None
    if isinstance(min_score, bool) or not isinstance(min_score, (int, float)):
        raise ValidationError({"min_score": ["Enter a number between 0 and 1."]})
    if not 0.0 <= float(min_score) <= 1.0 or math.isnan(min_score):
        raise ValidationError({"min_score": ["Enter a number between 0 and 1."]})
    return float(min_score)


@database_guard()
def turn_search(
    *,
    owner_id: str,
    q: str,
    limit: int = 20,
    mode: str | None = None,
    after: Any = None,
    before: Any = None,
    now: Any = None,
    min_score: float | None = None,
) -> list[TurnPayload]:
    """The owner's turns most relevant to ``q``, best first, each with its ``score`` (calibrated, in
    [0, 1]) and its ``context`` (the turns just before and after it in its session).

    ``mode`` (``MODES``, docs/recall.md): ``text`` (BM25), ``semantic`` or ``hybrid`` (the default
    where ``semantic_on()``). ``min_score`` drops lower scores. ``after``/``before`` (ISO-8601)
    keep that range, narrowed by a time ``q`` names against ``now``. ``q``: 1-200 characters of
    free text; ``limit``: 1-100; each statement under ``MEMORY["SEARCH_TIMEOUT_MS"]``.

    Raises ``ValidationError`` ({field: messages}) for bad input or a mode that is off,
    ``SearchTimeout`` past a limit, ``SearchUnavailable`` when ``semantic`` could not embed the
    query, and ``MemoryUnavailable`` when the database cannot be reached.
    """
    check_owner(owner_id)
    q = search.clean_query(q)
    limit = search.clean_limit(limit)
    min_score = clean_min_score(min_score)
    filters, text = search_filters(q, after=after, before=before, now=now)
    mode = search_mode(mode)
    query = query_embedding(owner_id, text, mode)
    return _searched(owner_id, text, mode, query, limit, filters=filters, min_score=min_score)


aturn_search = aio.twin(turn_search)


def _searched(
    owner_id: str,
    text: str,
    mode: str,
    query: QueryEmbedding | None,
    limit: int,
    *,
    filters: ranking.TurnFilters,
    min_score: float | None,
    context: bool = True,
) -> list[TurnPayload]:
    """``ranked_turns`` of the owner ``owner_id`` in a search transaction; none for an unknown
    owner."""
    if isinstance(filters, EventFilters) and mode != "text":
        filters.embedding = QueryEmbedding(owner_id, filters.event.phrase, required=False)
    # NOTE: an event's lookup walks with its own settings, and the search's walk after it sets
    # its own again; any other search's walk has them from the first statement.
    walk_set = query is not None and not isinstance(filters, EventFilters)
    with search.search_transaction(
        using=Turn.objects.db,
        milliseconds=conf.SEARCH_TIMEOUT_MS,
        settings=vectors.walk_settings(_depth(limit)) if walk_set else None,
        first=(_OWNER_SQL, [owner_id]),
    ) as row:
        if row is None:
            for begun in (query, getattr(filters, "embedding", None)):
                if begun is not None:
                    begun.cancel()
            return []
        owner = (row[0], row[1], row[2])
        if isinstance(filters, EventFilters):
            filters = event_narrowed(owner, filters)
        return ranked_turns(
            owner,
            text,
            mode,
            query,
            limit,
            filters=filters,
            min_score=min_score,
            context=context,
            walk_set=walk_set,
        )


def recall_begin(*, owner_id: str, query: str, now: Any = None) -> QueryEmbedding | None:
    """The embedding of a recall's ``query``, begun ahead of ``turns_recalled`` so that it runs
    while the caller reads the context; ``None`` where there is nothing to begin yet (a query
    ``turns_recalled`` will refuse, a search by words, or embeddings not known to be on: no I/O
    here, so the async path may call it)."""
    try:
        check_owner(owner_id)
        q = search.clean_query(query)
        text = search_filters(q, now=now)[1]
    except ValidationError:
        return None
    if not vectors.embeddings_known_on(Turn.objects.db):
        return None
    return QueryEmbedding(owner_id, text, required=False)


@database_guard()
def turns_recalled(
    *,
    owner_id: str,
    query: str,
    before_seq: int | None,
    limit: int,
    now: Any = None,
    min_score: float | None = None,
    begun: QueryEmbedding | None = None,
) -> list[TurnPayload]:
    """The owner's turns before ``before_seq`` (all when ``None``) most relevant to ``query``, best
    first, at most ``limit``, without ``context``: ``turn_search`` in its default mode, ``begun``
    the query's embedding where ``recall_begin`` began it. Raises ``ValidationError``
    ({"query": ...}) for a query ``turn_search`` would refuse."""
    try:
        q = search.clean_query(query)
    except ValidationError as e:
        raise ValidationError({"query": e.message_dict["q"]}) from e
    min_score = clean_min_score(min_score)
    filters, text = search_filters(q, now=now, before_seq=before_seq)
    mode = search_mode(None)
    if begun is not None and (mode == "text" or begun.text != text):
        begun.cancel()
        begun = None
    embedding = begun or query_embedding(owner_id, text, mode)
    return _searched(
        owner_id, text, mode, embedding, limit, filters=filters, min_score=min_score, context=False
    )


aturns_recalled = aio.twin(turns_recalled)


@database_guard()
def facts_similar(*, owner_id: str, query: str, limit: int) -> dict[str, float]:
    """The cosine similarity to ``query`` of the owner's ``limit`` nearest facts, by key; empty
    where search by meaning is off, the owner is unknown, or the embedder failed or ran past
    ``MEMORY["QUERY_EMBED_TIMEOUT_MS"]`` (logged). Raises
    ``ValidationError`` ({"q": ...}) for a query ``turn_search`` would refuse."""
    check_owner(owner_id)
    q = search.clean_query(query)
    if not semantic_on():
        return {}
    embedding = QueryEmbedding(owner_id, q, required=False)
    with search.search_transaction(
        using=Turn.objects.db, milliseconds=conf.SEARCH_TIMEOUT_MS, first=(_OWNER_SQL, [owner_id])
    ) as owner:
        vector = embedding.vector() if owner is not None else None
        if owner is None or vector is None:
            embedding.cancel()
            return {}
        embedder = embedders.embedder_get()
        assert embedder is not None
        nearest = vectors.facts_nearest(
            Turn.objects.db, owner[0], embedders.embedder_name(embedder), vector, limit
        )
    # Cosine similarity, 1 - distance: 1 the same direction, 0 unrelated.
    return {key: 1.0 - distance for key, distance in nearest}


afacts_similar = aio.twin(facts_similar)


@database_guard()
def turn_search_queryset(*, q: str, queryset: QuerySet[Turn] | None = None) -> QuerySet[Turn]:
    """The turns of ``queryset`` (every owner's by default) that match ``q`` by words, annotated
    with ``search_rank``, best first (for the admin).

    A lazy queryset, with no similar-words fallback (the turns may be anyone's); narrow
    ``queryset`` to bound it. Raises ``ValidationError`` ({"q": messages}) for a bad ``q``, and
    ``MemoryUnavailable`` when the database cannot be reached while the rows are read.
    """
    q = search.clean_query(q)
    turns = Turn.objects.all() if queryset is None else queryset
    return search.turns_matching(turns, q)


@database_guard()
def _turn_search_queryset_read(*, q: str, queryset: QuerySet[Turn] | None) -> QuerySet[Turn]:
    turns = turn_search_queryset(q=q, queryset=queryset)
    # NOTE: fill the result cache in the sync thread, so async code iterating it runs no query.
    len(turns)
    return turns


_aturn_search_queryset_read = sync_to_async(_turn_search_queryset_read, thread_sensitive=True)


@aio.twin_of(turn_search_queryset)
async def aturn_search_queryset(
    *, q: str, queryset: QuerySet[Turn] | None = None
) -> QuerySet[Turn]:
    # NOTE: not aio.twin: a lazy queryset out of the hop would query in async code
    # (SynchronousOnlyOperation).
    return await _aturn_search_queryset_read(q=q, queryset=queryset)
