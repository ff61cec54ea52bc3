"""The turns' and facts' vectors in PostgreSQL with pgvector: writing a batch, and the
nearest of one owner's turns or facts to a query, centred on the owner's mean; exactly up to
``INDEX_FROM`` turns, through the model's HNSW index past it (docs/recall.md)."""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, connections
from psycopg import sql

from memory import codec, search
from memory.conf import conf

logger = logging.getLogger("memory.recall")

# Owners with more embedded turns than this are searched through the model's HNSW index, where
# it exists; their embedding run builds it when it is missing.
INDEX_FROM = 10_000
# Candidates the index walk keeps at least (pgvector's hnsw.ef_search), and per result asked.
INDEX_EF_SEARCH = 100

# Per database alias: true once seen true; else when last seen false (asked again after
# ``RECHECK_SECONDS``, so ``memory_embed --setup`` needs no restart).
_READY: dict[str, bool] = {}
_MISSING_AT: dict[str, float] = {}
RECHECK_SECONDS = 30.0

_READY_SQL = (
    "SELECT to_regclass('memory_turnvector') IS NOT NULL"
    " AND to_regclass('memory_factvector') IS NOT NULL"
    " AND EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector')"
)

# NOTE: only turns that still exist and belong to the owner are written; an existing vector is
# replaced, owner included, correcting a row of a former owner.
_WRITE_SQL = """
INSERT INTO memory_turnvector (turn_id, owner_id, model, vector)
SELECT t.id, t.owner_id, %s, v.vector::halfvec
FROM unnest(%s::bigint[], %s::text[]) AS v (turn_id, vector)
JOIN memory_turn AS t ON t.id = v.turn_id
ON CONFLICT (turn_id) DO UPDATE
SET owner_id = EXCLUDED.owner_id, model = EXCLUDED.model, vector = EXCLUDED.vector
"""

# NOTE: joined on the owner too: a vector row is never trusted alone for whose turn it is.
_NEAREST_SQL = """
SELECT v.turn_id, {distance} AS distance
FROM memory_turnvector AS v {join}
WHERE v.owner_id = %(owner)s::bigint AND v.model = %(model)s {filters}
ORDER BY distance, v.turn_id DESC
LIMIT %(limit)s
"""
# A search narrowed by seq or date reads the turn beside its vector.
_FILTER_JOIN = "JOIN memory_turn AS t ON t.id = v.turn_id AND t.owner_id = v.owner_id"


# NOTE: written only for the version it was computed from; a fact changed since waits for the next
# run.
_FACT_WRITE_SQL = """
INSERT INTO memory_factvector (fact_id, owner_id, model, version, vector)
SELECT f.id, f.owner_id, %s, f.version, v.vector::halfvec
FROM unnest(%s::bigint[], %s::int[], %s::text[]) AS v (fact_id, version, vector)
JOIN memory_fact AS f ON f.id = v.fact_id AND f.version = v.version
ON CONFLICT (fact_id) DO UPDATE
SET owner_id = EXCLUDED.owner_id, model = EXCLUDED.model, version = EXCLUDED.version,
    vector = EXCLUDED.vector
"""

# The owner's facts with no vector of ``model`` for their current version (and owner).
_FACTS_DUE_SQL = """
SELECT f.id, f.version, f.key, f.value FROM memory_fact AS f
LEFT JOIN memory_factvector AS v
  ON v.fact_id = f.id AND v.model = %s AND v.version = f.version AND v.owner_id = f.owner_id
WHERE f.owner_id = %s AND v.fact_id IS NULL
ORDER BY f.id
LIMIT %s
"""

# NOTE: at most MEMORY["MAX_FACTS"] rows an owner: always the exact scan.
_FACTS_NEAREST_SQL = """
SELECT f.key, v.vector <=> %s::halfvec AS distance
FROM memory_factvector AS v
JOIN memory_fact AS f ON f.id = v.fact_id AND f.owner_id = v.owner_id AND f.version = v.version
WHERE v.owner_id = %s::bigint AND v.model = %s
ORDER BY distance, f.key
LIMIT %s
"""

# NOTE: HNSW needs one vector length: a partial index per model on the cast vector, the model a
# literal so the planner can match the index's predicate.
_INDEX_DDL = (
    "CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON memory_turnvector"
    " USING hnsw ((vector::halfvec({dimensions})) halfvec_cosine_ops) WHERE model = {model}"
)

_INDEX_STATE_SQL = """
SELECT i.indisvalid,
       EXISTS (SELECT 1 FROM pg_stat_progress_create_index AS p WHERE p.index_relid = i.indexrelid)
FROM pg_index AS i WHERE i.indexrelid = to_regclass(%s)
"""

# NOTE: relaxed order, sorted outside; the iterative scan (pgvector 0.8) goes past ef_search until
# ``limit`` of the owner's turns are found.
_NEAREST_INDEXED_SQL = """
SELECT turn_id, {distance} AS distance FROM (
  SELECT v.turn_id, v.vector
  FROM memory_turnvector AS v {join}
  WHERE v.owner_id = %(owner)s::bigint AND v.model = {model} {filters}
  ORDER BY v.vector::halfvec({dimensions}) <=> %(walk)s::halfvec({dimensions})
  LIMIT %(walked)s
) AS v
ORDER BY distance, turn_id DESC
LIMIT %(limit)s
"""
# NOTE: the walk goes by the centred query's direction, which orders the turns as the centred
# cosine's numerator does; this many times the results asked are walked, then ranked exactly.
INDEX_WALK_FACTOR = 2

# The owner's mean is taken over at most this many of their vectors, the first turns': a
# component's error is then about a thousandth, on a history of any length. In turn order, not
# a scan's (which starts where another scan is, PostgreSQL's synchronized scans): the same
# sample, so the same ranking, on every run.
CENTRE_SAMPLE = 500
# An owner with fewer vectors than this is compared uncentred: the mean of a short history is
# mostly its own few turns, and would take off what they say.
CENTRE_FROM = 50
# Per (database alias, owner pk, model): the owner's embedded turns when their centre was read,
# and the centre. Read again when they have more, unless the sample was full then (the same
# first CENTRE_SAMPLE vectors make it). At most CENTRE_CACHE owners, then forgotten at once.
_CENTRES: dict[tuple[str, int, str], tuple[int, list[float] | None]] = {}
CENTRE_CACHE = 4_096

_CENTRE_SQL = """
SELECT avg(s.vector)::text, count(*) FROM (
  SELECT vector FROM memory_turnvector
  WHERE owner_id = %s::bigint AND model = %s
  ORDER BY turn_id
  LIMIT %s
) AS s
"""


@dataclass(frozen=True)
class Centred:
    """A search query's vector and the centre its owner's turns are compared around.

    The distance of a turn's vector ``p`` is one minus the cosine of ``p - c`` and ``q - c``
    (``c`` the centre, ``q`` the query). Without a centre it is the plain cosine distance
    (``<=>``)."""

    query: Sequence[float]
    centre: Sequence[float] | None = None

    def distance_sql(self, column: str) -> str:
        """The SQL of the distance of ``column``'s vectors (``params`` holds its values)."""
        if self.centre is None:
            return f"({column} <=> %(vector)s::halfvec)"
        return (
            f"(1 - ((-({column} <#> %(centred)s::halfvec)) - %(offset)s)"
            f" / (greatest({column} <-> %(centre)s::halfvec, 1e-6) * %(scale)s))"
        )

    def point_sql(self, column: str) -> str:
        """The SQL of ``column``'s vectors as this measure sees them: less the centre."""
        if self.centre is None:
            return column
        return f"({column} - %(centre)s::halfvec)"

    @functools.cached_property
    def query_text(self) -> str:
        """The query's vector in pgvector's text form."""
        return vector_text(self.query)

    @functools.cached_property
    def _params(self) -> dict[str, Any]:
        if self.centre is None:
            return {"vector": self.query_text, "walk": self.query_text}
        centred = [q - c for q, c in zip(self.query, self.centre, strict=True)]
        scale = math.sqrt(sum(x * x for x in centred)) or 1e-6
        text = vector_text(centred)
        return {
            "centred": text,
            "walk": text,
            "centre": _centre_text(self.centre),
            "offset": sum(x * c for x, c in zip(centred, self.centre, strict=True)),
            "scale": scale,
        }

    def params(self) -> dict[str, Any]:
        """The statement's parameters of ``distance_sql``, and ``walk``: the direction an
        index walk goes (computed once per measure)."""
        return dict(self._params)


# NOTE: a centre's text, by the centre (the list ``owner_centre`` keeps): formatting 384 floats
# is a quarter of a millisecond of each search's critical path.
_CENTRE_TEXTS: dict[int, tuple[Sequence[float], str]] = {}


def _centre_text(centre: Sequence[float]) -> str:
    """``vector_text(centre)``, formatted once while ``centre`` lives."""
    kept = _CENTRE_TEXTS.get(id(centre))
    if kept is not None and kept[0] is centre:
        return kept[1]
    if len(_CENTRE_TEXTS) >= CENTRE_CACHE:
        _CENTRE_TEXTS.clear()
    text = vector_text(centre)
    _CENTRE_TEXTS[id(centre)] = (centre, text)
    return text


# Per (database alias, index name): true once seen valid; else when it was last seen missing.
_INDEXED: dict[tuple[str, str], bool] = {}
_UNINDEXED_AT: dict[tuple[str, str], float] = {}


def vector_text(vector: Sequence[float]) -> str:
    """pgvector's text form of ``vector``."""
    return "[" + ",".join(map(repr, map(float, vector))) + "]"


def vectors_ready(using: str) -> bool:
    """Whether the database ``using`` has pgvector and the vector table: asked once per process when
    true, at most every ``RECHECK_SECONDS`` while false."""
    if _READY.get(using):
        return True
    connection = connections[using]
    if connection.vendor != "postgresql":
        return False
    missing_at = _MISSING_AT.get(using)
    if missing_at is not None and time.monotonic() - missing_at < RECHECK_SECONDS:
        return False
    try:
        with connection.cursor() as cursor:
            cursor.execute(_READY_SQL)
            ready = bool(cursor.fetchone()[0])
    except DatabaseError:
        return False
    if ready:
        _READY[using] = True
        _MISSING_AT.pop(using, None)
    else:
        _MISSING_AT[using] = time.monotonic()
    return ready


def embeddings_on(using: str) -> bool:
    """Whether turns get vectors and searches compare them on ``using``: an embedder set
    (``MEMORY["EMBEDDER"]``) and the vector table in that database."""
    return conf.EMBEDDER is not None and vectors_ready(using)


def embeddings_known_on(using: str) -> bool:
    """``embeddings_on`` as this process last saw it, without asking the database: false until
    ``vectors_ready`` has once found the table there."""
    return conf.EMBEDDER is not None and bool(_READY.get(using))


def vectors_forget_ready() -> None:
    """Ask the database again next time (after a test dropped or created the table or index)."""
    _READY.clear()
    _MISSING_AT.clear()
    _INDEXED.clear()
    _UNINDEXED_AT.clear()
    _CENTRES.clear()
    _CENTRE_TEXTS.clear()


def index_name(model: str, dimensions: int) -> str:
    """The name of the HNSW index of ``model``'s vectors (``dimensions`` long)."""
    digest = hashlib.sha1(model.encode()).hexdigest()[:12]
    return f"memory_turnvector_hnsw_{dimensions}_{digest}"


def _index_state(using: str, name: str) -> str:
    """What of the index ``name`` there is: ``valid``, ``building``, ``invalid`` (a failed build),
    ``missing``, or ``old`` (pgvector before 0.8: no iterative scan, no index built)."""
    with connections[using].cursor() as cursor:
        cursor.execute(
            "SELECT string_to_array(extversion, '.')::int[] >= '{0,8}'"
            " FROM pg_extension WHERE extname = 'vector'"
        )
        version = cursor.fetchone()
        if not version or not version[0]:
            return "old"
        cursor.execute(_INDEX_STATE_SQL, [name])
        row = cursor.fetchone()
    if row is None:
        return "missing"
    valid, building = row
    return "valid" if valid else "building" if building else "invalid"


def vectors_indexed(using: str, model: str, dimensions: int) -> bool:
    """Whether ``model``'s HNSW index exists and is valid on ``using``: asked once per process
    when true, at most every ``RECHECK_SECONDS`` while false."""
    key = (using, index_name(model, dimensions))
    if _INDEXED.get(key):
        return True
    missing_at = _UNINDEXED_AT.get(key)
    if missing_at is not None and time.monotonic() - missing_at < RECHECK_SECONDS:
        return False
    if _index_state(using, key[1]) == "valid":
        _INDEXED[key] = True
        _UNINDEXED_AT.pop(key, None)
        return True
    _UNINDEXED_AT[key] = time.monotonic()
    return False


def vectors_index(using: str, model: str, dimensions: int) -> bool:
    """Build ``model``'s HNSW index where missing (``CREATE INDEX CONCURRENTLY``, an invalid one
    rebuilt); return whether it is there now. Outside a transaction only: inside, it only says. A
    failed build is logged, and the exact scan goes on serving."""
    name = index_name(model, dimensions)
    connection = connections[using]
    indexed = vectors_indexed(using, model, dimensions)
    if indexed or connection.in_atomic_block:
        return indexed
    state = _index_state(using, name)
    if state in ("old", "building"):
        return False
    try:
        with connection.cursor() as cursor:
            if state == "invalid":
                cursor.execute(
                    sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier(name))
                )
            cursor.execute(
                sql.SQL(_INDEX_DDL).format(
                    name=sql.Identifier(name),
                    dimensions=sql.Literal(int(dimensions)),
                    model=sql.Literal(model),
                )
            )
    except DatabaseError:
        logger.warning(
            "The HNSW index %s could not be built; searches scan exactly.", name, exc_info=True
        )
        return False
    _UNINDEXED_AT.pop((using, name), None)
    return vectors_indexed(using, model, dimensions)


def vectors_write(
    using: str, model: str, turn_ids: Sequence[int], vectors: Sequence[Sequence[float]]
) -> int:
    """Store the vectors of ``turn_ids`` (their ``model``) in one statement; return how many
    were written (a turn deleted since it was read is left out)."""
    with connections[using].cursor() as cursor:
        cursor.execute(
            _WRITE_SQL, [model, list(turn_ids), [vector_text(vector) for vector in vectors]]
        )
        written: int = cursor.rowcount
        return written


def owner_centre(
    using: str, owner_pk: int, model: str, *, embedded: int | None = None
) -> list[float] | None:
    """The centre the owner's turns are compared around (``Centred``): the mean of at most
    ``CENTRE_SAMPLE`` of their vectors of ``model``; ``None`` for an owner with fewer than
    ``CENTRE_FROM`` (compared uncentred). Kept by the process per ``embedded`` count where given,
    read again only while the owner had fewer than ``CENTRE_SAMPLE``."""
    key = (using, owner_pk, model)
    kept = _CENTRES.get(key) if embedded is not None else None
    if kept is not None and embedded is not None:
        seen, centre = kept
        if embedded == seen or (seen >= CENTRE_SAMPLE and embedded > seen):
            return centre
    with connections[using].cursor() as cursor:
        cursor.execute(_CENTRE_SQL, [owner_pk, model, CENTRE_SAMPLE])
        mean, count = cursor.fetchone()
    centre = None
    if mean is not None and count >= CENTRE_FROM:
        centre = [float(x) for x in mean.strip("[]").split(",")]
    if embedded is not None:
        if len(_CENTRES) >= CENTRE_CACHE:
            _CENTRES.clear()
        _CENTRES[key] = (embedded, centre)
    return centre


def walk_settings(limit: int) -> dict[str, str]:
    """The settings of an index walk for the ``limit`` nearest turns: pgvector's iterative scan,
    and ``hnsw.ef_search``."""
    walked = limit * INDEX_WALK_FACTOR
    return {
        "hnsw.iterative_scan": "relaxed_order",
        "hnsw.ef_search": str(max(INDEX_EF_SEARCH, min(walked, 1000))),
    }


def vectors_nearest(
    using: str,
    owner_pk: int,
    model: str,
    query: Sequence[float],
    limit: int,
    *,
    embedded: int = 0,
    filters: Any = None,
    centre: Sequence[float] | None = None,
    measure: Centred | None = None,
    walk_set: bool = False,
) -> list[tuple[int, float]]:
    """The ``limit`` turns of owner ``owner_pk`` whose vectors (of ``model``) are nearest to
    ``query``: ``(turn pk, distance)``, nearest first: the cosine distance, centred on ``centre``
    where given (``Centred``). Past ``INDEX_FROM`` ``embedded`` turns, the HNSW index serves where
    it exists, walked ``INDEX_WALK_FACTOR`` times deeper and ranked exactly; ``filters`` keeps
    only the turns it allows; ``measure``, where given, is ``Centred(query, centre)`` already
    made; ``walk_set``: the caller's transaction has ``walk_settings(limit)`` already."""
    measure = measure or Centred(query, centre)
    clauses, params = filters.sql("t") if filters else ("", {})
    join = _FILTER_JOIN if clauses else ""
    params = {**params, **measure.params(), "owner": owner_pk, "model": model, "limit": limit}
    with connections[using].cursor() as cursor:
        if embedded > INDEX_FROM and vectors_indexed(using, model, len(query)):
            walked = limit * INDEX_WALK_FACTOR
            if not walk_set:
                settings = walk_settings(limit)
                cursor.execute(search.settings_sql(list(settings)), list(settings.values()))
            statement = sql.SQL(_NEAREST_INDEXED_SQL).format(
                dimensions=sql.Literal(len(query)),
                model=sql.Literal(model),
                join=sql.SQL(join),
                filters=sql.SQL(clauses),
                distance=sql.SQL(measure.distance_sql("v.vector")),
            )
            cursor.execute(statement.as_string(cursor.connection), {**params, "walked": walked})
        else:
            distance = measure.distance_sql("v.vector")
            cursor.execute(
                _NEAREST_SQL.format(join=join, filters=clauses, distance=distance), params
            )
        return [(turn_id, float(distance)) for turn_id, distance in cursor.fetchall()]


def facts_due(using: str, owner_pk: int, model: str, limit: int) -> list[tuple[int, int, str, Any]]:
    """Up to ``limit`` of the owner's facts with no vector of ``model`` for their current
    version: ``(fact pk, version, key, value)``."""
    with connections[using].cursor() as cursor:
        cursor.execute(_FACTS_DUE_SQL, [model, owner_pk, limit])
        return [
            (pk, version, key, codec.loads_jsonb(value))
            for pk, version, key, value in cursor.fetchall()
        ]


def facts_write(
    using: str,
    model: str,
    facts: Sequence[tuple[int, int]],
    vectors: Sequence[Sequence[float]],
) -> int:
    """Store the vectors of ``facts`` (``(fact pk, version)``, of ``model``) in one statement;
    return how many were written (a fact changed or deleted since it was read is left out)."""
    with connections[using].cursor() as cursor:
        cursor.execute(
            _FACT_WRITE_SQL,
            [
                model,
                [pk for pk, _ in facts],
                [version for _, version in facts],
                [vector_text(vector) for vector in vectors],
            ],
        )
        written: int = cursor.rowcount
        return written


def facts_nearest(
    using: str, owner_pk: int, model: str, query: Sequence[float], limit: int
) -> list[tuple[str, float]]:
    """The ``limit`` facts of owner ``owner_pk`` whose current vectors (of ``model``) are
    nearest to ``query``: ``(fact key, cosine distance)``, nearest first."""
    with connections[using].cursor() as cursor:
        cursor.execute(_FACTS_NEAREST_SQL, [vector_text(query), owner_pk, model, limit])
        return [(key, float(distance)) for key, distance in cursor.fetchall()]


def fact_text(key: str, value: Any) -> str:
    """What is embedded of a fact: its key and value, as words where they are words (``likes:
    basketball, jazz``), else as JSON."""

    def words(part: Any) -> str:
        if isinstance(part, str):
            return part
        if isinstance(part, list) and all(isinstance(x, (str, int, float)) for x in part):
            return ", ".join(str(x) for x in part)
        if isinstance(part, dict):
            return "; ".join(f"{name}: {words(x)}" for name, x in part.items())
        return codec.dumps(part).decode()

    return f"{key.replace('_', ' ').replace('.', ' ')}: {words(value)}"
