"""Tests of ``memory.cache.cluster``: the cache layer on a real Redis Cluster of this module's own
(three primaries, no replicas), through the ``ClusterClient`` django-redis client."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.conf import settings
from django.core.cache import caches
from django.test import override_settings
from redis.cluster import RedisCluster as RedisClusterClient
from redis.exceptions import (
    ClusterDownError,
    RedisClusterException,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError

from memory import cache, selectors, services
from memory.cache import client as cache_client
from memory.cache.cluster import _mapped
from tests.servers import RedisCluster

pytestmark = [pytest.mark.django_db, pytest.mark.faults, pytest.mark.slow]

OPTIONS = {
    "CLIENT_CLASS": "memory.cache.cluster.ClusterClient",
    "SOCKET_CONNECT_TIMEOUT": 0.2,
    "SOCKET_TIMEOUT": 0.2,
    "SERIALIZER": "memory.codec.OrjsonSerializer",
}


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisCluster]:
    with RedisCluster(masters=3, replicas=0) as cluster:
        yield cluster


def _alias(location: str) -> dict[str, Any]:
    return {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": location, "OPTIONS": OPTIONS}


@pytest.fixture
def on_cluster(cluster: RedisCluster) -> Iterator[RedisCluster]:
    """The memory cache is the cluster (alias "cluster"), emptied before the test."""
    cluster.flushall()
    own = {**settings.CACHES, "cluster": _alias(cluster.url)}
    with override_settings(CACHES=own, MEMORY={**settings.MEMORY, "CACHE_ALIAS": "cluster"}):
        cache.reset()
        # NOTE: pools kept from a test that restarted a node connect again now, and learn its
        # run: else this test's first call to it would be refused as named by the old one.
        cache_client.client().ping(target_nodes=RedisClusterClient.ALL_NODES)
        yield cluster
    cache.reset()


def tell(owner: str, content: str) -> None:
    services.turn_append(owner_id=owner, session_id="s", role="user", content=content)


def contents(context: dict) -> list[str]:
    return [turn["content"] for turn in context["turns"]]


def test_memory_is_cached_and_kept_coherent_on_a_cluster(on_cluster, write):
    with write():
        tell("wang", "My name is Wang Jianguo")
        services.fact_put(owner_id="wang", key="location", value="Beijing")
    assert selectors.context_get(owner_id="wang")["source"] == "database"
    assert selectors.context_get(owner_id="wang")["source"] == "cache"
    with write():
        tell("wang", "I moved")
        services.fact_put(owner_id="wang", key="location", value="Shanghai")
    context = selectors.context_get(owner_id="wang")
    assert context["source"] == "cache"
    assert contents(context) == ["My name is Wang Jianguo", "I moved"]
    assert context["facts"]["location"] == "Shanghai"
    with write():
        services.fact_delete(owner_id="wang", key="location")
    assert "location" not in selectors.context_get(owner_id="wang")["facts"]
    with write():
        services.memory_forget(owner_id="wang")
    assert contents(selectors.context_get(owner_id="wang")) == []


def test_a_cold_read_claims_in_its_read_pipeline_on_a_cluster(on_cluster, write):
    with write():
        for owner in ("wang", "li", "zhang"):
            tell(owner, f"I am {owner}")
    for server in on_cluster.nodes:
        redis.Redis(port=server.port).script_flush()
    for owner in ("wang", "li", "zhang"):
        # NOTE: reads that mostly miss: the read and its claim are one script, sent to each
        # owner's node, loading it there first (a flushed cluster has none).
        cache.copy.miss_share.share = 1.0
        miss = cache.copy.copy_read(owner_id=owner, turns=20)
        assert isinstance(miss, cache.copy.Miss) and miss.fill_token
        key = cache.keys.owner_key(owner)
        node = redis.Redis(port=on_cluster.master_for(key).port)
        assert node.hget(key, "claim") == miss.fill_token.encode()
        cache.copy.copy_evict(owner_id=owner)
        assert selectors.context_get(owner_id=owner)["source"] == "database"
        context = selectors.context_get(owner_id=owner)
        assert context["source"] == "cache" and contents(context) == [f"I am {owner}"]


def test_owners_spread_over_every_primary(on_cluster):
    owners = [f"owner-{n}" for n in range(60)]
    assert len({on_cluster.master_for(cache.keys.owner_key(o)).port for o in owners}) == 3


def test_stats_scan_every_node(on_cluster, write):
    owners = [f"owner-{n}" for n in range(12)]
    for owner in owners:
        with write():
            tell(owner, "hello")
        selectors.context_get(owner_id=owner)
    stats = cache.stats()
    assert stats["cache"] == "ok"
    # One hash per owner, and the shared counters' hash.
    assert stats["keys"] == len(owners) + 1
    assert stats["counters"]["fills"] >= len(owners)


def test_get_many_and_set_many_cross_slots(on_cluster):
    cache = caches["cluster"]
    values = {f"key-{n}": n for n in range(20)}
    cache.set_many(values)
    assert cache.get_many([*values, "absent"]) == values


def test_a_command_across_slots_is_a_response_error_not_an_outage(on_cluster):
    client = caches["cluster"].client.get_client(write=True)
    with pytest.raises(ResponseError):
        client.eval("return 1", 2, "memory:a", "memory:b")
    assert cache.ping() == "ok"


def test_a_dead_primary_is_down_for_its_owners_only(on_cluster, write):
    doomed, spared = (
        "wang",
        next(
            f"li-{n}"
            for n in range(1000)
            if on_cluster.master_for(cache.keys.owner_key(f"li-{n}")).port
            != on_cluster.master_for(cache.keys.owner_key("wang")).port
        ),
    )
    for owner in (doomed, spared):
        with write():
            tell(owner, f"{owner} says hello")
        selectors.context_get(owner_id=owner)
    victim = on_cluster.master_for(cache.keys.owner_key(doomed))
    on_cluster.kill(victim)
    try:
        # NOTE: no replica takes over: the slot is uncovered, which is "down", not a bug.
        assert cache.copy.copy_read(owner_id=doomed, turns=5) is cache.client.Outcome.DOWN
        assert cache.client.breaker.down_since is not None
        context = selectors.context_get(owner_id=doomed)
        assert (context["source"], contents(context)) == ("database", ["wang says hello"])
        cache.reset()
        cached = cache.copy.copy_read(owner_id=spared, turns=5)
        assert isinstance(cached, cache.copy.Hit)
        assert [turn["content"] for turn in cached.snapshot.turns] == [f"{spared} says hello"]
    finally:
        victim.start()
        on_cluster.wait_stable()


def test_a_cluster_no_seed_answers_is_down(write):
    dead = {**settings.CACHES, "nowhere": _alias("redis://127.0.0.1:1")}
    with override_settings(CACHES=dead, MEMORY={**settings.MEMORY, "CACHE_ALIAS": "nowhere"}):
        cache.reset()
        assert cache.ping() == "down"
        with write():
            tell("wang", "hello")
        context = selectors.context_get(owner_id="wang")
        assert (context["source"], contents(context)) == ("database", ["hello"])
    cache.reset()


def test_several_seeds_are_one_cluster(cluster):
    seeds = ",".join(f"redis://127.0.0.1:{node.port}" for node in cluster.nodes)
    own = {**settings.CACHES, "seeds": _alias(seeds)}
    with override_settings(CACHES=own):
        client = caches["seeds"].client.get_client(write=True)
        assert {node.port for node in client.get_primaries()} == {n.port for n in cluster.nodes}


def test_counters_on_a_dead_primary_cost_the_owners_elsewhere_no_hits(
    on_cluster, write, monkeypatch
):
    victim = on_cluster.master_for(cache.keys.stats_key())
    owner = next(
        f"li-{n}"
        for n in range(1000)
        if on_cluster.master_for(cache.keys.owner_key(f"li-{n}")).port != victim.port
    )
    with write():
        tell(owner, "hello")
    selectors.context_get(owner_id=owner)
    monkeypatch.setattr(cache.copy, "COUNTS_FLUSH_SECONDS", 0.0)
    on_cluster.kill(victim)
    try:
        # NOTE: every read now also flushes the counters, to the dead primary.
        cached = cache.copy.copy_read(owner_id=owner, turns=5)
        assert isinstance(cached, cache.copy.Hit)
        assert cache.client.breaker.down_since is None
        assert selectors.context_get(owner_id=owner)["source"] == "cache"
        # The counts are kept for a later flush, not lost.
        assert cache.client.breaker.counts["hits"] >= 2
    finally:
        victim.start()
        on_cluster.wait_stable()


@pytest.mark.parametrize(
    "error", [ClusterDownError("CLUSTERDOWN"), TryAgainError("TRYAGAIN"), SlotNotCoveredError("x")]
)
def test_failover_replies_are_connection_errors(error):
    # NOTE: the mapping alone; the outages themselves are the tests above.
    def fail() -> None:
        raise error

    with pytest.raises(RedisConnectionError):
        _mapped(fail)


def test_other_cluster_client_errors_are_response_errors():
    def fail() -> None:
        raise RedisClusterException("all keys must map to the same key slot")

    with pytest.raises(ResponseError):
        _mapped(fail)


def test_a_read_goes_straight_to_its_node_and_follows_a_moved_slot(on_cluster, write, monkeypatch):
    with write():
        tell("wang", "My name is Wang Jianguo")
    selectors.context_get(owner_id="wang")
    client = cache_client.client()
    key = cache.keys.owner_key("wang")
    home = on_cluster.master_for(key).port
    # NOTE: no cluster pipeline on the way: a warm read and an append reach the node directly.
    monkeypatch.setattr(type(client), "pipeline", lambda *a, **k: pytest.fail("pipelined"))
    with write():
        tell("wang", "I like basketball")
    context = selectors.context_get(owner_id="wang")
    assert context["source"] == "cache"
    assert contents(context) == ["My name is Wang Jianguo", "I like basketball"]
    monkeypatch.undo()
    # A slot map that sends the owner's slot to another primary (as after a resharding the
    # client has not seen): that node answers MOVED, the cluster's routing follows it, and the
    # client is told to rebuild its map. The read, named by the other node's run, reached
    # another: it is not trusted (rule 10), and the database answers it.
    elsewhere = next(n for n in client.get_primaries() if n.port != home)
    slot = client.keyslot(key)
    monkeypatch.setitem(client.nodes_manager.slots_cache, slot, [elsewhere])
    asked: list[int] = []
    monkeypatch.setattr(client, "refresh_later", lambda: asked.append(1))
    assert cache.copy.copy_read(owner_id="wang", turns=5) is cache.client.Outcome.SKIPPED
    assert asked
    # NOTE: the cluster's routing learnt the move: the next read goes straight home again, and
    # finds the copy under its node's name.
    assert client.nodes_manager.get_node_from_slot(slot).port == home
    cached = cache.copy.copy_read(owner_id="wang", turns=5)
    assert isinstance(cached, cache.copy.Hit)
    assert [t["content"] for t in cached.snapshot.turns] == [
        "My name is Wang Jianguo",
        "I like basketball",
    ]


def test_a_node_restarted_from_an_older_snapshot_serves_no_copy_it_brought_back(
    on_cluster, write, memory_settings
):
    # NOTE: no suspect window: only the node's run in the copy's name keeps the old one unread.
    with memory_settings(CACHE_ALIAS="cluster", SUSPECT_WINDOW=0.0):
        with write():
            tell("wang", "My name is Wang Jianguo")
        selectors.context_get(owner_id="wang")
        assert selectors.context_get(owner_id="wang")["source"] == "cache"
        before = cache.keys.owner_key("wang")
        victim = on_cluster.master_for(before)
        node = redis.Redis(host="127.0.0.1", port=victim.port)
        node.save()
        with write():
            tell("wang", "I like basketball")
        context = selectors.context_get(owner_id="wang")
        assert (context["source"], contents(context)[-1]) == ("cache", "I like basketball")
        on_cluster.kill(victim)
        try:
            victim.start()
            on_cluster.wait_stable()
            # The node came back with the snapshot's copy, which lacks the confirmed update.
            assert node.hget(before, "rev") is not None
            for _ in range(3):
                context = selectors.context_get(owner_id="wang")
                assert contents(context) == ["My name is Wang Jianguo", "I like basketball"]
            assert context["source"] == "cache"
            assert cache.keys.owner_key("wang") != before
        finally:
            node.close()
            victim.start()
            on_cluster.wait_stable()
