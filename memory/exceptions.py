"""Domain errors of the memory app. They carry no HTTP; ``memory.views`` maps them to statuses."""

from __future__ import annotations

import contextlib
from typing import Any

from django.db import InterfaceError, OperationalError


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
    """An idempotency key came back with a different request (session, role, content or
    metadata) than the turn first stored under it; nothing was stored. ``turn`` is that first
    turn, for Python callers (the HTTP answer says only this message)."""

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


class database_guard(contextlib.ContextDecorator):
    """Turn a lost database connection into ``MemoryUnavailable`` (a decorator or a ``with``)."""

    def __enter__(self) -> database_guard:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        if exc is not None and isinstance(exc, (OperationalError, InterfaceError)):
            raise MemoryUnavailable(f"The database is unavailable: {exc}") from exc
