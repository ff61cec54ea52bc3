"""The database history every copy is stamped on: the PostgreSQL cluster's system identifier
and the primary's timeline, which a promotion changes at once. It names every owner key
(``keys.owner_key``; rule 9 of ``memory.cache``).

A process trusts the history it last confirmed for ``MEMORY["HISTORY_LEASE"]`` seconds
(monotonic clock); past that, no copy is read or written until one query confirms it again.
The repairer thread renews it in the background; a request renews it itself only when the
thread did not (one query, once per lease at most).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time

from django.db import DatabaseError, connection, transaction

from memory.cache.runs import named
from memory.conf import conf

logger = logging.getLogger("memory.cache")

# The history of a database that has no timelines (SQLite): one, for ever.
SINGLE = "0"

_QUERY = (
    "SELECT system_identifier::text, substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)"
    " FROM pg_control_system()"
)


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.epoch: str | None = None
        self.confirmed_at = 0.0
        self.switches = 0


_state = _State()


def reset() -> None:
    """Forget the confirmed history (tests, forks): the next cache call confirms it again."""
    with _state.lock:
        _state.reset()


def _epoch_of(system_identifier: str, timeline: str) -> str:
    digest = hashlib.blake2b(f"{system_identifier}/{timeline}".encode(), digest_size=4)
    return digest.hexdigest()


def history_probe() -> str | None:
    """Ask the database for its history now (one query on the default alias); record and
    return its epoch, or ``None`` when the database does not answer (or is in recovery: a
    standby has no history to write on). Never raises a database error."""
    # NOTE: the lease runs from before the question, so a slow answer cannot stretch it.
    asked = time.monotonic()
    if connection.vendor != "postgresql":
        epoch = SINGLE
    else:
        try:
            # NOTE: a savepoint, so a failed probe does not abort a caller's transaction.
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(_QUERY)
                system_identifier, timeline = cursor.fetchone()
        except DatabaseError as e:
            logger.info("Could not confirm the database's history: %s", e)
            return None
        epoch = _epoch_of(system_identifier, timeline)
    with _state.lock:
        if asked < _state.confirmed_at:
            # NOTE: a question asked later (another thread's) was answered first: its answer
            # stands, and this one renews nothing.
            return epoch if epoch == _state.epoch else None
        if _state.epoch is not None and _state.epoch != epoch:
            _state.switches += 1
            logger.warning(
                "The database's history changed (a promotion or a restore): every cached copy "
                "stamped on the previous one is refused from now on."
            )
        _state.epoch, _state.confirmed_at = epoch, asked
    return epoch


def _trusted() -> str | None:
    epoch, confirmed_at = _state.epoch, _state.confirmed_at
    if epoch is not None and time.monotonic() - confirmed_at < conf.HISTORY_LEASE:
        return epoch
    return None


def history_trusted() -> str | None:
    """The epoch this process confirmed within the lease, named with the cache server's run
    (``runs``), or ``None``; no I/O."""
    return named(_trusted(), ask=False)


def history_epoch() -> str | None:
    """The epoch to read and write copies under: the trusted one, else the database's now
    (one query), with the server's run (asked if unknown); ``None`` when either is not
    confirmed (no copy may be used)."""
    return named(_trusted() or history_probe(), ask=True)


def history_due() -> bool:
    """Whether the repairer should renew the lease now (half of it is left or less): it looks
    every quarter of a lease, so a thread held up for a quarter still renews it in time."""
    return time.monotonic() - _state.confirmed_at >= conf.HISTORY_LEASE / 2


def history_current() -> str:
    """The last epoch this process confirmed, trusted or not: the keys' name by default. Before
    any, the database's now (one query), or ``SINGLE`` if it does not answer."""
    epoch = _state.epoch or history_probe() or SINGLE
    return named(epoch, ask=True) or epoch


def history_switches() -> int:
    """How many times this process saw the database's history change (metrics)."""
    return _state.switches
