"""Tests of the breaker in memory.cache.client: a caller that is cancelled, or a Redis error that
persists, never wedges it; the async side reads its state once per read and never queries on
the event loop. Real Redis servers of the tests' own, paused or given a key of the wrong type."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from memory import cache, selectors, services
from memory.cache import readthrough
from memory.cache.client import redis_call
from memory.cache.keys import owner_key
from tests.loop import run

real_db = pytest.mark.django_db(transaction=True)


def append(content: str, owner_id: str = "wang") -> None:
    services.turn_append(owner_id=owner_id, session_id="s", role="user", content=content)


def served(owner_id: str = "wang") -> bool:
    return selectors.context_get(owner_id=owner_id)["source"] == "cache"


def eventually(condition: Callable[[], bool], *, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@pytest.fixture
def warm_redis(own_redis: Any) -> Any:
    """A Redis of the test's own, holding a warm copy of "wang"."""
    append("My name is Wang Jianguo")
    selectors.context_get(owner_id="wang")
    assert served()
    return own_redis


@real_db
@pytest.mark.faults
def test_an_async_read_cancelled_while_it_probes_gives_the_probe_back(warm_redis):
    own_redis = warm_redis
    own_redis.pause()
    try:
        assert not served()  # times out: the breaker opens
        assert cache.client.breaker.state == "open"

        async def cancelled_reads() -> None:
            for _ in range(5):
                # NOTE: the window over, each read is the half-open probe, and is cancelled
                # while Redis does not answer: a client that went away.
                cache.client.breaker.expire()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(selectors.acontext_get(owner_id="wang"), 0.05)

        run(cancelled_reads)
    finally:
        own_redis.resume()
    cache.client.breaker.expire()
    assert eventually(served, within=2.0)
    # A write after it is confirmed by Redis, not skipped after waiting for a lost probe.
    append("I like basketball")
    context = selectors.context_get(owner_id="wang")
    assert context["source"] == "cache"
    assert context["turns"][-1]["content"] == "I like basketball"
    assert cache.repair.pending_count() == 0


@real_db
@pytest.mark.faults
def test_an_async_read_of_a_paused_redis_ends_at_the_socket_timeout(warm_redis):
    own_redis = warm_redis

    async def read() -> dict[str, Any]:
        # NOTE: the async connections have no socket timeout of their own; the call's deadline,
        # the alias's SOCKET_TIMEOUT (0.2 s), ends the read. Not a speed assertion: redis-py's
        # default timeout, 5 s, would still be waiting.
        return await asyncio.wait_for(selectors.acontext_get(owner_id="wang"), 2.0)

    async def reads() -> list[dict[str, Any]]:
        # NOTE: two at once on one loop: one watch and its one timer end both.
        return list(await asyncio.gather(read(), read()))

    own_redis.pause()
    try:
        contexts = run(reads)
        state, outages = cache.client.breaker.state, cache.client.breaker.outages
    finally:
        own_redis.resume()
    for context in contexts:
        assert context["source"] == "database"
        assert [turn["content"] for turn in context["turns"]] == ["My name is Wang Jianguo"]
    assert (state, outages) == ("open", 1)


def test_the_watch_ends_only_the_calls_past_their_deadline():
    from memory.cache.wire import Watch

    async def main() -> list[str]:
        watch = Watch(asyncio.get_running_loop())

        async def call(seconds: float) -> str:
            task = asyncio.current_task()
            assert task is not None
            watch.start(task, seconds)
            try:
                await asyncio.sleep(0.3)
                return "answered"
            except asyncio.CancelledError:
                return "timed out" if watch.end(task) else "cancelled"
            finally:
                watch.end(task)

        slow = asyncio.create_task(call(0.05))
        later = asyncio.create_task(call(0.15))
        fast = asyncio.create_task(call(5.0))
        gone = asyncio.create_task(call(5.0))
        await asyncio.sleep(0.01)
        gone.cancel()
        return list(await asyncio.gather(slow, later, fast, gone))

    assert asyncio.run(main()) == ["timed out", "timed out", "answered", "cancelled"]


@real_db
@pytest.mark.faults
def test_an_async_connection_the_server_closed_while_idle_is_connected_again(warm_redis):
    killer = redis.Redis.from_url(warm_redis.url)

    async def reads() -> list[str]:
        sources = [(await selectors.acontext_get(owner_id="wang"))["source"]]
        # NOTE: the connection that read waits, idle, for the next read of this loop; Redis
        # closes it meanwhile (a restart, CLIENT KILL, an idle timeout).
        killer.client_kill_filter(_type="normal", skipme=True)
        await asyncio.sleep(0.1)  # the loop sees the connection closed
        sources.append((await selectors.acontext_get(owner_id="wang"))["source"])
        return sources

    assert run(reads) == ["cache", "cache"]
    assert cache.client.breaker.outages == 0


def test_a_sync_call_interrupted_while_it_probes_gives_the_probe_back(db):
    append("hi")
    cache.client.breaker.failed(redis.ConnectionError("gone"), "test")
    cache.client.breaker.expire()

    def interrupted(client: Any) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        redis_call("read", interrupted)
    # The next reader is the probe, Redis answers, and the breaker closes.
    assert served() or served()
    assert cache.client.breaker.state == "closed"


@real_db
def test_an_async_hit_never_queries_on_the_event_loop_when_another_thread_errs_meanwhile():
    append("hi")
    selectors.context_get(owner_id="wang")
    assert not cache.client.breaker.suspect()
    seen = []

    def another_thread_sees_redis_down() -> None:
        cache.client.breaker.failed(redis.ConnectionError("gone"), "test")

    def hook(frame: Any, event: str, arg: Any) -> None:
        # NOTE: the moment the read decides whether its copy is valid, another thread of the
        # process records a Redis error: the read must act on the state it took once.
        if event == "call" and frame.f_code is readthrough.copy_valid.__code__ and not seen:
            seen.append(frame.f_code.co_name)
            thread = threading.Thread(target=another_thread_sees_redis_down)
            thread.start()
            thread.join()

    async def read() -> dict[str, Any]:
        sys.setprofile(hook)
        try:
            return await selectors.acontext_get(owner_id="wang")
        finally:
            sys.setprofile(None)

    context = run(read)
    assert seen
    assert cache.client.breaker.suspect()
    assert context["turns"][-1]["content"] == "hi"


@pytest.mark.faults
@pytest.mark.django_db(transaction=True)
def test_a_persistent_redis_error_is_retried_with_backoff_and_logged_once(
    own_redis, memory_settings, caplog
):
    client = redis.Redis.from_url(own_redis.url)
    append("hi")
    # NOTE: a key of the wrong type where the owner's hash goes: every script on it fails with
    # WRONGTYPE, a bug (not an outage) that no retry mends.
    client.set(owner_key("wang"), "not a hash")
    client.config_resetstat()
    with memory_settings(REPAIR_THREAD=True), caplog.at_level(logging.ERROR, "memory.cache"):
        append("again")  # its update fails and is left to the repairer
        assert cache.repair.pending_count() == 1
        time.sleep(2.0)
        attempts = _calls(client, "evalsha")
        errors = [r for r in caplog.records if "WRONGTYPE" in r.getMessage()]
        client.delete(owner_key("wang"))
        # Mended, the repair lands within the backoff's cap.
        assert eventually(lambda: cache.repair.pending_count() == 0, within=3.0)
    # At 0.1 s a retry, 2 s are 20 attempts; backing off from 0.1 s, doubling: at most 5.
    assert attempts <= 6, attempts
    # One line for the write that failed, one for its repairs: not one per attempt.
    assert sorted(r.getMessage().split(":")[0] for r in errors) == [
        "Redis refused drop",
        "Redis refused write",
    ]


def _calls(client: redis.Redis, command: str) -> int:
    stats = client.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))
