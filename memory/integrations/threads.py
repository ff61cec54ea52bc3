"""The database connection of a framework's worker thread: opened for one call of an adapter,
closed after it (the adapters' sync methods run in such threads)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection


@contextmanager
def thread_connection() -> Iterator[None]:
    """Close the database connection this block opened, if it opened one outside the main
    thread.

    NOTE: frameworks run sync code in worker threads of their own executors (LangChain's
    ``RunnableWithMessageHistory`` loads history through ``RunnableParallel``; LangGraph runs
    parallel nodes in a thread pool); a Django connection opened there is no request's, so
    nothing would close it but the thread's end. A connection that was open before (a
    request's, a transaction's) is left as it was, and so is the main thread's (a script's, a
    worker's), which the next call reuses.
    """
    opened = connection.connection is None and threading.current_thread() is not (
        threading.main_thread()
    )
    try:
        yield
    finally:
        if opened and not connection.in_atomic_block:
            connection.close()
