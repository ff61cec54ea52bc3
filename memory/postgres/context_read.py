"""The context's database read in one statement: ``memory.selectors.context.django_read`` (its
specification) on PostgreSQL, prepared where ``memory.db`` allows it."""

from __future__ import annotations

import datetime as dt
import functools

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections

from memory import cache, codec
from memory.db import prepared_fetchone
from memory.models import Fact, Owner, Summary, Turn
from memory.payloads import (
    FACT_FIELDS,
    SUMMARY_FIELDS,
    TURN_FIELDS,
    SummaryPayload,
    payloads_from_arrays,
)


def context_read_usable(using: str = DEFAULT_DB_ALIAS) -> bool:
    """Whether ``context_read`` can serve on the database ``using``: PostgreSQL, and aware
    datetimes (which it writes as UTC)."""
    return connections[using].vendor == "postgresql" and bool(settings.USE_TZ)


def _utc(column: str) -> str:
    """SQL of ``column``'s instant as ``payloads.isoformat`` writes it (UTC as ``Z``, no fraction
    when it has no microseconds), whatever the session's DateStyle."""
    return (
        f"replace(to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),"
        " '.000000Z', 'Z')"
    )


@functools.cache
def _context_read_sql(alias: str) -> str:
    """The statement of ``context_read``, written once from the models' tables: one row (none
    for an unknown owner) of the owner's stamp, then its last turns (oldest first), live facts
    (by key) and summary, each a JSON array of field arrays as text (``None``: none).
    Parameters: turns, instant, owner id."""
    q = connections[alias].ops.quote_name
    owner, turn, fact, summary = (q(model._meta.db_table) for model in (Owner, Turn, Fact, Summary))
    # NOTE: jsonb as is, decoded at once (codec.loads_jsonb_rows); the rest text or int64.
    turn_columns = [
        *(f"t.{q(f)}" for f in TURN_FIELDS[:5]),
        _utc(f"t.{q(TURN_FIELDS[5])}"),
    ]
    fact_columns = [
        *(f"f.{q(f)}" for f in FACT_FIELDS[:3]),
        _utc(f"f.{q(FACT_FIELDS[3])}"),
        f"f.{q(FACT_FIELDS[4])}",
        _utc(f"f.{q(FACT_FIELDS[5])}"),
    ]
    summary_columns = [
        *(f"s.{q(f)}" for f in SUMMARY_FIELDS[:3]),
        _utc(f"s.{q(SUMMARY_FIELDS[3])}"),
    ]
    owner_pk, seq, expires_at = f"o.{q('id')}", q("seq"), q("expires_at")
    turns = (
        f"SELECT json_agg(json_build_array({', '.join(turn_columns)}) ORDER BY t.{seq})::text"
        f" FROM (SELECT {', '.join(map(q, TURN_FIELDS))} FROM {turn}"
        f" WHERE {q('owner_id')} = {owner_pk} ORDER BY {seq} DESC LIMIT %s) t"
    )
    facts = (
        f"SELECT json_agg(json_build_array({', '.join(fact_columns)}) ORDER BY f.{q('key')})::text"
        f" FROM {fact} f WHERE f.{q('owner_id')} = {owner_pk}"
        f" AND (f.{expires_at} IS NULL OR f.{expires_at} > %s)"
    )
    summaries = (
        f"SELECT json_build_array({', '.join(summary_columns)})::text"
        f" FROM {summary} s WHERE s.{q('owner_id')} = {owner_pk}"
    )
    # NOTE: one statement, not four: one plan, and orjson reads the JSON faster than rows.
    return (
        f"SELECT o.{q('stamp')}, ({turns}), ({facts}), ({summaries})"
        f" FROM {owner} o WHERE o.{q('external_id')} = %s"
    )


def context_read(
    owner_id: str, turns: int, at: dt.datetime, using: str = DEFAULT_DB_ALIAS
) -> cache.Loaded:
    """``memory.selectors.context.django_read`` in one statement and one round trip, with the
    payloads built straight from its JSON: the same snapshot and completeness.
    Expired facts are left out by ``at``, not ``now()``: the cached copy's clock. Raises what
    the statement raises, as Django's errors.
    """
    row = prepared_fetchone(
        connections[using], _context_read_sql(using), [turns, at, owner_id], read_only=True
    )
    if row is None:
        return cache.Loaded(cache.Snapshot(stamp=0, turns=[], facts=[]), True)
    stamp, turns_json, facts_json, summary_json = row
    turn_list, facts = payloads_from_arrays(
        codec.loads_jsonb_rows(turns_json, 4) if turns_json else (),
        codec.loads_jsonb_rows(facts_json, 1) if facts_json else (),
    )
    summary: SummaryPayload | None = None
    if summary_json is not None:
        text, through_seq, tokens, updated_at = codec.loads(summary_json)
        summary = {
            "text": text,
            "through_seq": through_seq,
            "tokens": tokens,
            "updated_at": updated_at,
        }
    memory = cache.Snapshot(stamp=stamp, turns=turn_list, facts=facts, summary=summary)
    return cache.Loaded(memory, len(turn_list) < turns)
