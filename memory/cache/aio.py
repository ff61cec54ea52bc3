"""The protocol's async front door: a warm read natively on ``redis.asyncio``, with no thread
hop; anything else (a miss, a refused copy, an outage) goes through the sync read path in one
``sync_to_async`` call. The same scripts, breaker, counters and validity step as the sync side.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from asgiref.sync import sync_to_async
from django.core.cache import caches
from redis import asyncio as aioredis
from redis import exceptions as redis_errors

from memory import codec
from memory.cache import copy
from memory.cache.client import DOWN_ERRORS, alias, breaker, enabled
from memory.cache.keys import lock_key, owner_key
from memory.cache.readthrough import Loader, Source, copy_valid, read_through
from memory.cache.repair import repairer_ensure
from memory.conf import conf
from memory.payloads import FactPayload

# NOTE: a redis.asyncio pool belongs to the event loop it was made in; one per loop and alias.
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Any]] = (
    weakref.WeakKeyDictionary()
)


def _async_client() -> Any | None:
    """A redis.asyncio client for the memory alias in this event loop, or ``None`` when the
    alias is not a plain django-redis client (Sentinel, Cluster): then the sync path serves."""
    name = alias()
    if name is None:
        return None
    loop = asyncio.get_running_loop()
    per_loop = _clients.setdefault(loop, {})
    if name in per_loop:
        return per_loop[name]
    backend = caches[name]
    options = (getattr(backend, "_params", None) or {}).get("OPTIONS") or {}
    client_class = options.get("CLIENT_CLASS", "django_redis.client.DefaultClient")
    servers = getattr(backend, "_server", None)
    if client_class != "django_redis.client.DefaultClient" or not servers:
        per_loop[name] = None
        return None
    # NOTE: the primary, as the sync client's write=True connection is: never a replica.
    location = servers[0] if isinstance(servers, (list, tuple)) else str(servers).split(",")[0]
    client = aioredis.from_url(
        location,
        socket_timeout=options.get("SOCKET_TIMEOUT"),
        socket_connect_timeout=options.get("SOCKET_CONNECT_TIMEOUT"),
    )
    per_loop[name] = client
    return client


async def _evalsha(client: Any, script: Any, keys: list[str], args: list[Any]) -> Any:
    try:
        return await client.evalsha(script.sha, len(keys), *keys, *args)
    except redis_errors.NoScriptError:
        # NOTE: a restarted or flushed Redis: load the script, as redis-py's Script does.
        await client.script_load(script.script)
        return await client.evalsha(script.sha, len(keys), *keys, *args)


async def _copy_aread(owner_id: str, turns: int) -> copy.ReadResult | None:
    """``copy.copy_read`` without claiming the fill lock, on redis.asyncio; ``None`` when this
    loop has no async client (the caller reads through the sync path)."""
    client = _async_client()
    if client is None:
        return None
    if breaker.admit(write=False) is not True:
        return copy.Outcome.SKIPPED
    try:
        reply = await _evalsha(
            client,
            copy._READ,
            [owner_key(owner_id), lock_key(owner_id)],
            [conf.CACHE_TTL, 0, "", turns],
        )
    except DOWN_ERRORS as e:
        breaker.failed(e, "read")
        return copy.Outcome.DOWN
    except redis_errors.RedisError as e:
        breaker.bug(e, "read")
        return copy.Outcome.ERROR
    breaker.succeeded()
    if reply[0] == 0:
        breaker.count("misses")
        return copy.Miss(fill_token=None)
    if reply[0] == 2:
        breaker.count("short")
        return copy.Short()
    breaker.count("hits")
    facts: list[FactPayload] = codec.loads(reply[3])
    facts.sort(key=lambda fact: fact["key"])
    return copy.Hit(copy.Snapshot(int(reply[1]), codec.loads(reply[2]), facts))


async def aread_through(*, owner_id: str, turns: int, load: Loader) -> tuple[copy.Snapshot, Source]:
    """``read_through`` for async code: a valid copy in one async Redis round trip, no query
    and no thread; the validity step's database check (only while suspect) and every other
    case in one ``sync_to_async`` call of the sync path. Raises what ``load`` raises."""
    if enabled():
        repairer_ensure()
        result = await _copy_aread(owner_id, turns)
        if isinstance(result, copy.Hit):
            if breaker.suspect():
                checked = await sync_to_async(copy_valid)(owner_id, result)
            else:
                checked = copy_valid(owner_id, result)
            if isinstance(checked, copy.Hit):
                return checked.snapshot, "cache"
    return await sync_to_async(read_through)(owner_id=owner_id, turns=turns, load=load)
