"""The context's database read in one round trip: ``memory.selectors.context.django_read`` (its
specification) on PostgreSQL through psycopg 3's pipeline mode."""

from __future__ import annotations

import datetime as dt
import functools

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections
from psycopg import Pipeline

from memory import cache, codec
from memory.models import Fact, Owner, Summary, Turn
from memory.payloads import (
    FACT_FIELDS,
    SUMMARY_FIELDS,
    TURN_FIELDS,
    FactPayload,
    SummaryPayload,
    TurnPayload,
)


def context_read_usable(using: str = DEFAULT_DB_ALIAS) -> bool:
    """Whether ``context_read`` can serve on the database ``using``: PostgreSQL through
    psycopg 3 with pipeline mode, and aware datetimes (which it writes as UTC)."""
    conn = connections[using]
    if conn.vendor != "postgresql" or not settings.USE_TZ:
        return False
    conn.ensure_connection()
    return hasattr(conn.connection, "pipeline") and Pipeline.is_supported()


def _utc(column: str) -> str:
    # NOTE: text of a fixed shape whatever the session's DateStyle; _iso() finishes it.
    return f"to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US')"


def _iso(text: str) -> str:
    """``isoformat()`` of the aware UTC datetime ``_utc()`` wrote (``payloads.isoformat``)."""
    return (text[:-7] if text.endswith(".000000") else text) + "Z"


@functools.cache
def _context_read_sql() -> tuple[str, str, str, str]:
    """The four statements of ``context_read``, written once from the models' tables."""
    q = connection.ops.quote_name
    owner, turn, fact, summary = (q(model._meta.db_table) for model in (Owner, Turn, Fact, Summary))
    owner_pk = f"(SELECT id FROM {owner} WHERE external_id = %s)"
    turn_columns = [*map(q, TURN_FIELDS[:-1]), _utc(q(TURN_FIELDS[-1]))]
    fact_columns = [
        *map(q, FACT_FIELDS[:3]),
        _utc(q(FACT_FIELDS[3])),
        q(FACT_FIELDS[4]),
        _utc(q(FACT_FIELDS[5])),
    ]
    summary_columns = [*map(q, SUMMARY_FIELDS[:3]), _utc(q(SUMMARY_FIELDS[3]))]
    return (
        f"SELECT stamp FROM {owner} WHERE external_id = %s",
        f"SELECT {', '.join(turn_columns)} FROM {turn}"
        f" WHERE owner_id = {owner_pk} ORDER BY seq DESC LIMIT %s",
        f"SELECT {', '.join(fact_columns)} FROM {fact}"
        f" WHERE owner_id = {owner_pk} AND (expires_at IS NULL OR expires_at > %s)"
        f" ORDER BY {q('key')}",
        f"SELECT {', '.join(summary_columns)} FROM {summary} WHERE owner_id = {owner_pk}",
    )


def context_read(
    owner_id: str, turns: int, at: dt.datetime, using: str = DEFAULT_DB_ALIAS
) -> tuple[cache.Snapshot, bool]:
    """``memory.selectors.context.django_read`` in one round trip, with the payloads built straight
    from the rows: the same snapshot and completeness.

    NOTE: the ORM's query building and timestamp parsing cost more than the database
    (docs/performance.md): the SQL is written once, sent in pipeline mode, timestamps as text.
    Expired facts are left out by ``at``, not ``now()``: the one clock the cached copy uses.
    """
    owner_sql, turns_sql, facts_sql, summary_sql = _context_read_sql()
    conn = connections[using]
    cursors = [conn.cursor() for _ in range(4)]
    try:
        # NOTE: errors of pipelined statements surface when the pipeline syncs, outside
        # Django's cursor wrapper: they are wrapped here into django.db errors like any query's.
        with conn.wrap_database_errors:
            with conn.connection.pipeline():
                cursors[0].execute(owner_sql, [owner_id])
                cursors[1].execute(turns_sql, [owner_id, turns])
                cursors[2].execute(facts_sql, [owner_id, at])
                cursors[3].execute(summary_sql, [owner_id])
            owner_rows, rows, fact_rows, summary_rows = (cursor.fetchall() for cursor in cursors)
    finally:
        for cursor in cursors:
            cursor.close()
    if not owner_rows:
        return cache.Snapshot(stamp=0, turns=[], facts=[]), True
    rows.reverse()
    # NOTE: jsonb arrives as text, decoded as Django's JSONField decodes it (codec.loads_jsonb).
    turn_list: list[TurnPayload] = [
        {
            "seq": seq,
            "session_id": session_id,
            "role": role,
            "content": content,
            "metadata": codec.loads_jsonb(metadata),
            "created_at": _iso(created_at),
        }
        for seq, session_id, role, content, metadata, created_at in rows
    ]
    facts: list[FactPayload] = [
        {
            "key": key,
            "value": codec.loads_jsonb(value),
            "session_id": session_id,
            "updated_at": _iso(updated_at),
            "version": version,
            "expires_at": _iso(expires_at) if expires_at is not None else None,
        }
        for key, value, session_id, updated_at, version, expires_at in fact_rows
    ]
    summary: SummaryPayload | None = None
    if summary_rows:
        text, through_seq, tokens, updated_at = summary_rows[0]
        summary = {
            "text": text,
            "through_seq": through_seq,
            "tokens": tokens,
            "updated_at": _iso(updated_at),
        }
    memory = cache.Snapshot(stamp=owner_rows[0][0], turns=turn_list, facts=facts, summary=summary)
    return memory, len(rows) < turns
