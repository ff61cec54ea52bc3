"""Searching turns by their content: the query side of the ``search`` column and the owners'
vocabulary, and the time limit every search statement runs under.

``q`` is only ever data (an argument of ``plainto_tsquery``, ``to_tsvector``, ``strpos`` and key
comparisons): no input forms query syntax. Off PostgreSQL: a case-insensitive substring match. Work
is bounded whatever ``q`` is: at most the newest ``RANK_WINDOW`` matches are ranked, and the typo
fallback probes the owner's vocabulary, never every turn (docs/recall.md).
"""

from __future__ import annotations

import contextlib
import re
import unicodedata
from collections.abc import Iterator, Sequence
from functools import reduce
from typing import Any

from django.contrib.postgres.search import (
    SearchQuery,
    SearchRank,
    SearchVectorField,
)
from django.core.exceptions import ValidationError
from django.db import OperationalError, connections, transaction
from django.db.models import F, Func, Q, QuerySet, Value
from django.db.models.expressions import Expression
from django.db.models.functions import StrIndex
from django.db.models.lookups import GreaterThan

from memory.exceptions import SearchTimeout
from memory.models import Turn

MAX_QUERY_CHARS = 200
MAX_RESULTS = 100
# The ranges of the database's memory_search_document(): Han, kana, Hangul syllables.
CJK_RANGES = (
    "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002fa1f"
)
CJK_RUN_RE = re.compile(f"[{CJK_RANGES}]+")
UNSTORABLE_RE = re.compile(r"[\x00\ud800-\udfff]")
# Shorter words are like too many others: the fallback matches them only as they are.
MIN_SIMILAR_CHARS = 4
# NOTE: ts_rank_cd / (1 + log(length)): a short turn that says it beats a long one that mentions it.
RANK_NORMALIZATION = 1
# Best first; among equals the newest (``pk`` tells apart equal seqs of different owners).
ORDERING = ("-search_rank", "-seq", "-pk")
# NOTE: the newest matches ranked, at most: a common word ranks these, not all of them.
RANK_WINDOW = 1000
# Similar words of the vocabulary that a misspelt word may stand for, the closest first.
SIMILAR_WORDS = 12
# NOTE: SQLSTATE query_canceled, what Postgres answers a statement stopped by statement_timeout.
QUERY_CANCELED = "57014"


class TurnSearchDocument(Expression):
    """The turn's ``search`` column, which Postgres computes (not a model field)."""

    output_field = SearchVectorField()

    # Django 5.2's search lookup adds its own list of params to these: a list, not the stubs' tuple.
    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:  # type: ignore[override]
        alias = compiler.query.get_initial_alias()
        column = connection.ops.quote_name("search")
        return f"{compiler.quote_name_unless_alias(alias)}.{column}", []


def clean_query(q: object) -> str:
    """``q`` stripped; ``ValidationError({"q": ...})`` unless it is 1-200 storable characters."""
    if not isinstance(q, str):
        raise ValidationError({"q": ["Enter the text to search for."]})
    q = q.strip()
    if not q:
        raise ValidationError({"q": ["This field may not be blank."]})
    if len(q) > MAX_QUERY_CHARS:
        raise ValidationError(
            {"q": [f"Ensure this field has no more than {MAX_QUERY_CHARS} characters."]}
        )
    if UNSTORABLE_RE.search(q):
        raise ValidationError({"q": ["Null and surrogate characters are not allowed."]})
    return q


def clean_limit(limit: Any) -> int:
    """``limit`` itself; ``ValidationError({"limit": ...})`` unless an int of 1-100."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_RESULTS:
        raise ValidationError({"limit": [f"Ensure this value is between 1 and {MAX_RESULTS}."]})
    return limit


def query_split(q: str) -> tuple[str, list[str]]:
    """The words of ``q`` outside CJK runs, and its CJK runs, after NFKC as the document has."""
    text = unicodedata.normalize("NFKC", q)
    return CJK_RUN_RE.sub(" ", text).strip(), CJK_RUN_RE.findall(text)


def cjk_grams(run: str) -> str:
    """A CJK run as the document indexes it: one character, or its overlapping pairs."""
    if len(run) == 1:
        return run
    return " ".join(run[i : i + 2] for i in range(len(run) - 1))


def _uses_postgres(queryset: QuerySet[Turn]) -> bool:
    return connections[queryset.db].vendor == "postgresql"


# NOTE: planner settings for the search's statements only. At the defaults the planner prices a
# tsvector match as cheap and filters all of an owner's turns rather than walking back to the newest
# matches (docs/performance.md); JIT never pays here, nor parallel workers: the words statement's
# branch for a short recent window launched two whose filter then skipped it, 10 ms a search.
PLANNER_SETTINGS = {
    "cpu_operator_cost": "0.025",
    "random_page_cost": "1.1",
    "jit": "off",
    "max_parallel_workers_per_gather": "0",
}
_NAMES = ("statement_timeout", *PLANNER_SETTINGS)
_SETTING_RE = re.compile(r"[a-z_]+(\.[a-z_]+)?")


def settings_sql(names: Sequence[str]) -> str:
    """A statement that sets ``names`` (``SET LOCAL``) to its parameters, in order."""
    return "SELECT " + ", ".join(f"set_config('{name}', %s, true)" for name in names)


@contextlib.contextmanager
def search_transaction(
    *,
    using: str,
    milliseconds: int,
    settings: dict[str, str] | None = None,
    first: tuple[str, Sequence[Any]] | None = None,
) -> Iterator[tuple[Any, ...] | None]:
    """Run the block in a transaction (a savepoint inside one) whose statements stop after
    ``milliseconds`` each (``SearchTimeout``), planned with ``PLANNER_SETTINGS`` and ``settings``;
    ``first`` (``(sql, params)``) runs in the same round trip and the block gets its first row
    (or None). The settings are ``SET LOCAL``; an error rolls the block back. Other databases:
    the block, after ``first``."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        row = None
        if first is not None:
            with connection.cursor() as cursor:
                cursor.execute(*first)
                row = cursor.fetchone()
        yield None if row is None else tuple(row)
        return
    extra = settings or {}
    names = (*_NAMES, *extra)
    assert all(_SETTING_RE.fullmatch(name) for name in extra), extra
    # NOTE: a target list is evaluated in order: the values before, then the new ones.
    statement = (
        "SELECT "
        + ", ".join(f"current_setting('{name}', true)" for name in names)
        + ", "
        + settings_sql(names).removeprefix("SELECT ")
    )
    params: list[Any] = [f"{int(milliseconds)}ms", *PLANNER_SETTINGS.values(), *extra.values()]
    if first is not None:
        statement += f", f.* FROM (SELECT) AS one LEFT JOIN LATERAL ({first[0]}) AS f ON true"
        params += list(first[1])
    outer = connection.in_atomic_block
    try:
        with transaction.atomic(using=using):
            with connection.cursor() as cursor:
                cursor.execute(statement, params)
                row = cursor.fetchone()
            previous = list(row[: len(names)])
            got = tuple(row[2 * len(names) :]) if first is not None else None
            yield None if got is None or all(value is None for value in got) else got
            if outer:
                with connection.cursor() as cursor:
                    cursor.execute(settings_sql(names), previous)
    except OperationalError as e:
        cause = e.__cause__
        if getattr(cause, "sqlstate", None) == QUERY_CANCELED:
            raise SearchTimeout(milliseconds) from e
        raise


def turns_matching(
    queryset: QuerySet[Turn], q: str, *, window: int | None = None
) -> QuerySet[Turn]:
    """The turns of ``queryset`` whose content has every word and every CJK run of ``q``, annotated
    with ``search_rank``, best first, newest first among equals.

    English words match any form; a CJK run matches as written, found through its character pairs.
    With ``window`` (one owner's turns), only the newest ``window`` matches are ranked.
    """
    if not _uses_postgres(queryset):
        return (
            queryset.filter(content__icontains=q)
            .annotate(search_rank=Value(1.0))
            .order_by(*ORDERING)
        )
    words, runs = query_split(q)
    parts = [SearchQuery(words, config="english")] if words else []
    parts += [SearchQuery(cjk_grams(run), config="simple") for run in runs]
    query = reduce(lambda a, b: a & b, parts)
    matches = queryset.alias(document=TurnSearchDocument()).filter(document=query)
    for run in runs:
        if len(run) > 2:
            # NOTE: the pairs say which turns may hold the run; the text says which do.
            matches = matches.filter(
                Q(GreaterThan(StrIndex("content", Value(run)), 0))
                | Q(GreaterThan(StrIndex(_nfkc(F("content")), Value(run)), 0))
            )
    return _ranked(matches, window, query)


def _windowed(matches: QuerySet[Turn], window: int | None) -> QuerySet[Turn]:
    """``matches`` itself, or only its newest ``window`` turns (one owner's: by ``seq``)."""
    if window is None:
        return matches
    # NOTE: the planner reads few matches off the GIN index, or walks the owner's turns backwards
    # until it has ``window`` of many; either way it stops.
    newest = matches.order_by("-seq").values("pk")[:window]
    return Turn.objects.using(matches.db).filter(pk__in=newest).alias(document=TurnSearchDocument())


def turns_similar(
    queryset: QuerySet[Turn], q: str, *, owner_pk: int, window: int | None = None
) -> QuerySet[Turn] | None:
    """The fallback for words that match no turn: ``owner_pk``'s turns with similar words.

    Every word but stop words must match: one of four letters or more matches itself, a
    vocabulary word one typo away, or a word it starts (the ``SIMILAR_WORDS`` closest); a shorter
    one only itself. Annotated with ``search_rank``, best first; with ``window``, only the newest
    ranked. ``None`` off Postgres or with CJK in ``q``; empty, reading no turn, when no
    vocabulary word is alike.
    """
    words, runs = query_split(q)
    if not _uses_postgres(queryset) or runs or not words:
        return None
    similar = _similar_words(queryset.db, words, owner_pk)
    if not similar or not all(similar.values()):
        return queryset.none()
    query = reduce(
        lambda a, b: a & b,
        [
            reduce(lambda a, b: a | b, [SearchQuery(word, config="english") for word in choices])
            for choices in similar.values()
        ],
    )
    matches = queryset.alias(document=TurnSearchDocument()).filter(document=query)
    return _ranked(matches, window, query)


# NOTE: each query word but stop words, with the owner's closest non-stop words: itself or one typo
# away (a shared key; rank 0), then the words it starts (a bounded key range; rank 1).
_SIMILAR_SQL = """
SELECT q.word, s.word
FROM unnest(tsvector_to_array(to_tsvector('pg_catalog.simple', %(words)s))) AS q(word)
LEFT JOIN LATERAL (
    SELECT c.word FROM (
        SELECT v.word, 0 AS how FROM memory_searchword AS v
        WHERE char_length(q.word) >= %(min_chars)s AND v.owner_id = %(owner)s::bigint
          AND v.key = ANY(memory_search_keys(q.word))
        UNION ALL
        (SELECT v.word, 1 FROM memory_searchword AS v
         WHERE char_length(q.word) >= %(min_chars)s AND v.owner_id = %(owner)s::bigint
           AND v.key > q.word AND v.key < q.word || %(top)s AND v.key = v.word
         ORDER BY v.key LIMIT %(starts)s)
    ) AS c
    WHERE numnode(plainto_tsquery('pg_catalog.english', c.word)) > 0
    GROUP BY c.word
    ORDER BY min(c.how), c.word <> q.word, char_length(c.word), c.word
    LIMIT %(limit)s
) AS s ON true
WHERE numnode(plainto_tsquery('pg_catalog.english', q.word)) > 0
"""
# Words read for a prefix, at most.
_STARTS_SCANNED = 50


def _similar_words(using: str, words: str, owner_pk: int) -> dict[str, list[str]]:
    """Each word of ``words`` but stop words: itself when short, else its similar words of the
    vocabulary (none when nothing is like it). Empty when ``words`` are all stop words."""
    params: dict[str, str | int] = {
        "words": words,
        "owner": owner_pk,
        "min_chars": MIN_SIMILAR_CHARS,
        "limit": SIMILAR_WORDS,
        "starts": _STARTS_SCANNED,
        # NOTE: above every character, so that ``q.word || top`` bounds the keys it starts.
        "top": chr(0x10FFFF),
    }
    similar: dict[str, list[str]] = {}
    with connections[using].cursor() as cursor:
        cursor.execute(_SIMILAR_SQL, params)
        for word, choice in cursor.fetchall():
            choices = similar.setdefault(word, [])
            if len(word) < MIN_SIMILAR_CHARS:
                choices.append(word)
            elif choice is not None:
                choices.append(choice)
    return similar


def _nfkc(expression: Any) -> Func:
    return Func(expression, function="normalize", template="%(function)s(%(expressions)s, NFKC)")


def _ranked(matches: QuerySet[Turn], window: int | None, query: SearchQuery) -> QuerySet[Turn]:
    """The newest ``window`` of ``matches``, ranked against ``query``, best first."""
    rank = SearchRank(
        F("document"), query, cover_density=True, normalization=Value(RANK_NORMALIZATION)
    )
    return _windowed(matches, window).annotate(search_rank=rank).order_by(*ORDERING)
