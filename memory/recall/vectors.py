"""The turns' vectors in PostgreSQL with pgvector (``memory_turnvector``, migration 0015): whether
the database has them, writing a batch, and the nearest of one owner's turns to a query.

Bounded work: a search scans the vectors of one owner only (the ``(owner_id, model)`` index)
and sorts them by cosine distance keeping the best ``limit`` (a top-N heap sort); measured on
the bench's 50,000-turn owner, that exact scan answers within the search's time limit and
needs no index to tune, where an HNSW index over every owner's rows would have to filter
another owner's neighbours out (docs/recall.md). The statements run inside the caller's
search transaction, under its ``statement_timeout``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from django.db import DatabaseError, connections

# Per database alias: true once seen true; else when it was last seen false (asked again after
# ``RECHECK_SECONDS``, so that ``memory_embed --setup`` takes effect without a restart).
_READY: dict[str, bool] = {}
_MISSING_AT: dict[str, float] = {}
RECHECK_SECONDS = 30.0

_READY_SQL = (
    "SELECT to_regclass('memory_turnvector') IS NOT NULL"
    " AND EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector')"
)

# NOTE: only turns that still exist and still belong to the owner are written (a turn deleted
# or moved by a link since it was read is skipped); a vector already there is replaced, owner
# included, so that a row written for a turn's former owner is corrected.
_WRITE_SQL = """
INSERT INTO memory_turnvector (turn_id, owner_id, model, vector)
SELECT t.id, t.owner_id, %s, v.vector::halfvec
FROM unnest(%s::bigint[], %s::text[]) AS v (turn_id, vector)
JOIN memory_turn AS t ON t.id = v.turn_id
ON CONFLICT (turn_id) DO UPDATE
SET owner_id = EXCLUDED.owner_id, model = EXCLUDED.model, vector = EXCLUDED.vector
"""

# NOTE: the turn is joined on its owner too: a vector row is never trusted alone for whose
# turn it is.
_NEAREST_SQL = """
SELECT v.turn_id, v.vector <=> %s::halfvec AS distance
FROM memory_turnvector AS v
WHERE v.owner_id = %s::bigint AND v.model = %s
ORDER BY distance, v.turn_id DESC
LIMIT %s
"""


def vector_text(vector: Sequence[float]) -> str:
    """pgvector's text form of ``vector``."""
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def vectors_ready(using: str) -> bool:
    """Whether the database ``using`` has pgvector and the vector table: asked once per process
    when true, at most every ``RECHECK_SECONDS`` while false."""
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
    from memory.conf import conf

    return conf.EMBEDDER is not None and vectors_ready(using)


def vectors_forget_ready() -> None:
    """Ask the database again next time (after a test dropped or created the table)."""
    _READY.clear()
    _MISSING_AT.clear()


def vectors_write(
    using: str, model: str, turn_ids: Sequence[int], vectors: Sequence[Sequence[float]]
) -> int:
    """Store the vectors of ``turn_ids`` (their ``model``) in one statement; return how many
    were written (a turn deleted since it was read is left out)."""
    with connections[using].cursor() as cursor:
        cursor.execute(
            _WRITE_SQL, [model, list(turn_ids), [vector_text(vector) for vector in vectors]]
        )
        return cursor.rowcount


def vectors_nearest(
    using: str, owner_pk: int, model: str, query: Sequence[float], limit: int
) -> list[tuple[int, float]]:
    """The ``limit`` turns of owner ``owner_pk`` whose vectors (of ``model``) are nearest to
    ``query``: ``(turn pk, cosine distance)``, nearest first."""
    with connections[using].cursor() as cursor:
        cursor.execute(_NEAREST_SQL, [vector_text(query), owner_pk, model, limit])
        return [(turn_id, float(distance)) for turn_id, distance in cursor.fetchall()]
