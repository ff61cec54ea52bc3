"""The run of the cache's Redis server in every copy's name (rule 10 of ``memory.cache``)."""

# NOTE: ``named`` appends it to the database history's epoch (``history``): a restart from any
# snapshot, or a failover to another server, changes the run, and what came back is never read
# again (it expires by its TTL). On a cluster ``node_named`` puts in the run of the node that
# serves the owner's slot.

from __future__ import annotations

from typing import Any

from redis import Redis

from memory.cache.client import (
    Answer,
    _client_of,
    _cluster_type,
    _held,
    alias,
    breaker,
    redis_call,
)
from memory.cache.drops import UNNAMED, node_learned, run_asked, run_of
from memory.cache.wire import rerouted

# The run in the name of a copy on a cluster node whose run this process does not know yet:
# no call under it is trusted (``key_kept``).
NODE_UNKNOWN = "r?"


def _asked(redis: Any) -> str:
    run = run_of(getattr(redis, "connection_pool", None))
    if not isinstance(redis, Redis) or run is None:
        return UNNAMED
    return run_asked(redis, run)


def run_learn() -> str | None:
    """Ask the server its run (one call, breaker first); ``None``: no answer."""
    answer = redis_call("run", _asked)
    return answer.value if isinstance(answer, Answer) else None


def run_token() -> str | None:
    """The run of the client's server (``None``: not known yet); no I/O."""
    name = alias()
    if name is None:
        return UNNAMED
    try:
        redis = _client_of(name)
    except Exception:
        # NOTE: a cluster no seed answers cannot be built: its copies are not named by a run.
        return UNNAMED
    return _token_of(redis)


def _token_of(redis: Any) -> str | None:
    """The run recorded for ``redis``'s pool (``UNNAMED`` where none is watched)."""
    run = run_of(getattr(redis, "connection_pool", None))
    return UNNAMED if run is None else run.token


def run_kept(epoch: str | None) -> bool:
    """Whether a call named ``epoch`` reached the run it names (a reconnect may not have)."""
    if epoch is None:
        return True
    # NOTE: the thread's client as ``named`` looked it up for this call, without the settings'
    # look-up again: a microsecond of a warm read.
    redis = _held.client
    run = run_token() if redis is None else _token_of(redis)
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


def node_named(tag: str) -> str:
    """On a cluster, the run of the node that serves the hash tag ``tag``'s slot by this
    thread's client's map, as it names copies, asked of the node (``INFO``) if not known yet
    and the node is not down (``NODE_UNKNOWN`` when it does not tell); else nothing (a single
    server's run is in the epoch)."""
    redis = _held.client
    if redis is None or not _cluster_type(type(redis)):
        return ""
    try:
        node = redis.nodes_manager.get_node_from_slot(redis.keyslot(tag))
        plain = redis.get_redis_connection(node)
        run = run_of(plain.connection_pool)
        if (run is None or run.token is None) and not breaker.is_down(node.name):
            node_learned(plain, breaker.dropped)
            run = run_of(plain.connection_pool)
    except Exception:
        # NOTE: a slot no node serves, or a node that does not answer: the call finds it down.
        return NODE_UNKNOWN
    return NODE_UNKNOWN if run is None or run.token is None else f"r{run.token}"


def on_cluster() -> bool:
    """Whether this thread's client is a cluster's (no I/O)."""
    redis = _held.client
    return redis is not None and _cluster_type(type(redis))


def key_kept(key: str, now: str) -> bool:
    """Whether a call on a cluster to the copy ``key`` reached the node run it names: the name is
    the same after the call (``now``), its run was known and the call was not rerouted."""
    return key == now and f"{NODE_UNKNOWN}:" not in key and not rerouted.seen
