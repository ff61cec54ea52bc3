"""Request counters for rate limits (``memory.throttling``): a fixed window per key in Redis (one
Lua ``INCR``), through the breaker.

Without a cache, or while Redis is down, each process counts in its own memory with the same
limits: a client gets at most the limit once per process, never an unbounded pass.
"""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path

from redis.commands.core import Script

from memory import counters
from memory.cache.client import Answer, Outcome, redis_call
from memory.cache.keys import prefix

_COUNT = Script(None, (Path(__file__).resolve().parent / "lua" / "count.lua").read_bytes())  # type: ignore[arg-type]

# Most windows the in-process fallback keeps; the oldest go first.
LOCAL_WINDOWS = 10_000


class _Local:
    """The process's own counts, for while Redis is away: ``{(key, window): count}``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: dict[tuple[str, int], int] = {}

    def count(self, key: str, window: int) -> int:
        with self.lock:
            if len(self.counts) >= LOCAL_WINDOWS:
                for old in sorted(self.counts, key=lambda item: item[1])[: LOCAL_WINDOWS // 10]:
                    del self.counts[old]
            n = self.counts.get((key, window), 0) + 1
            self.counts[(key, window)] = n
            return n


_local = _Local()


def window_count(*, key: str, seconds: int) -> tuple[int, float]:
    """Count one request for ``key`` in the current window of ``seconds``: the count so far (this
    one included) and the seconds left. In Redis, or in this process while Redis cannot be reached.
    Never raises."""
    seconds = max(int(seconds), 1)
    now = time.time()
    window = int(now // seconds)
    left = (window + 1) * seconds - now
    digest = hashlib.blake2b(key.encode(), digest_size=12).hexdigest()
    name = f"{prefix()}:limit:{{{digest}}}:{window}"
    answer = redis_call(
        "count",
        lambda redis: _COUNT(keys=[name], args=[seconds + 1], client=redis),
        # NOTE: a read for the breaker: a count Redis cannot take is counted here, never waited for.
        key=name,
    )
    if isinstance(answer, Answer):
        return int(answer.value), left
    if answer is not Outcome.DISABLED:
        counters.throttle_local()
    return _local.count(digest, window), left


def reset() -> None:
    """Forget the process's own counts (tests)."""
    with _local.lock:
        _local.counts.clear()
