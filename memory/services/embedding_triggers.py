"""What makes an owner's embedding run due: an append (or a link's moved turns), and the task's
enqueue after commit, debounced per owner and process.

On the request path: a dictionary lookup and at most one set insertion per owner every
``DEBOUNCE_SECONDS``; the handoff thread (``MEMORY["ENQUEUE_THREAD"]``) enqueues the runs. A run
never enqueued is made up by the owner's next run or ``manage.py memory_embed``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from importlib.util import find_spec

from django.db import DEFAULT_DB_ALIAS, connections, transaction

from memory.conf import conf
from memory.recall import vectors

logger = logging.getLogger("memory.recall")

# An append enqueues its owner's run at most this often per process, delayed as long where the
# backend can defer, so the run finds the burst's turns committed.
DEBOUNCE_SECONDS = 1.0
# Owners remembered by the debounce, at most; past it the oldest half is let go.
DEBOUNCE_OWNERS = 10_000

_due_lock = threading.Lock()
_due_at: dict[str, float] = {}
# The owners whose runs the handoff thread enqueues next, and the thread (of this process).
_pending: set[str] = set()
_wake = threading.Event()
_thread: threading.Thread | None = None


def embedding_due(owner_id: str) -> None:
    """After commit, have the owner's embedding run enqueued, unless this process did within
    ``DEBOUNCE_SECONDS``. Called by every append."""
    if not vectors.embeddings_on(DEFAULT_DB_ALIAS) or find_spec("django_tasks") is None:
        return
    now = time.monotonic()
    with _due_lock:
        last = _due_at.get(owner_id)
        if last is not None and now - last < DEBOUNCE_SECONDS:
            return
        if len(_due_at) >= DEBOUNCE_OWNERS:
            for key in list(_due_at)[: DEBOUNCE_OWNERS // 2]:
                del _due_at[key]
        _due_at[owner_id] = now
    if conf.ENQUEUE_THREAD:
        transaction.on_commit(lambda: _hand_off(owner_id), robust=True)
        return
    from memory.services.deferred import embedding_enqueue

    transaction.on_commit(
        lambda: embedding_enqueue(owner_id=owner_id, delay=DEBOUNCE_SECONDS), robust=True
    )


def _hand_off(owner_id: str) -> None:
    global _thread
    with _due_lock:
        if len(_pending) < DEBOUNCE_OWNERS:
            _pending.add(owner_id)
        # A forked child starts with none (_after_fork).
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(
                target=_handoff_loop, name="memory-embed-enqueue", daemon=True
            )
            _thread.start()
    _wake.set()


def _handoff_loop() -> None:
    while True:
        _wake.wait()
        # NOTE: the burst's owners gathered, and its turns committed, before their runs start.
        time.sleep(DEBOUNCE_SECONDS)
        _wake.clear()
        try:
            handoff_flush()
        except Exception:  # pragma: no cover - handoff_flush logs and never raises
            logger.exception("The embedding handoff failed.")
        finally:
            connections.close_all()


def handoff_flush() -> int:
    """Enqueue the runs of the owners waiting for the handoff thread, now; return how many were
    enqueued. The thread calls it; so can a test or a process about to exit."""
    from memory.services.deferred import embedding_enqueue

    with _due_lock:
        owners = sorted(_pending)
        _pending.clear()
    return sum(embedding_enqueue(owner_id=owner_id) for owner_id in owners)


def _after_fork() -> None:
    # NOTE: after a fork a lock a parent's thread held stays held: start each anew.
    global _due_lock, _wake, _thread
    _due_lock = threading.Lock()
    _wake = threading.Event()
    _thread = None
    _pending.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def debounce_reset() -> None:
    """Forget which owners' runs this process enqueued lately and which wait for the handoff
    (tests, a forked worker)."""
    with _due_lock:
        _due_at.clear()
        _pending.clear()
