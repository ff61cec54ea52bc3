"""The cache protocol: every Redis read and write of the app, and every rule that keeps the
Redis copy of an owner's memory from ever serving a state older than the database's.

**The invariant.** Postgres is the truth; Redis holds at most one copy per owner, stamped with
the database state it reflects. A read served from a copy reflects every write acknowledged
before the read began, except within these bounds:

- a write acknowledged while Redis could not be reached is served by every process within
  ``REPAIR_POLL`` (0.1 s) plus one socket timeout of Redis answering again, as long as its
  writer lives; by any process within ``RECONCILE_GRACE + RECONCILE_INTERVAL`` (3 s by default)
  of the write if its writer died between commit and cache update;
- a process that saw Redis down within ``SUSPECT_WINDOW`` seconds serves no stale copy at all:
  it checks each copy's stamp against the database first; a connection Redis dropped counts as
  seen down (``drops``);
- a restart of Redis (or of a cluster node) from any snapshot, or a failover to another
  server, brings back no copy at all: every copy is named by its server's run (rule 10);
- under Sentinel or Cluster, a failover loses no confirmed update only with
  ``CACHE_REPLICAS`` set to the replicas each primary has (below, rule 2), and with a replica
  promoted at most ``CACHE_REPLICA_GRACE`` (2 s) after it dropped off its primary;
- after a Postgres failover that lost acknowledged transactions (asynchronous replication),
  no process serves a copy stamped on the lost history once ``HISTORY_LEASE`` (1 s) has
  passed since it last sent the old primary the question that confirmed it: zero after the
  promotion, when the promotion comes later than that after the old primary's last answer;
  otherwise at most ``HISTORY_LEASE`` minus that time (rule 9).

**The rules that keep it** (each in the module named):

1. *Stamps* (``stamps``). Every write draws a new stamp from the Postgres sequence
   ``memory_stamp_seq`` in its own transaction, under the owner's row lock, and marks the owner
   ``cache_dirty`` in that transaction. Stamps only grow, across a forget and a re-creation.
2. *Deltas after commit* (``writes``, ``copy``). A service writes an owner inside
   ``owner_write`` (or calls ``owner_changed`` / ``owner_drop`` once): the stamp of rule 1 and
   the update below are one call, and a write that states no delta drops the copy. After
   commit, and never before (a rolled-back
   write never reaches Redis), one Lua script applies the write's delta only to a copy at the
   stamp just before it, in O(delta); any other copy is dropped to a content-free *floor* at
   the new stamp. The breaker never skips a write's update. Redis confirmed: the dirty mark is
   cleared (by the repairer, batched). Not confirmed: *repair*. With
   ``MEMORY["CACHE_REPLICAS"]`` an update is confirmed only once that many replicas hold it
   (``WAIT``, same connection), so that a failover never promotes an older copy; a replica
   that dropped off is still counted for ``CACHE_REPLICA_GRACE`` seconds after it did.
3. *Fills* (``readthrough``, ``copy``). A miss rehydrates from the database (a bounded number
   of queries whatever the history length) under a fill lock, so concurrent readers wait for
   one rehydration; the miss also leaves the reader's *claim* in the owner's hash. The fill
   script refuses a copy older than the stored one or the floor. No floor is load-bearing:
   every write's update and every loss (eviction, flush, delete) removes the hash whole, claim
   included, so a fill that no longer finds its claim is *verified*: the owner's stamp is read
   again from the database, and a fill that a write overtook is dropped before its reader
   returns. A fill that finds its claim needs no check (nothing touched the hash since).
4. *Validity* (``readthrough.copy_valid``; ``aio`` for async callers, natively async on a
   hit). Every read served from a copy, whatever the path (context, facts, messages, sync or
   async), passes it: a copy of an owner with an update this process could not land is not
   served; while this process is suspect, a copy whose stamp is not the database's is not.
5. *Repair* (``repair``). An unconfirmed update is remembered and retried as a drop by the
   process's repairer thread every ``REPAIR_POLL`` seconds: it is also the probe that finds
   Redis back. Every ``RECONCILE_INTERVAL`` seconds the repairer drops the copy of every
   owner still dirty (or forgotten, ``CacheInvalidation``) after ``RECONCILE_GRACE`` seconds,
   measured on the database's clock: writers that died. Repairs only ever drop.
6. *Writes that bypass the services* (``writes.orm_write``, from ``memory.signals`` and the
   ``Turn`` model's ``delete``): a turn or fact saved or deleted through the ORM (an instance
   or a queryset) takes a stamp and a dirty mark in its own transaction and drops the copy
   after commit, as a service write does; an owner deleted so leaves a pending drop, as a
   forget does (``writes.orm_forget``). ``QuerySet.update()``, ``bulk_create``/``bulk_update``
   and raw SQL send nothing: call ``ops.cache_drop`` (``manage.py memory_cache drop``)
   after them.
7. *One failure boundary* (``client``). Every Redis call, sync or awaited, runs in one
   ``Attempt``. Connection errors, timeouts, a loading, read-only or cluster-down server, a
   moved slot mean "down": the call answers a miss or "not confirmed", and reads skip Redis for
   ``BREAKER_SECONDS``, then one probe at a time; a probe cancelled or interrupted is given
   back. Any other Redis error (``WRONGTYPE``, a script error) is a bug: logged as an error
   naming the command (once per ``BUG_LOG_SECONDS``, with a count), never an outage; its repair
   backs off up to ``REPAIR_BACKOFF_MAX``. No Redis error reaches a caller. The async client is
   made from the sync client's own pool.
8. *Expiry* (``readthrough.snapshot_live``). A copy holds each fact's ``expires_at``, and every
   read, from a copy or the database, sync or async, drops the facts whose ``expires_at`` is
   not after this process's clock: an expired fact is absent from every read on every instance
   at once, bounded only by the skew between the hosts' clocks, with no write and no
   invalidation. The sweep that deletes it later is an ordinary write (rule 2).
9. *History* (``history``). A stamp means something only on the database history it was
   drawn on: the cluster's system identifier and the primary's timeline, which a promotion
   (or a point-in-time restore) changes at once. Every owner key is named by that history's
   epoch, so a copy stamped on a history a failover lost is never read under the new one, and
   a stamp the new primary draws again (its sequence may be behind the lost writes') can
   never match it. A process reads, fills, writes and repairs copies only under an epoch it
   confirmed with the database (one query, the lease counted from before it was sent) within
   ``MEMORY["HISTORY_LEASE"]`` seconds of its monotonic clock; none confirmed, it reads the
   database as if Redis were down and leaves its updates to the repair. Its repairer renews the
   lease in the background; a request that finds the lease run out asks, once. A fill whose
   epoch changed while it read the database is not stored. The owner's slot (``keys.owner_tag``)
   does not depend on the history: routing a key needs no database. This holds as long as the old
   primary stops committing before the standby is promoted (it is dead, or the engine fenced
   it): a primary that keeps committing beside the new one is a split brain no cache rule
   mends.

10. *Runs* (``runs``, ``drops``). A copy means something only on the Redis server run that
   stored it: a restart from a snapshot brings back copies older than updates it confirmed.
   Every connect of the alias's pools asks the server's ``run_id`` (``INFO server``), and
   every owner key is named by it beside rule 9's epoch; a process asks before its first copy
   (none answered: the database is read as if Redis were down). On a Cluster the name holds
   the run of the node that serves the owner's slot, asked of each node before its first call.
   A call during which its connection connected again and found another run, that a cluster
   routed to another node than the one named, or named before its node's run was known, does
   not count: its read is refused and its update is not confirmed (repaired under the name).

Redis keys: ``<KEY_PREFIX>:v6:h<epoch>r<run>:{<digest of owner id>}`` (a hash; the braces are a
cluster hash tag, so an owner's keys share a slot and every script touches one slot; the epoch
is rule 9's, the run rule 10's), ``...:fill`` (the fill lock), ``<KEY_PREFIX>:v6:stats``
(shared counters).
"""

from __future__ import annotations

from typing import Literal

from memory.cache.aio import aread_through
from memory.cache.client import enabled
from memory.cache.copy import Loaded, Snapshot, ping, stats
from memory.cache.limits import window_count
from memory.cache.readthrough import Source, read_through
from memory.cache.repair import run_once
from memory.cache.replica import replica_read
from memory.cache.writes import (
    OwnerWrite,
    orm_delete,
    orm_forget,
    orm_write,
    owner_changed,
    owner_drop,
    owner_invalidate,
    owner_write,
    service_write,
)


def replicas_state() -> Literal["ok", "behind"]:
    """Whether this process's last replicated update reached its replicas (health, metrics)."""
    from memory.cache.replication import replicas

    return replicas.state()


def reset() -> None:
    """Forget this process's cache state: breaker, counters, pending repairs (tests, forks)."""
    from memory.cache import client, copy, history, limits, repair, replication

    client.breaker.reset()
    history.reset()
    repair.reset()
    replication.replicas.reset()
    copy.miss_share.reset()
    limits.reset()


__all__ = [
    "Loaded",
    "OwnerWrite",
    "Snapshot",
    "Source",
    "aread_through",
    "enabled",
    "orm_delete",
    "orm_forget",
    "orm_write",
    "owner_changed",
    "owner_drop",
    "owner_invalidate",
    "owner_write",
    "ping",
    "read_through",
    "replica_read",
    "replicas_state",
    "reset",
    "run_once",
    "service_write",
    "stats",
    "window_count",
]
