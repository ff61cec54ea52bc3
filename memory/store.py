"""The Redis copy of each owner's memory: key layout, Lua scripts, reads, fills, deltas and drops.

The only module that talks to Redis, and the one failure boundary: every function here catches
Redis errors, logs them once per outage, and answers "miss" or ``False``; none raises.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any, Literal

from django.core.cache import caches
from django_redis.exceptions import ConnectionInterrupted
from redis.commands.core import Script
from redis.exceptions import RedisError

from memory.conf import conf
from memory.payloads import FactPayload, TurnPayload

logger = logging.getLogger("memory.store")

SCHEMA = "v1"
CacheErrors = (RedisError, ConnectionInterrupted, OSError)

# An owner's cached memory is one hash, so that eviction takes it whole or not at all:
#   rev       stamp of the database state the payload reflects (absent: no payload, a miss)
#   floor     highest stamp any writer announced; a fill older than it is refused
#   complete  "1" if the cached turns are all of the owner's turns
#   seqs      the cached turn seqs, oldest first, space-separated
#   t:<seq>   a turn payload;  f:<key>  a fact payload

# KEYS: memory hash, fill lock. ARGV: ttl, lock ms, lock token.
_READ = Script(
    None,  # type: ignore[arg-type]
    b"""
if redis.call('HEXISTS', KEYS[1], 'rev') == 1 then
  redis.call('EXPIRE', KEYS[1], ARGV[1])
  return {1, redis.call('HGETALL', KEYS[1])}
end
if ARGV[2] == '0' then return {0, 0} end
local got = redis.call('SET', KEYS[2], ARGV[3], 'NX', 'PX', ARGV[2])
if got then return {0, 1} end
return {0, 0}
""",
)

# KEYS: memory hash, fill lock.
# ARGV: stamp, ttl, complete, lock token, seqs, then field/value pairs.
_FILL = Script(
    None,  # type: ignore[arg-type]
    b"""
if redis.call('GET', KEYS[2]) == ARGV[4] then redis.call('DEL', KEYS[2]) end
local stamp = tonumber(ARGV[1])
local cur = redis.call('HGET', KEYS[1], 'rev')
local floor = redis.call('HGET', KEYS[1], 'floor')
if (cur and tonumber(cur) >= stamp) or (floor and tonumber(floor) > stamp) then return 0 end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'rev', ARGV[1], 'floor', ARGV[1], 'complete', ARGV[3], 'seqs', ARGV[5])
for i = 6, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('EXPIRE', KEYS[1], ARGV[2])
return 1
""",
)

# KEYS: memory hash. ARGV: prev stamp, stamp, ttl, guard ttl, depth,
#   then n turns and n (seq, payload) pairs, n facts and n (key, payload) pairs, n deleted keys.
# Returns 1 applied, 2 already reflected, 0 dropped (payload absent or not at prev stamp).
_APPLY = Script(
    None,  # type: ignore[arg-type]
    b"""
local key = KEYS[1]
local stamp = tonumber(ARGV[2])
local cur = redis.call('HGET', key, 'rev')
if cur and tonumber(cur) >= stamp then return 2 end
local floor = tonumber(redis.call('HGET', key, 'floor') or '0')
if stamp > floor then floor = stamp end
if not cur or cur ~= ARGV[1] then
  redis.call('DEL', key)
  redis.call('HSET', key, 'floor', floor)
  redis.call('EXPIRE', key, ARGV[4])
  return 0
end
local seqs = redis.call('HGET', key, 'seqs') or ''
local complete = redis.call('HGET', key, 'complete') or '0'
local i = 6
local n = tonumber(ARGV[i]); i = i + 1
for _ = 1, n do
  -- NOTE: a fill may already hold this turn (its rows were read after the commit);
  -- applying a delta twice must change nothing.
  if redis.call('HSETNX', key, 't:' .. ARGV[i], ARGV[i + 1]) == 1 then
    if seqs == '' then seqs = ARGV[i] else seqs = seqs .. ' ' .. ARGV[i] end
  end
  i = i + 2
end
local list = {}
for w in string.gmatch(seqs, '%S+') do list[#list + 1] = w end
local depth = tonumber(ARGV[5])
if #list > depth then
  for j = 1, #list - depth do redis.call('HDEL', key, 't:' .. list[j]) end
  seqs = table.concat(list, ' ', #list - depth + 1, #list)
  complete = '0'
end
n = tonumber(ARGV[i]); i = i + 1
for _ = 1, n do redis.call('HSET', key, 'f:' .. ARGV[i], ARGV[i + 1]); i = i + 2 end
n = tonumber(ARGV[i]); i = i + 1
for _ = 1, n do redis.call('HDEL', key, 'f:' .. ARGV[i]); i = i + 1 end
redis.call('HSET', key, 'rev', ARGV[2], 'floor', floor, 'seqs', seqs, 'complete', complete)
redis.call('EXPIRE', key, ARGV[3])
return 1
""",
)

# KEYS: memory hash. ARGV: stamp, guard ttl. Leaves only a content-free floor.
_DROP = Script(
    None,  # type: ignore[arg-type]
    b"""
local floor = tonumber(redis.call('HGET', KEYS[1], 'floor') or '0')
local stamp = tonumber(ARGV[1])
if stamp > floor then floor = stamp end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'floor', floor)
redis.call('EXPIRE', KEYS[1], ARGV[2])
return 1
""",
)

# NOTE: how long a floor outlives the payload it guards. It only has to outlast a
# rehydration that read the database before the write (milliseconds, seconds at worst).
GUARD_TTL = 60


# NOTE: after an error, skip Redis for this long so that a Redis that hangs costs one socket
# timeout per process and second, not one per request.
BREAKER_SECONDS = 1.0
# Counters go to Redis at most this often, in a call of their own.
COUNTS_FLUSH_SECONDS = 1.0


@dataclass(frozen=True)
class CachedMemory:
    """An owner's memory as the cache holds it."""

    stamp: int
    turns: list[TurnPayload]
    facts: list[FactPayload]


@dataclass(frozen=True)
class Miss:
    """No usable copy; ``fill_token`` is set when this caller won the right to rehydrate."""

    fill_token: str | None


class _Health:
    """Per-process Redis health: outage logging, a short circuit breaker and counters."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Forget past errors and unflushed counters (tests, a forked worker)."""
        self.down_since: float | None = None
        self.retry_at = 0.0
        self.last_error_at = 0.0
        self.outages = 0
        self.errors = 0
        self.counts: dict[str, int] = {}
        self.counts_flushed_at = 0.0

    def failed(self, error: BaseException, action: str) -> None:
        now = time.monotonic()
        with self.lock:
            self.errors += 1
            self.last_error_at = now
            self.retry_at = now + BREAKER_SECONDS
            first = self.down_since is None
            if first:
                self.down_since = now
                self.outages += 1
        if first:
            logger.warning(
                "Redis unreachable (%s during %s); reading from the database.", error, action
            )
        else:
            logger.debug("Redis still unreachable (%s during %s).", error, action)

    def succeeded(self) -> None:
        if self.down_since is None:
            return
        with self.lock:
            since, self.down_since = self.down_since, None
        if since is not None:
            logger.warning("Redis reachable again after %.1f s.", time.monotonic() - since)

    def open(self) -> bool:
        return self.down_since is not None and time.monotonic() < self.retry_at

    def count(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.counts[name] = self.counts.get(name, 0) + n


health = _Health()


def _alias() -> str | None:
    return conf.CACHE_ALIAS


def enabled() -> bool:
    """Whether a cache alias is configured at all."""
    return _alias() is not None


def _client() -> Any:
    alias = _alias()
    assert alias is not None
    return caches[alias].client.get_client(write=True)  # type: ignore[attr-defined]


def _codec() -> Any:
    alias = _alias()
    assert alias is not None
    return caches[alias].client  # type: ignore[attr-defined]


def owner_key(owner_id: str) -> str:
    """The owner's memory hash; the ``{...}`` hash tag keeps all its keys in one cluster slot.

    The tag is a digest of the owner id, not the id itself: key names show up in monitoring,
    slow logs and ``--bigkeys`` output, and a forgotten owner's guard key must not name them.
    """
    digest = hashlib.blake2b(owner_id.encode(), digest_size=12).hexdigest()
    return f"{conf.KEY_PREFIX}:{SCHEMA}:{{{digest}}}"


def _lock_key(owner_id: str) -> str:
    return f"{owner_key(owner_id)}:fill"


def stats_key() -> str:
    return f"{conf.KEY_PREFIX}:{SCHEMA}:stats"


def key_pattern() -> str:
    """A SCAN pattern matching every key this app writes under the configured prefix."""
    return f"{conf.KEY_PREFIX}:{SCHEMA}:*"


def _usable() -> bool:
    return enabled() and not health.open()


def _flush_counts(client: Any, *, force: bool = False) -> None:
    now = time.monotonic()
    with health.lock:
        if not force and now - health.counts_flushed_at < COUNTS_FLUSH_SECONDS:
            return
        counts, health.counts = health.counts, {}
        health.counts_flushed_at = now
    if counts:
        pipe = client.pipeline(transaction=False)
        for name, n in counts.items():
            pipe.hincrby(stats_key(), name, n)
        pipe.execute()


def memory_read(
    *, owner_id: str, turns: int, claim_fill: bool = True
) -> CachedMemory | Miss | None:
    """Read an owner's cached memory with its last ``turns`` turns, renewing its TTL.

    Returns ``CachedMemory`` on a hit; ``Miss`` when there is no usable copy (with a fill token
    when ``claim_fill`` and this caller should rehydrate); ``None`` when no cache is configured,
    Redis failed or is in its back-off window, or the copy holds fewer turns than asked.
    Never raises.
    """
    if not _usable():
        return None
    token = secrets.token_hex(8) if claim_fill else ""
    try:
        client = _client()
        found, data = _READ(
            keys=[owner_key(owner_id), _lock_key(owner_id)],
            args=[conf.CACHE_TTL, conf.FILL_WAIT_MS * 2 if claim_fill else 0, token],
            client=client,
        )
        health.succeeded()
        _flush_counts(client)
    except CacheErrors as e:
        health.failed(e, "read")
        return None
    if not found:
        health.count("misses")
        return Miss(fill_token=token if (claim_fill and data == 1) else None)
    cached = _decode(data, turns)
    health.count("hits" if cached is not None else "short")
    return cached


def _decode(flat: list[bytes], turns: int) -> CachedMemory | None:
    fields = dict(zip(flat[::2], flat[1::2], strict=True))
    seqs = fields.get(b"seqs", b"").split()
    if turns > len(seqs) and fields.get(b"complete") != b"1":
        return None
    codec = _codec()
    wanted = seqs[max(len(seqs) - turns, 0) :] if turns else []
    turn_list = [codec.decode(fields[b"t:" + seq]) for seq in wanted]
    facts = [codec.decode(value) for name, value in fields.items() if name.startswith(b"f:")]
    facts.sort(key=lambda fact: fact["key"])
    return CachedMemory(stamp=int(fields[b"rev"]), turns=turn_list, facts=facts)


def memory_fill(
    *,
    owner_id: str,
    stamp: int,
    turns: list[TurnPayload],
    facts: list[FactPayload],
    complete: bool,
    fill_token: str | None = None,
) -> bool:
    """Store a copy read from the database at ``stamp``, unless a writer has moved past it.

    ``turns`` are the owner's last turns, oldest first; ``complete`` says they are all of them.
    Returns whether the copy was stored. Never raises.
    """
    if not _usable():
        return False
    codec = _codec()
    args: list[Any] = [
        stamp,
        conf.CACHE_TTL,
        "1" if complete else "0",
        fill_token or "",
        " ".join(str(turn["seq"]) for turn in turns),
    ]
    for turn in turns:
        args += [f"t:{turn['seq']}", codec.encode(turn, allow_int=False)]
    for fact in facts:
        args += [f"f:{fact['key']}", codec.encode(fact, allow_int=False)]
    try:
        stored = _FILL(keys=[owner_key(owner_id), _lock_key(owner_id)], args=args, client=_client())
        health.succeeded()
    except CacheErrors as e:
        health.failed(e, "fill")
        return False
    health.count("fills" if stored else "fills_refused")
    return bool(stored)


def memory_apply(
    *,
    owner_id: str,
    prev_stamp: int,
    stamp: int,
    turns: list[TurnPayload] | tuple[()] = (),
    facts: list[FactPayload] | tuple[()] = (),
    deleted_keys: list[str] | tuple[()] = (),
) -> bool:
    """Bring the cached copy from ``prev_stamp`` to ``stamp`` with this delta, in O(delta).

    A copy at another stamp, or none, is replaced by a content-free floor at ``stamp`` so that
    no older rehydration can be stored after it. Call only after the write committed. Returns
    whether Redis confirmed (applied or dropped); ``False`` means the copy may be stale and the
    caller must record that. Never raises.
    """
    if not _usable():
        return False
    codec = _codec()
    args: list[Any] = [prev_stamp, stamp, conf.CACHE_TTL, GUARD_TTL, conf.CACHE_TURNS, len(turns)]
    for turn in turns:
        args += [turn["seq"], codec.encode(turn, allow_int=False)]
    args.append(len(facts))
    for fact in facts:
        args += [fact["key"], codec.encode(fact, allow_int=False)]
    args.append(len(deleted_keys))
    args += list(deleted_keys)
    try:
        result = _APPLY(keys=[owner_key(owner_id)], args=args, client=_client())
        health.succeeded()
    except CacheErrors as e:
        health.failed(e, "write")
        return False
    health.count("deltas" if result else "drops")
    return True


def memory_drop(*, owner_id: str, stamp: int) -> bool:
    """Remove the owner's cached copy, leaving a content-free floor at ``stamp`` for a minute.

    Returns whether Redis confirmed. Never raises.
    """
    if not enabled():
        return False
    if health.open():
        return False
    try:
        _DROP(keys=[owner_key(owner_id)], args=[stamp, GUARD_TTL], client=_client())
        health.succeeded()
    except CacheErrors as e:
        health.failed(e, "drop")
        return False
    health.count("drops")
    return True


def memory_evict(*, owner_id: str) -> bool:
    """Delete the owner's keys outright, as eviction would (operators, tests). Never raises."""
    if not enabled():
        return False
    try:
        _client().delete(owner_key(owner_id), _lock_key(owner_id))
        health.succeeded()
    except CacheErrors as e:
        health.failed(e, "evict")
        return False
    return True


def ping() -> Literal["ok", "down", "disabled"]:
    """The cache's state for the health endpoint; ignores the back-off window. Never raises."""
    if not enabled():
        return "disabled"
    try:
        _client().ping()
    except CacheErrors as e:
        health.failed(e, "ping")
        return "down"
    health.succeeded()
    return "ok"


def suspect() -> bool:
    """Whether this process saw a Redis error within ``MEMORY["SUSPECT_WINDOW"]`` seconds."""
    return (
        health.last_error_at > 0 and time.monotonic() - health.last_error_at < conf.SUSPECT_WINDOW
    )


def _memory_usage(client: Any, keys: list[bytes]) -> int:
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.memory_usage(key)
    return sum(size or 0 for size in pipe.execute()) if keys else 0


def stats() -> dict[str, Any]:
    """Counters (shared ones from Redis, this process's outages) and the app's Redis memory.

    Returns ``{"cache": "disabled"}`` or ``{"cache": "down", ...}`` instead of raising.
    """
    local = {"outages": health.outages, "errors": health.errors}
    if not enabled():
        return {"cache": "disabled", **local}
    try:
        client = _client()
        _flush_counts(client, force=True)
        shared = client.hgetall(stats_key())
        keys = 0
        used = 0
        batch: list[bytes] = []
        # NOTE: MEMORY USAGE pipelined by the thousand: one round trip per batch, not per key.
        for key in client.scan_iter(match=key_pattern(), count=1000):
            batch.append(key)
            if len(batch) == 1000:
                used += _memory_usage(client, batch)
                keys += len(batch)
                batch = []
        used += _memory_usage(client, batch)
        keys += len(batch)
        health.succeeded()
    except CacheErrors as e:
        health.failed(e, "stats")
        return {"cache": "down", **local}
    counters = {name.decode(): int(value) for name, value in shared.items()}
    return {"cache": "ok", "keys": keys, "memory_bytes": used, "counters": counters, **local}
