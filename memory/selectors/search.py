"""Search over an owner's turns: by words (full text), by meaning (the turns' vectors), or both."""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models import (
    BigIntegerField,
    QuerySet,
    Value,
)
from django.db.models.functions import Cast

from memory import aio, search
from memory.conf import conf
from memory.exceptions import SearchUnavailable, database_guard
from memory.models import Owner, Turn
from memory.payloads import (
    TURN_FIELDS,
    TurnPayload,
    turn_payload_from_row,
)
from memory.recall import embedders, vectors
from memory.selectors.pages import check_owner

logger = logging.getLogger("memory.recall")


def owner_turns(owner_pk: int) -> QuerySet[Turn]:
    # NOTE: a bigint, not a bare number: Postgres reads 42 as an integer, and the GIN indexes
    # (btree_gin's bigint class) serve ``owner_id = 42::bigint`` only.
    return Turn.objects.filter(owner_id=Cast(Value(owner_pk), BigIntegerField()))


# The ways ``turn_search`` ranks: by words, by meaning (embeddings), or both fused.
MODES = ("text", "semantic", "hybrid")
# NOTE: each ranking hybrid fuses is this long at most; reciprocal rank fusion's usual constant
# (Cormack et al., 2009): a turn first in one ranking and absent from the other still beats a
# turn tenth in both.
FUSION_CANDIDATES = 50
FUSION_K = 60


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
    """``mode`` checked: the default is ``hybrid`` where search by meaning is on, else ``text``.
    Raises ``ValidationError`` ({"mode": ...}) for an unknown mode, and for ``semantic`` or
    ``hybrid`` where embeddings are off."""
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


# NOTE: a hybrid search embeds its query on one of these threads while its text search runs
# in the database (the built-in embedder's engine lets the GIL go): the two overlap.
_EMBED_THREADS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="memory-query-embed")

# A query's vector, or its embedding under way (a hybrid search's).
QueryVector = list[float] | Future[list[float]] | None


def _query_vector(q: str, mode: str) -> tuple[str, QueryVector]:
    """The vector of ``q`` for a search by meaning: ``semantic`` embeds it here, before any
    transaction opens, and raises ``SearchUnavailable`` where the embedder fails; ``hybrid``
    starts embedding it on a thread of its own (``_resolved`` waits for it)."""
    if mode == "text":
        return mode, None
    embedder = embedders.embedder_get()
    assert embedder is not None
    if mode == "hybrid":
        return mode, _EMBED_THREADS.submit(embedders.query_embed, embedder, q)
    try:
        return mode, embedders.query_embed(embedder, q)
    except Exception as e:
        logger.exception("The embedder failed on a search query.")
        raise SearchUnavailable("Search by meaning failed: the embedder raised.") from e


def _resolved(query: QueryVector) -> list[float] | None:
    """The vector, once its embedding is done; None where it failed (logged: the hybrid
    search goes on by words)."""
    if not isinstance(query, Future):
        return query
    try:
        return query.result()
    except Exception:
        logger.exception("The embedder failed on a search query; searching by words.")
        return None


def _text_rows(turns: QuerySet[Turn], q: str, owner_pk: int, limit: int) -> list[tuple[Any, ...]]:
    window = search.RANK_WINDOW
    matches = search.turns_matching(turns, q, window=window)
    rows = list(matches.values_list("pk", *TURN_FIELDS)[:limit])
    if not rows:
        similar = search.turns_similar(turns, q, owner_pk=owner_pk, window=window)
        if similar is not None:
            rows = list(similar.values_list("pk", *TURN_FIELDS)[:limit])
    return rows


def _semantic_rows(
    turns: QuerySet[Turn], owner: tuple[int, int], query: list[float], limit: int
) -> list[tuple[tuple[Any, ...], float]]:
    embedder = embedders.embedder_get()
    assert embedder is not None
    owner_pk, embedded = owner
    nearest = vectors.vectors_nearest(
        turns.db, owner_pk, embedders.embedder_name(embedder), query, limit, embedded=embedded
    )
    rows = {
        row[0]: row
        for row in turns.filter(pk__in=[pk for pk, _ in nearest]).values_list("pk", *TURN_FIELDS)
    }
    # NOTE: cosine similarity, 1 - distance: 1 the same direction, 0 unrelated.
    return [(rows[pk], 1.0 - distance) for pk, distance in nearest if pk in rows]


def _fused(
    text: list[tuple[Any, ...]], semantic: list[tuple[tuple[Any, ...], float]], limit: int
) -> list[tuple[tuple[Any, ...], float]]:
    """Reciprocal rank fusion of the two rankings: best first, the newest among equals."""
    scores: dict[int, float] = {}
    found: dict[int, tuple[Any, ...]] = {}
    for rank, row in enumerate(text):
        scores[row[0]] = scores.get(row[0], 0.0) + 1.0 / (FUSION_K + rank + 1)
        found[row[0]] = row
    for rank, (row, _) in enumerate(semantic):
        scores[row[0]] = scores.get(row[0], 0.0) + 1.0 / (FUSION_K + rank + 1)
        found[row[0]] = row
    best = sorted(scores, key=lambda pk: (-scores[pk], -found[pk][1]))[:limit]
    return [(found[pk], scores[pk]) for pk in best]


def _scored(row: tuple[Any, ...], score: float | None) -> TurnPayload:
    payload = turn_payload_from_row(row[1:])
    if score is not None:
        payload["score"] = round(score, 6)  # type: ignore[typeddict-unknown-key]
    return payload


def ranked_turns(
    owner: tuple[int, int],
    q: str,
    mode: str,
    query: QueryVector,
    limit: int,
    *,
    before_seq: int | None = None,
    skip: int = 0,
) -> list[TurnPayload]:
    """The owner's best ``limit`` turns for ``q`` by ``mode``, in the caller's search
    transaction; ``owner`` is their ``(pk, embedded_seq)`` (``_owner_read``). With
    ``before_seq``, only turns before it (the ``skip`` turns from it on are passed over by the
    vector scan's extra depth)."""
    owner_pk = owner[0]
    turns = owner_turns(owner_pk)
    if before_seq is not None:
        turns = turns.filter(seq__lt=before_seq)
    if mode == "text" or query is None:
        return [_scored(row, None) for row in _text_rows(turns, q, owner_pk, limit)]
    if mode == "semantic":
        vector = _resolved(query)
        assert vector is not None
        found = _semantic_rows(turns, owner, vector, limit + skip)[:limit]
        return [_scored(row, score) for row, score in found]
    depth = max(limit, FUSION_CANDIDATES)
    text = _text_rows(turns, q, owner_pk, depth)
    vector = _resolved(query)
    if vector is None:
        return [_scored(row, None) for row in text[:limit]]
    semantic = _semantic_rows(turns, owner, vector, depth + skip)[:depth]
    return [_scored(row, score) for row, score in _fused(text, semantic, limit)]


def _owner_read(owner_id: str) -> tuple[int, int] | None:
    """The owner's ``(pk, embedded_seq)``, or None for an unknown owner."""
    return Owner.objects.filter(external_id=owner_id).values_list("pk", "embedded_seq").first()


@database_guard()
def turn_search(
    *, owner_id: str, q: str, limit: int = 20, mode: str | None = None
) -> list[TurnPayload]:
    """The owner's turns that match ``q``: best match first, newest first among equals.

    ``mode`` says how they are ranked (``MODES``): ``text`` by the words (always available);
    ``semantic`` by meaning, the cosine similarity of the turns' vectors
    (``MEMORY["EMBEDDER"]``) to the query's, each result with its ``score``; ``hybrid`` fuses
    both rankings (reciprocal rank fusion, ``score`` the fused one). The default is ``hybrid``
    where search by meaning is on (``semantic_on()``), else ``text``; ``semantic`` or
    ``hybrid`` where it is off is a ``ValidationError`` ({"mode": ...}). The query is embedded
    in this process (about 25 ms for the built-in embedder): before the search's transaction
    opens for ``semantic``, and for ``hybrid`` on a thread of its own while the text search
    runs; a turn appended since the owner's last embedding run is found by its words only.

    ``q`` is 1-200 characters of free text, stripped, and never query syntax. By words, every
    English word of it must match, in any case and form ("Played" finds "play"); Chinese,
    Japanese and Korean text matches where the content holds it, with no spaces needed ("篮球"
    finds "我喜欢打篮球"). When the words match no turn, turns with similar words are returned
    (a typo, or the start of a word). ``limit`` is 1-100. Only the owner's own turns are
    searched; an unknown owner has none. Bounded work: the best of the newest 1,000 matches
    (``search.RANK_WINDOW``) are ranked by words, a typo is looked up in the owner's
    vocabulary, and by meaning one scan of the owner's vectors keeps the nearest; each statement
    is served by an index that leads with the owner, in one transaction whose statements each
    run under ``MEMORY["SEARCH_TIMEOUT_MS"]``. Raises ``ValidationError`` ({"q" | "limit" |
    "mode" | "user_id": messages}) for bad input, ``SearchTimeout`` when a statement ran past
    that limit (Postgres stopped it; nothing is held, the connection stays usable),
    ``SearchUnavailable`` when ``semantic`` was asked and the embedder failed, and
    ``MemoryUnavailable`` when the database cannot be reached.
    """
    check_owner(owner_id)
    q = search.clean_query(q)
    limit = search.clean_limit(limit)
    mode, query = _query_vector(q, search_mode(mode))
    with search.search_transaction(using=Turn.objects.db, milliseconds=conf.SEARCH_TIMEOUT_MS):
        owner = _owner_read(owner_id)
        if owner is None:
            return []
        return ranked_turns(owner, q, mode, query, limit)


aturn_search = aio.twin(turn_search)


@database_guard()
def turns_recalled(
    *, owner_id: str, query: str, before_seq: int | None, skip: int, limit: int
) -> list[TurnPayload]:
    """The owner's turns before ``before_seq`` (all, when ``None``) most relevant to ``query``,
    best first, at most ``limit``: ``turn_search`` in its default mode, bounded as it is.
    ``skip`` is how many turns there are from ``before_seq`` on (the context's window). Raises
    ``ValidationError`` ({"query": ...}) for a query ``turn_search`` would refuse."""
    try:
        q = search.clean_query(query)
    except ValidationError as e:
        raise ValidationError({"query": e.message_dict["q"]}) from e
    mode, vector = _query_vector(q, search_mode(None))
    with search.search_transaction(using=Turn.objects.db, milliseconds=conf.SEARCH_TIMEOUT_MS):
        owner = _owner_read(owner_id)
        if owner is None:
            return []
        return ranked_turns(owner, q, mode, vector, limit, before_seq=before_seq, skip=skip)


aturns_recalled = aio.twin(turns_recalled)


@database_guard()
def facts_similar(*, owner_id: str, query: str, limit: int) -> dict[str, float]:
    """The cosine similarity to ``query`` of the owner's ``limit`` nearest facts, by key:
    those whose current version has a vector of the embedder (``services.facts_embed``); an
    empty dict where search by meaning is off, for an unknown owner, or where the embedder
    failed on the query (logged). Bounded: one scan of at most the owner's facts, under the
    search's statement timeout. Raises ``ValidationError`` ({"q": ...}) for a query
    ``turn_search`` would refuse."""
    check_owner(owner_id)
    q = search.clean_query(query)
    if not semantic_on():
        return {}
    embedder = embedders.embedder_get()
    assert embedder is not None
    try:
        vector = embedders.query_embed(embedder, q)
    except Exception:
        logger.exception("The embedder failed on a query of facts; ranking them by words.")
        return {}
    with search.search_transaction(using=Turn.objects.db, milliseconds=conf.SEARCH_TIMEOUT_MS):
        owner = _owner_read(owner_id)
        if owner is None:
            return {}
        nearest = vectors.facts_nearest(
            Turn.objects.db, owner[0], embedders.embedder_name(embedder), vector, limit
        )
    # NOTE: cosine similarity, 1 - distance: 1 the same direction, 0 unrelated.
    return {key: 1.0 - distance for key, distance in nearest}


afacts_similar = aio.twin(facts_similar)

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
