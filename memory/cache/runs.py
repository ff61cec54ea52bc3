"""The run of the cache's Redis server in every copy's name (rule 10 of ``memory.cache``)."""

# NOTE: ``named`` appends it to the database history's epoch (``history``): a restart from any
# snapshot, or a failover to another server, changes the run, and what came back is never read
# again (it expires by its TTL). On a cluster copies carry no run: each node has its own.

from __future__ import annotations

from typing import Any

from redis import Redis
from redis import exceptions as redis_errors

from memory.cache.client import Answer, client, enabled, redis_call
from memory.cache.drops import UNNAMED, run_of, run_parsed


def _asked(redis: Any) -> str:
    run = run_of(getattr(redis, "connection_pool", None))
    if not isinstance(redis, Redis) or run is None:
        return UNNAMED
    try:
        token = run_parsed(redis.execute_command("INFO", "server"))
    except redis_errors.ResponseError:
        # NOTE: an ACL that refuses INFO: copies are not named by a run (docs/reliability.md).
        run.seen(UNNAMED)
        return UNNAMED
    run.seen(token)
    return token


def run_learn() -> str | None:
    """Ask the server its run (one call, breaker first); ``None``: no answer."""
    answer = redis_call("run", _asked)
    return answer.value if isinstance(answer, Answer) else None


def run_token() -> str | None:
    """The run of the client's server (``None``: not known yet); no I/O."""
    if not enabled():
        return UNNAMED
    try:
        redis = client()
    except Exception:
        # NOTE: a cluster no seed answers cannot be built: its copies are not named by a run.
        return UNNAMED
    run = run_of(getattr(redis, "connection_pool", None))
    return UNNAMED if run is None else run.token


def run_kept(epoch: str | None) -> bool:
    """Whether a call named ``epoch`` reached the run it names (a reconnect may not have)."""
    if epoch is None:
        return True
    run = run_token()
    return run is not None and (not run or epoch.endswith(f"r{run}"))


def named(epoch: str | None, *, ask: bool) -> str | None:
    """``epoch`` with the run (``None``: either unknown); ``ask``: ask an unknown run."""
    if epoch is None:
        return None
    run = run_token()
    if run is None:
        if not ask:
            return None
        run = run_learn()
        if run is None:
            return None
    return f"{epoch}r{run}" if run else epoch
