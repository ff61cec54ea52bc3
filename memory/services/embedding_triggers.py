"""What makes an owner's embedding run due: an append (or a link's moved turns), and the task's
enqueue after commit, debounced per owner and process. Apart from ``embeddings`` so that the
task's module, which imports the run, is imported only from here.

On the request path this costs a dictionary lookup, and at most one enqueue per owner and
process every ``DEBOUNCE_SECONDS``; a turn whose enqueue was debounced while the owner's last run
was already finishing waits for the owner's next run or ``manage.py memory_embed``.
"""

from __future__ import annotations

import threading
import time
from importlib.util import find_spec

from django.db import DEFAULT_DB_ALIAS, transaction

from memory.recall import vectors

# An append enqueues its owner's embedding run at most this often per process: a burst of
# appends costs one task. The run is handed to the backend to start after this delay where the
# backend can defer, so that it finds the burst's turns committed.
DEBOUNCE_SECONDS = 1.0
# Owners remembered by the debounce, at most; past it the oldest half is let go.
DEBOUNCE_OWNERS = 10_000

_due_lock = threading.Lock()
_due_at: dict[str, float] = {}


def embedding_due(owner_id: str) -> None:
    """After the current transaction commits, enqueue the owner's embedding run, unless this
    process did within ``DEBOUNCE_SECONDS``. Called by every append; costs a dictionary lookup
    when embeddings are off or the owner's run is already on its way."""
    if find_spec("django_tasks") is None or not vectors.embeddings_on(DEFAULT_DB_ALIAS):
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
    from memory.services.deferred import embedding_enqueue

    transaction.on_commit(
        lambda: embedding_enqueue(owner_id=owner_id, delay=DEBOUNCE_SECONDS), robust=True
    )


def debounce_reset() -> None:
    """Forget which owners' runs this process enqueued lately (tests, a forked worker)."""
    with _due_lock:
        _due_at.clear()
