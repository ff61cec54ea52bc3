"""The owner's summary of its older turns, read through the Redis copy like the context."""

from __future__ import annotations

import functools

from memory import aio, cache
from memory.exceptions import database_guard
from memory.payloads import SummaryPayload
from memory.selectors.context import database_read
from memory.selectors.pages import check_owner


@database_guard()
def summary_get(*, owner_id: str) -> SummaryPayload | None:
    """The owner's summary of its turns 1..``through_seq``, or ``None`` while it has none; read
    through the cached copy as ``context_get`` reads. Raises ``ValidationError`` for a bad owner id
    and ``MemoryUnavailable`` when the database cannot be reached."""
    check_owner(owner_id)
    memory, _ = cache.read_through(
        owner_id=owner_id, turns=0, load=functools.partial(database_read, owner_id)
    )
    return memory.summary


@aio.twin_of(summary_get)
async def asummary_get(*, owner_id: str) -> SummaryPayload | None:
    check_owner(owner_id)
    with database_guard():
        memory, _ = await cache.aread_through(
            owner_id=owner_id, turns=0, load=functools.partial(database_read, owner_id)
        )
    return memory.summary
