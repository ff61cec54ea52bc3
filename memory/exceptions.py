"""Domain errors of the memory app. They carry no HTTP; ``memory.views`` maps them to statuses."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

from django.db import InterfaceError, OperationalError

__all__ = [
    "FactNotFound",
    "FactVersionConflict",
    "IdempotencyKeyReused",
    "MemoryException",
    "MemoryUnavailable",
    "ReadsInFlight",
    "SearchTimeout",
    "SearchUnavailable",
]

logger = logging.getLogger("memory.db")

# The same cause of an unavailable database is logged at most this often, with a count.
UNAVAILABLE_LOG_SECONDS = 10.0
# The longest message of a cause that is logged (its first line only).
UNAVAILABLE_LOG_CHARS = 200


class MemoryException(Exception):
    """Base class of every error the memory app raises on purpose."""


class FactNotFound(MemoryException):
    """The owner has no fact under that key."""

    def __init__(self, key: str) -> None:
        super().__init__(f"No fact {key!r}.")
        self.key = key


class FactVersionConflict(MemoryException):
    """A write named an expected version that is no longer the fact's current one."""

    def __init__(self, key: str, expected: int, current: int | None) -> None:
        super().__init__(
            f"Fact {key!r} is at version {current}, not {expected}."
            if current is not None
            else f"Fact {key!r} does not exist, so it is not at version {expected}."
        )
        self.key = key
        self.expected = expected
        self.current = current


class IdempotencyKeyReused(MemoryException):
    """An idempotency key came back with a different request than the turn first stored under it;
    nothing was stored. ``turn`` is that first turn."""

    def __init__(self, key: str, turn: Any = None) -> None:
        super().__init__(
            f"Idempotency-Key {key!r} was already used for a different turn; "
            "a retry must repeat the first request exactly. Nothing was stored."
        )
        self.key = key
        self.turn = turn


class MemoryUnavailable(MemoryException):
    """The database, the source of truth, could not be reached; nothing was stored."""


class SearchTimeout(MemoryException):
    """A search statement ran past ``MEMORY["SEARCH_TIMEOUT_MS"]`` and Postgres stopped it."""

    def __init__(self, milliseconds: int) -> None:
        super().__init__(
            f"The search took longer than {milliseconds} ms and was stopped; "
            "try again, or with fewer or more specific words."
        )
        self.milliseconds = milliseconds


class SearchUnavailable(MemoryException):
    """A search by meaning could not run: the embedder failed on the query (the API: 503)."""


class ReadsInFlight(MemoryException):
    """The caller already has ``MEMORY["HEAVY_READS_PER_CALLER"]`` heavy reads in flight in this
    process (``memory.limits``); nothing was read. Retry after ``retry_after`` seconds."""

    def __init__(self, limit: int, retry_after: int = 1) -> None:
        super().__init__(
            f"Too many heavy reads in flight: at most {limit} at once per caller "
            "(searches, long contexts and long turn pages); wait for one to finish."
        )
        self.limit = limit
        self.retry_after = retry_after


class _UnavailableLog:
    """When each cause of an unavailable database was last logged, and how often since."""

    lock = threading.Lock()
    # (error type, message) -> (monotonic time logged, recurrences since); bounded: cleared
    # when it holds this many causes.
    logged: dict[tuple[str, str], tuple[float, int]] = {}
    most = 64


def unavailable_log(exc: BaseException) -> None:
    """Log (``memory.db``, a warning) why the database counts as unavailable: the error types and
    the message's first line, which names no query or data. Once per ``UNAVAILABLE_LOG_SECONDS`` per
    cause and process, with a count. Never raises."""
    kind = type(exc).__name__
    driver = exc.__cause__
    if driver is not None and type(driver) is not type(exc):
        kind = f"{kind} ({type(driver).__module__}.{type(driver).__qualname__})"
    lines = str(exc).strip().splitlines()
    message = lines[0][:UNAVAILABLE_LOG_CHARS] if lines else ""
    key, now, repeats = (kind, message), time.monotonic(), 0
    with _UnavailableLog.lock:
        logged = _UnavailableLog.logged
        if len(logged) >= _UnavailableLog.most:
            logged.clear()
        entry = logged.get(key)
        if entry is not None and now - entry[0] < UNAVAILABLE_LOG_SECONDS:
            logged[key] = (entry[0], entry[1] + 1)
            return
        if entry is not None:
            repeats = entry[1]
        logged[key] = (now, 0)
    again = f" ({repeats} more since the last report)" if repeats else ""
    logger.warning("The memory database is unavailable: %s: %s%s", kind, message, again)


class database_guard(contextlib.ContextDecorator):
    """Turn a lost database connection into ``MemoryUnavailable`` (a decorator or a ``with``),
    its cause logged by ``unavailable_log``."""

    def __enter__(self) -> database_guard:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        if exc is not None and isinstance(exc, (OperationalError, InterfaceError)):
            unavailable_log(exc)
            raise MemoryUnavailable(f"The database is unavailable: {exc}") from exc
