"""Ranking turns by their words: BM25 over the search document's terms (any word of the question) in
one statement on PostgreSQL, the same in Python elsewhere, the filters a search keeps, and the
features both rankings of a hybrid search read."""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from typing import TYPE_CHECKING, Any

from django.db import connections
from django.db.models import QuerySet

from memory import codec, search
from memory.models import Turn
from memory.payloads import TURN_FIELDS
from memory.search import cjk_grams, query_split

if TYPE_CHECKING:
    from memory.recall.vectors import Centred

# BM25's usual constants: how fast a word's repeats stop counting, how much length weighs.
BM25_K1 = 1.2
BM25_B = 0.75
# How many turns a window's worth of matches is first looked for in, in windows.
RECENT_TURNS = 3

# NOTE: ``q``'s terms are data (words through to_tsvector, CJK pairs, each a plainto_tsquery);
# candidates match any of them, as websearch_to_tsquery "a or b" so that the planner sees the query.
# Every turn in the span from the oldest candidate to ``top_seq`` that holds a term is a candidate,
# so document frequencies over that span are exact (N: its length in turns). The newest ``window``
# matches are first looked for among the newest ``recent`` turns (a range of the owner's seq
# index, bounded whatever the words): where a term is common they are all there, and the owner's
# other matches are never read; else every match is, through the search index.
# ``_RANKED_PKS`` sums a turn's idfs in the order a sort on the turn leaves them, as the sorted
# grouping of ``_RANKED_HELD`` does, so that both find the same best turns.
# The owner's turns that hold any of the terms (``filters``: ``TurnFilters.sql``), matched by
# ``{match}``: ``_INDEXED`` or ``_WALKED``.
_MATCHES = """SELECT t.id, t.seq, length(t.search) AS dl, t.search
  FROM memory_turn AS t
  WHERE t.owner_id = %(owner)s::bigint AND {match} {filters}"""
_ANY_TERM = """(websearch_to_tsquery('pg_catalog.english', %(any_word)s)
                     || websearch_to_tsquery('pg_catalog.simple', %(any_gram)s))"""
_INDEXED = f"t.search @@ {_ANY_TERM}"
# NOTE: the operator's function, which no index serves: else the planner, misled by the table's
# word counts, reads every match of the owner through the search index where the walk back along
# the seq index stops at the window. A query of no term (stop words only) walks nothing.
_WALKED = f"ts_match_vq(t.search, {_ANY_TERM})"
_WORDS_SQL = """
WITH usable AS MATERIALIZED (
  SELECT DISTINCT term, plainto_tsquery('pg_catalog.simple', term) AS tq
  FROM unnest(tsvector_to_array(to_tsvector('pg_catalog.english', %(words)s))
              || %(grams)s::text[]) AS term
  WHERE numnode(plainto_tsquery('pg_catalog.simple', term)) > 0
),
recent AS MATERIALIZED (
  {walked} AND t.seq > %(top_seq)s - %(recent)s AND EXISTS (SELECT FROM usable)
  ORDER BY t.seq DESC LIMIT %(window)s
),
cand AS MATERIALIZED (
  SELECT * FROM recent WHERE (SELECT count(*) FROM recent) >= %(window)s
  UNION ALL
  ({matches} AND (SELECT count(*) FROM recent) < %(window)s
   ORDER BY t.seq DESC LIMIT %(window)s)
),
hits AS MATERIALIZED (
  SELECT c.id, c.dl, u.term FROM cand AS c JOIN usable AS u ON c.search @@ u.tq
),
df AS (SELECT term, count(*) AS df FROM hits GROUP BY term),
span AS (
  SELECT greatest(count(*), %(top_seq)s - CASE WHEN count(*) >= %(window)s THEN min(seq)
                                                ELSE %(low_seq)s END + 1)::float8 AS n,
         greatest(coalesce(avg(dl), 1), 1)::float8 AS avgdl
  FROM cand
),
idf AS MATERIALIZED (
  SELECT u.term, ln(1 + (s.n - coalesce(d.df, 0) + 0.5) / (coalesce(d.df, 0) + 0.5)) AS idf
  FROM usable AS u CROSS JOIN span AS s LEFT JOIN df AS d USING (term)
),
{ranked}"""

# The best turns with their BM25, length and terms held, as JSON.
_RANKED_HELD = """scored AS (
  SELECT h.id, h.dl, array_agg(h.term ORDER BY h.term) AS terms,
         sum(i.idf) * (%(k1)s + 1)
           / (1 + %(k1)s * (1 - %(b)s + %(b)s * h.dl / s.avgdl)) AS score
  FROM hits AS h JOIN idf AS i USING (term) CROSS JOIN span AS s
  GROUP BY h.id, h.dl, s.avgdl
)
SELECT (SELECT coalesce(json_object_agg(term, idf), '{}') FROM idf),
       (SELECT avgdl FROM span),
       (SELECT coalesce(json_agg(json_build_array(id, score, dl, terms)
                                 ORDER BY score DESC, id DESC), '[]')
        FROM (SELECT * FROM scored ORDER BY score DESC, id DESC LIMIT %(depth)s) AS top)
"""
# The best turns' pks only: a quarter of the statement's CPU less (no per-turn sort of terms).
_RANKED_PKS = """scored AS (
  SELECT id, sum(idf) * (%(k1)s + 1) / (1 + %(k1)s * (1 - %(b)s + %(b)s * dl / avgdl)) AS score
  FROM (
    SELECT h.id, h.dl, s.avgdl, i.idf
    FROM hits AS h JOIN idf AS i USING (term) CROSS JOIN span AS s
    ORDER BY h.id, h.dl, s.avgdl
  ) AS held
  GROUP BY id, dl, avgdl
)
SELECT (SELECT coalesce(json_object_agg(term, idf), '{}') FROM idf),
       (SELECT avgdl FROM span),
       ARRAY(SELECT id FROM scored ORDER BY score DESC, id DESC LIMIT %(depth)s)
"""


class WordRanking:
    """What ``words_ranked`` found: each term's idf, the average turn length (distinct words) over
    the span, the pks of the best turns, best first, and (where asked) those turns as
    ``(pk, bm25, length, terms)``."""

    def __init__(
        self,
        idf: dict[str, float],
        avgdl: float,
        hits: list[tuple[int, float, int, list[str]]],
        pks: list[int] | None = None,
    ):
        self.idf = idf
        self.avgdl = avgdl
        self.hits = hits
        self.pks = [hit[0] for hit in hits] if pks is None else pks

    @functools.cached_property
    def _most(self) -> float:
        return sum(self.idf.values()) * (BM25_K1 + 1) / (1 + BM25_K1 * (1 - BM25_B))

    def bm25(self, length: int, terms: list[str]) -> float:
        """The BM25 of a turn of ``length`` words holding ``terms`` (each once) of the query."""
        weight = sum(self.idf.get(term, 0.0) for term in terms)
        norm = 1 - BM25_B + BM25_B * length / self.avgdl
        return weight * (BM25_K1 + 1) / (1 + BM25_K1 * norm)

    def coverage(self, length: int, terms: list[str]) -> float:
        """``bm25`` over the most a turn could score: in [0, 1], how much of the query the turn
        matches, and how little else it says."""
        total = self._most
        if total <= 0:
            return 0.0
        return min(1.0, self.bm25(length, terms) / total)


# NOTE: a CJK run of three characters or more is searched by its pairs; a turn holding the pairs but
# not the run as written keeps this share of its match.
APART_SHARE = 0.7


def as_written(q: str, content: str) -> float:
    """1 where ``content`` holds each CJK run of ``q`` of three characters or more as written
    (or ``q`` has none), else ``APART_SHARE`` times the share it holds."""
    runs = _long_runs(q)
    if not runs:
        return 1.0
    text = unicodedata.normalize("NFKC", content)
    held = sum(run in text for run in runs)
    return 1.0 if held == len(runs) else APART_SHARE * (1 + held) / (1 + len(runs))


@functools.lru_cache(maxsize=64)
def _long_runs(q: str) -> tuple[str, ...]:
    return tuple(run for run in query_split(q)[1] if len(run) > 2)


def query_terms(q: str) -> tuple[str, list[str]]:
    """``q``'s English words (as one text) and its CJK pairs (a single character where a run is
    one), as the document indexes them."""
    words, runs = query_split(q)
    grams: list[str] = []
    for run in runs:
        for gram in cjk_grams(run).split():
            if gram not in grams:
                grams.append(gram)
    return words, grams


def words_ranked(
    *,
    using: str,
    owner_pk: int,
    q: str,
    top_seq: int,
    low_seq: int = 1,
    depth: int,
    window: int | None = None,
    filters: TurnFilters | None = None,
    held: bool = False,
) -> WordRanking:
    """The owner's turns ranked by BM25 against ``q``'s terms (any of them), the best ``depth``;
    PostgreSQL only, in the caller's search transaction. ``top_seq``/``low_seq`` bound the span. At
    most the newest ``window`` turns holding a term are read, scored in the same statement.
    With ``held``, their BM25, length and terms too (``WordRanking.hits``, else empty)."""
    window = search.RANK_WINDOW if window is None else window
    words, grams = query_terms(q)
    any_word = " or ".join(w for w in _WORD_RE.findall(words) if w.lower() != "or")
    clauses, params = (filters or TurnFilters()).sql("t")
    statement = _WORDS_SQL.format(
        walked=_MATCHES.format(match=_WALKED, filters=clauses),
        matches=_MATCHES.format(match=_INDEXED, filters=clauses),
        ranked=_RANKED_HELD if held else _RANKED_PKS,
    )
    with connections[using].cursor() as cursor:
        cursor.execute(
            statement,
            {
                "words": words,
                "grams": grams,
                "any_word": any_word,
                "any_gram": " or ".join(grams),
                "owner": owner_pk,
                "window": window,
                "recent": RECENT_TURNS * window,
                "top_seq": top_seq,
                "low_seq": low_seq,
                "depth": depth,
                "k1": BM25_K1,
                "b": BM25_B,
                **params,
            },
        )
        idf, avgdl, hits = cursor.fetchone()
    idf = {str(k): float(v) for k, v in _json(idf).items()}
    if not held:
        return WordRanking(idf, float(avgdl), [], list(hits))
    return WordRanking(
        idf,
        float(avgdl),
        [(int(pk), float(score), int(dl), list(terms)) for pk, score, dl, terms in _json(hits)],
    )


def _json(value: Any) -> Any:
    import json

    return json.loads(value) if isinstance(value, (str, bytes)) else value


class TurnFilters:
    """The turns a search may return: older than ``before_seq``, created at or after
    ``after`` and before ``before`` (each optional)."""

    def __init__(
        self,
        *,
        before_seq: int | None = None,
        after: Any = None,
        before: Any = None,
    ):
        self.before_seq = before_seq
        self.after = after
        self.before = before

    def sql(self, alias: str) -> tuple[str, dict[str, Any]]:
        """The ``AND ...`` clauses on the turn table ``alias`` and their parameters."""
        clauses = []
        params: dict[str, Any] = {}
        if self.before_seq is not None:
            clauses.append(f"AND {alias}.seq < %(f_before_seq)s")
            params["f_before_seq"] = self.before_seq
        if self.after is not None:
            clauses.append(f"AND {alias}.created_at >= %(f_after)s")
            params["f_after"] = self.after
        if self.before is not None:
            clauses.append(f"AND {alias}.created_at < %(f_before)s")
            params["f_before"] = self.before
        return " ".join(clauses), params

    def queryset(self, turns: QuerySet[Turn]) -> QuerySet[Turn]:
        """``turns`` narrowed to these filters."""
        if self.before_seq is not None:
            turns = turns.filter(seq__lt=self.before_seq)
        if self.after is not None:
            turns = turns.filter(created_at__gte=self.after)
        if self.before is not None:
            turns = turns.filter(created_at__lt=self.before)
        return turns

    def __bool__(self) -> bool:
        return self.before_seq is not None or self.after is not None or self.before is not None


# NOTE: the candidates of a search, whichever ranking found them, read once (``turns_features``).
# Each candidate's nearest are a top-N sort of its own neighbours, a third of the time of one sort
# of all pairs. The turn is read on its owner too: a pk from a vector row is never trusted alone.
# NOTE: the turns asked for, and the session neighbours (the turn just before and after) of
# ``heads``, the best few: the sentence that answers is often next to the one that matches. A
# neighbour with nothing to say (an acknowledgement: no vector) is not one.
_IDS_SQL = """
ids AS MATERIALIZED (
  SELECT unnest(%(ids)s::bigint[]) AS id
  UNION
  SELECT n.id FROM memory_turn AS h
  JOIN memory_turn AS n ON n.owner_id = h.owner_id AND n.seq IN (h.seq - 1, h.seq + 1)
       AND n.session_id = h.session_id
  WHERE h.id = ANY(%(heads)s::bigint[]) AND h.owner_id = %(owner)s::bigint{said}
)
"""
_SAID = """
    AND EXISTS (SELECT FROM memory_turnvector AS nv WHERE nv.turn_id = n.id
                AND nv.owner_id = n.owner_id AND nv.model = %(model)s)"""
_FEATURES_SQL = (
    "WITH "
    + _IDS_SQL.format(said="")
    + """
SELECT t.id, t.seq, t.session_id, t.role, t.content, t.metadata, t.created_at,
       length(t.search),
       ARRAY(SELECT term FROM unnest(%(terms)s::text[]) AS term
             WHERE t.search @@ plainto_tsquery('pg_catalog.simple', term)),
       NULL::float8, NULL::float8, NULL::float8, NULL::bigint[]
FROM memory_turn AS t
WHERE t.id IN (SELECT id FROM ids) AND t.owner_id = %(owner)s::bigint
"""
)
_FEATURES_VECTOR_SQL = (
    "WITH "
    + _IDS_SQL.format(said=_SAID).replace("{", "{{").replace("}", "}}")
    + """,
vec AS MATERIALIZED (
  SELECT v.turn_id, {point} AS vector, {distance} AS distance,
         v.vector <=> %(vector)s::halfvec AS plain
  FROM memory_turnvector AS v
  WHERE v.turn_id IN (SELECT id FROM ids) AND v.owner_id = %(owner)s::bigint
    AND v.model = %(model)s
),
near AS MATERIALIZED (SELECT turn_id, vector FROM vec ORDER BY distance, turn_id LIMIT %(crowded)s),
crowd AS MATERIALIZED (
  SELECT a.turn_id,
         (SELECT avg(s.similarity) FROM (
            SELECT 1 - (a.vector <=> b.vector) AS similarity FROM near AS b
            WHERE b.turn_id <> a.turn_id ORDER BY similarity DESC LIMIT %(crowd)s
          ) AS s) AS crowding,
         ARRAY(SELECT b.turn_id FROM near AS b
               WHERE b.turn_id <> a.turn_id AND (a.vector <=> b.vector) <= 1 - %(alike)s) AS alike
  FROM near AS a
)
SELECT t.id, t.seq, t.session_id, t.role, t.content, t.metadata, t.created_at,
       length(t.search),
       ARRAY(SELECT term FROM unnest(%(terms)s::text[]) AS term
             WHERE t.search @@ plainto_tsquery('pg_catalog.simple', term)),
       v.distance, v.plain, c.crowding, c.alike
FROM memory_turn AS t
LEFT JOIN vec AS v ON v.turn_id = t.id
LEFT JOIN crowd AS c ON c.turn_id = t.id
WHERE t.id IN (SELECT id FROM ids) AND t.owner_id = %(owner)s::bigint
"""
)


def turns_features(
    *,
    using: str,
    owner_pk: int,
    pks: list[int],
    terms: list[str],
    model: str | None,
    vector: str | None,
    measure: Centred | None = None,
    crowd: int = 10,
    crowded: int = 100,
    alike: float = 0.2,
    heads: list[int] | None = None,
) -> list[tuple[Any, ...]]:
    """For each of the owner's turns ``pks`` and the session neighbours of ``heads``: ``(pk,
    *TURN_FIELDS, length, terms held, distance or None, plain cosine distance or None, crowding
    or None, alike pks or None)``;
    PostgreSQL only. No distance without ``vector`` (pgvector text) and ``model``; ``measure``
    centres the distance and crowding as the vector search did. Crowding, for the ``crowded``
    turns nearest the query: the mean cosine similarity of a turn's ``crowd`` nearest among them;
    alike: the pks among them at a similarity of ``alike`` or more."""
    extra: dict[str, Any] = {} if measure is None else measure.params()
    if vector is None or model is None:
        statement = _FEATURES_SQL
    elif measure is None:
        statement = _FEATURES_VECTOR_SQL.format(
            point="v.vector", distance="v.vector <=> %(vector)s::halfvec"
        )
    else:
        statement = _FEATURES_VECTOR_SQL.format(
            point=measure.point_sql("v.vector"), distance=measure.distance_sql("v.vector")
        )
    with connections[using].cursor() as cursor:
        cursor.execute(
            statement,
            {
                **extra,
                "terms": terms,
                "ids": pks,
                "heads": heads or [],
                "owner": owner_pk,
                "model": model,
                "vector": vector,
                "crowd": crowd,
                "crowded": crowded,
                "alike": alike,
            },
        )
        rows = cursor.fetchall()
    return [_metadata_read(row, 5) for row in rows]


def _metadata_read(row: tuple[Any, ...], at: int) -> tuple[Any, ...]:
    """``row`` with its jsonb at ``at`` parsed: a raw cursor reads it as its text
    (memory.codec), where the ORM's JSONField would parse it."""
    value = row[at]
    if isinstance(value, str):
        value = codec.loads_jsonb(value)
    return (*row[:at], value, *row[at + 1 :])


_NEAR_SQL = f"""
SELECT {", ".join(f"t.{name}" for name in TURN_FIELDS)} FROM memory_turn AS t
WHERE t.owner_id = %s::bigint AND t.seq = ANY(%s::bigint[])
"""


def turns_at(*, using: str, owner_pk: int, seqs: list[int]) -> list[tuple[Any, ...]]:
    """The owner's turns at ``seqs`` (those there are) as ``TURN_FIELDS`` rows, in one indexed
    read: on PostgreSQL by one statement, elsewhere through the ORM."""
    if connections[using].vendor != "postgresql":
        turns = Turn.objects.using(using).filter(owner_id=owner_pk, seq__in=seqs)
        return list(turns.values_list(*TURN_FIELDS))
    with connections[using].cursor() as cursor:
        cursor.execute(_NEAR_SQL, [owner_pk, seqs])
        return [_metadata_read(row, 4) for row in cursor.fetchall()]


# Stop words for the ranking off PostgreSQL (which has its English configuration's).
_STOP_WORDS_TEXT = (
    "a an and are as at be but by did do does for from had has have he her him his how i if"
    " in into is it its me my no not of on or our she so that the their them then there they"
    " this to was we were what when where which who why will with you your"
)
_STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())
_WORD_RE = re.compile(r"\w+")
# Off PostgreSQL, a turn that holds ``q`` as written but none of its terms counts as this share.
SUBSTRING_COVERAGE = 0.5


def text_terms(text: str) -> list[str]:
    """The ranking's terms of ``text`` off PostgreSQL: lower-cased words but stop words (a
    plural's ``s`` dropped), and CJK pairs."""
    words, runs = query_split(text.lower())
    terms = [
        word[:-1] if len(word) > 3 and word.endswith("s") else word
        for word in _WORD_RE.findall(words)
        if word not in _STOP_WORDS
    ]
    for run in runs:
        terms.extend(cjk_grams(run).split())
    return terms


def words_ranked_python(
    turns: QuerySet[Turn], q: str, *, depth: int, window: int | None = None
) -> list[tuple[tuple[Any, ...], float]]:
    """``words_ranked`` off PostgreSQL: the newest ``window`` turns scored by BM25 in Python, the
    best ``depth`` as ``(row, coverage)``, row ``(pk, *TURN_FIELDS)``."""
    wanted = set(text_terms(q))
    if not wanted:
        return []
    window = search.RANK_WINDOW if window is None else window
    rows = list(turns.order_by("-seq").values_list("pk", *TURN_FIELDS)[:window])
    held = [(row, set(text_terms(row[4])) & wanted, len(set(text_terms(row[4])))) for row in rows]
    n = max(len(rows), 1)
    df = {term: sum(term in terms for _, terms, _ in held) for term in wanted}
    ranking = WordRanking(
        {term: math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5)) for term in wanted},
        max(sum(length for *_, length in held) / n, 1.0),
        [],
    )
    scored = [
        (row, ranking.coverage(length, sorted(terms)) * as_written(q, row[4]))
        for row, terms, length in held
        if terms
    ]
    if not scored:
        # No term matched (the start of a word, say): the substring match this path had.
        needle = q.casefold()
        scored = [(row, SUBSTRING_COVERAGE) for row, *_ in held if needle in row[4].casefold()]
    scored.sort(key=lambda item: (-item[1], -item[0][1]))
    return scored[:depth]
