"""The database connection of a framework's worker thread: opened for one call of an adapter,
closed after it (the adapters' sync methods run in such threads)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection


@contextmanager
def thread_connection() -> Iterator[None]:
    """Close the database connection this block opened, if it opened one outside the main thread.

    Frameworks' executor threads would keep it till the thread ends. A connection open before, or
    the main thread's, is left.
    """
    opened = connection.connection is None and threading.current_thread() is not (
        threading.main_thread()
    )
    try:
        yield
    finally:
        if opened and not connection.in_atomic_block:
            connection.close()
