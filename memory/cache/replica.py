"""Reads from a replica that never serve yesterday: a cold read (and the fill it stores) goes
to ``MEMORY["READ_DATABASE"]`` only when that replica holds the owner's last acknowledged
write, judged by the owner's stamp (rule 1), else to the primary."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import DEFAULT_DB_ALIAS, DatabaseError

from memory.cache.client import breaker
from memory.cache.copy import Loaded
from memory.cache.stamps import stamp_get
from memory.conf import conf

logger = logging.getLogger("memory.cache")


def replica_current(*, primary: int, replica: int) -> bool:
    """Whether a replica's read of an owner at stamp ``replica`` is as current as the primary's
    stamp ``primary`` read before it: the same write, or a later one of an owner the primary
    held; an owner the primary no longer holds (0) only where the replica holds none either."""
    return replica == primary or replica > primary > 0


def replica_read(owner_id: str, read: Callable[[str], Loaded]) -> Loaded:
    """``read(alias)`` of a snapshot (with a ``stamp``) from the replica, when the replica's
    answer is as current as the primary's stamp of the owner read first; else from the primary.

    Without ``MEMORY["READ_DATABASE"]``: ``read`` on the primary. A replica that fails or is
    behind costs one more read, on the primary, never a stale answer. Counted as the cache
    events ``replica_served``, ``replica_behind`` and ``replica_failed``. Raises what the
    primary's read raises.
    """
    alias = conf.READ_DATABASE
    if alias is None:
        return read(DEFAULT_DB_ALIAS)
    # NOTE: the primary's stamp first: every write acknowledged before this read began is in it
    # (read-your-writes on any instance), and a replica at that stamp or later has replayed it.
    primary = stamp_get(owner_id)
    try:
        answer = read(alias)
    except DatabaseError as e:
        breaker.count("replica_failed")
        logger.info("The read replica %r failed a read; the primary answers: %s", alias, e)
        return read(DEFAULT_DB_ALIAS)
    if replica_current(primary=primary, replica=answer.snapshot.stamp):
        breaker.count("replica_served")
        return answer
    breaker.count("replica_behind")
    return read(DEFAULT_DB_ALIAS)
