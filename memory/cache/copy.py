"""The Redis copy of an owner's memory: its Lua scripts and the calls that read, fill, change and
drop it. Each call is one round trip and one owner's keys (one cluster slot); none raises.
"""

from __future__ import annotations

import enum
import operator
import secrets
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

from redis import exceptions as redis_errors
from redis.commands.core import Script

from memory import codec
from memory.cache.client import (
    DOWN_ERRORS,
    Answer,
    Outcome,
    aredis_call,
    breaker,
    client,
    enabled,
    logger,
    redis_call,
)
from memory.cache.keys import key_pattern, lock_key, owner_key, stats_key
from memory.cache.replication import replicated
from memory.cache.runs import key_kept, on_cluster, run_kept
from memory.cache.wire import Command, commands_run, script_run
from memory.conf import conf
from memory.payloads import (
    FactPayload,
    SummaryPayload,
    TurnPayload,
    payloads_from_arrays,
)

# An owner's cached memory is one hash, so that eviction takes it whole or not at all:
#   rev       stamp of the database state the payload reflects (absent: a miss)
#   floor     highest stamp any writer announced; a fill older than it is refused
#   complete  "1" if the cached turns are all of the owner's turns
#   seqs      the cached turn seqs, oldest first, space-separated
#   turns     the cached turns' payloads, oldest first, each followed by ","; it may begin with
#             payloads no longer cached, and the newest may be in ``tail``
#   tail      the newest payloads the same way, while they are few (absent: none)
#   ends      where the first cached payload begins in ``turns`` + ``tail``, then where each
#             one's successor would begin (the last: their length); 4 bytes big-endian each
#   fkeys     the keys of the cached facts, space-separated
#   facts     their payloads, in that order, joined by ","
#   fends     where each ends in ``facts``, as ``ends``
#   sum       the owner's summary payload (absent: the owner has none)
# A turn or fact payload is a JSON array of its fields in the order of TURN_FIELDS /
# FACT_FIELDS (the field names would be a third of a turn's bytes in Redis; a hit builds the
# dicts back faster than it parses objects). The turns are one field, and the facts one, not
# one field each: a field costs Redis about 100 bytes of its own in a hash too big for a
# listpack, half the bytes of a 200-character turn; and a hit is then one HMGET of fixed
# fields, no script (docs/performance.md). An append writes the small ``tail`` and ``ends``,
# not the whole ``turns``: the apply script folds them into it once in many appends.

LUA = Path(__file__).resolve().parent / "lua"


def _script(name: str, *chunks: str) -> Script:
    """The script ``lua/<name>.lua``, after the ``chunks`` (``lua/<chunk>.lua``) it calls."""
    source = b"".join([(LUA / f"{part}.lua").read_bytes() for part in (*chunks, name)])
    # NOTE: no client here: each call passes the alias's, which loads the script on NOSCRIPT.
    return Script(None, source)  # type: ignore[arg-type]


def _run_locked(action: str, script: Script, key: str, args: list[Any]) -> Answer[Any] | Outcome:
    """``redis_call`` of ``script`` over an owner's hash ``key`` and its fill lock, on ``args``."""
    keys = [key, f"{key}:fill"]
    return redis_call(action, lambda redis: script_run(script, redis, keys, args), key=key)


_CLAIM = _script("claim", "take")
_READ_CLAIM = _script("read_claim", "take")
_FILL = _script("fill")
_APPLY = _script("apply")
_DROP = _script("drop")

# NOTE: how long a floor outlives its payload. Not load-bearing: a fill that finds it gone is
# verified against the database.
GUARD_TTL = 60


@dataclass(frozen=True)
class Snapshot:
    """An owner's memory at one ``stamp``: its last turns (oldest first), facts (by key) and
    summary (``None``: it has none)."""

    stamp: int
    turns: list[TurnPayload]
    facts: list[FactPayload]
    summary: SummaryPayload | None = None


class Loaded(NamedTuple):
    """An owner read from the database: its ``snapshot``, and whether the snapshot's turns are
    all of the owner's turns (``complete``)."""

    snapshot: Snapshot
    complete: bool


@dataclass(frozen=True)
class Hit:
    """Redis holds a copy at ``snapshot.stamp`` with the turns asked for."""

    snapshot: Snapshot


@dataclass(frozen=True)
class Miss:
    """No copy; ``fill_token`` is set when this caller won the right to rehydrate."""

    fill_token: str | None


@dataclass(frozen=True)
class Short:
    """A copy, but with fewer turns than asked for: read the database."""


ReadResult = Hit | Miss | Short | Outcome


TURN_FIELDS = ("seq", "session_id", "role", "content", "metadata", "created_at")
FACT_FIELDS = ("key", "value", "session_id", "updated_at", "version", "expires_at")


_turn_values = operator.itemgetter(*TURN_FIELDS)
_fact_values = operator.itemgetter(*FACT_FIELDS)


def turn_pack(turn: TurnPayload) -> bytes:
    """A turn payload as the copy stores it: its fields' values in ``TURN_FIELDS`` order."""
    return codec.dumps(_turn_values(turn))


def fact_pack(fact: FactPayload) -> bytes:
    """A fact payload as the copy stores it: its fields' values in ``FACT_FIELDS`` order."""
    return codec.dumps(_fact_values(fact))


def payloads_unpack(turns: bytes, facts: bytes) -> tuple[list[TurnPayload], list[FactPayload]]:
    """The turns, and the facts by key, of JSON arrays of packed turns and facts (``turn_pack``,
    ``fact_pack``)."""
    turn_list, fact_list = payloads_from_arrays(codec.loads(turns), codec.loads(facts))
    fact_list.sort(key=_fact_key)
    return turn_list, fact_list


def _fact_key(fact: FactPayload) -> str:
    return fact["key"]


# What a hit reads, in one HMGET: the stamp, completeness, the turns' offsets and payloads
# (two fields), the facts' end offsets and payloads, the summary.
# NOTE: bytes, which redis-py sends as they are.
_HIT_FIELDS = (
    b"rev",
    b"complete",
    b"ends",
    b"turns",
    b"fends",
    b"facts",
    b"sum",
    b"floor",
    b"tail",
)


class _MissShare:
    """The share of this process's recent reads that found no copy, weighted to the latest
    (each read moves it 1/16 of the way to 1 or 0): whether a read should claim the fill in the
    same round trip (``read_claim.lua``).
    Used while more than a fifth of reads miss. Updated without a lock: a lost update only
    moves the share less.
    """

    THRESHOLD = 0.2

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.share = 0.0

    def saw(self, miss: bool) -> None:
        self.share += ((1.0 if miss else 0.0) - self.share) / 16

    def likely(self) -> bool:
        return self.share > self.THRESHOLD


miss_share = _MissShare()


def _kept(owner_id: str, epoch: str | None, key: str) -> bool:
    """Whether a write to ``key`` reached the server run its name holds (rule 10): the epoch's
    run on a single Redis, the slot's node run on a cluster."""
    return run_kept(epoch) and _node_kept(owner_id, epoch, key)


def _node_kept(owner_id: str, epoch: str | None, key: str) -> bool:
    """Whether a call to ``key`` on a cluster reached the node run its name holds (rule 10);
    on a single Redis, ``runs.run_kept`` checks the epoch's run instead."""
    return not on_cluster() or key_kept(key, owner_key(owner_id, epoch))


def copy_read(
    *, owner_id: str, turns: int, claim_fill: bool = True, epoch: str | None = None
) -> ReadResult:
    """Read the owner's copy with its last ``turns`` turns and every fact; renew its TTL.

    ``Hit`` on a hit; ``Miss`` when there is no copy (with a fill token when ``claim_fill`` and
    this caller took the fill lock); ``Short`` when the copy holds fewer turns than asked; an
    ``Outcome`` when no cache is configured, the breaker skipped Redis, or Redis failed.
    A hit is one round trip (HMGET and EXPIRE pipelined), and a miss that claims the fill lock
    a second (the claim script). While this process's reads often miss (``miss_share``), either
    is one script doing the same (``read_claim.lua``). A floor alone is set back to at most
    ``GUARD_TTL``. Never raises.
    """
    key = owner_key(owner_id, epoch)
    ttl, wait_ms = conf.CACHE_TTL, conf.FILL_WAIT_MS * 2
    if claim_fill and miss_share.likely():
        claimed = _read_claim(key, turns, [ttl, GUARD_TTL, wait_ms, secrets.token_hex(8)])
        return claimed if _node_kept(owner_id, epoch, key) else Outcome.SKIPPED
    commands: list[Command] = [("HMGET", key, *_HIT_FIELDS), ("EXPIRE", key, ttl)]

    def read(redis: Any) -> Any:
        return commands_run(redis, commands)

    answer = redis_call("read", read, key=key)
    if not isinstance(answer, Answer):
        return answer
    if not _node_kept(owner_id, epoch, key):
        return Outcome.SKIPPED
    counts_flush()
    held = answer.value[0]
    miss_share.saw(held[0] is None)
    if held[0] is not None:
        return _hit_result(held, turns)
    if held[7] is not None:
        redis_call("read", lambda redis: redis.expire(key, GUARD_TTL, lt=True), key=key)
    if not claim_fill:
        breaker.count("misses")
        return Miss(fill_token=None)
    token = secrets.token_hex(8)
    taken = _run_locked("read", _CLAIM, key, [wait_ms, token])
    if not isinstance(taken, Answer):
        return taken
    if taken.value == 2:
        # NOTE: filled between the HMGET and the claim: read it, claiming nothing (no loop).
        return copy_read(owner_id=owner_id, turns=turns, claim_fill=False, epoch=epoch)
    breaker.count("misses")
    return Miss(fill_token=token if taken.value == 1 else None)


def _read_claim(key: str, turns: int, args: list[Any]) -> ReadResult:
    """``copy_read`` of the hash ``key`` in a process whose reads often miss: the read and the
    claim in one script (``read_claim.lua``; ``args``: TTL, guard TTL, lock ms, token), one round
    trip whether it hits or misses."""
    answer = _run_locked("read", _READ_CLAIM, key, args)
    if not isinstance(answer, Answer):
        return answer
    counts_flush()
    held = answer.value
    hit = isinstance(held, list)
    miss_share.saw(not hit)
    if hit:
        return _hit_result(held, turns)
    breaker.count("misses")
    return Miss(fill_token=args[3] if held == 1 else None)


async def copy_aread(*, owner_id: str, turns: int, epoch: str) -> ReadResult | None:
    """``copy_read`` from async code, without claiming the fill lock, on redis.asyncio; ``None``
    where the alias has no async client (read through the sync path). Never raises a Redis
    error."""

    if on_cluster():
        return None  # NOTE: a cluster has no async client; its key's name may ask its node.
    key = owner_key(owner_id, epoch)
    answer = await aredis_call(
        "read", (("HMGET", key, *_HIT_FIELDS), ("EXPIRE", key, conf.CACHE_TTL))
    )
    if not isinstance(answer, Answer):
        return answer
    held = answer.value[0]
    if held[0] is None:
        if held[7] is not None:
            await aredis_call("read", (("EXPIRE", key, GUARD_TTL, "LT"),))
        breaker.count("misses")
        return Miss(fill_token=None)
    return _hit_result(held, turns)


def _ends(payloads: list[bytes]) -> bytes:
    """The ``fends`` of payloads joined by ",": each one's end offset, 4 bytes big-endian."""
    end, ends = -1, []
    for payload in payloads:
        end += len(payload) + 1
        ends.append(end)
    return struct.pack(f">{len(ends)}I", *ends)


def _turn_ends(payloads: list[bytes]) -> bytes:
    """The ``ends`` of payloads each followed by ",": 0, then where each one's successor
    begins, 4 bytes big-endian each."""
    start, starts = 0, [0]
    for payload in payloads:
        start += len(payload) + 1
        starts.append(start)
    return struct.pack(f">{len(starts)}I", *starts)


def _whole(body: bytes | None, ends: bytes | None) -> bool:
    """Whether ``body`` ends where its ``ends`` say (a copy's fields agree)."""
    if not ends:
        return not body
    return len(ends) % 4 == 0 and int.from_bytes(ends[-4:]) == len(body or b"")


def _array(payloads: bytes, start: int = 0) -> bytes:
    """The JSON array of the payloads joined by "," in ``payloads`` from byte ``start``, in one
    copy."""
    return b"".join((b"[", memoryview(payloads)[start:], b"]"))


def _hit_result(held: list[Any], want: int) -> ReadResult:
    """What a copy's ``_HIT_FIELDS`` say for a read of its last ``want`` turns, counted: the
    turns cut from ``turns`` + ``tail`` at the bytes where they begin and end; ``Short`` when
    it holds fewer, or when a field does not end where its offsets say (never served)."""
    rev, complete, ends, head, fends, facts, summary, _, tail = held
    head, tail, ends = head or b"", tail or b"", ends or b""
    held_turns = len(ends) // 4 - 1
    if (
        held_turns < 0
        or (want > held_turns and complete != b"1")
        or len(ends) % 4
        or int.from_bytes(ends[-4:]) != len(head) + len(tail)
        or ends[:4] > ends[-4:]
        or not _whole(facts, fends)
    ):
        breaker.count("short")
        return Short()
    breaker.count("hits")
    text = b""
    if want and held_turns:
        skip = max(held_turns - want, 0)
        start = int.from_bytes(ends[4 * skip : 4 * skip + 4])
        if start >= len(head):
            text = tail[start - len(head) : -1]
        else:
            text = head[start:] + tail[:-1] if tail else head[start:-1]
    turns, fact_list = payloads_unpack(b"[" + text + b"]", _array(facts) if fends else b"[]")
    summary_payload = codec.loads(summary) if summary else None
    return Hit(Snapshot(int(rev), turns, fact_list, summary_payload))


class Fill(enum.Enum):
    """What a fill did: stored over its own claim, stored without it (``verify`` it against the
    database), or refused."""

    REFUSED = 0
    CLAIMED = 1
    UNCLAIMED = 2


def copy_fill(
    *, owner_id: str, loaded: Loaded, fill_token: str | None = None, epoch: str | None = None
) -> Fill | Outcome:
    """Store a copy read from the database, unless a writer announced a newer stamp.

    ``loaded.snapshot.turns`` are the owner's last turns, oldest first; ``fill_token``: the claim
    ``copy_read`` took before the database was read. Returns what the fill did, or the ``Outcome``
    that stopped it (after ``TIMEOUT`` a paused Redis may still store it). Never raises.
    """
    snapshot, complete = loaded
    turns, facts = snapshot.turns, snapshot.facts
    packed = codec.dumps_all(list(map(_turn_values, turns)))
    fact_payloads = codec.dumps_all(list(map(_fact_values, facts)))
    args: list[Any] = [
        snapshot.stamp,
        conf.CACHE_TTL,
        "1" if complete else "0",
        fill_token or "",
        " ".join([str(turn["seq"]) for turn in turns]),
        _turn_ends(packed),
        b",".join(packed) + b"," if packed else b"",
        " ".join([fact["key"] for fact in facts]),
        _ends(fact_payloads),
        b",".join(fact_payloads),
        codec.dumps(snapshot.summary) if snapshot.summary is not None else "",
    ]
    key = owner_key(owner_id, epoch)
    answer = _run_locked("fill", _FILL, key, args)
    if not isinstance(answer, Answer):
        return answer
    result = Fill(int(answer.value))
    breaker.count("fills_refused" if result is Fill.REFUSED else "fills")
    return result


def copy_apply(
    *,
    owner_id: str,
    prev_stamp: int,
    stamp: int,
    turns: list[TurnPayload] | tuple[()] = (),
    facts: list[FactPayload] | tuple[()] = (),
    deleted_keys: list[str] | tuple[()] = (),
    epoch: str | None = None,
) -> bool:
    """Bring the copy from ``prev_stamp`` to ``stamp`` with this delta, in O(delta).

    Any other copy, or none, becomes a content-free floor at ``stamp``. Call only after commit.
    Returns whether Redis confirmed; ``False``: the caller must have it repaired. The breaker never
    skips it. Never raises.
    """
    args: list[Any] = [prev_stamp, stamp, conf.CACHE_TTL, GUARD_TTL, conf.CACHE_TURNS, len(turns)]
    for turn in turns:
        args += [turn["seq"], turn_pack(turn)]
    args.append(len(facts))
    for fact in facts:
        args += [fact["key"], fact_pack(fact)]
    args.append(len(deleted_keys))
    args += list(deleted_keys)
    key = owner_key(owner_id, epoch)
    answer = redis_call(
        "write", lambda redis: replicated(redis, _APPLY, key, args), write=True, key=key
    )
    if not isinstance(answer, Answer) or answer.value is None or not _kept(owner_id, epoch, key):
        return False
    breaker.count("deltas" if answer.value else "drops")
    return True


def copy_drop(*, owner_id: str, stamp: int, epoch: str | None = None) -> bool:
    """Remove the owner's copy, leaving a content-free floor at ``stamp`` for ``GUARD_TTL``.

    Returns whether Redis confirmed. A write: the breaker never skips it. Never raises.
    """
    key = owner_key(owner_id, epoch)
    answer = redis_call(
        "drop",
        lambda redis: replicated(redis, _DROP, key, [stamp, GUARD_TTL]),
        write=True,
        key=key,
    )
    if not isinstance(answer, Answer) or answer.value is None or not _kept(owner_id, epoch, key):
        return False
    breaker.count("drops")
    return True


def copy_evict(*, owner_id: str) -> bool:
    """Delete the owner's keys outright, as eviction would (operators, tests). Never raises."""
    answer = redis_call(
        "evict",
        lambda redis: redis.delete(owner_key(owner_id), lock_key(owner_id)),
        write=True,
        key=owner_key(owner_id),
    )
    return isinstance(answer, Answer)


def ping() -> Literal["ok", "down", "disabled"]:
    """The cache's state for the health endpoint: a PING, or "down" at once while the breaker is
    open and a thread probes. Never raises."""
    answer = redis_call("ping", lambda redis: redis.ping(), write=True)
    if answer is Outcome.DISABLED:
        return "disabled"
    return "ok" if isinstance(answer, Answer) or answer is Outcome.ERROR else "down"


def probe(shard: str) -> bool:
    """PING the shard (a cluster node, "" for the whole Redis) as its breaker probe: whether it
    answered. For the prober thread. Never raises."""

    def ping_shard(redis: Any) -> Any:
        if shard and hasattr(redis, "get_node"):
            node = redis.get_node(node_name=shard)
            if node is None:
                # A node the slot map no longer has: nothing goes to it any more.
                return True
            return redis.ping(target_nodes=node)
        return redis.ping()

    answer = redis_call("probe", ping_shard, write=True, shard=shard)
    return isinstance(answer, Answer) or answer is Outcome.ERROR


def _memory_usage(redis: Any, keys: list[bytes]) -> int:
    pipe = redis.pipeline(transaction=False)
    for key in keys:
        pipe.memory_usage(key)
    return sum(size or 0 for size in pipe.execute()) if keys else 0


def stats() -> dict[str, Any]:
    """Counters (shared ones from Redis, this process's outages) and the app's Redis memory.

    Returns ``{"cache": "disabled"}`` or ``{"cache": "down", ...}`` instead of raising.
    """

    local = {"outages": breaker.outages, "errors": breaker.errors, "bugs": breaker.bugs}
    counts_flush(force=True)

    def collect(redis: Any) -> tuple[dict[bytes, bytes], int, int]:
        shared = redis.hgetall(stats_key())
        keys = used = 0
        batch: list[bytes] = []
        for key in redis.scan_iter(match=key_pattern(), count=1000):
            batch.append(key)
            if len(batch) == 1000:
                used += _memory_usage(redis, batch)
                keys += len(batch)
                batch = []
        used += _memory_usage(redis, batch)
        keys += len(batch)
        return shared, keys, used

    answer = redis_call("stats", collect, write=True)
    if answer is Outcome.DISABLED:
        return {"cache": "disabled", **local}
    if not isinstance(answer, Answer):
        return {"cache": "down", **local}
    shared, keys, used = answer.value
    counters = {name.decode(): int(value) for name, value in shared.items()}
    return {"cache": "ok", "keys": keys, "memory_bytes": used, "counters": counters, **local}


# Counters go to Redis at most this often, in a call of their own.
COUNTS_FLUSH_SECONDS = 1.0
_FLUSH_ERRORS: tuple[type[BaseException], ...] = (*DOWN_ERRORS, redis_errors.RedisError)


def counts_flush(*, force: bool = False) -> None:
    """Add this process's counters to the shared ones in Redis, at most once a second.
    Outside the breaker: a counters' node down must not open it for every owner.
    """
    now = time.monotonic()
    if not force and now - breaker.counts_flushed_at < COUNTS_FLUSH_SECONDS:
        return
    with breaker.lock:
        if not force and now - breaker.counts_flushed_at < COUNTS_FLUSH_SECONDS:
            return
        counts, breaker.counts = breaker.counts, {}
        breaker.counts_flushed_at = now
    if not counts or not enabled():
        return
    try:
        pipe = client().pipeline(transaction=False)
        for name, n in counts.items():
            pipe.hincrby(stats_key(), name, n)
        pipe.execute()
    except _FLUSH_ERRORS as e:
        with breaker.lock:
            for name, n in counts.items():
                breaker.counts[name] = breaker.counts.get(name, 0) + n
        logger.debug("Could not flush the cache counters: %s", e)
