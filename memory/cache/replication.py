"""Redis replication under ``MEMORY["CACHE_REPLICAS"]``: a write's cache update counts as landed
only once the replicas that a failover could promote hold it (rule 2 of ``memory.cache``)."""

from __future__ import annotations

import threading
import time
from typing import Any, Literal

from redis import exceptions as redis_errors
from redis.commands.core import Script

from memory import counters
from memory.cache.client import breaker, logger
from memory.cache.wire import map_behind, rerouted, script_run
from memory.conf import conf


class _Replicas:
    """What this process's writes learned of each primary's replicas online (``ROLE``) and whether
    updates came up short.

    A replica that drops off its primary is still waited for during ``CACHE_REPLICA_GRACE``
    seconds from the first ``ROLE`` that missed it (no update to that primary lands); past it,
    the replicas online are. A primary with a new run id starts with no replica missing."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.online: dict[str, int] = {}
            # Per primary: the replicas it had online before some dropped off, and when this
            # process first saw fewer (monotonic clock).
            self.lost: dict[str, tuple[int, float]] = {}
            # Per primary: its server's run id, which a restart changes.
            self.run_ids: dict[str, str] = {}
            self.behind = False
            self.shortfalls = 0
            self.logged_at = 0.0
        counters.cache_replicas_behind(False)

    def want(self, node: str, replicas: int) -> tuple[int, int]:
        """How many replicas a write to ``node`` waits for, and how many it had online last
        time: those, and those that dropped off within the grace."""
        online = self.online.get(node, replicas)
        before, since = self.lost.get(node, (online, 0.0))
        if before > online and time.monotonic() - since < conf.CACHE_REPLICA_GRACE:
            return min(replicas, before), online
        return min(replicas, online), online

    def asks(self, node: str, role: Any) -> bool:
        """Whether to read ``node``'s run id with this ``ROLE``: at the first, to know it, and at
        one that shows fewer replicas online than the last, to tell a restart apart."""
        previous = self.online.get(node)
        return previous is None or _online(role) < previous

    def saw(self, node: str, role: Any, *, run_id: str | None = None) -> None:
        online = _online(role)
        now = time.monotonic()
        with self.lock:
            previous = self.online.get(node)
            before, since = self.lost.get(node, (online, 0.0))
            restarted = run_id is not None and self.run_ids.get(node, run_id) != run_id
            if run_id is not None:
                self.run_ids[node] = run_id
            if restarted:
                self.lost.pop(node, None)
            elif previous is not None and online < previous:
                self.lost[node] = (max(before, previous), now)
            elif online >= before or now - since >= conf.CACHE_REPLICA_GRACE:
                self.lost.pop(node, None)
            self.online[node] = online

    def reached(self, acknowledged: int, wanted: int) -> bool:
        """Record one replicated update; whether enough replicas acknowledged it."""
        short = acknowledged < wanted
        if short != self.behind:
            self.behind = short
            counters.cache_replicas_behind(short)
        if not short:
            return True
        breaker.count("unreplicated")
        now = time.monotonic()
        with self.lock:
            self.shortfalls += 1
            due = now - self.logged_at >= REPLICA_LOG_SECONDS
            if due:
                self.logged_at, count, self.shortfalls = now, self.shortfalls, 0
        if due:
            # NOTE: one line a period, not one per write: a lagging replica fails them all.
            logger.warning(
                "%d cache update%s reached fewer replicas than they waited for (last: %d of %d "
                "in %d ms, or a replica lost within CACHE_REPLICA_GRACE); they count as not "
                "landed and are repaired.",
                count,
                "" if count == 1 else "s",
                acknowledged,
                wanted,
                conf.CACHE_REPLICA_WAIT_MS,
            )
        return False

    def state(self) -> Literal["ok", "behind"]:
        return "behind" if self.behind else "ok"


replicas = _Replicas()
# At most one warning this often about updates that came up short of their replicas.
REPLICA_LOG_SECONDS = 10.0


def _online(role: Any) -> int:
    """How many replicas a ``ROLE`` reply lists online (none when the node is not a primary)."""
    return len(role[2]) if role and role[0] in (b"master", "master") else 0


def replicated(redis: Any, script: Script, key: str, args: list[Any]) -> Any:
    """Run a write's ``script`` on the owner's hash; with ``MEMORY["CACHE_REPLICAS"]``, then
    ``WAIT`` for that many replicas, of those the primary has online, on the same connection
    and in the same round trip. Returns the script's reply, or ``None`` when too few replicas
    acknowledged it in ``CACHE_REPLICA_WAIT_MS`` (Redis answered: no outage, but the update has
    not landed).
    A replica off its primary counts as not landed for ``CACHE_REPLICA_GRACE`` (``_Replicas``),
    then is not waited for. ``ROLE`` in the same pipeline counts them for the next write.
    """
    wanted = conf.CACHE_REPLICAS
    if not wanted:
        return script_run(script, redis, [key], args)
    # NOTE: WAIT counts its own connection's writes: on a cluster, a pipeline to the key's node.
    node = redis.get_redis_connection(redis.get_node_from_key(key)) if _is_cluster(redis) else redis
    if node is not redis:
        # NOTE: straight to the key's node by the map (a move raises): not rerouted.
        rerouted.seen = False
    kwargs = node.connection_pool.connection_kwargs
    name = f"{kwargs.get('host')}:{kwargs.get('port')}"
    want, online = replicas.want(name, wanted)
    for attempt in (1, 2):
        pipe = node.pipeline(transaction=False)
        pipe.evalsha(script.sha, 1, key, *args)
        # NOTE: a replica known to be off (in the grace) would only make WAIT time out.
        if want and want <= online:
            pipe.wait(want, conf.CACHE_REPLICA_WAIT_MS)
        pipe.execute_command("ROLE")
        try:
            reply, *acknowledged, role = pipe.execute()
            break
        except redis_errors.NoScriptError:
            if attempt == 2:
                raise
            node.script_load(script.script)
        except (redis_errors.MovedError, redis_errors.ConnectionError, redis_errors.TimeoutError):
            # NOTE: this pipeline bypasses cluster routing: have the client learn the new map.
            if _is_cluster(redis):
                map_behind(redis)
            raise
    # NOTE: rare (a node's first write, a replica fewer than the last write saw): one INFO.
    run_id = str(node.info("server")["run_id"]) if replicas.asks(name, role) else None
    replicas.saw(name, role, run_id=run_id)
    if not replicas.reached(acknowledged[0] if acknowledged else min(want, online), want):
        return None
    return reply


def _is_cluster(redis: Any) -> bool:
    return hasattr(redis, "get_node_from_key")
