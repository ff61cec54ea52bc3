"""Tests of memory.selectors: reading through the cache, rehydrating, paging, on real services."""

from __future__ import annotations

import datetime as dt
import time

import pytest
import redis
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory import cache, ops, payloads, selectors, services, tokens
from memory.exceptions import MemoryUnavailable
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
    # NOTE: one pipeline, one round trip: an HMGET of every field a hit needs and an EXPIRE;
    # no script (its run cost Redis ten times the HMGET's).
    calls = {name.removeprefix("cmdstat_"): v["calls"] for name, v in stats.items()}
    calls.pop("config|resetstat", None)
    calls.pop("config", None)
    assert calls == {"hmget": 1, "expire": 1}


def _redis_calls(admin: redis.Redis) -> dict[str, int]:
    stats = admin.info("commandstats")
    calls = {name.removeprefix("cmdstat_"): v["calls"] for name, v in stats.items()}
    return {name: n for name, n in calls.items() if not name.startswith("config")}


def test_a_warm_process_sends_no_claim_with_its_hits(history, own_redis):
    history()
    admin = redis.Redis.from_url(own_redis.url)
    # NOTE: a run of misses (a cold start) has the claim ride in the reads' pipelines...
    for i in range(20):
        selectors.context_get(owner_id=f"nobody-{i}")
    assert cache.copy.miss_share.likely()
    selectors.context_get(owner_id="wang")
    admin.config_resetstat()
    assert selectors.context_get(owner_id="wang")["source"] == "cache"
    assert _redis_calls(admin)["evalsha"] == 1
    # ...and once the reads hit again, a hit is its HMGET and EXPIRE alone.
    for _ in range(30):
        selectors.context_get(owner_id="wang")
    assert not cache.copy.miss_share.likely()
    admin.config_resetstat()
    assert selectors.context_get(owner_id="wang")["source"] == "cache"
    assert _redis_calls(admin) == {"hmget": 1, "expire": 1}


@pytest.mark.parametrize("in_script", [False, True], ids=["claim-after", "read-claim-script"])
def test_a_cold_read_claims_the_fill_in_its_first_round_trip_when_reads_miss(
    history, own_redis, in_script
):
    history()
    admin = redis.Redis.from_url(own_redis.url)
    cache.copy.miss_share.share = 1.0 if in_script else 0.0
    _settle()  # the scripts loaded
    admin.config_resetstat()
    with CaptureQueriesContext(connection) as queries:
        assert selectors.context_get(owner_id="wang")["source"] == "database"
    calls = _redis_calls(admin)
    # NOTE: one script (the HMGET, EXPIRE and claim) or a pipeline and the claim after it;
    # then the database's one statement and the fill script. The claim held: no query
    # verifies the fill.
    assert calls["hmget"] == 1 and calls["evalsha"] == 2 and calls["hset"] >= 1
    assert len(queries) == 1
    assert selectors.context_get(owner_id="wang")["source"] == "cache"


def test_a_read_and_claim_script_on_a_redis_without_it_loads_it_and_claims(history, own_redis):
    history()
    admin = redis.Redis.from_url(own_redis.url)
    admin.script_flush()
    cache.copy.miss_share.share = 1.0
    with CaptureQueriesContext(connection) as queries:
        assert selectors.context_get(owner_id="wang")["source"] == "database"
    assert len(queries) == 1  # the claim held: the fill needed no check
    assert selectors.context_get(owner_id="wang")["source"] == "cache"


def test_the_claim_takes_the_fill_lock_only_where_there_is_no_copy(history, own_redis):
    history()
    admin = redis.Redis.from_url(own_redis.url)
    key = cache.keys.owner_key("wang")
    claim = cache.copy._CLAIM
    assert claim(keys=[key, f"{key}:fill"], args=[400, "a"], client=admin) == 1
    assert admin.hget(key, "claim") == b"a" and admin.get(f"{key}:fill") == b"a"
    # The lock is held: another reader takes nothing.
    assert claim(keys=[key, f"{key}:fill"], args=[400, "b"], client=admin) == 0
    assert admin.hget(key, "claim") == b"a"
    selectors.context_get(owner_id="wang")
    # A copy is there (a fill stored it between a reader's HMGET and its claim): 2, no lock.
    admin.delete(f"{key}:fill")
    assert claim(keys=[key, f"{key}:fill"], args=[400, "c"], client=admin) == 2
    assert admin.get(f"{key}:fill") is None and admin.hget(key, "claim") is None
    # No waiting allowed (FILL_WAIT_MS 0): no lock either.
    admin.delete(key)
    assert claim(keys=[key, f"{key}:fill"], args=[0, "d"], client=admin) == 0
    assert not admin.exists(key, f"{key}:fill")


def _read_then_claim(admin: redis.Redis, key: str, args: list) -> object:
    """What ``read_claim.lua`` replaces: the read's pipeline, then, on a miss, the floor's
    EXPIRE and the claim script, as ``copy_read`` sends them while its reads mostly hit."""
    ttl, guard_ttl, wait_ms, token = args
    pipe = admin.pipeline(transaction=False)
    pipe.hmget(key, cache.copy._HIT_FIELDS)
    pipe.expire(key, ttl)
    held = pipe.execute()[0]
    if held[0] is not None:
        return held
    if held[7] is not None:
        admin.expire(key, guard_ttl, lt=True)
    return cache.copy._CLAIM(keys=[key, f"{key}:fill"], args=[wait_ms, token], client=admin)


def _state(admin: redis.Redis, key: str) -> tuple:
    """A key and its lock as a read leaves them: fields, lock holder, TTLs to the second."""
    lock = f"{key}:fill"
    return (
        admin.hgetall(key),
        admin.get(lock),
        round(admin.pttl(key) / 1000),
        round(admin.pttl(lock) / 1000),
    )


@pytest.mark.parametrize("wait_ms", [400, 0])
@pytest.mark.parametrize(
    "start", ["none", "copy", "floor", "claim", "claim-unlocked", "floor-locked"]
)
def test_the_read_claim_script_does_what_the_read_pipeline_and_claim_do(
    history, redis_client, start, wait_ms
):
    history()
    selectors.context_get(owner_id="wang")
    copy_key = cache.keys.owner_key("wang")
    assert redis_client.hexists(copy_key, "rev")
    made: dict[str, str] = {}
    for side in ("spec", "script"):
        key = cache.keys.owner_key(f"read-claim-{side}")
        lock = f"{key}:fill"
        redis_client.delete(key, lock)
        if start == "copy":
            redis_client.restore(key, 0, redis_client.dump(copy_key))
        elif start.startswith("floor"):
            cache.copy.copy_drop(owner_id=f"read-claim-{side}", stamp=7)
        elif start.startswith("claim"):
            redis_client.hset(key, "claim", "other")
            redis_client.pexpire(key, 400)
        if start in ("claim", "floor-locked"):
            redis_client.set(lock, "other", px=400)
        made[side] = key
    args = [3600, cache.copy.GUARD_TTL, wait_ms, "token"]
    spec_key, script_key = made["spec"], made["script"]
    spec = _read_then_claim(redis_client, spec_key, args)
    script = cache.copy._READ_CLAIM(
        keys=[script_key, f"{script_key}:fill"], args=args, client=redis_client
    )
    assert script == spec
    assert _state(redis_client, script_key) == _state(redis_client, spec_key)


def test_cold_read_query_count_does_not_grow_with_history(history):
    history("short", turns=5)
    history("long", turns=400)
    counts = []
    for owner_id in ("short", "long"):
        _settle()
        with CaptureQueriesContext(connection) as queries:
            assert selectors.context_get(owner_id=owner_id)["source"] == "database"
        counts.append(len(queries))
    # NOTE: one, the owner, turns, facts and summary in one statement on PostgreSQL; the fill
    # found its own claim, so nothing touched the copy since the miss and it needs no
    # verification query.
    assert counts[0] == counts[1] == 1


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
        seqs = redis_client.hget(cache.keys.owner_key("wang"), "seqs")
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
    redis_client.delete(cache.keys.owner_key("wang"))
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
        redis_client.expire(cache.keys.owner_key("wang"), 5)
        selectors.context_get(owner_id="wang")
    assert redis_client.ttl(cache.keys.owner_key("wang")) > 90


@pytest.mark.faults
def test_restarted_redis_rehydrates_same_context(history, own_redis):
    history()
    warm = (selectors.context_get(owner_id="wang"), selectors.context_get(owner_id="wang"))[1]
    own_redis.restart()
    cache.reset()
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


def test_turn_list_limit_defaults_to_50_and_is_bounded_as_the_api_is(history):
    history(turns=60)
    page, more = selectors.turn_list(owner_id="wang")
    assert (len(page), more) == (50, True)
    page, more = selectors.turn_list(owner_id="wang", limit=500)
    assert (len(page), more) == (60, False)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"limit": 501}, "limit"),
        ({"limit": 0}, "limit"),
        ({"limit": -1}, "limit"),
        ({"limit": 10**9}, "limit"),
        ({"limit": True}, "limit"),
        ({"limit": "5"}, "limit"),
        ({"after": -1}, "after"),
        ({"after": "10"}, "after"),
    ],
)
def test_turn_list_rejects_a_bad_limit_or_after(db, kwargs, field):
    with pytest.raises(ValidationError) as info:
        selectors.turn_list(owner_id="wang", **kwargs)
    assert list(info.value.message_dict) == [field]


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
    summary = ops.owner_summary_get(owner_id="wang")
    assert summary is not None
    assert {k: summary[k] for k in ("turns", "sessions", "facts", "fact_versions", "last_seq")} == {
        "turns": 5,
        "sessions": 2,
        "facts": 2,
        "fact_versions": 2,
        "last_seq": 5,
    }
    assert ops.owner_summary_get(owner_id="nobody") is None


def test_owner_recent_list_is_newest_write_first(history):
    for owner_id in ("a", "b", "c"):
        history(owner_id=owner_id, turns=1)
    assert ops.owner_recent_list(limit=2) == ["c", "b"]


def test_owner_id_iter_walks_every_owner_in_chunks(history):
    for owner_id in ("a", "b", "c", "d", "e"):
        history(owner_id=owner_id, turns=2 if owner_id in "bd" else 1)
    with CaptureQueriesContext(connection) as queries:
        assert list(ops.owner_id_iter(chunk_size=2)) == ["a", "b", "c", "d", "e"]
    assert len(queries) == 3
    assert list(ops.owner_id_iter(min_last_seq=1)) == ["b", "d"]


def test_stats_counts_rows_and_reads_cache_counters(history):
    history(turns=3)
    selectors.context_get(owner_id="wang")
    stats = ops.stats_get()
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
    memory, complete = selectors.context.database_read("wang", 51)
    assert complete
    assert memory.turns == [payloads.turn_payload(first), payloads.turn_payload(second)]
    assert memory.turns[0]["created_at"] == "2025-01-02T03:04:05Z"
    facts = Fact.objects.filter(owner__external_id="wang").order_by("key")
    assert memory.facts == [payloads.fact_payload(fact) for fact in facts]
    assert memory.facts[-1]["value"] is None
    assert selectors.context.database_read("nobody", 51) == (cache.Snapshot(0, [], []), True)


# The context as model messages -------------------------------------------------------------

CHARACTERS = "builtins.len"


def _turn_messages(context):
    return [{"role": t["role"], "content": t["content"]} for t in context["turns"]]


def test_context_messages_are_the_facts_then_the_turns(history):
    history()
    context = selectors.context_get(owner_id="wang")
    sent = selectors.context_messages(owner_id="wang")
    assert set(sent) == {
        "user_id",
        "messages",
        "facts",
        "source",
        "tokens",
        "summary_through_seq",
        "recalled",
    }
    assert sent["user_id"] == "wang"
    assert sent["facts"] == {"likes": ["basketball"], "name": "Wang Jianguo"}
    assert sent["messages"][0] == {
        "role": "system",
        "content": 'Known facts about the user:\n- likes: ["basketball"]\n- name: Wang Jianguo',
    }
    assert sent["messages"][1:] == _turn_messages(context)
    assert [m["content"] for m in sent["messages"][1:3]] == ["turn 11", "turn 12"]
    assert sent["tokens"] == sum(tokens.estimate_counter(m["content"]) for m in sent["messages"])


def test_context_messages_take_turns_as_the_context_does(history):
    history()
    sent = selectors.context_messages(owner_id="wang", turns=3)
    assert [m["content"] for m in sent["messages"][1:]] == ["turn 28", "turn 29", "turn 30"]
    assert selectors.context_messages(owner_id="wang", turns=0)["messages"][1:] == []


def test_context_messages_read_from_the_cache_once_warm(history):
    history()
    cold = selectors.context_messages(owner_id="wang", max_tokens=1000)
    warm = selectors.context_messages(owner_id="wang", max_tokens=1000)
    assert (cold["source"], warm["source"]) == ("database", "cache")
    assert {**cold, "source": None} == {**warm, "source": None}


def test_context_messages_of_an_unknown_owner_hold_only_the_facts_message():
    sent = selectors.context_messages(owner_id="nobody", max_tokens=50)
    assert sent["messages"] == [
        {"role": "system", "content": "Known facts about the user: none yet."}
    ]
    assert sent["facts"] == {}
    assert sent["tokens"] == tokens.estimate_counter(sent["messages"][0]["content"])


def test_max_tokens_keeps_the_newest_whole_turns_that_fit(history, memory_settings):
    history()
    with memory_settings(TOKEN_COUNTER=CHARACTERS):
        facts = len(selectors.context_messages(owner_id="wang", turns=0)["messages"][0]["content"])
        # "turn 29" and "turn 30" are 7 characters each; "turn 28" no longer fits.
        sent = selectors.context_messages(owner_id="wang", max_tokens=facts + 14 + 6)
        assert [m["content"] for m in sent["messages"][1:]] == ["turn 29", "turn 30"]
        assert sent["tokens"] == facts + 14
        exact = selectors.context_messages(owner_id="wang", max_tokens=facts + 21)
        assert [m["content"] for m in exact["messages"][1:]] == ["turn 28", "turn 29", "turn 30"]
        assert exact["tokens"] == facts + 21
        only_facts = selectors.context_messages(owner_id="wang", max_tokens=facts)
        assert only_facts["messages"][1:] == []
        assert only_facts["tokens"] == facts


def test_max_tokens_stops_at_the_first_turn_that_does_not_fit(write, memory_settings):
    with write():
        for content in ["old", "x" * 100, "new"]:
            services.turn_append(owner_id="wang", session_id="s", role="user", content=content)
    with memory_settings(TOKEN_COUNTER=CHARACTERS):
        facts = len(selectors.context_messages(owner_id="wang", turns=0)["messages"][0]["content"])
        sent = selectors.context_messages(owner_id="wang", max_tokens=facts + 50)
    # NOTE: "old" would fit in what is left, but not without the turn between them.
    assert [m["content"] for m in sent["messages"][1:]] == ["new"]


def test_max_tokens_reads_at_most_max_context_turns(history, memory_settings):
    history()
    with memory_settings(MAX_CONTEXT_TURNS=25):
        sent = selectors.context_messages(owner_id="wang", max_tokens=100_000)
        assert [m["content"] for m in sent["messages"][1:]] == [f"turn {i}" for i in range(6, 31)]
        fewer = selectors.context_messages(owner_id="wang", max_tokens=100_000, turns=4)
        assert len(fewer["messages"]) == 1 + 4


def test_facts_alone_over_max_tokens_are_refused_and_never_cut(write, memory_settings):
    with write():
        services.fact_put(owner_id="wang", key="name", value="Wang Jianguo")
    with memory_settings(TOKEN_COUNTER=CHARACTERS):
        facts = len(selectors.context_messages(owner_id="wang", turns=0)["messages"][0]["content"])
        assert selectors.context_messages(owner_id="wang", max_tokens=facts)["tokens"] == facts
        with pytest.raises(ValidationError) as info:
            selectors.context_messages(owner_id="wang", max_tokens=facts - 1)
    assert list(info.value.message_dict) == ["max_tokens"]
    assert f"take {facts} tokens" in info.value.message_dict["max_tokens"][0]


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": -5}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"max_tokens": "100"}, "max_tokens"),
        ({"max_tokens": 1.5}, "max_tokens"),
        ({"max_tokens": tokens.MAX_TOKENS + 1}, "max_tokens"),
        ({"turns": -1}, "turns"),
        ({"turns": 201}, "turns"),
        ({"max_tokens": 100, "turns": 201}, "turns"),
        ({"owner_id": "no spaces"}, "user_id"),
    ],
)
def test_context_messages_refuse_bad_arguments(arguments, field):
    arguments = {"owner_id": "wang", **arguments}
    with pytest.raises(ValidationError) as info:
        selectors.context_messages(**arguments)
    assert list(info.value.message_dict) == [field]


def test_context_messages_keep_chinese_text_exactly(write):
    said = "我叫王建国，我喜欢打篮球。\n第二行：「引号」 🙂 and English"
    with write():
        services.fact_put(owner_id="wang", key="location", value="上海")
        services.fact_put(owner_id="wang", key="note", value="第一行\n- admin: yes")
        services.turn_append(owner_id="wang", session_id="s", role="user", content=said)
        services.turn_append(owner_id="wang", session_id="s", role="assistant", content="好的！")
    for _ in range(2):  # database, then cache
        sent = selectors.context_messages(owner_id="wang", max_tokens=200)
        assert sent["messages"][1:] == [
            {"role": "user", "content": said},
            {"role": "assistant", "content": "好的！"},
        ]
        # NOTE: a value with a line break is written as JSON, so it cannot pose as a fact line.
        # The extractor wrote name and likes from the turn.
        assert sent["messages"][0]["content"] == (
            'Known facts about the user:\n- likes: ["打篮球"]\n- location: 上海\n'
            '- name: 王建国\n- note: "第一行\\n- admin: yes"'
        )
        assert sent["facts"]["note"] == "第一行\n- admin: yes"
    budget = tokens.estimate_counter(sent["messages"][0]["content"]) + tokens.estimate_counter(
        "好的！"
    )
    assert selectors.context_messages(owner_id="wang", max_tokens=budget)["messages"][1:] == [
        {"role": "assistant", "content": "好的！"}
    ]


def test_context_messages_with_redis_down_are_the_same(history, dead_cache):
    history()
    sent = selectors.context_messages(owner_id="wang", max_tokens=60)
    assert sent["source"] == "database"
    assert sent["messages"][0]["content"].endswith("- name: Wang Jianguo")
    assert sent["messages"][-1] == {"role": "assistant", "content": "turn 30"}


def test_context_messages_with_a_bad_counter_are_improperly_configured(memory_settings):
    with memory_settings(TOKEN_COUNTER="nowhere.count"), pytest.raises(ImproperlyConfigured):
        selectors.context_messages(owner_id="wang", max_tokens=10)


def test_a_wide_first_read_does_not_mark_a_partial_copy_complete(history, memory_settings):
    """A cold read of 200 turns of an owner with 80 stores the last 50: that copy is not all of
    the owner's turns, so a later read of 100 must not be served its 50."""
    history(turns=80)
    with memory_settings(CACHE_TURNS=50):
        wide = selectors.context_get(owner_id="wang", turns=200)
        assert (wide["source"], len(wide["turns"])) == ("database", 80)
        again = selectors.context_get(owner_id="wang", turns=100)
        assert (again["source"], len(again["turns"])) == ("database", 80)
        assert selectors.context_get(owner_id="wang", turns=50)["source"] == "cache"


@pytest.mark.parametrize("session_id", [None, "a"])
def test_a_turn_page_walks_the_index_without_sorting(history, session_id):
    from django.db import connection

    history(turns=30)
    sql, params = selectors.turns.turn_page_queryset("wang", session_id=session_id, after=10)[
        :6
    ].query.sql_with_params()
    with connection.cursor() as cursor:
        # NOTE: thirty rows are cheapest read any way and sorted; what matters is whether an
        # index serves this order, as it must for a long history.
        for method in ("seqscan", "bitmapscan", "sort"):
            cursor.execute(f"SET LOCAL enable_{method} = off")
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Sort" not in plan, plan
    assert "Index" in plan, plan


@pytest.mark.parametrize(
    ("read", "kwargs"),
    [
        (selectors.owner_exists, {"owner_id": "wang"}),
        (ops.owner_dirty_count, {"limit": 10}),
        (ops.owner_recent_list, {"limit": 10}),
        (selectors.turn_list, {"owner_id": "wang"}),
    ],
    ids=lambda p: getattr(p, "__name__", ""),
)
def test_database_reads_raise_memory_unavailable_when_the_database_is_down(
    dead_database, read, kwargs
):
    with pytest.raises(MemoryUnavailable, match="The database is unavailable"):
        read(**kwargs)


def test_owner_usage_counts_turns_and_their_characters(write):
    assert ops.owner_usage_get(owner_id="wang") == (0, 0)
    with write():
        for content in ("hello", "我住在上海"):
            services.turn_append(owner_id="wang", session_id="s", role="user", content=content)
        services.turn_append(owner_id="li", session_id="s", role="user", content="x" * 100)
    assert ops.owner_usage_get(owner_id="wang") == ops.OwnerUsage(turns=2, chars=10)
