"""Tests of memory.aio: the async twins of every service and selector, run from real asyncio code
on the real servers, answer and fail as their sync functions do."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

import pytest
import redis
from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.db import connection

from memory import ops, selectors, services
from memory.exceptions import FactNotFound, FactVersionConflict, MemoryUnavailable
from memory.models import Turn
from tests.loop import run

# NOTE: the twins' sync code runs in another thread, with its own connection: it sees only
# committed rows, and commits its own.
real_db = pytest.mark.django_db(transaction=True)


def _sync_functions(module: Any) -> list[str]:
    twins = {name for name in module.__all__ if name.startswith("a") and name[1:] in module.__all__}
    return [
        name
        for name in module.__all__
        if name not in twins and inspect.isfunction(getattr(module, name))
    ]


@pytest.mark.parametrize(
    ("module", "name"),
    [(module, name) for module in (services, selectors, ops) for name in _sync_functions(module)],
)
def test_every_public_function_has_an_async_twin_beside_it(module, name):
    sync, twin = getattr(module, name), getattr(module, f"a{name}")
    assert f"a{name}" in module.__all__
    assert inspect.iscoroutinefunction(twin) or inspect.isasyncgenfunction(twin)
    assert twin.__name__ == f"a{name}"
    assert inspect.signature(twin).parameters == inspect.signature(sync).parameters
    assert sync.__doc__ in twin.__doc__
    assert f"Async twin of ``{name}``" in twin.__doc__


def test_the_twins_are_the_issue_names():
    for name in ("aturn_append", "afact_put", "afacts_merge", "afact_delete", "amemory_forget"):
        assert name in services.__all__
    for name in ("acontext_get", "acontext_messages", "aturn_list", "afact_list", "aturn_search"):
        assert name in selectors.__all__


def _without_source(payload: dict[str, Any]) -> dict[str, Any]:
    return {**payload, "source": None}


@real_db
def test_async_code_reads_and_writes_as_the_sync_api_does():
    async def main() -> dict[str, Any]:
        first = await services.aturn_append(
            owner_id="wang", session_id="tab-1", role="user", content="My name is Wang Jianguo"
        )
        second = await services.aturn_append(
            owner_id="wang",
            session_id="tab-2",
            role="assistant",
            content="你好，王建国！",
            idempotency_key="reply-1",
        )
        again = await services.aturn_append(
            owner_id="wang",
            session_id="tab-2",
            role="assistant",
            content="你好，王建国！",
            idempotency_key="reply-1",
        )
        fact, created = await services.afact_put(owner_id="wang", key="location", value="上海")
        merged = await services.afacts_merge(
            owner_id="wang", facts={"likes": ["篮球"], "tz": "Asia/Shanghai"}
        )
        return {
            "seqs": [first.seq, second.seq, again.seq],
            "fact": (fact.key, fact.value, fact.version, created),
            "merged": [f.key for f in merged],
            "cold": await selectors.acontext_get(owner_id="wang"),
            "warm": await selectors.acontext_get(owner_id="wang", turns=5),
            "messages": await selectors.acontext_messages(owner_id="wang", max_tokens=100),
            "turn_list": await selectors.aturn_list(owner_id="wang", limit=1),
            "fact_list": await selectors.afact_list(owner_id="wang"),
            "fact_get": await selectors.afact_get(owner_id="wang", key="location"),
            "fact_history": await selectors.afact_history(owner_id="wang", key="location"),
            "session_list": await selectors.asession_list(owner_id="wang"),
            "turn_search": await selectors.aturn_search(owner_id="wang", q="王建国"),
            "search": await selectors.aturn_search(owner_id="wang", q="jianguo"),
            "health": await selectors.ahealth_get(),
            "exists": await selectors.aowner_exists(owner_id="wang"),
            "summary": await ops.aowner_summary_get(owner_id="wang"),
            "recent": await ops.aowner_recent_list(limit=5),
            "ids": [owner async for owner in ops.aowner_id_iter(chunk_size=1)],
            "stats": await ops.astats_get(),
            "queryset": [turn.seq async for turn in await ops.aturn_search_queryset(q="Jianguo")],
        }

    got = run(main)
    assert got["seqs"] == [1, 2, 2]
    assert got["fact"] == ("location", "上海", 1, True)
    assert got["merged"] == ["likes", "location", "name", "tz"]
    assert (got["cold"]["source"], got["warm"]["source"]) == ("database", "cache")
    assert got["cold"] == _without_source(selectors.context_get(owner_id="wang")) | {
        "source": "database"
    }
    assert _without_source(got["warm"]) == _without_source(
        selectors.context_get(owner_id="wang", turns=5)
    )
    assert got["messages"] == selectors.context_messages(owner_id="wang", max_tokens=100)
    assert got["messages"]["messages"][-1] == {"role": "assistant", "content": "你好，王建国！"}
    assert got["turn_list"] == selectors.turn_list(owner_id="wang", limit=1)
    assert got["fact_list"] == selectors.fact_list(owner_id="wang")
    assert got["fact_get"] == selectors.fact_get(owner_id="wang", key="location")
    assert got["fact_history"] == selectors.fact_history(owner_id="wang", key="location")
    assert got["session_list"] == selectors.session_list(owner_id="wang")
    assert got["turn_search"] == selectors.turn_search(owner_id="wang", q="王建国")
    assert [t["seq"] for t in got["turn_search"]] == [2]
    assert got["search"] == selectors.turn_search(owner_id="wang", q="jianguo")
    states = {k: v for k, v in selectors.health_get().items() if k != "latency_ms"}
    assert {k: v for k, v in got["health"].items() if k != "latency_ms"} == states
    assert states == {"database": "ok", "cache": "ok"}
    assert got["exists"] is True
    assert got["summary"] == ops.owner_summary_get(owner_id="wang")
    assert got["recent"] == ops.owner_recent_list(limit=5) == ["wang"]
    assert got["ids"] == list(ops.owner_id_iter()) == ["wang"]
    assert got["stats"]["turns"] == ops.stats_get()["turns"] == 2
    assert got["queryset"] == [1]


@real_db
def test_async_maintenance_services_act_as_the_sync_ones():
    async def main() -> dict[str, Any]:
        for i in range(5):
            await services.aturn_append(
                owner_id="wang", session_id="s", role="assistant", content=f"turn {i + 1}"
            )
        await services.aturn_append(
            owner_id="anon-7f3a", session_id="a", role="assistant", content="anonymous"
        )
        await services.afact_put(owner_id="anon-7f3a", key="city", value="上海")
        await selectors.acontext_get(owner_id="wang")
        got: dict[str, Any] = {
            "deleted": await services.aturn_delete(owner_id="wang", seq=1),
            "missing": await services.aturn_delete(owner_id="wang", seq=1),
            "dropped": await ops.acache_drop(owner_id="wang"),
        }
        got["after_drop"] = (await selectors.acontext_get(owner_id="wang"))["source"]
        got["pruned"] = await ops.aturns_prune(owner_id="wang", keep_last=2)
        got["linked"] = await services.amemory_link(owner_id="wang", from_owner_id="anon-7f3a")
        got["relinked"] = await services.amemory_link(owner_id="wang", from_owner_id="anon-7f3a")
        got["context"] = await selectors.acontext_get(owner_id="wang")
        await services.afact_delete(owner_id="wang", key="city")
        got["facts"] = await selectors.afact_list(owner_id="wang")
        got["forgot"] = await services.amemory_forget(owner_id="wang")
        got["forgot_again"] = await services.amemory_forget(owner_id="wang")
        got["empty"] = await selectors.acontext_get(owner_id="wang")
        return got

    got = run(main)
    assert (got["deleted"], got["missing"], got["dropped"]) == (True, False, True)
    assert got["after_drop"] == "database"
    assert got["pruned"] == 2
    assert got["linked"] == services.LinkResult(turns_moved=1, facts_moved=1)
    assert got["relinked"] == services.LinkResult(0, 0)
    assert [t["content"] for t in got["context"]["turns"]] == ["turn 4", "turn 5", "anonymous"]
    assert got["context"]["facts"] == {"city": "上海"}
    assert got["facts"] == []
    assert (got["forgot"], got["forgot_again"]) == (True, False)
    assert (got["empty"]["facts"], got["empty"]["turns"]) == ({}, [])
    assert selectors.context_get(owner_id="wang")["turns"] == []


def _error(call: Callable[[], Any]) -> BaseException:
    try:
        call()
    except Exception as e:
        return e
    raise AssertionError("no error")


@real_db
@pytest.mark.parametrize(
    ("name", "module", "kwargs", "error"),
    [
        (
            "turn_append",
            services,
            {"owner_id": "wang", "session_id": "s", "role": "robot", "content": "hi"},
            ValidationError,
        ),
        ("fact_put", services, {"owner_id": "bad id", "key": "k", "value": 1}, ValidationError),
        (
            "fact_put",
            services,
            {"owner_id": "wang", "key": "name", "value": "Li", "expected_version": 5},
            FactVersionConflict,
        ),
        ("fact_delete", services, {"owner_id": "wang", "key": "nothing"}, FactNotFound),
        ("turns_prune", ops, {"owner_id": "wang"}, ValidationError),
        ("memory_link", services, {"owner_id": "wang", "from_owner_id": "wang"}, ValidationError),
        ("context_get", selectors, {"owner_id": "wang", "turns": -1}, ValidationError),
        ("context_messages", selectors, {"owner_id": "wang", "max_tokens": 0}, ValidationError),
        ("context_messages", selectors, {"owner_id": "wang", "max_tokens": 1}, ValidationError),
        ("fact_history", selectors, {"owner_id": "wang", "key": "Bad Key"}, ValidationError),
        ("fact_get", selectors, {"owner_id": "wang", "key": "Bad Key"}, ValidationError),
        ("fact_get", selectors, {"owner_id": "wang", "key": "nothing"}, FactNotFound),
        ("turn_search", selectors, {"owner_id": "wang", "q": ""}, ValidationError),
    ],
)
def test_async_twins_raise_what_the_sync_functions_raise(name, module, kwargs, error):
    services.fact_put(owner_id="wang", key="name", value="Wang Jianguo")
    sync_error = _error(lambda: getattr(module, name)(**kwargs))
    twin = getattr(module, f"a{name}")

    async def main() -> BaseException:
        try:
            await twin(**kwargs)
        except Exception as e:
            return e
        raise AssertionError("no error")

    async_error = run(main)
    assert type(async_error) is type(sync_error) is error
    assert str(async_error) == str(sync_error)
    if isinstance(sync_error, ValidationError):
        assert async_error.message_dict == sync_error.message_dict
    # NOTE: nothing was written by the failed calls.
    assert selectors.fact_list(owner_id="wang")[0]["version"] == 1


@real_db
def test_the_async_search_queryset_can_be_iterated_as_any_list_in_async_code():
    """Its twin handed out a lazy queryset: a plain ``for`` over it in async code raised
    ``SynchronousOnlyOperation`` (issue 21). Its rows are read in the twin's hop."""
    for content in ("I like basketball", "basketball again", "chess"):
        services.turn_append(owner_id="wang", session_id="s", role="user", content=content)
    services.turn_append(owner_id="li", session_id="s", role="user", content="basketball")

    async def main() -> dict[str, Any]:
        turns = await ops.aturn_search_queryset(q="basketball")
        only_wang = await ops.aturn_search_queryset(
            q="basketball", queryset=Turn.objects.filter(owner__external_id="wang")
        )
        return {
            "for": [(turn.owner_id, turn.seq, turn.search_rank) for turn in turns],
            "async for": [turn.seq async for turn in turns],
            "len": len(turns),
            "first": turns[0].seq,
            "only wang": [turn.content for turn in only_wang],
        }

    got = run(main)
    expected = list(ops.turn_search_queryset(q="basketball"))
    assert got["for"] == [(t.owner_id, t.seq, t.search_rank) for t in expected]
    assert got["async for"] == [t.seq for t in expected]
    assert got["len"] == len(expected) == 3
    assert got["first"] == expected[0].seq
    assert sorted(got["only wang"]) == ["I like basketball", "basketball again"]


@real_db
def test_concurrent_async_appends_get_every_seq_once():
    async def main() -> list[int]:
        turns = await asyncio.gather(
            *(
                services.aturn_append(
                    owner_id="wang", session_id=f"tab-{i % 3}", role="user", content=f"say {i}"
                )
                for i in range(30)
            )
        )
        return [turn.seq for turn in turns]

    assert sorted(run(main)) == list(range(1, 31))
    assert [t["seq"] for t in selectors.context_get(owner_id="wang", turns=30)["turns"]] == list(
        range(1, 31)
    )


@real_db
def test_an_async_write_updates_the_cached_copy_after_commit():
    async def main() -> tuple[str, dict[str, Any]]:
        await services.aturn_append(owner_id="wang", session_id="s", role="user", content="one")
        cold = await selectors.acontext_get(owner_id="wang")
        await services.aturn_append(owner_id="wang", session_id="s", role="user", content="two")
        await services.afact_put(owner_id="wang", key="mood", value="好")
        return cold["source"], await selectors.acontext_get(owner_id="wang")

    cold_source, warm = run(main)
    assert (cold_source, warm["source"]) == ("database", "cache")
    assert [t["content"] for t in warm["turns"]] == ["one", "two"]
    assert warm["facts"] == {"mood": "好"}


@real_db
def test_async_reads_after_a_flushall_rehydrate_the_same_context(own_redis):
    async def main() -> list[dict[str, Any]]:
        await services.aturn_append(
            owner_id="wang", session_id="laptop", role="user", content="我叫王建国"
        )
        reads = [await selectors.acontext_get(owner_id="wang")]
        reads.append(await selectors.acontext_get(owner_id="wang"))
        await sync_to_async(redis.Redis.from_url(own_redis.url).flushall)()
        reads.append(await selectors.acontext_messages(owner_id="wang", max_tokens=50))
        reads.append(await selectors.acontext_get(owner_id="wang"))
        return reads

    cold, warm, flushed, again = run(main)
    assert [r["source"] for r in (cold, warm, flushed, again)] == [
        "database",
        "cache",
        "database",
        "cache",
    ]
    assert _without_source(cold) == _without_source(warm) == _without_source(again)
    assert flushed["facts"] == {"name": "王建国"}
    assert flushed["messages"][1:] == [{"role": "user", "content": "我叫王建国"}]


@real_db
def test_async_twins_with_redis_down_answer_from_the_database(dead_cache):
    async def main() -> tuple[int, dict[str, Any], dict[str, str]]:
        turn = await services.aturn_append(
            owner_id="wang", session_id="s", role="user", content="hi"
        )
        return (
            turn.seq,
            await selectors.acontext_get(owner_id="wang"),
            await selectors.ahealth_get(),
        )

    seq, context, health = run(main)
    assert seq == 1
    assert context["source"] == "database"
    assert [t["content"] for t in context["turns"]] == ["hi"]
    assert (health["database"], health["cache"]) == ("ok", "down")


@real_db
def test_async_twins_with_the_database_unreachable_raise_memory_unavailable():
    # NOTE: the thread that serves the twins' sync code gets a connection to a port where no
    # database listens (as test_cache_down does for Redis); other threads keep theirs.
    def unreachable() -> dict[str, Any]:
        saved = connection.settings_dict
        connection.close()
        connection.settings_dict = {**saved, "HOST": "127.0.0.1", "PORT": "1"}
        return saved

    def reachable(saved: dict[str, Any]) -> None:
        connection.close()
        connection.settings_dict = saved

    async def main() -> tuple[list[str], dict[str, str], int]:
        saved = await sync_to_async(unreachable, thread_sensitive=True)()
        failed = []
        try:
            for twin, kwargs in [
                (services.aturn_append, {"session_id": "s", "role": "user", "content": "lost"}),
                (services.afact_put, {"key": "k", "value": 1}),
                (selectors.acontext_get, {}),
                (selectors.acontext_messages, {"max_tokens": 100}),
                (selectors.aturn_list, {}),
                (selectors.aowner_exists, {}),
                (ops.aowner_dirty_count, {"limit": 10}),
            ]:
                try:
                    if "limit" in kwargs:
                        await twin(**kwargs)
                    else:
                        await twin(owner_id="wang", **kwargs)
                except MemoryUnavailable:
                    failed.append(twin.__name__)
            health = await selectors.ahealth_get()
        finally:
            await sync_to_async(reachable, thread_sensitive=True)(saved)
        turn = await services.aturn_append(
            owner_id="wang", session_id="s", role="user", content="stored"
        )
        return failed, health, turn.seq

    failed, health, seq = run(main)
    assert failed == [
        "aturn_append",
        "afact_put",
        "acontext_get",
        "acontext_messages",
        "aturn_list",
        "aowner_exists",
        "aowner_dirty_count",
    ]
    assert health["database"] == "down"
    assert seq == 1
    assert [t["content"] for t in selectors.context_get(owner_id="wang")["turns"]] == ["stored"]
