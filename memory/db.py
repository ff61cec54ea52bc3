"""The app's few hot statements on PostgreSQL, run as prepared statements where safe
(``prepared_fetchone``): not behind a transaction pooler, not inside a caller's transaction, not
while queries are logged; a lost statement is sent again unprepared (docs/performance.md, "Prepared
statements")."""

from __future__ import annotations

import functools
import logging
import select
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from django.db import DatabaseError

from memory.conf import conf

logger = logging.getLogger("memory.db")

# NOTE: a prepared statement lost, duplicated, or changed under the connection (a migration), or
# another client's under the same name behind a pooler: each fails before it runs.
PREPARED_LOST = frozenset({"26000", "42P05", "0A000", "08P01"})

# The attribute of a psycopg connection holding its cursor for prepared statements.
_CURSOR = "_django_memory_prepared_cursor"


class _Prepared:
    """Whether this process still prepares: it stops the first time a server lost one."""

    works = True


def prepared_fetchone(
    db: Any, sql: str, params: Sequence[Any], *, read_only: bool = False, idle_look: bool = False
) -> tuple[Any, ...] | None:
    """Run ``sql`` on the Django connection ``db`` (PostgreSQL) and return its first row.

    Prepared where the rules allow it, else with server-side binding (type what the server cannot
    infer: ``%s::jsonb``). Raises what the statement raises, as Django's errors. ``read_only``: it
    writes nothing, so it is also the connection's health check. ``idle_look``: a write checked
    by ``idle_clean`` instead of Django's ``SELECT 1``; never sent twice.
    """
    if idle_look and _health_check_due(db) and idle_clean(db):
        # NOTE: a connection the server closed while idle has its end (or its FATAL message)
        # waiting on the socket; one that looks clean is used as Django's check would.
        db.health_check_done = True
    if read_only and _health_check_due(db):
        # NOTE: marked done first, so that nothing on the way sends Django's SELECT 1.
        db.health_check_done = True
        try:
            return _fetchone(db, sql, params)
        except DatabaseError:
            if not _broken(db):
                raise
        logger.debug("A database connection kept from an earlier request was dead; reconnecting.")
        db.close()
    return _fetchone(db, sql, params)


def _health_check_due(db: Any) -> bool:
    """Whether Django would check the connection ``db`` before its next statement."""
    return (
        db.connection is not None
        and getattr(db, "health_check_enabled", False)
        and not getattr(db, "health_check_done", True)
        and not db.in_atomic_block
    )


def idle_clean(db: Any) -> bool:
    """Whether the idle connection ``db`` has nothing waiting on its socket: no end of the
    connection, no message from the server (a terminated backend sends one before it closes).
    False where it cannot tell (no ``select.poll``, a closed or busy connection)."""
    raw = db.connection
    return raw is not None and not _broken(db) and socket_quiet(raw)


def socket_quiet(sock: Any) -> bool:
    """Whether nothing waits on the socket of ``sock`` (anything with ``fileno()``): no end of
    the connection, no message, by one poll. False where it cannot tell (no ``select.poll``, a
    closed socket)."""
    if not hasattr(select, "poll"):
        return False
    try:
        waiting = select.poll()
        waiting.register(sock, select.POLLIN | select.POLLPRI)
        return not waiting.poll(0)
    except (OSError, ValueError):
        return False


def _broken(db: Any) -> bool:
    """Whether the connection ``db`` failed as a connection (not a statement that failed)."""
    raw = db.connection
    return raw is None or bool(raw.closed) or bool(getattr(raw, "broken", False))


def _fetchone(db: Any, sql: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
    if (
        _Prepared.works
        and not db.in_atomic_block
        and not db.queries_logged
        and conf.PREPARED_STATEMENTS
        and _cursor_classes() is not None
    ):
        try:
            return _prepared_run(db, sql, params)
        except DatabaseError as e:
            # NOTE: a lost statement leaves a working connection. PgBouncer also answers 08P01 for a
            # database it cannot reach, and closes the connection: an outage.
            if getattr(e.__cause__, "sqlstate", None) not in PREPARED_LOST or _broken(db):
                raise
            _Prepared.works = False
            logger.warning(
                "The database lost a prepared statement (%s); the app's statements are sent "
                "unprepared from now on in this process. Behind a transaction-mode pooler, "
                "set MEMORY['POOLER'] = 'transaction'.",
                e,
            )
    with server_bound_cursor(db) as cursor:
        cursor.execute(sql, params)
        row: tuple[Any, ...] | None = cursor.fetchone()
        return row


def _prepared_run(db: Any, sql: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
    """``sql`` as a prepared statement (psycopg names one per SQL and connection); Django's
    ``prepare_threshold`` is lifted for this statement only."""
    # NOTE: with CONN_HEALTH_CHECKS a connection that died idle is replaced here, not found dead.
    db.close_if_health_check_failed()
    db.ensure_connection()
    db.validate_thread_sharing()
    raw = db.connection
    cursor = getattr(raw, _CURSOR, None)
    if cursor is None:
        classes = _cursor_classes()
        assert classes is not None
        cursor = _cursor_of(db, classes[1])
        setattr(raw, _CURSOR, cursor)
    threshold = raw.prepare_threshold
    if threshold is None:
        raw.prepare_threshold = 1 << 62
    try:
        if db.execute_wrappers:
            cursor.execute(sql, params)
            # NOTE: the psycopg cursor's own fetchone, in Django's error mapping: the wrapper's
            # attribute lookup builds a decorated function on every call.
            with db.wrap_database_errors:
                row: tuple[Any, ...] | None = cursor.cursor.fetchone()
            return row
        # NOTE: with no execute wrapper to call, what Django's cursor wrapper does around a
        # statement is its error mapping and the broken-transaction check (outside a
        # transaction: none); psycopg's cursor straight costs an append its layers.
        with db.wrap_database_errors:
            return cursor.cursor.execute(sql, params).fetchone()  # type: ignore[no-any-return]
    finally:
        if threshold is None:
            raw.prepare_threshold = None


@contextmanager
def server_bound_cursor(db: Any) -> Iterator[Any]:
    """A Django cursor of ``db`` whose parameters the server binds (psycopg2: the default
    cursor)."""
    classes = _cursor_classes()
    if classes is None:
        with db.cursor() as cursor:
            yield cursor
        return
    with _cursor_of(db, classes[0]) as cursor:
        yield cursor


def _cursor_of(db: Any, cursor_class: type) -> Any:
    """``db.cursor()`` (Django's wrapper and checks) on a psycopg cursor of ``cursor_class``."""
    db.ensure_connection()
    raw = db.connection
    default = raw.cursor_factory
    raw.cursor_factory = cursor_class
    try:
        return db.cursor()
    finally:
        raw.cursor_factory = default


@functools.cache
def _cursor_classes() -> tuple[type, type] | None:
    """Django's cursor class for server-side binding, and one that prepares what it runs;
    ``None`` under psycopg2, which has neither."""
    try:
        from django.db.backends.postgresql.base import ServerBindingCursor
    except ImportError:
        return None

    class PreparingCursor(ServerBindingCursor):
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            # The stubs leave psycopg's Cursor out of ServerBindingCursor's bases.
            return super().execute(query, params, prepare=True, **kwargs)  # type: ignore[misc]

    return ServerBindingCursor, PreparingCursor
