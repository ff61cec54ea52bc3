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

from memory import codec, metrics
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
#   fkeys     the keys of the cached facts, space-separated (a copy filled before it existed
#             lacks it; reads then list the hash's fields instead)
#   t:<seq>   a turn payload;  f:<key>  a fact payload

# KEYS: memory hash, fill lock. ARGV: ttl, lock ms, lock token, turns wanted.
# A hit returns {1, rev, turns, facts}: the last turns wanted and every fact, each as one JSON
# array joined here from the stored payloads; {2} when the copy holds fewer turns than wanted.
# A miss returns {0, 1} when this caller took the fill lock, else {0, 0}.
# NOTE: the joined arrays make a hit three bulk replies whatever the turn count, and leave out
# the cached turns the caller did not ask for: parsing replies is most of a hit's client time.
_READ = Script(
    None,  # type: ignore[arg-type]
    b"""
local key = KEYS[1]
local meta = redis.call('HMGET', key, 'rev', 'complete', 'seqs', 'fkeys')
if meta[1] then
  redis.call('EXPIRE', key, ARGV[1])
  local seqs = {}
  for w in string.gmatch(meta[3] or '', '%S+') do seqs[#seqs + 1] = w end
  local want = tonumber(ARGV[4])
  if want > #seqs and meta[2] ~= '1' then return {2} end
  local names = {}
  for j = math.max(#seqs - want + 1, 1), #seqs do names[#names + 1] = 't:' .. seqs[j] end
  local nturns = #names
  if meta[4] then
    for name in string.gmatch(meta[4], '%S+') do names[#names + 1] = 'f:' .. name end
  else
    for _, name in ipairs(redis.call('HKEYS', key)) do
      if string.sub(name, 1, 2) == 'f:' then names[#names + 1] = name end
    end
  end
  local turns, facts = {}, {}
  -- NOTE: in slices, as unpack() has a limit on how many values it spreads.
  for i = 1, #names, 1000 do
    local last = math.min(i + 999, #names)
    local values = redis.call('HMGET', key, unpack(names, i, last))
    for j = 1, #values do
      if not values[j] then return {2} end
      if i + j - 1 <= nturns then
        turns[#turns + 1] = values[j]
      else
        facts[#facts + 1] = values[j]
      end
    end
  end
  turns = '[' .. table.concat(turns, ',') .. ']'
  return {1, meta[1], turns, '[' .. table.concat(facts, ',') .. ']'}
end
if ARGV[2] == '0' then return {0, 0} end
local got = redis.call('SET', KEYS[2], ARGV[3], 'NX', 'PX', ARGV[2])
if got then return {0, 1} end
return {0, 0}
""",
)

# KEYS: memory hash, fill lock.
# ARGV: stamp, ttl, complete, lock token, seqs, fields ("name length" pairs), payloads joined.
# NOTE: two arguments for all payloads, not two per payload: packing a command's arguments is
# most of the client's time for a fill of 50 turns.
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
local fields, fkeys, pos = {}, {}, 1
for name, size in string.gmatch(ARGV[6], '(%S+) (%d+)') do
  fields[#fields + 1] = name
  fields[#fields + 1] = string.sub(ARGV[7], pos, pos + size - 1)
  if string.sub(name, 1, 2) == 'f:' then fkeys[#fkeys + 1] = string.sub(name, 3) end
  pos = pos + size
end
redis.call('HSET', KEYS[1], 'fkeys', table.concat(fkeys, ' '))
-- NOTE: one HSET per slice of fields, as unpack() has a limit on how many values it spreads.
for i = 1, #fields, 1000 do
  redis.call('HSET', KEYS[1], unpack(fields, i, math.min(i + 999, #fields)))
end
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
local fkeys = redis.call('HGET', key, 'fkeys')
local known = {}
if fkeys then for name in string.gmatch(fkeys, '%S+') do known[name] = true end end
n = tonumber(ARGV[i]); i = i + 1
for _ = 1, n do
  redis.call('HSET', key, 'f:' .. ARGV[i], ARGV[i + 1])
  known[ARGV[i]] = true
  i = i + 2
end
n = tonumber(ARGV[i]); i = i + 1
for _ = 1, n do
  redis.call('HDEL', key, 'f:' .. ARGV[i])
  known[ARGV[i]] = nil
  i = i + 1
end
if fkeys then
  local names = {}
  for name in pairs(known) do names[#names + 1] = name end
  redis.call('HSET', key, 'fkeys', table.concat(names, ' '))
end
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
        metrics.cache_outage_reset()

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
        metrics.cache_failed()
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
            metrics.cache_recovered()
            logger.warning("Redis reachable again after %.1f s.", time.monotonic() - since)

    def open(self) -> bool:
        return self.down_since is not None and time.monotonic() < self.retry_at

    def count(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.counts[name] = self.counts.get(name, 0) + n
        metrics.cache_event(name, n)


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
        try:
            pipe.execute()
        except CacheErrors as e:
            # NOTE: on a cluster the counters' key is in a slot of its own, maybe on a node
            # that is down while the owner's answers: that must not fail a read whose own
            # script succeeded, nor open the breaker for every owner. The counts wait for the
            # next flush.
            with health.lock:
                for name, n in counts.items():
                    health.counts[name] = health.counts.get(name, 0) + n
            if force:
                raise
            logger.debug("Could not flush the cache counters: %s", e)


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
        reply = _READ(
            keys=[owner_key(owner_id), _lock_key(owner_id)],
            args=[conf.CACHE_TTL, conf.FILL_WAIT_MS * 2 if claim_fill else 0, token, turns],
            client=client,
        )
        health.succeeded()
        _flush_counts(client)
    except CacheErrors as e:
        health.failed(e, "read")
        return None
    if reply[0] == 0:
        health.count("misses")
        return Miss(fill_token=token if (claim_fill and reply[1] == 1) else None)
    if reply[0] == 2:
        health.count("short")
        return None
    health.count("hits")
    facts: list[FactPayload] = codec.loads(reply[3])
    facts.sort(key=_fact_key)
    return CachedMemory(stamp=int(reply[1]), turns=codec.loads(reply[2]), facts=facts)


def _fact_key(fact: FactPayload) -> str:
    return fact["key"]


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
    names = [f"t:{turn['seq']}" for turn in turns] + [f"f:{fact['key']}" for fact in facts]
    payloads = [codec.dumps(turn) for turn in turns] + [codec.dumps(fact) for fact in facts]
    args: list[Any] = [
        stamp,
        conf.CACHE_TTL,
        "1" if complete else "0",
        fill_token or "",
        " ".join(str(turn["seq"]) for turn in turns),
        " ".join(f"{name} {len(payload)}" for name, payload in zip(names, payloads, strict=True)),
        b"".join(payloads),
    ]
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
    args: list[Any] = [prev_stamp, stamp, conf.CACHE_TTL, GUARD_TTL, conf.CACHE_TURNS, len(turns)]
    for turn in turns:
        args += [turn["seq"], codec.dumps(turn)]
    args.append(len(facts))
    for fact in facts:
        args += [fact["key"], codec.dumps(fact)]
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
