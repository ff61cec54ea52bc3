"""The turn append in one call of the database function ``memory_turn_append()``
(``sql/turn_append.sql``), on PostgreSQL: ``memory.services.turns._turn_append_django`` (its
specification) in one round trip."""

from __future__ import annotations

from typing import NamedTuple

from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from memory import codec
from memory.appends import (
    AppendAccess,
    AppendPlan,
    SummaryCount,
    TurnInput,
    fact_cap_warn,
    retry_checked,
    row_loaded,
    turn_loaded,
)
from memory.conf import conf
from memory.db import prepared_fetchone
from memory.models import Owner, Turn
from memory.payloads import FactPayload, fact_payload_from_row
from memory.postgres.token_lookup import reach_sql, token_columns, token_loaded

# The parameters of memory_turn_append() (sql/turn_append.sql), in its order, typed
# for a cursor that binds them on the server.
_APPEND_ARGS = (
    "%s::text", "%s::text", "%s::text", "%s::text", "%s::jsonb", "%s::text", "%s::boolean",
    "%s::timestamptz", "%s::boolean", "%s::jsonb", "%s::integer", "%s::integer", "%s::integer",
)  # fmt: skip
_APPEND_CALL = f"SELECT * FROM memory_turn_append({', '.join(_APPEND_ARGS)})"


class Appended(NamedTuple):
    """What one call stored: the turn; the pks of the ``PendingExtraction`` and the
    ``PendingSummary`` it created, if any (the caller enqueues both); and for the cache's
    update, the owner with its new stamp, the facts written and the stamp taken before (no
    owner for a retry of an idempotency key, which stored nothing)."""

    turn: Turn
    pending_pk: int | None
    summary_pk: int | None
    owner: Owner | None
    facts: list[FactPayload]
    stamp_taken: int | None


def turn_append_call(
    new: TurnInput,
    plan: AppendPlan,
    count: SummaryCount,
    *,
    dirty: bool,
    db: BaseDatabaseWrapper,
    access: AppendAccess | None = None,
) -> Appended | None:
    """``turn_append`` of checked input as ``_turn_append_django`` does it, in one call of
    ``memory_turn_append()`` on ``db``: one round trip, its own transaction. Returns what was
    stored, or ``None`` when a fact of ``plan`` moved before the owner's lock (nothing written).
    Raises ``IdempotencyKeyReused``. ``dirty``: the copy marked dirty with the stamp; with
    ``access``, only a caller who reaches the owner appends (``access.settle`` raises)."""
    owner_id, session_id, role, content, metadata, idempotency_key = new
    at = timezone.now()
    params = [
        owner_id,
        session_id,
        role,
        content,
        codec.dumps(metadata).decode(),
        idempotency_key,
        dirty,
        at,
        plan.defer,
        codec.dumps(plan.facts).decode() if plan.facts is not None else None,
        conf.MAX_FACTS,
        count.tokens,
        count.after,
    ]
    if access is None:
        row = prepared_fetchone(db, _APPEND_CALL, params)
    else:
        app_label, codename = access.permission.split(".")
        row = prepared_fetchone(
            db,
            reach_sql(db.alias, "memory_turn_append", _APPEND_ARGS),
            [owner_id, app_label, codename, access.key, *params],
            idle_look=True,
        )
        access.settle(None if row is None else token_loaded(db.alias, row))
        assert row is not None  # settle raises for no token
        row = row[token_columns(db.alias) :]
        if row[0] is None:
            # NOTE: refused by the statement where settle let the caller through: nothing was
            # written, and the general path writes as for any caller settle let through.
            return None
    assert row is not None  # the SELECT of one function call: one row
    created, conflict, turn_pk, owner_pk, seq, stamp, prev, *stored = row[:12]
    pending_pk, written, skipped, summary_pk = row[12:16]
    if conflict:
        return None
    if not created:
        existing = turn_loaded(
            id=turn_pk,
            owner_id=owner_pk,
            seq=seq,
            session_id=stored[0],
            role=stored[1],
            content=stored[2],
            metadata=codec.loads_jsonb(stored[3]),
            idempotency_key=idempotency_key,
            created_at=stored[4],
        )
        return Appended(retry_checked(existing, new), None, None, None, [], None)
    turn = turn_loaded(
        id=turn_pk,
        owner_id=owner_pk,
        seq=seq,
        session_id=session_id,
        role=role,
        content=content,
        metadata=metadata,
        idempotency_key=idempotency_key,
        created_at=at,
    )
    for key in skipped or ():
        fact_cap_warn(key, seq, owner_id)
    facts = [
        fact_payload_from_row((fact["key"], fact["value"], session_id, at, fact["version"], None))
        for fact in (codec.loads(written) if written else ())
    ]
    owner = row_loaded(Owner, {"id": owner_pk, "external_id": owner_id, "stamp": stamp})
    return Appended(turn, pending_pk, summary_pk, owner, facts, prev)
