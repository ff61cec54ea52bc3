"""Tests of memory.selectors: reading through the cache, rehydrating, paging, on real services."""

from __future__ import annotations

import datetime as dt
import time

import pytest
import redis
from django.core.exceptions import ValidationError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory import payloads, selectors, services, store
from memory.models import Fact, Turn

pytestmark = pytest.mark.django_db


@pytest.fixture
def history(django_capture_on_commit_callbacks):
    """Wang told the assistant his name and a like, over two sessions, then chatted 30 turns."""

    def make(owner_id: str = "wang", turns: int = 30) -> None:
        with django_capture_on_commit_callbacks(execute=True):
            services.fact_put(owner_id=owner_id, key="name", value="Wang Jianguo", session_id="a")
            services.fact_put(owner_id=owner_id, key="likes", value=["basketball"], session_id="b")
            for i in range(turns):
                services.turn_append(
                    owner_id=owner_id,
                    session_id="a" if i % 2 else "b",
                    role="user" if i % 2 == 0 else "assistant",
                    content=f"turn {i + 1}",
                )

    return make


def _settle() -> None:
    """Run the first read's reconciliation so that the next read measures the hit alone."""
    selectors.context_get(owner_id="warm-up")


def test_context_cold_read_comes_from_database_then_cache(history):
    history()
    cold = selectors.context_get(owner_id="wang")
    warm = selectors.context_get(owner_id="wang")
    assert cold["source"] == "database"
    assert warm["source"] == "cache"
    assert {k: v for k, v in cold.items() if k != "source"} == {
        k: v for k, v in warm.items() if k != "source"
    }
    assert warm["facts"] == {"name": "Wang Jianguo", "likes": ["basketball"]}
    assert [t["seq"] for t in warm["turns"]] == list(range(11, 31))


def test_context_default_and_explicit_turn_counts(history, memory_settings):
    history()
    assert len(selectors.context_get(owner_id="wang")["turns"]) == 20
    assert [t["seq"] for t in selectors.context_get(owner_id="wang", turns=3)["turns"]] == [
        28,
        29,
        30,
    ]
    assert selectors.context_get(owner_id="wang", turns=0)["turns"] == []
    with memory_settings(CONTEXT_TURNS=5):
        assert len(selectors.context_get(owner_id="wang")["turns"]) == 5


@pytest.mark.parametrize("turns", [-1, 201, "5"])
def test_context_rejects_bad_turn_count(turns):
    with pytest.raises(ValidationError):
        selectors.context_get(owner_id="wang", turns=turns)


def test_context_of_unknown_owner_is_empty():
    context = selectors.context_get(owner_id="nobody")
    assert context == {"user_id": "nobody", "facts": {}, "turns": [], "source": "database"}


def test_warm_context_read_makes_no_query(history):
    history()
    selectors.context_get(owner_id="wang")
    _settle()
    with CaptureQueriesContext(connection) as queries:
        context = selectors.context_get(owner_id="wang")
    assert context["source"] == "cache"
    assert len(queries) == 0


def test_warm_context_read_is_one_redis_call(history, own_redis):
    history()
    selectors.context_get(owner_id="wang")
    _settle()
    admin = redis.Redis.from_url(own_redis.url)
    admin.config_resetstat()
    context = selectors.context_get(owner_id="wang")
    stats = admin.info("commandstats")
    assert context["source"] == "cache"
    # NOTE: one EVALSHA from the client; the script's own HMGET and EXPIRE are counted by
    # Redis too but cost no round trip.
    calls = {name.removeprefix("cmdstat_"): v["calls"] for name, v in stats.items()}
    calls.pop("config|resetstat", None)
    calls.pop("config", None)
    assert calls == {"evalsha": 1, "hmget": 2, "expire": 1}


def test_cold_read_query_count_does_not_grow_with_history(history):
    history("short", turns=5)
    history("long", turns=400)
    counts = []
    for owner_id in ("short", "long"):
        _settle()
        with CaptureQueriesContext(connection) as queries:
            assert selectors.context_get(owner_id=owner_id)["source"] == "database"
        counts.append(len(queries))
    assert counts[0] == counts[1] == 3


def test_asking_for_more_turns_than_cached_reads_database(history, memory_settings):
    history(turns=80)
    with memory_settings(CACHE_TURNS=50):
        selectors.context_get(owner_id="wang")
        assert selectors.context_get(owner_id="wang", turns=50)["source"] == "cache"
        wide = selectors.context_get(owner_id="wang", turns=60)
    assert wide["source"] == "database"
    assert [t["seq"] for t in wide["turns"]] == list(range(21, 81))


def test_small_history_is_served_whole_from_cache(history):
    history(turns=5)
    selectors.context_get(owner_id="wang")
    context = selectors.context_get(owner_id="wang", turns=200)
    assert context["source"] == "cache"
    assert len(context["turns"]) == 5


def test_appends_update_warm_copy_without_rehydrating(history, django_capture_on_commit_callbacks):
    history(turns=3)
    selectors.context_get(owner_id="wang")
    with django_capture_on_commit_callbacks(execute=True):
        services.turn_append(owner_id="wang", session_id="new-tab", role="user", content="again")
        services.fact_put(owner_id="wang", key="location", value="Shanghai")
        services.fact_delete(owner_id="wang", key="likes")
    context = selectors.context_get(owner_id="wang")
    assert context["source"] == "cache"
    assert context["turns"][-1]["content"] == "again"
    assert context["facts"] == {"name": "Wang Jianguo", "location": "Shanghai"}


def test_cached_copy_keeps_only_cache_turns(
    history, redis_client, django_capture_on_commit_callbacks, memory_settings
):
    history(turns=3)
    with memory_settings(CACHE_TURNS=4, CONTEXT_TURNS=4):
        selectors.context_get(owner_id="wang")
        with django_capture_on_commit_callbacks(execute=True):
            for i in range(3):
                services.turn_append(owner_id="wang", session_id="s", role="user", content=f"n{i}")
        context = selectors.context_get(owner_id="wang")
        seqs = redis_client.hget(store.owner_key("wang"), "seqs")
        assert seqs == b"3 4 5 6"
        assert context["source"] == "cache"
        assert [t["seq"] for t in context["turns"]] == [3, 4, 5, 6]
        assert selectors.context_get(owner_id="wang", turns=6)["source"] == "database"


def test_flushed_cache_rehydrates_same_context(history, own_redis):
    history()
    warm = (selectors.context_get(owner_id="wang"), selectors.context_get(owner_id="wang"))[1]
    redis.Redis.from_url(own_redis.url).flushall()
    after = selectors.context_get(owner_id="wang")
    assert after["source"] == "database"
    assert after["turns"] == warm["turns"] and after["facts"] == warm["facts"]
    assert selectors.context_get(owner_id="wang")["source"] == "cache"


def test_deleted_key_rehydrates_same_context(history, redis_client):
    history()
    warm = (selectors.context_get(owner_id="wang"), selectors.context_get(owner_id="wang"))[1]
    redis_client.delete(store.owner_key("wang"))
    after = selectors.context_get(owner_id="wang")
    assert after["source"] == "database"
    assert (after["turns"], after["facts"]) == (warm["turns"], warm["facts"])


def test_expired_key_rehydrates_same_context(history, memory_settings):
    history()
    with memory_settings(CACHE_TTL=1):
        warm = (selectors.context_get(owner_id="wang"), selectors.context_get(owner_id="wang"))[1]
        assert warm["source"] == "cache"
        time.sleep(1.2)
        after = selectors.context_get(owner_id="wang")
    assert after["source"] == "database"
    assert (after["turns"], after["facts"]) == (warm["turns"], warm["facts"])


def test_hits_renew_the_ttl(history, redis_client, memory_settings):
    history()
    with memory_settings(CACHE_TTL=100):
        selectors.context_get(owner_id="wang")
        redis_client.expire(store.owner_key("wang"), 5)
        selectors.context_get(owner_id="wang")
    assert redis_client.ttl(store.owner_key("wang")) > 90


@pytest.mark.faults
def test_restarted_redis_rehydrates_same_context(history, own_redis):
    history()
    warm = (selectors.context_get(owner_id="wang"), selectors.context_get(owner_id="wang"))[1]
    own_redis.restart()
    store.health.reset()
    after = selectors.context_get(owner_id="wang")
    assert after["source"] == "database"
    assert (after["turns"], after["facts"]) == (warm["turns"], warm["facts"])


def test_turn_list_pages_by_seq(history):
    history(turns=12)
    page, more = selectors.turn_list(owner_id="wang", limit=5)
    assert [t["seq"] for t in page] == [1, 2, 3, 4, 5] and more
    page, more = selectors.turn_list(owner_id="wang", after=10, limit=5)
    assert [t["seq"] for t in page] == [11, 12] and not more
    page, _ = selectors.turn_list(owner_id="wang", session_id="a", limit=100)
    assert {t["session_id"] for t in page} == {"a"} and len(page) == 6


def test_fact_list_same_from_cache_and_database(history):
    history()
    from_db = selectors.fact_list(owner_id="wang")
    selectors.context_get(owner_id="wang")
    from_cache = selectors.fact_list(owner_id="wang")
    assert from_db == from_cache
    assert [f["key"] for f in from_db] == ["likes", "name"]


def test_health_reports_database_and_cache():
    health = selectors.health_get()
    assert (health["database"], health["cache"]) == ("ok", "ok")
    assert set(health["latency_ms"]) == {"database", "cache"}


def test_owner_summary_counts_what_is_stored(history):
    history(turns=5)
    summary = selectors.owner_summary_get(owner_id="wang")
    assert summary is not None
    assert {k: summary[k] for k in ("turns", "sessions", "facts", "fact_versions", "last_seq")} == {
        "turns": 5,
        "sessions": 2,
        "facts": 2,
        "fact_versions": 2,
        "last_seq": 5,
    }
    assert selectors.owner_summary_get(owner_id="nobody") is None


def test_owner_recent_list_is_newest_write_first(history):
    for owner_id in ("a", "b", "c"):
        history(owner_id=owner_id, turns=1)
    assert selectors.owner_recent_list(limit=2) == ["c", "b"]


def test_owner_id_iter_walks_every_owner_in_chunks(history):
    for owner_id in ("a", "b", "c", "d", "e"):
        history(owner_id=owner_id, turns=2 if owner_id in "bd" else 1)
    with CaptureQueriesContext(connection) as queries:
        assert list(selectors.owner_id_iter(chunk_size=2)) == ["a", "b", "c", "d", "e"]
    assert len(queries) == 3
    assert list(selectors.owner_id_iter(min_last_seq=1)) == ["b", "d"]


def test_stats_counts_rows_and_reads_cache_counters(history):
    history(turns=3)
    selectors.context_get(owner_id="wang")
    stats = selectors.stats_get()
    assert (stats["owners"], stats["sessions"], stats["turns"], stats["facts"]) == (1, 2, 3, 2)
    assert stats["cache"]["cache"] == "ok"
    assert stats["cache"]["counters"]["misses"] == 1


def test_cold_read_gives_the_payloads_the_writes_gave(django_capture_on_commit_callbacks):
    """The one-round-trip cold read builds the same payloads as the services returned."""
    with django_capture_on_commit_callbacks(execute=True):
        first = services.turn_append(
            owner_id="wang", session_id="tab", role="user", content="我叫王建国", metadata={}
        )
        second = services.turn_append(
            owner_id="wang",
            session_id="tab",
            role="assistant",
            content="hi",
            metadata={"n": 1, "nested": {"list": [1.5, None, "文"]}},
        )
        services.fact_put(owner_id="wang", key="nothing", value=None)
    # NOTE: a timestamp on a whole second is written without a fraction, as isoformat() does.
    Turn.objects.filter(pk=first.pk).update(
        created_at=dt.datetime(2025, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    )
    first.refresh_from_db()
    memory, complete = selectors._database_read("wang", 51)
    assert complete
    assert memory.turns == [payloads.turn_payload(first), payloads.turn_payload(second)]
    assert memory.turns[0]["created_at"] == "2025-01-02T03:04:05Z"
    facts = Fact.objects.filter(owner__external_id="wang").order_by("key")
    assert memory.facts == [payloads.fact_payload(fact) for fact in facts]
    assert memory.facts[-1]["value"] is None
    assert selectors._database_read("nobody", 51) == (store.CachedMemory(0, [], []), True)
