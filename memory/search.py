"""Searching turns by their content: the query side of the ``search`` column of migration 0003.

``q`` is only ever data: it reaches Postgres as the argument of ``plainto_tsquery`` (which reads
words, never operators), of ``strpos`` and of trigram similarity, so no input can form query
syntax. Other databases (the SQLite demo) get a case-insensitive substring match.
"""

from __future__ import annotations

import re
import unicodedata
from functools import reduce
from typing import Any

from django.contrib.postgres.lookups import TrigramWordSimilar
from django.contrib.postgres.search import (
    SearchQuery,
    SearchRank,
    SearchVectorField,
    TrigramWordSimilarity,
)
from django.core.exceptions import ValidationError
from django.db import connections
from django.db.models import F, Func, IntegerField, Q, QuerySet, Value
from django.db.models.expressions import Expression
from django.db.models.functions import StrIndex
from django.db.models.lookups import Exact, GreaterThan

from memory.models import Turn

MAX_QUERY_CHARS = 200
MAX_RESULTS = 100
# NOTE: the ranges of migration 0003's memory_search_document(): Han, kana, Hangul syllables.
CJK_RANGES = (
    "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002fa1f"
)
CJK_RUN_RE = re.compile(f"[{CJK_RANGES}]+")
UNSTORABLE_RE = re.compile(r"[\x00\ud800-\udfff]")
WORD_RE = re.compile(r"\w+")
# Shorter words are like too many others: the fallback matches them only as they are.
MIN_SIMILAR_CHARS = 4
# NOTE: ts_rank_cd divided by 1 + log(length): a short turn that says it beats a long one that
# mentions it in passing, and words close together beat words far apart.
RANK_NORMALIZATION = 1
# Best first; among equals the newest (``pk`` tells apart equal seqs of different owners).
ORDERING = ("-search_rank", "-seq", "-pk")


class TurnSearchDocument(Expression):
    """The turn's ``search`` column, which Postgres computes (not a model field; see 0003)."""

    output_field = SearchVectorField()

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        alias = compiler.query.get_initial_alias()
        column = connection.ops.quote_name("search")
        return f"{compiler.quote_name_unless_alias(alias)}.{column}", []


def clean_query(q: Any) -> str:
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


def _split(q: str) -> tuple[str, list[str]]:
    """The words of ``q`` outside CJK runs, and its CJK runs, after NFKC as the document has."""
    text = unicodedata.normalize("NFKC", q)
    return CJK_RUN_RE.sub(" ", text).strip(), CJK_RUN_RE.findall(text)


def _grams(run: str) -> str:
    """A CJK run as the document indexes it: one character, or its overlapping pairs."""
    if len(run) == 1:
        return run
    return " ".join(run[i : i + 2] for i in range(len(run) - 1))


def _uses_postgres(queryset: QuerySet[Turn]) -> bool:
    return connections[queryset.db].vendor == "postgresql"


def turns_matching(queryset: QuerySet[Turn], q: str) -> QuerySet[Turn]:
    """The turns of ``queryset`` whose content has every word and every CJK run of ``q``.

    Annotated with ``search_rank`` and ordered best match first, newest first among equals.
    English words match any form (``played`` finds ``play``); a CJK run matches where the
    content holds it as it is, found through the index of its character pairs.
    """
    if not _uses_postgres(queryset):
        return (
            queryset.filter(content__icontains=q)
            .annotate(search_rank=Value(1.0))
            .order_by(*ORDERING)
        )
    words, runs = _split(q)
    parts = [SearchQuery(words, config="english")] if words else []
    parts += [SearchQuery(_grams(run), config="simple") for run in runs]
    query = reduce(lambda a, b: a & b, parts)
    matches = queryset.alias(document=TurnSearchDocument()).filter(document=query)
    for run in runs:
        if len(run) > 2:
            # NOTE: the pairs say which turns may hold the run; the text says which do. The
            # normalised text is read only for a turn whose raw text does not hold it.
            matches = matches.filter(
                Q(GreaterThan(StrIndex("content", Value(run)), 0))
                | Q(GreaterThan(StrIndex(_nfkc(F("content")), Value(run)), 0))
            )
    return matches.annotate(
        search_rank=SearchRank(
            F("document"), query, cover_density=True, normalization=Value(RANK_NORMALIZATION)
        )
    ).order_by(*ORDERING)


def turns_similar(queryset: QuerySet[Turn], q: str) -> QuerySet[Turn] | None:
    """The fallback for words that match no turn: turns with similar words.

    Every word of ``q`` but stop words must be like a word of the turn: a word of four letters
    or more by trigram word similarity (``pg_trgm``, at its ``word_similarity_threshold``), so
    that a misspelt word (``basketbal``) or the start of one (``bask``) matches; a shorter one
    (``li``) as it is, since a few letters are like too many words. Annotated with
    ``search_rank`` and ordered best first. ``None`` when there is no fallback: outside
    Postgres, or when ``q`` has CJK text. A ``q`` of stop words only (``the``) matches nothing.
    """
    words, runs = _split(q)
    if not _uses_postgres(queryset) or runs or not words:
        return None
    similar = [
        # NOTE: constant for the planner, which folds a stop word's test away to true and
        # another word's to its index condition.
        Q(Exact(_lexemes(word), 0))
        | (
            Q(TrigramWordSimilar(F("content"), Value(word)))
            if len(word) >= MIN_SIMILAR_CHARS
            else Q(document=SearchQuery(word, config="english"))
        )
        for word in dict.fromkeys(WORD_RE.findall(words.lower()))
    ]
    return (
        queryset.alias(document=TurnSearchDocument())
        .filter(GreaterThan(_lexemes(words), 0), *similar)
        .annotate(search_rank=TrigramWordSimilarity(Value(words), "content"))
        .order_by(*ORDERING)
    )


def _lexemes(words: str) -> Func:
    """The size of the English query of ``words``: 0 when they are all stop words."""
    return Func(
        SearchQuery(words, config="english"), function="numnode", output_field=IntegerField()
    )


def _nfkc(expression: Any) -> Func:
    return Func(expression, function="normalize", template="%(function)s(%(expressions)s, NFKC)")
