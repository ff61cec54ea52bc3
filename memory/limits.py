"""Work in flight per caller: the slots a heavy read holds in this process while it runs, so that
one caller never occupies every thread (``MEMORY["HEAVY_READS_PER_CALLER"]``).

The API's views take a slot for a search, and for a context, messages or turn page beyond the
cached copy or a default page; past the limit, 429 with ``Retry-After``. The Python API takes
none.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from memory.conf import conf
from memory.exceptions import ReadsInFlight

# A turn page longer than this (the API's default page) is a heavy read.
PAGE_TURNS = 50

_lock = threading.Lock()
# Heavy reads in flight in this process, per caller; a caller with none has no entry.
_in_flight: dict[str, int] = {}


@contextmanager
def heavy_read(*, caller: str) -> Iterator[None]:
    """Hold one of ``caller``'s heavy-read slots of this process for the block.

    Raises ``ReadsInFlight`` at once, holding nothing, when ``caller`` already holds
    ``MEMORY["HEAVY_READS_PER_CALLER"]`` of them. The slot is given back however the block ends.
    """
    limit = conf.HEAVY_READS_PER_CALLER
    with _lock:
        held = _in_flight.get(caller, 0)
        if held >= limit:
            raise ReadsInFlight(limit)
        _in_flight[caller] = held + 1
    try:
        yield
    finally:
        with _lock:
            left = _in_flight[caller] - 1
            if left:
                _in_flight[caller] = left
            else:
                del _in_flight[caller]


def in_flight(*, caller: str) -> int:
    """How many heavy reads ``caller`` has in flight in this process now."""
    with _lock:
        return _in_flight.get(caller, 0)


def context_heavy(*, turns: int | None, max_tokens: int | None = None) -> bool:
    """Whether a context (or its messages) of these arguments reads more turns than the cached
    copy holds; ``turns`` defaults as ``selectors.context_messages`` defaults it."""
    if turns is None:
        turns = conf.MAX_CONTEXT_TURNS if max_tokens is not None else conf.CONTEXT_TURNS
    return turns > conf.CACHE_TURNS


def page_heavy(*, limit: int) -> bool:
    """Whether a turn page of ``limit`` turns is longer than the API's default page."""
    return limit > PAGE_TURNS
