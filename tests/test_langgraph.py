"""Tests of memory.integrations.langgraph: MemoryStore under a LangGraph graph whose nodes read
and write it, across threads, processes and a flushed Redis; and its ops, sync and async."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, TypedDict

import pytest
import redis
from asgiref.sync import async_to_sync
from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import F
from django.utils import timezone
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
    TTLConfig,
)
from langgraph.store.base.batch import AsyncBatchedBaseStore

from memory import ops, selectors, services
from memory.integrations.langgraph import AsyncMemoryStore, MemoryStore, fact_key, item_address
from memory.models import Fact
from tests import instance
from tests.loop import run


@dataclass
class Context:
    user_id: str


class State(TypedDict, total=False):
    text: str
    known: list[str]
    reply: str


def recall(state: State, runtime: Runtime[Context]) -> State:
    assert runtime.store is not None
    found = runtime.store.search((runtime.context.user_id, "memories"), query=state["text"])
    return {"known": [item.value["text"] for item in found]}


def remember(state: State, runtime: Runtime[Context]) -> State:
    assert runtime.store is not None
    if state["text"].startswith("Remember: "):
        text = state["text"].removeprefix("Remember: ")
        runtime.store.put((runtime.context.user_id, "memories"), str(uuid.uuid4()), {"text": text})
    return {}


def answer(state: State) -> State:
    known = state.get("known") or []
    return {"reply": "You told me: " + "; ".join(known) if known else "Noted."}


async def arecall(state: State, runtime: Runtime[Context]) -> State:
    assert runtime.store is not None
    found = await runtime.store.asearch((runtime.context.user_id, "memories"), query=state["text"])
    return {"known": [item.value["text"] for item in found]}


async def aremember(state: State, runtime: Runtime[Context]) -> State:
    assert runtime.store is not None
    if state["text"].startswith("Remember: "):
        text = state["text"].removeprefix("Remember: ")
        await runtime.store.aput(
            (runtime.context.user_id, "memories"), str(uuid.uuid4()), {"text": text}
        )
    return {}


def graph(*, asynchronous: bool = False) -> Any:
    """recall -> remember -> answer, over a MemoryStore; each thread's state is its own."""
    builder = StateGraph(State, context_schema=Context)
    builder.add_node("recall", arecall if asynchronous else recall)
    builder.add_node("remember", aremember if asynchronous else remember)
    builder.add_node("answer", answer)
    builder.add_edge(START, "recall")
    builder.add_edge("recall", "remember")
    builder.add_edge("remember", "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=InMemorySaver(), store=MemoryStore())


def graph_turn(*, owner_id: str, thread_id: str, text: str) -> dict[str, Any]:
    """One run of the graph (``invoke``) in a thread of the owner; its final state."""
    return dict(
        graph().invoke(
            {"text": text},
            config={"configurable": {"thread_id": thread_id}},
            context=Context(user_id=owner_id),
        )
    )


async def agraph_turn(*, owner_id: str, thread_id: str, text: str) -> dict[str, Any]:
    """``graph_turn`` with async nodes and ``ainvoke``: the store's ``abatch``."""
    return dict(
        await graph(asynchronous=True).ainvoke(
            {"text": text},
            config={"configurable": {"thread_id": thread_id}},
            context=Context(user_id=owner_id),
        )
    )


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_second_thread_in_another_process_after_a_flushall_gets_the_first_ones_memory(
    own_redis,
):
    first = run(
        lambda: agraph_turn(owner_id="wang", thread_id="laptop", text="Remember: I like basketball")
    )
    assert first == {"text": "Remember: I like basketball", "known": [], "reply": "Noted."}
    cache = redis.Redis.from_url(own_redis.url)
    assert cache.dbsize() > 0
    cache.flushall()
    assert cache.dbsize() == 0

    second = instance.run(
        "langgraph", "wang", "phone", "What do I like?", env={"REDIS_URL": own_redis.url}
    )

    assert second == {
        "text": "What do I like?",
        "known": ["I like basketball"],
        "reply": "You told me: I like basketball",
    }
    (fact,) = selectors.fact_list(owner_id="wang")
    assert fact["key"].startswith("memories.") and fact["value"] == {"text": "I like basketball"}
    # NOTE: the other process rehydrated the flushed copy.
    assert cache.dbsize() > 0


@pytest.mark.django_db(transaction=True)
def test_the_sync_graph_shares_the_owners_memory_between_threads_only():
    graph_turn(owner_id="wang", thread_id="a", text="Remember: I live in Shanghai")
    graph_turn(owner_id="li", thread_id="c", text="Remember: I live in Beijing")
    state = graph_turn(owner_id="wang", thread_id="b", text="Where do I live?")
    assert state["known"] == ["I live in Shanghai"]
    assert selectors.fact_list(owner_id="li")[0]["value"] == {"text": "I live in Beijing"}


def test_namespaces_and_keys_fold_into_fact_keys_and_back():
    assert fact_key(("wang",), "name") == ("wang", "name")
    assert fact_key(("wang@example:1", "prefs", "food"), "likes") == (
        "wang@example:1",
        "prefs.food.likes",
    )
    assert item_address("wang", "prefs.food.likes") == (("wang", "prefs", "food"), "likes")
    assert item_address("wang", "name") == (("wang",), "name")
    for unfoldable in ("a..b", ".a", "a.", "A"):
        assert item_address("wang", unfoldable) is None


@pytest.mark.parametrize(
    ("namespace", "key", "error"),
    [
        ((), "k", InvalidNamespaceError),
        (("bad id",), "k", InvalidNamespaceError),
        (("wang", "Prefs"), "k", InvalidNamespaceError),
        (("wang", "préfs"), "k", InvalidNamespaceError),
        (("wang",), "Key", ValueError),
        (("wang",), "a.b", ValueError),
        (("wang",), "", ValueError),
        (("wang", "x" * 40), "y" * 24, ValueError),
        (("wang.jianguo",), "k", InvalidNamespaceError),
    ],
)
@pytest.mark.django_db
def test_what_does_not_fold_into_a_fact_key_is_refused_and_nothing_stored(namespace, key, error):
    store = MemoryStore()
    with pytest.raises(error):
        store.put(namespace, key, {"v": 1})
    with pytest.raises(error):
        store.batch([PutOp(("wang",), "fine", {"v": 1}), PutOp(namespace, key, {"v": 1})])
    assert selectors.fact_list(owner_id="wang") == []


@pytest.mark.django_db
def test_put_get_delete(write):
    store = MemoryStore()
    assert store.get(("wang", "prefs"), "food") is None
    with write():
        store.put(("wang", "prefs"), "food", {"likes": ["饺子"], "spicy": True})
    item = store.get(("wang", "prefs"), "food")
    assert item is not None
    assert (item.namespace, item.key, item.value) == (
        ("wang", "prefs"),
        "food",
        {"likes": ["饺子"], "spicy": True},
    )
    (fact,) = selectors.fact_list(owner_id="wang")
    assert (fact["key"], fact["value"], fact["version"]) == ("prefs.food", item.value, 1)
    assert item.updated_at.isoformat().replace("+00:00", "Z") == fact["updated_at"]
    assert item.created_at == item.updated_at
    with write():
        store.put(("wang", "prefs"), "food", {"likes": ["面条"]})
        store.delete(("wang", "prefs"), "food")
        # NOTE: a delete of nothing is nothing, as in LangGraph's stores.
        store.delete(("wang", "prefs"), "food")
        store.delete(("nobody",), "food")
    assert store.get(("wang", "prefs"), "food") is None
    history = selectors.fact_history(owner_id="wang", key="prefs.food").results
    assert [(v["version"], v["deleted"]) for v in history] == [(3, True), (2, False), (1, False)]


@pytest.mark.django_db
def test_facts_of_other_doors_show_at_the_namespace_their_key_unfolds_to(write):
    with write():
        services.turn_append(owner_id="wang", session_id="s", role="user", content="我叫王建国")
        services.fact_put(owner_id="wang", key="prefs.color", value="green")
        services.fact_put(owner_id="wang", key="a..b", value={"x": 1})
    store = MemoryStore()
    name = store.get(("wang",), "name")
    assert name is not None and name.value == {"value": "王建国"}
    assert [(i.namespace, i.key) for i in store.search(("wang",))] == [
        (("wang", "prefs"), "color"),
        (("wang",), "name"),
    ]
    assert store.list_namespaces(prefix=("wang",)) == [("wang",), ("wang", "prefs")]


@pytest.mark.django_db
def test_a_batch_reads_what_was_there_before_its_writes_and_the_last_put_wins(write):
    store = MemoryStore()
    with write():
        store.put(("wang",), "city", {"name": "Shanghai"})
        results = store.batch(
            [
                PutOp(("wang",), "city", {"name": "Beijing"}),
                GetOp(("wang",), "city"),
                PutOp(("wang",), "city", {"name": "Hangzhou"}),
                PutOp(("wang",), "gone", None),
                SearchOp(("wang",)),
                ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("wang",)),)),
            ]
        )
    assert results[0] is None and results[2] is None and results[3] is None
    assert results[1].value == {"name": "Shanghai"}
    assert [item.value for item in results[4]] == [{"name": "Shanghai"}]
    assert results[5] == [("wang",)]
    assert store.get(("wang",), "city").value == {"name": "Hangzhou"}
    history = selectors.fact_history(owner_id="wang", key="city").results
    assert [v["value"] for v in history] == [{"name": "Hangzhou"}, {"name": "Shanghai"}]


@pytest.mark.django_db
def test_max_facts_is_a_clear_error_and_nothing_of_the_batch_is_stored(write, memory_settings):
    store = MemoryStore()
    with memory_settings(MAX_FACTS=3):
        with write():
            store.put(("wang",), "one", {"n": 1})
            store.put(("wang",), "two", {"n": 2})
        with pytest.raises(ValueError) as e, write():
            store.batch(
                [
                    PutOp(("li",), "one", {"n": 1}),
                    PutOp(("wang",), "one", None),
                    PutOp(("wang",), "three", {"n": 3}),
                    PutOp(("wang",), "four", {"n": 4}),
                    PutOp(("wang",), "five", {"n": 5}),
                ]
            )
        message = str(e.value)
        assert not isinstance(e.value, ValidationError)
        assert "at most 3 facts (MEMORY['MAX_FACTS'])" in message
        assert "nothing was stored" in message
        assert [f["key"] for f in selectors.fact_list(owner_id="wang")] == ["one", "two"]
        assert selectors.fact_list(owner_id="li") == []
        # NOTE: a delete in the same batch makes room.
        with write():
            store.batch(
                [
                    PutOp(("wang",), "one", None),
                    PutOp(("wang",), "three", {"n": 3}),
                    PutOp(("wang",), "four", {"n": 4}),
                ]
            )
        assert [f["key"] for f in selectors.fact_list(owner_id="wang")] == ["four", "three", "two"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "value",
    [["not", "a", "dict"], {"nul": "\x00"}, {"big": "x" * 20_000}, {"set": {1, 2}}],
)
def test_a_bad_value_is_refused_and_nothing_of_the_batch_is_stored(value, write):
    with pytest.raises(ValueError) as e, write():
        MemoryStore().batch([PutOp(("wang",), "fine", {"v": 1}), PutOp(("wang",), "bad", value)])
    assert not isinstance(e.value, ValidationError)
    assert selectors.fact_list(owner_id="wang") == []


@pytest.mark.django_db
def test_search_filters_ranks_and_pages_one_owners_facts(write):
    store = MemoryStore()
    with write():
        store.put(("wang", "memories"), "m1", {"text": "I like basketball", "score": 3})
        store.put(("wang", "memories"), "m2", {"text": "I like noodles and dumplings", "score": 5})
        store.put(("wang", "memories"), "m3", {"text": "我喜欢打篮球", "score": 4.0})
        store.put(("wang", "prefs"), "food", {"text": "noodles", "score": 5})
        store.put(("li", "memories"), "m1", {"text": "I like basketball too", "score": 3})

    def keys(items: list[Any]) -> list[str]:
        return [item.key for item in items]

    # NOTE: newest first without a query.
    assert keys(store.search(("wang", "memories"))) == ["m3", "m2", "m1"]
    assert keys(store.search(("wang",), limit=2, offset=1)) == ["m3", "m2"]
    assert keys(store.search(("wang",), filter={"score": 5})) == ["food", "m2"]
    assert keys(store.search(("wang",), filter={"score": 4})) == ["m3"]
    assert keys(store.search(("wang",), filter={"score": {"$gte": 4, "$lt": 5}})) == ["m3"]
    assert keys(store.search(("wang",), filter={"score": {"$ne": 5}})) == ["m3", "m1"]
    assert keys(store.search(("wang",), filter={"text": {"$gt": 1}})) == []
    found = store.search(("wang", "memories"), query="I like NOODLES!")
    assert keys(found) == ["m2", "m1"]
    assert [item.score for item in found] == [1.0, pytest.approx(2 / 3)]
    assert keys(store.search(("wang",), query="篮球")) == ["m3"]
    assert keys(store.search(("wang",), query="food")) == ["food"]
    assert store.search(("wang",), query="golf") == []
    assert keys(store.search(("li",))) == ["m1"]
    for prefix in ((), ("*",), ("wang", "Memories")):
        with pytest.raises(ValueError):
            store.search(prefix)
    with pytest.raises(ValueError, match="Unsupported filter operator"):
        store.search(("wang",), filter={"score": {"$regex": "."}})
    with pytest.raises(ValueError):
        store.search(("wang",), limit=0)
    with pytest.raises(ValueError):
        store.search(("wang",), query="x" * 201)


@pytest.mark.django_db
def test_list_namespaces_lists_one_owners(write):
    store = MemoryStore()
    with write():
        for namespace in [("wang",), ("wang", "a"), ("wang", "a", "b"), ("wang", "c", "b")]:
            store.put(namespace, "k", {"v": 1})
        store.put(("li", "a"), "k", {"v": 1})
    assert store.list_namespaces(prefix=("wang",)) == [
        ("wang",),
        ("wang", "a"),
        ("wang", "a", "b"),
        ("wang", "c", "b"),
    ]
    assert store.list_namespaces(prefix=("wang", "a")) == [("wang", "a"), ("wang", "a", "b")]
    assert store.list_namespaces(prefix=("wang", "*", "b")) == [
        ("wang", "a", "b"),
        ("wang", "c", "b"),
    ]
    assert store.list_namespaces(prefix=("wang",), suffix=("b",)) == [
        ("wang", "a", "b"),
        ("wang", "c", "b"),
    ]
    assert store.list_namespaces(prefix=("wang",), max_depth=2) == [
        ("wang",),
        ("wang", "a"),
        ("wang", "c"),
    ]
    assert store.list_namespaces(prefix=("wang",), limit=2, offset=1) == [
        ("wang", "a"),
        ("wang", "a", "b"),
    ]
    for kwargs in ({}, {"suffix": ("b",)}, {"prefix": ("*",)}):
        with pytest.raises(ValueError, match="one owner"):
            store.list_namespaces(**kwargs)


@pytest.mark.django_db
def test_the_async_ops_are_the_sync_ones(write):
    store = MemoryStore()
    # NOTE: each write in a block of its own: its cache update runs at the block's end, as at
    # a commit.
    with write():
        async_to_sync(store.aput)(("wang", "prefs"), "food", {"likes": ["饺子"]})
    item = async_to_sync(store.aget)(("wang", "prefs"), "food")
    assert item.value == {"likes": ["饺子"]} and item.namespace == ("wang", "prefs")
    found = async_to_sync(store.asearch)(("wang",), query="饺子")
    assert [(i.key, i.score) for i in found] == [("food", 1.0)]
    assert async_to_sync(store.alist_namespaces)(prefix=("wang",)) == [("wang", "prefs")]
    with write():
        async_to_sync(store.adelete)(("wang", "prefs"), "food")
    assert async_to_sync(store.aget)(("wang", "prefs"), "food") is None
    with pytest.raises(InvalidNamespaceError):
        async_to_sync(store.aput)(("wang", "Bad"), "k", {"v": 1})


@pytest.mark.django_db(transaction=True)
def test_abatch_in_an_event_loop_of_its_own():
    async def main() -> list[Any]:
        store = MemoryStore()
        await store.abatch([PutOp(("wang",), "k", {"v": 1})])
        return await store.abatch([GetOp(("wang",), "k"), SearchOp(("wang",), query="1")])

    item, found = run(main)
    assert item.value == {"v": 1}
    assert [i.key for i in found] == ["k"]


@pytest.mark.django_db(transaction=True)
def test_a_connection_opened_in_a_worker_thread_is_closed_after_use():
    # NOTE: LangGraph runs parallel nodes in a thread pool: no request ever closes theirs.
    seen: dict[str, Any] = {}

    def work() -> None:
        store = MemoryStore()
        store.put(("wang",), "k", {"v": 1})
        seen["after_put"] = connection.connection is not None
        seen["value"] = store.get(("wang",), "k").value
        seen["after_get"] = connection.connection is not None

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    assert seen == {"after_put": False, "value": {"v": 1}, "after_get": False}


def test_without_langgraph_the_import_error_names_the_extra():
    out = instance.import_error_without("langgraph", "memory.integrations.langgraph")
    assert out.startswith("memory.integrations.langgraph needs langgraph")
    # NOTE: no release on an index yet: the wheel make dist builds, as the README installs it.
    assert 'pip install "$(echo dist/django_memory-*.whl)[langgraph]" after make dist' in out


def letters(texts: list[str]) -> list[list[float]]:
    """A site's own embedder, for the tests: how often each letter a-z occurs in a text."""
    return [[float(text.lower().count(chr(c))) for c in range(97, 123)] for text in texts]


def by_meaning(**config: Any) -> MemoryStore:
    return MemoryStore(index={"dims": 26, "embed": letters, **config})


@pytest.mark.django_db
def test_an_item_put_is_found_by_meaning_by_the_next_search(write):
    store = by_meaning(fields=["text"])
    with write():
        store.put(("wang", "notes"), "a", {"text": "aaaa", "tag": "zzzz"})
        store.put(("wang", "notes"), "b", {"text": "bbbb", "tag": "aaaa"})
        store.put(("wang", "notes"), "c", {"text": "cccc"}, index=False)
    found = store.search(("wang", "notes"), query="aaa")
    assert [i.key for i in found] == ["a", "b", "c"]
    assert found[0].score == pytest.approx(1.0) and found[1].score == pytest.approx(0.0)
    assert found[2].score is None
    # The put's own paths replace the store's fields; the site's distance is kept.
    with write():
        store.put(("wang", "notes"), "b", {"text": "bbbb", "tag": "aaaa"}, index=["tag"])
    assert [i.key for i in store.search(("wang", "notes"), query="aaa")][:2] == ["b", "a"]
    scored = by_meaning(fields=["text"], distance_type="inner_product")
    assert scored.search(("wang", "notes"), query="aaa")[0].score == pytest.approx(12.0)


@pytest.mark.django_db
def test_a_fact_changed_by_another_door_is_not_ranked_by_its_old_vector(write):
    store = by_meaning()
    with write():
        store.put(("wang",), "k", {"text": "aaaa"})
        services.facts_merge(owner_id="wang", facts={"k": {"text": "bbbb"}})
    (item,) = store.search(("wang",), query="aaa")
    assert item.score is None
    with pytest.raises(ValueError, match="distance_type"):
        by_meaning(distance_type="hamming")


@pytest.mark.django_db(transaction=True)
def test_the_async_store_embeds_and_searches_by_meaning():
    async def aletters(texts: list[str]) -> list[list[float]]:
        return letters(texts)

    store = MemoryStore(index={"dims": 26, "embed": aletters, "fields": ["text"]})

    async def main() -> list[str]:
        await store.aput(("wang",), "a", {"text": "aaaa"})
        await store.aput(("wang",), "b", {"text": "bbbb"})
        return [i.key for i in await store.asearch(("wang",), query="bb")]

    assert run(main) == ["b", "a"]


@pytest.mark.django_db
def test_an_empty_query_is_no_query(write):
    store = MemoryStore()
    with write():
        store.put(("wang",), "a", {"text": "one"})
    assert [i.key for i in store.search(("wang",), query="")] == ["a"]
    assert store.search(("wang",), query="")[0].score is None


@pytest.mark.django_db
def test_a_ttl_expires_the_fact_and_a_read_refreshes_it(write):
    store = MemoryStore(ttl={"default_ttl": 10, "refresh_on_read": True})
    assert store.supports_ttl
    with write():
        store.put(("wang",), "kept", {"v": 1}, ttl=None)
        store.put(("wang",), "short", {"v": 2}, ttl=1)
        store.put(("wang",), "default", {"v": 3})
    facts = {f["key"]: f for f in selectors.fact_list(owner_id="wang")}
    assert facts["kept"]["expires_at"] is None
    for key, minutes in (("short", 1), ("default", 10)):
        written = dt.datetime.fromisoformat(facts[key]["updated_at"])
        expires = dt.datetime.fromisoformat(facts[key]["expires_at"])
        assert abs(expires - written - dt.timedelta(minutes=minutes)) < dt.timedelta(seconds=1)
    with pytest.raises(ValueError, match="TTL"):
        store.put(("wang",), "bad", {"v": 1}, ttl=-1)

    # A read a tenth of the TTL after the write starts it again: a new version.
    Fact.objects.filter(owner__external_id="wang", key="short").update(
        updated_at=F("updated_at") - dt.timedelta(seconds=30),
        expires_at=F("expires_at") - dt.timedelta(seconds=30),
    )
    with write():
        ops.cache_drop(owner_id="wang")
        assert store.get(("wang",), "short") is not None
    fact = Fact.objects.get(owner__external_id="wang", key="short")
    assert fact.version == 2
    assert abs(fact.expires_at - fact.updated_at - dt.timedelta(minutes=1)) < dt.timedelta(
        seconds=1
    )
    with write():
        store.get(("wang",), "short", refresh_ttl=True)
    assert Fact.objects.get(owner__external_id="wang", key="short").version == 2

    # Expired: absent from every read before any sweep, then swept.
    Fact.objects.filter(owner__external_id="wang", key="short").update(
        expires_at=timezone.now() - dt.timedelta(seconds=1)
    )
    with write():
        ops.cache_drop(owner_id="wang")
    assert store.get(("wang",), "short", refresh_ttl=False) is None
    assert [i.key for i in store.search(("wang",))] == ["default", "kept"]
    assert store.list_namespaces(prefix=("wang",)) == [("wang",)]
    with write():
        assert store.sweep_ttl() == 1
    assert not Fact.objects.filter(key="short").exists()


@pytest.mark.django_db
@pytest.mark.parametrize("omit_expired", [None, False, True])
def test_an_expired_unswept_fact_is_never_read_nor_refreshed_whatever_omit_expired_says(
    omit_expired, write
):
    # NOTE: PostgresStore returns, and a read refreshes, an expired row not yet swept unless
    # omit_expired is set; here expiry is forgetting, at its instant, on every door.
    config: TTLConfig = {"refresh_on_read": True}
    if omit_expired is not None:
        config["omit_expired"] = omit_expired
    store = MemoryStore(ttl=config)
    with write():
        store.put(("wang", "notes"), "gone", {"v": 1}, ttl=1)
        store.put(("wang", "kept"), "live", {"v": 2}, ttl=1)
    Fact.objects.filter(owner__external_id="wang", key="notes.gone").update(
        expires_at=timezone.now() - dt.timedelta(seconds=1)
    )
    with write():
        ops.cache_drop(owner_id="wang")
        assert store.get(("wang", "notes"), "gone", refresh_ttl=True) is None
        assert [i.key for i in store.search(("wang",), refresh_ttl=True)] == ["live"]
        assert store.list_namespaces(prefix=("wang",)) == [("wang", "kept")]
    gone = Fact.objects.get(owner__external_id="wang", key="notes.gone")
    assert gone.version == 1 and gone.expires_at < timezone.now()
    assert [f["key"] for f in selectors.fact_list(owner_id="wang")] == ["kept.live"]


@pytest.mark.django_db(transaction=True)
def test_the_ttl_sweeper_deletes_expired_facts_until_stopped():
    store = MemoryStore(ttl={"sweep_interval_minutes": 0.001})
    store.put(("wang",), "gone", {"v": 1}, ttl=0.0005)
    store.put(("wang",), "kept", {"v": 1})
    future = store.start_ttl_sweeper()
    assert store.start_ttl_sweeper() is future
    deadline = time.monotonic() + 10
    while Fact.objects.filter(key="gone").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert store.stop_ttl_sweeper(timeout=5) and future.done()
    assert list(Fact.objects.values_list("key", flat=True)) == ["kept"]


@pytest.mark.django_db(transaction=True)
def test_in_an_event_loop_the_ttl_methods_are_awaited_as_an_async_stores_are():
    store = MemoryStore(ttl={"sweep_interval_minutes": 0.001})
    store.put(("wang",), "gone", {"v": 1}, ttl=0.0005)
    store.put(("wang",), "kept", {"v": 1})
    time.sleep(0.1)

    async def main() -> tuple[int, Any, bool, bool]:
        swept = await store.sweep_ttl()
        future = await store.start_ttl_sweeper()
        stopped = await store.stop_ttl_sweeper(5)
        return swept, future, stopped, await store.stop_ttl_sweeper()

    swept, future, stopped, again = run(main)
    assert (swept, stopped, again) == (1, True, True)
    assert future.done()
    assert list(Fact.objects.values_list("key", flat=True)) == ["kept"]


def test_a_sweeper_told_to_stop_in_an_event_loop_stops_awaited_or_not():
    store = MemoryStore(ttl={"sweep_interval_minutes": 60})

    async def main() -> Any:
        future = await store.start_ttl_sweeper()
        store.stop_ttl_sweeper().close()  # the awaitable dropped: the sweeper still stops
        return future

    assert run(main).result(timeout=5) is None


def test_the_index_embeddings_are_the_stores_as_on_langgraphs_stores():
    assert by_meaning().embeddings is not None
    assert by_meaning().embeddings.embed_query("ab")[:3] == letters(["ab"])[0][:3]
    assert MemoryStore().embeddings is None


@pytest.mark.django_db
def test_the_langgraph_root_label_is_refused_by_put_and_taken_by_batch(write):
    store = MemoryStore()
    with pytest.raises(InvalidNamespaceError):
        store.put(("langgraph", "x"), "k", {"v": 1})
    with write():
        store.batch([PutOp(("langgraph", "x"), "k", {"v": 1})])
    assert store.get(("langgraph", "x"), "k").value == {"v": 1}


@pytest.mark.django_db
def test_errors_are_langgraphs_types_not_djangos(write, memory_settings):
    store = MemoryStore()
    for call in (
        lambda: store.search(("wang",), query="x" * 201),
        lambda: store.put(("wang",), "k", {"big": "x" * 20_000}),
        lambda: store.search(("wang",), limit=0),
    ):
        with pytest.raises(ValueError) as e:
            call()
        assert not isinstance(e.value, ValidationError)
    with pytest.raises(InvalidNamespaceError):
        store.search(("bad id",))


@pytest.mark.django_db
def test_a_prefix_or_namespace_given_as_a_list_is_taken_as_postgresstore_takes_it(write):
    store = MemoryStore()
    with write():
        store.batch([PutOp(["wang", "prefs"], "food", {"likes": "tea"})])  # type: ignore[arg-type]
    assert [i.key for i in store.search(["wang"])] == ["food"]  # type: ignore[arg-type]
    assert store.search(["wang"])[0].namespace == ("wang", "prefs")  # type: ignore[arg-type]
    assert store.list_namespaces(prefix=["wang"]) == [("wang", "prefs")]  # type: ignore[arg-type]


@pytest.mark.django_db(transaction=True)
def test_a_sync_call_in_an_event_loop_runs_as_langgraphs_own_stores_run_it():
    # NOTE: LangGraph's batching wrapper (AsyncBatchedBaseStore) calls the sync batch from its
    # event loop; InMemoryStore and PostgresStore answer there, blocking the loop.
    class Batched(AsyncBatchedBaseStore):
        def __init__(self) -> None:
            super().__init__()
            self.inner = MemoryStore()

        def batch(self, ops: Any) -> list[Any]:
            return self.inner.batch(ops)

        async def abatch(self, ops: Any) -> list[Any]:
            return self.inner.batch(ops)

    async def main() -> tuple[Any, ...]:
        store = MemoryStore()
        store.put(("wang", "prefs"), "food", {"likes": "tea"})
        with pytest.raises(InvalidNamespaceError):
            store.put(("wang", "Bad"), "k", {"v": 1})
        batched = Batched()
        await batched.aput(("wang", "prefs"), "drink", {"likes": "water"})
        found = await asyncio.gather(
            batched.aget(("wang", "prefs"), "food"), batched.asearch(("wang",))
        )
        return store.get(("wang", "prefs"), "food"), *found

    item, batched_item, found = run(main)
    assert item.value == batched_item.value == {"likes": "tea"}
    assert sorted(i.key for i in found) == ["drink", "food"]
    assert selectors.fact_get(owner_id="wang", key="prefs.drink")["value"] == {"likes": "water"}


@pytest.mark.django_db(transaction=True)
def test_the_async_store_refuses_a_sync_call_in_an_event_loop_as_langgraphs_async_stores():
    # NOTE: AsyncPostgresStore and AsyncSqliteStore raise InvalidStateError there; a sync call
    # from a thread without a running loop is answered.
    async def main() -> tuple[Any, ...]:
        store = AsyncMemoryStore()
        refused = []
        for call in (
            lambda: store.put(("wang", "prefs"), "food", {"likes": "tea"}),
            lambda: store.get(("wang", "prefs"), "food"),
            lambda: store.delete(("wang", "prefs"), "food"),
            lambda: store.search(("wang",)),
            lambda: store.list_namespaces(prefix=("wang",)),
            lambda: store.batch([PutOp(("wang",), "k", {"v": 1})]),
        ):
            with pytest.raises(asyncio.InvalidStateError, match="await its async methods"):
                call()
            refused.append(True)
        stored_while_refused = await store.asearch(("wang",))
        await asyncio.to_thread(store.put, ("wang", "prefs"), "food", {"likes": "tea"})
        from_thread = await asyncio.to_thread(store.get, ("wang", "prefs"), "food")
        awaited = await store.aget(("wang", "prefs"), "food")
        return len(refused), stored_while_refused, from_thread, awaited

    refused, stored_while_refused, from_thread, awaited = run(main)
    assert refused == 6 and stored_while_refused == []
    assert from_thread.value == awaited.value == {"likes": "tea"}
    # NOTE: outside an event loop, a sync call is answered as MemoryStore answers it.
    assert AsyncMemoryStore().get(("wang", "prefs"), "food").value == {"likes": "tea"}
    assert isinstance(AsyncMemoryStore(), MemoryStore)


@pytest.mark.django_db
def test_a_dotted_filter_key_is_the_key_itself_else_a_path_through_nested_objects(write):
    store = MemoryStore()
    with write():
        store.put(("wang",), "hyphen", {"access-level": "public", "user": {"access-level": "in"}})
        store.put(("wang",), "digit", {"123abc": "ok", "user": {"123abc": "ok2"}})
        store.put(("wang",), "literal", {"user.access-level": "dotted", "user": {}})

    def keys(spec: dict[str, Any]) -> list[str]:
        return sorted(i.key for i in store.search(("wang",), filter=spec))

    assert keys({"access-level": "public"}) == ["hyphen"]
    assert keys({"user.access-level": "in"}) == ["hyphen"]
    assert keys({"user.123abc": "ok2"}) == ["digit"]
    assert keys({"user.123abc": {"$ne": "ok2"}}) == ["hyphen", "literal"]
    # NOTE: a key holding the dots is that key, as PostgresStore reads it.
    assert keys({"user.access-level": "dotted"}) == ["literal"]
    assert keys({"user.nothing.deeper": "x"}) == []


@pytest.mark.django_db
def test_a_query_longer_than_the_apps_search_takes_goes_to_the_sites_embedder(write):
    store = by_meaning()
    with write():
        store.put(("wang",), "a", {"text": "aaaa"})
    assert [i.key for i in store.search(("wang",), query="a" * 500)] == ["a"]
    with pytest.raises(ValueError):
        MemoryStore().search(("wang",), query="a" * 500)
