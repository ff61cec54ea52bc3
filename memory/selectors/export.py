"""An owner's whole memory as the contract's export document: JSON chunks read page by page
from one snapshot of the database, so that an owner of any size costs bounded memory."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from typing import Any

import orjson
from asgiref.sync import sync_to_async
from django.db import DatabaseError, connections, router
from django.db.models import Q, QuerySet
from django.utils import timezone

from memory import aio
from memory.exceptions import database_guard
from memory.models import Fact, FactVersion, Owner, Session, Summary, Turn, fact_live
from memory.payloads import (
    FACT_FIELDS,
    FACT_VERSION_FIELDS,
    SESSION_FIELDS,
    SUMMARY_FIELDS,
    TURN_FIELDS,
    SummaryPayload,
    fact_payload_from_row,
    fact_version_payload_from_row,
    isoformat,
    session_payload_from_row,
    summary_payload_from_row,
    turn_payload_from_row,
)
from memory.selectors.pages import check_owner

EXPORT_FORMAT = "memory-export"
EXPORT_VERSION = 1
# Rows read per query, the most held in memory at once (a few MB at the longest turns).
EXPORT_PAGE_ROWS = 500


def _export_summary(snapshot: _Snapshot, owner_pk: int | None) -> SummaryPayload | None:
    """The owner's summary for the document, read on the export's snapshot; ``None`` if none."""
    if owner_pk is None:
        return None
    rows = snapshot.rows(Summary.objects.filter(owner_id=owner_pk).values_list(*SUMMARY_FIELDS))
    return summary_payload_from_row(rows[0]) if rows else None


class _Snapshot:
    """A connection of its own, in one read-only REPEATABLE READ transaction: every query of
    it sees the database as it was at its first statement."""

    def __init__(self) -> None:
        alias = router.db_for_read(Turn)
        # NOTE: a new connection with this thread's settings for the alias (a test may repoint
        # them).
        current = connections[alias]
        self.connection = type(current)(dict(current.settings_dict), alias)
        # NOTE: under ASGI the chunks are read from whichever thread a hop lands on, one at a time.
        self.connection.inc_thread_sharing()
        try:
            with self.connection.cursor() as cursor:
                if self.connection.vendor == "postgresql":
                    cursor.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    cursor.execute("SELECT transaction_timestamp()")
                    (self.taken_at,) = cursor.fetchone()
                else:
                    # NOTE: SQLite keeps one snapshot from the first read (WAL), or holds off
                    # writers.
                    cursor.execute("BEGIN")
                    self.taken_at = timezone.now()
        except BaseException:
            self.connection.close()
            raise

    def rows(self, queryset: QuerySet[Any]) -> list[tuple[Any, ...]]:
        """The rows of a ``values_list`` queryset, read on this snapshot's connection."""
        compiler = queryset.query.get_compiler(connection=self.connection)
        return [tuple(row) for row in compiler.results_iter(tuple_expected=True)]

    def close(self) -> None:
        # NOTE: a lost connection has ended its transaction already; closing it is enough.
        try:
            if self.connection.connection is not None:
                with contextlib.suppress(DatabaseError), self.connection.cursor() as cursor:
                    cursor.execute("ROLLBACK")
        finally:
            with contextlib.suppress(DatabaseError):
                self.connection.close()


def _dumps(items: list[Any]) -> bytes:
    """``items`` as JSON, UTF-8, as the API writes them (orjson; Python's encoder past 64 bits)."""
    try:
        return orjson.dumps(items)
    except TypeError:
        return json.dumps(items, ensure_ascii=False, separators=(",", ":")).encode()


def _after(order: tuple[str, ...], cursor: tuple[Any, ...]) -> Q:
    """The rows past ``cursor`` (the ``order`` columns' values of the last row read) in
    ``order`` (``-``: descending); the first column also bounded, so that its index scan starts
    at the cursor."""
    columns = [(name.lstrip("-"), "lt" if name.startswith("-") else "gt") for name in order]
    (name, op), value = columns[-1], cursor[-1]
    condition = Q(**{f"{name}__{op}": value})
    for (name, op), value in zip(reversed(columns[:-1]), reversed(cursor[:-1]), strict=True):
        condition = Q(**{f"{name}__{op}": value}) | Q(condition, **{name: value})
    if len(columns) > 1:
        (name, op), value = columns[0], cursor[0]
        condition &= Q(**{f"{name}__{op}e": value})
    return condition


def _pages(
    snapshot: _Snapshot,
    rows: QuerySet[Any],
    order: tuple[str, ...],
    fields: tuple[str, ...],
    payload: Callable[[tuple[Any, ...]], Any],
) -> Iterator[bytes]:
    """The items of one list of the document, ``rows`` in ``order`` (a key of them), a page per
    chunk, each page the keyset query after the last row of the one before."""
    positions = [fields.index(name.lstrip("-")) for name in order]
    after: tuple[Any, ...] | None = None
    first = True
    while True:
        page = rows if after is None else rows.filter(_after(order, after))
        found = snapshot.rows(page.order_by(*order).values_list(*fields)[:EXPORT_PAGE_ROWS])
        if not found:
            return
        body = _dumps([payload(row) for row in found])[1:-1]
        yield body if first else b"," + body
        first = False
        if len(found) < EXPORT_PAGE_ROWS:
            return
        after = tuple(found[-1][i] for i in positions)


def _document(snapshot: _Snapshot, owner_id: str) -> Generator[bytes, None, None]:
    """The document's chunks; the first (the head) reads the owner, the rest page its rows."""
    found = snapshot.rows(Owner.objects.filter(external_id=owner_id).values_list("pk"))
    pk = found[0][0] if found else None
    head = {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "user_id": owner_id,
        "exported_at": isoformat(snapshot.taken_at.astimezone(dt.UTC)),
    }
    yield orjson.dumps(head)[:-1] + b',"facts":['
    if pk is not None:
        facts = Fact.objects.filter(fact_live(snapshot.taken_at), owner_id=pk)
        yield from _pages(snapshot, facts, ("key",), FACT_FIELDS, fact_payload_from_row)
    yield b'],"fact_history":['
    if pk is not None:
        versions = FactVersion.objects.filter(owner_id=pk)
        yield from _pages(
            snapshot,
            versions,
            ("key", "version"),
            FACT_VERSION_FIELDS,
            fact_version_payload_from_row,
        )
    yield b'],"turns":['
    if pk is not None:
        turns = Turn.objects.filter(owner_id=pk)
        yield from _pages(snapshot, turns, ("seq",), TURN_FIELDS, turn_payload_from_row)
    yield b'],"sessions":['
    if pk is not None:
        sessions = Session.objects.filter(owner_id=pk)
        order = ("-last_seen", "session_id")
        yield from _pages(snapshot, sessions, order, SESSION_FIELDS, session_payload_from_row)
    yield b'],"summary":' + _dumps([_export_summary(snapshot, pk)])[1:-1] + b"}"


class ExportStream:
    """The chunks of one owner's export document (bytes; concatenated, the JSON document), read from
    a snapshot held until the last chunk or ``close()``.

    ``read()`` gives the next chunk or ``None`` at the end; iterating gives the same chunks.
    Close it when done early: its snapshot holds a database connection.
    """

    _snapshot: _Snapshot | None = None
    _head: bytes | None = None

    def __init__(self, owner_id: str) -> None:
        with database_guard():
            self._snapshot = _Snapshot()
            try:
                self._chunks = _document(self._snapshot, owner_id)
                self._head = next(self._chunks)
            except BaseException:
                self.close()
                raise

    def read(self) -> bytes | None:
        """The next chunk, ``None`` after the last (the snapshot is then closed). Raises
        ``MemoryUnavailable`` when the database is lost on the way."""
        if self._head is not None:
            head, self._head = self._head, None
            return head
        if self._snapshot is None:
            return None
        try:
            with database_guard():
                return next(self._chunks)
        except StopIteration:
            self.close()
            return None
        except BaseException:
            self.close()
            raise

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        chunk = self.read()
        if chunk is None:
            raise StopIteration
        return chunk

    def close(self) -> None:
        """End the snapshot and give its connection back; again, nothing."""
        snapshot, self._snapshot = self._snapshot, None
        self._head = None
        if snapshot is not None:
            self._chunks.close()
            snapshot.close()

    def __del__(self) -> None:
        # NOTE: a stream dropped unread (an ASGI client gone) still ends its transaction.
        self.close()


def owner_export(*, owner_id: str) -> ExportStream:
    """The owner's whole memory as the contract's export document, in chunks of JSON bytes:
    ``{"format": "memory-export", "version": 1, "user_id", "exported_at", "facts", "fact_history",
    "turns", "sessions", "summary"}``. An unknown owner gives empty lists.

    Every row comes from one read-only REPEATABLE READ snapshot on a connection of the stream's own,
    held until the last chunk or ``close()``: each write is wholly in or wholly out. ``exported_at``
    is the snapshot's instant. Pages of ``EXPORT_PAGE_ROWS`` rows bound the memory.

    Raises ``ValidationError`` ({"user_id": messages}) for a bad owner id and ``MemoryUnavailable``
    when the database cannot be reached, before any chunk; a database lost later raises
    ``MemoryUnavailable`` from the iteration (a truncated document is never valid JSON).
    """
    check_owner(owner_id)
    return ExportStream(owner_id)


@aio.twin_of(owner_export)
async def aowner_export(*, owner_id: str) -> AsyncIterator[bytes]:
    stream = await sync_to_async(owner_export, thread_sensitive=True)(owner_id=owner_id)
    read = sync_to_async(stream.read, thread_sensitive=True)
    try:
        while (chunk := await read()) is not None:
            yield chunk
    finally:
        await sync_to_async(stream.close, thread_sensitive=True)()
