"""Tests of the breaker in memory.cache.client: a caller that is cancelled, or a Redis error that
persists, never wedges it; the async side reads its state once per read and never queries on
the event loop. Real Redis servers of the tests' own, paused or given a key of the wrong type."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
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


@real_db
@pytest.mark.faults
def test_a_sync_connection_the_server_closed_while_idle_is_connected_again(warm_redis):
    killer = redis.Redis.from_url(warm_redis.url)
    assert served()
    # NOTE: the connection that read stays with this thread for its next call; Redis closes it
    # meanwhile (a restart, CLIENT KILL, an idle timeout).
    killer.client_kill_filter(_type="normal", skipme=True)
    time.sleep(0.05)
    assert served()
    assert cache.client.breaker.outages == 0


def _pool_of_thread_calls(pool: Any, calls: Callable[[], None]) -> set[Any]:
    """The connections ``pool`` holds checked out while a thread makes ``calls`` and after it
    ended."""
    held: list[set[Any]] = []

    def work() -> None:
        calls()
        held.append(set(pool._in_use_connections))

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    return held[0]


def test_a_thread_keeps_one_connection_between_its_calls_and_gives_it_back_at_its_end(own_redis):
    from memory.cache.wire import commands_run

    plain = redis.Redis.from_url(own_redis.url)
    pool = plain.connection_pool

    def calls() -> None:
        for n in range(5):
            assert commands_run(plain, [("SET", "k", n), ("GET", "k")]) == [b"OK", b"%d" % n]

    during = _pool_of_thread_calls(pool, calls)
    assert len(during) == 1
    assert eventually(lambda: not pool._in_use_connections, within=2)
    assert len(pool._available_connections) == 1


def test_no_more_than_half_a_pools_limit_is_kept_and_none_of_a_blocking_pool(own_redis):
    from memory.cache.wire import commands_run

    plain = redis.Redis.from_url(own_redis.url, max_connections=4)
    called, measured = threading.Barrier(5), threading.Barrier(5)

    def work() -> None:
        commands_run(plain, [("PING",)])
        called.wait()
        measured.wait()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    called.wait()
    kept = len(plain.connection_pool._in_use_connections)
    measured.wait()
    for thread in threads:
        thread.join()
    assert kept == 2
    assert eventually(lambda: not plain.connection_pool._in_use_connections, within=2)
    # A blocking pool of one connection: kept by this thread, the other's call would wait on it.
    blocking = redis.Redis(
        connection_pool=redis.BlockingConnectionPool.from_url(
            own_redis.url, max_connections=1, timeout=0.2
        )
    )
    assert commands_run(blocking, [("PING",)]) == [b"PONG"]
    other: list[Any] = []
    thread = threading.Thread(target=lambda: other.append(commands_run(blocking, [("PING",)])))
    thread.start()
    thread.join()
    assert other == [[b"PONG"]]


def test_a_call_interrupted_mid_reply_leaves_no_reply_for_the_next(own_redis, monkeypatch):
    from memory.cache import wire

    plain = redis.Redis.from_url(own_redis.url)
    assert wire.commands_run(plain, [("SET", "k", "1")]) == [b"OK"]

    def interrupted(connection: Any) -> Any:
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(wire, "_reply", interrupted)
        with pytest.raises(KeyboardInterrupt):
            wire.commands_run(plain, [("SET", "k", "2")])  # sent; its reply left unread
    assert not plain.connection_pool._in_use_connections  # not kept: out of step
    time.sleep(0.05)  # the reply arrives; the pool's check finds it and connects again
    assert wire.commands_run(plain, [("GET", "k")]) == [b"2"]
    assert wire.commands_run(plain, [("PING",)]) == [b"PONG"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_child_uses_a_connection_of_its_own(own_redis):
    from memory.cache.wire import commands_run

    plain = redis.Redis.from_url(own_redis.url)
    assert commands_run(plain, [("SET", "k", "parent")]) == [b"OK"]
    pid = os.fork()
    if pid == 0:  # the child
        ok = commands_run(plain, [("GET", "k")]) == [b"parent"]
        ok = ok and commands_run(plain, [("SET", "k", "child")]) == [b"OK"]
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert commands_run(plain, [("GET", "k")]) == [b"child"]
    assert commands_run(plain, [("PING",)]) == [b"PONG"]


def test_as_many_threads_call_at_once_as_the_pools_limit_while_others_keep_connections(own_redis):
    from memory.cache.wire import commands_run

    plain = redis.Redis.from_url(own_redis.url, max_connections=4)
    assert commands_run(plain, [("PING",)]) == [b"PONG"]  # this thread keeps one
    gate = threading.Barrier(4)
    answers: list[Any] = []

    def blocked(connection: Any) -> Any:
        # NOTE: each call holds its connection until all four are in a call at once.
        gate.wait(timeout=5)
        return connection.read_response()

    def work() -> None:
        try:
            answers.append(commands_run(plain, [("PING",)]))
        except Exception as e:
            answers.append(e)

    from memory.cache import wire

    real = wire._reply
    wire._reply = blocked  # type: ignore[assignment]
    try:
        threads = [threading.Thread(target=work) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        wire._reply = real  # type: ignore[assignment]
    assert answers == [[b"PONG"]] * 4
    assert commands_run(plain, [("PING",)]) == [b"PONG"]
