"""The protocol's async front door: a warm read on ``redis.asyncio`` (``copy_aread``), with no
thread hop; anything else goes through the sync read path in one ``sync_to_async`` call. Same
scripts, breaker, counters and validity step as the sync side."""

from __future__ import annotations

from asgiref.sync import sync_to_async

from memory.cache.client import breaker
from memory.cache.copy import Hit, Snapshot, copy_aread
from memory.cache.history import history_trusted
from memory.cache.readthrough import Loader, Source, copy_valid, read_through, snapshot_live
from memory.cache.repair import repairer_ensure


async def aread_through(*, owner_id: str, turns: int, load: Loader) -> tuple[Snapshot, Source]:
    """``read_through`` for async code: a valid copy in one async Redis round trip, no query
    and no thread (its expired facts dropped, as ``read_through`` drops them); the validity
    step's database check (only while suspect) and every other case in one ``sync_to_async``
    call of the sync path. Raises what ``load`` raises."""
    # NOTE: no cache configured, the read below answers DISABLED and the sync path is taken.
    epoch = history_trusted()
    if epoch is not None:
        # NOTE: a history not confirmed within the lease is confirmed by the sync path.
        repairer_ensure()
        result = await copy_aread(owner_id=owner_id, turns=turns, epoch=epoch)
        if isinstance(result, Hit):
            # NOTE: read once: a validity step that queried would do so on the event loop.
            suspect = breaker.suspect()
            if suspect:
                checked = await sync_to_async(copy_valid)(
                    owner_id, result, suspect=True, epoch=epoch
                )
            else:
                checked = copy_valid(owner_id, result, suspect=False, epoch=epoch)
            if isinstance(checked, Hit):
                return snapshot_live(checked.snapshot), "cache"
    return await sync_to_async(read_through)(owner_id=owner_id, turns=turns, load=load)
