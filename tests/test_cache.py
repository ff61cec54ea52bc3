"""Tests of memory.cache: key layout, payloads, and the stamps that keep stale copies out."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.asyncio.connection import Connection as AsyncConnection
from redis.connection import Connection

from memory import cache, selectors, services
from memory.cache.copy import Hit, Short, Snapshot
from memory.models import Owner

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True, params=["claim-after", "read-claim-script"])
def claim_path(request, monkeypatch):
    """Each test with a miss's claim sent after its read, and in one script with it
    (``memory.cache.copy.miss_share``)."""
    in_script = request.param == "read-claim-script"
    monkeypatch.setattr(cache.copy.miss_share, "THRESHOLD", -1.0 if in_script else 2.0)


def append(owner_id: str, content: str) -> None:
    services.turn_append(owner_id=owner_id, session_id="s", role="user", content=content)


def contents(context) -> list[str]:
    return [turn["content"] for turn in context["turns"]]


def test_owner_key_has_prefix_schema_and_hash_tag_without_the_id(settings):
    key = cache.keys.owner_key("wang@example.com")
    history = cache.history.history_current()
    prefix = f"{settings.MEMORY['KEY_PREFIX']}:v6:h{history}:{{"
    assert key.startswith(prefix) and key.endswith("}")
    assert "wang" not in key
    assert key != cache.keys.owner_key("wang@example.org")
    assert key == cache.keys.owner_key("wang@example.com")


def test_cached_payload_is_a_json_array_of_the_api_fields(
    django_capture_on_commit_callbacks, redis_client
):
    with django_capture_on_commit_callbacks(execute=True):
        append("wang", "我叫王建国")
        services.fact_put(owner_id="wang", key="name", value="王建国")
    context = selectors.context_get(owner_id="wang")
    raw = redis_client.hgetall(cache.keys.owner_key("wang"))
    # NOTE: the turns are one field, each payload followed by a comma; here one turn, from 0.
    assert raw[b"seqs"] == b"1" and b"tail" not in raw
    assert raw[b"ends"] == bytes(4) + len(raw[b"turns"]).to_bytes(4)
    payload = raw[b"turns"].removesuffix(b",")
    assert orjson.loads(payload) == [context["turns"][0][f] for f in cache.copy.TURN_FIELDS]
    assert orjson.loads(raw[b"facts"])[1] == "王建国"
    assert "我叫王建国".encode() in raw[b"turns"]
    (fact,) = selectors.fact_list(owner_id="wang")
    stored = {field: fact[field] for field in cache.copy.FACT_FIELDS}
    assert orjson.loads(raw[b"facts"]) == list(stored.values())
    unpacked = cache.copy.payloads_unpack(b"[" + payload + b"]", b"[" + raw[b"facts"] + b"]")
    assert unpacked == (context["turns"][:1], [stored])


def test_stale_fill_after_a_write_is_refused(django_capture_on_commit_callbacks):
    """The cache-aside "stale set" race, driven step by step.

    A reader misses and reads the database; a writer commits and updates the cache (there is
    no copy, so it leaves a floor); only then does the reader store what it read.
    """
    with django_capture_on_commit_callbacks(execute=True):
        append("wang", "one")
    stale, complete = selectors.context.database_read("wang", 51)
    with django_capture_on_commit_callbacks(execute=True):
        append("wang", "two")
    stored = cache.copy.copy_fill(owner_id="wang", loaded=cache.Loaded(stale, complete))
    assert stored is cache.copy.Fill.REFUSED
    assert contents(selectors.context_get(owner_id="wang")) == ["one", "two"]
    assert contents(selectors.context_get(owner_id="wang")) == ["one", "two"]


def test_fill_before_a_committed_writes_cache_update_is_caught_up(
    django_capture_on_commit_callbacks,
):
    """The other order: the write commits, the reader fills with what it read before, and the
    write's own cache update lands last. The delta brings the copy up to date."""
    with django_capture_on_commit_callbacks(execute=True):
        append("wang", "one")
    stale, complete = selectors.context.database_read("wang", 51)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        append("wang", "two")
    assert (
        cache.copy.copy_fill(owner_id="wang", loaded=cache.Loaded(stale, complete))
        is cache.copy.Fill.UNCLAIMED
    )
    for callback in callbacks:
        callback()
    context = selectors.context_get(owner_id="wang")
    assert context["source"] == "cache"
    assert contents(context) == ["one", "two"]


def test_fill_that_already_holds_the_write_is_not_doubled(django_capture_on_commit_callbacks):
    """A reader reads the stamp before a write and the rows after it; the write's delta then
    arrives on a copy that already has the turn. Applying it twice must change nothing."""
    with django_capture_on_commit_callbacks(execute=True):
        append("wang", "one")
    before = Owner.objects.get(external_id="wang").stamp
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        append("wang", "two")
    mixed, complete = selectors.context.database_read("wang", 51)
    assert (
        cache.copy.copy_fill(
            owner_id="wang",
            loaded=cache.Loaded(cache.Snapshot(before, mixed.turns, mixed.facts), complete),
        )
        is cache.copy.Fill.UNCLAIMED
    )
    for callback in callbacks:
        callback()
    context = selectors.context_get(owner_id="wang")
    assert context["source"] == "cache"
    assert contents(context) == ["one", "two"]


def test_stale_fill_after_forget_cannot_resurrect_memory(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        append("wang", "My name is Wang Jianguo")
    stale, complete = selectors.context.database_read("wang", 51)
    with django_capture_on_commit_callbacks(execute=True):
        services.memory_forget(owner_id="wang")
    assert (
        cache.copy.copy_fill(owner_id="wang", loaded=cache.Loaded(stale, complete))
        is cache.copy.Fill.REFUSED
    )
    assert selectors.context_get(owner_id="wang")["turns"] == []


def test_stale_fill_after_fact_change_is_refused(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        services.fact_put(owner_id="wang", key="name", value="Bob")
    stale, complete = selectors.context.database_read("wang", 51)
    with django_capture_on_commit_callbacks(execute=True):
        services.fact_put(owner_id="wang", key="name", value="Wang Jianguo")
    assert (
        cache.copy.copy_fill(owner_id="wang", loaded=cache.Loaded(stale, complete))
        is cache.copy.Fill.REFUSED
    )
    assert selectors.context_get(owner_id="wang")["facts"] == {"name": "Wang Jianguo"}


def test_delta_on_a_copy_that_missed_a_write_drops_it(
    django_capture_on_commit_callbacks, redis_client
):
    with django_capture_on_commit_callbacks(execute=True):
        append("wang", "one")
    selectors.context_get(owner_id="wang")
    with django_capture_on_commit_callbacks(execute=False):
        append("wang", "two (its cache update is lost)")
    with django_capture_on_commit_callbacks(execute=True):
        append("wang", "three")
    raw = redis_client.hgetall(cache.keys.owner_key("wang"))
    assert b"rev" not in raw
    assert int(raw[b"floor"]) == Owner.objects.get(external_id="wang").stamp
    assert contents(selectors.context_get(owner_id="wang")) == [
        "one",
        "two (its cache update is lost)",
        "three",
    ]


def test_fact_keys_follow_every_delta(django_capture_on_commit_callbacks, redis_client):
    """A hit finds the facts through the copy's ``fkeys`` field, which deltas keep up to date."""
    with django_capture_on_commit_callbacks(execute=True):
        services.fact_put(owner_id="wang", key="name", value="Wang")
        services.fact_put(owner_id="wang", key="city", value="Shanghai")
    selectors.context_get(owner_id="wang")
    with django_capture_on_commit_callbacks(execute=True):
        services.fact_put(owner_id="wang", key="pet", value="cat")
        services.fact_put(owner_id="wang", key="name", value="Jianguo")
        services.fact_delete(owner_id="wang", key="city")
    fkeys = redis_client.hget(cache.keys.owner_key("wang"), "fkeys")
    assert sorted(fkeys.split()) == [b"name", b"pet"]
    context = selectors.context_get(owner_id="wang")
    assert context["source"] == "cache"
    assert context["facts"] == {"name": "Jianguo", "pet": "cat"}


def test_turns_field_is_cut_where_the_turns_asked_begin(
    django_capture_on_commit_callbacks, redis_client, memory_settings
):
    """The cached turns are two fields, ``turns`` then ``tail``, where each cached payload
    begins and ends by ``ends``: a hit returns the turns asked for, whatever their bytes
    (Chinese, commas, quotes), and a delta past ``CACHE_TURNS`` moves the first offset past the
    oldest."""
    texts = ["我叫王建国", 'a, "quoted" one', "[x]", "{}", "plain", "篮球,足球"]
    with memory_settings(CACHE_TURNS=4, CONTEXT_TURNS=3):
        with django_capture_on_commit_callbacks(execute=True):
            append("wang", texts[0])
        selectors.context_get(owner_id="wang")
        for text in texts[1:]:
            with django_capture_on_commit_callbacks(execute=True):
                append("wang", text)
        key = cache.keys.owner_key("wang")
        held = redis_client.hmget(key, "seqs", "turns", "complete", "ends", "tail")
        assert held[0] == b"3 4 5 6" and held[2] == b"0"
        body = held[1] + held[4]
        ends = [int.from_bytes(held[3][i : i + 4]) for i in range(0, len(held[3]), 4)]
        assert len(ends) == 5 and ends[-1] == len(body) and ends[0] > 0
        assert all(body[end - 1 : end] == b"," for end in ends)
        for turns in (0, 1, 3, 4):
            context = selectors.context_get(owner_id="wang", turns=turns)
            assert context["source"] == "cache"
            wanted = texts[len(texts) - turns :] if turns else []
            assert contents(context) == wanted
        assert selectors.context_get(owner_id="wang", turns=5)["source"] == "database"
    # A field that does not end where its ends say is never cut: the database answers.
    redis_client.hset(key, "tail", held[4][:-1])
    assert selectors.context_get(owner_id="wang", turns=2)["source"] == "database"


def test_appends_fold_the_tail_into_the_turns_field(
    django_capture_on_commit_callbacks, redis_client, memory_settings
):
    """An append writes ``tail`` and ``ends``; once ``tail`` and the bytes of turns no longer
    cached reach a quarter of ``turns`` (1 KB at least), they are folded into ``turns``. Every
    read between serves the last turns, as the database holds them."""
    key = cache.keys.owner_key("wang")
    with memory_settings(CACHE_TURNS=5, CONTEXT_TURNS=5):
        with django_capture_on_commit_callbacks(execute=True):
            append("wang", "first")
        selectors.context_get(owner_id="wang")
        folds = 0
        for i in range(40):
            with django_capture_on_commit_callbacks(execute=True):
                append("wang", f"turn {i} " + "x" * 90)
            held = redis_client.hmget(key, "turns", "tail", "ends")
            if held[1] is None:
                folds += 1
                assert held[2][:4] == bytes(4)
            context = selectors.context_get(owner_id="wang")
            assert context["source"] == "cache"
            assert [turn["seq"] for turn in context["turns"]] == list(range(max(1, i - 2), i + 3))
            assert contents(context)[-1] == f"turn {i} " + "x" * 90
            assert len(held[0] or b"") + len(held[1] or b"") < 5 * 200 + 1024 + 200
        assert 2 <= folds < 20


# A turn's text: long ones make the script fold the tail into ``turns`` within a few deltas.
CONTENT = st.tuples(
    st.sampled_from(["", "篮球,足球", 'a, "q"', "[x]", "{}"]), st.integers(0, 700)
).map(lambda parts: parts[0] + "x" * parts[1])
# A delta: new turns (their text), a repeat of the newest cached turn, a fact set or deleted.
DELTA = st.tuples(
    st.lists(CONTENT, max_size=3),
    st.booleans(),
    st.sampled_from([None, ("set", "name"), ("set", "city"), ("delete", "name")]),
)


AT = "2026-12-07T08:00:00Z"


def turn_of(seq: int, content: str) -> dict:
    return {"seq": seq, "session_id": "s", "role": "user", "content": content, "metadata": {},
            "created_at": AT}  # fmt: skip


def fact_of(key: str, version: int) -> dict:
    return {"key": key, "value": f"{key} {version}", "session_id": "s", "updated_at": AT,
            "version": version, "expires_at": None}  # fmt: skip


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    filled=st.lists(CONTENT, max_size=8),
    depth=st.integers(1, 6),
    deltas=st.lists(DELTA, min_size=1, max_size=12),
)
def test_a_copy_after_any_deltas_reads_as_its_turns_and_facts(
    memory_settings, filled, depth, deltas
):
    """Whatever the deltas (turns added, repeated, the oldest cut past ``CACHE_TURNS``, facts set
    and deleted) and wherever the script folded its tail, every read of the copy returns the
    last turns asked for and the facts, as a model of the copy holds them, or ``Short``."""
    cache.copy.copy_evict(owner_id="prop")
    with memory_settings(CACHE_TURNS=depth):
        held = [turn_of(seq, text) for seq, text in enumerate(filled, start=1)]
        complete = len(held) <= depth
        held = held[-depth:]
        stamp, seq, facts = 10, len(filled), {}
        stored = cache.copy.copy_fill(
            owner_id="prop", loaded=cache.Loaded(Snapshot(stamp, held, []), complete)
        )
        assert stored is cache.copy.Fill.UNCLAIMED
        for texts, repeat, fact in deltas:
            turns = [turn_of(seq := seq + 1, text) for text in texts]
            if repeat and held:
                turns.insert(0, held[-1])
            written, deleted = [], []
            if fact is not None and fact[0] == "set":
                written = [fact_of(fact[1], stamp)]
                facts[fact[1]] = written[0]
            elif fact is not None and facts.pop(fact[1], None) is not None:
                deleted = [fact[1]]
            assert cache.copy.copy_apply(
                owner_id="prop", prev_stamp=stamp, stamp=stamp + 1, turns=turns,
                facts=written, deleted_keys=deleted,
            )  # fmt: skip
            stamp += 1
            cached = {turn["seq"] for turn in held}
            held += [turn for turn in turns if turn["seq"] not in cached]
            if len(held) > depth:
                held, complete = held[-depth:], False
            for want in range(depth + 2):
                got = cache.copy.copy_read(owner_id="prop", turns=want, claim_fill=False)
                if want > len(held) and not complete:
                    assert isinstance(got, Short)
                    continue
                assert isinstance(got, Hit) and got.snapshot.stamp == stamp
                assert got.snapshot.turns == (held[max(len(held) - want, 0) :] if want else [])
                assert got.snapshot.facts == [facts[key] for key in sorted(facts)]


def test_evicted_owner_goes_whole(django_capture_on_commit_callbacks, redis_client):
    with django_capture_on_commit_callbacks(execute=True):
        append("wang", "one")
        services.fact_put(owner_id="wang", key="name", value="Wang")
    selectors.context_get(owner_id="wang")
    keys = list(redis_client.scan_iter(match=f"{cache.keys.owner_key('wang')}*"))
    assert keys == [cache.keys.owner_key("wang").encode()]


def test_concurrent_cold_reads_wait_for_one_rehydration(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        append("wang", "one")
    first = cache.copy.copy_read(owner_id="wang", turns=20)
    second = cache.copy.copy_read(owner_id="wang", turns=20)
    assert isinstance(first, cache.copy.Miss) and first.fill_token
    assert isinstance(second, cache.copy.Miss) and second.fill_token is None


def test_a_read_redis_refuses_leaves_its_connection_in_step(
    django_capture_on_commit_callbacks, redis_client
):
    """A read whose HMGET Redis refuses (a key of the wrong type) is a bug, not an outage, and
    the replies after it are read all the same: its connection goes back to the pool in step,
    not to be dropped by the next caller."""
    with django_capture_on_commit_callbacks(execute=True):
        append("wang", "one")
    key = cache.keys.owner_key("wang")
    redis_client.set(key, "not a hash")
    connection = redis_client.client_id()
    assert cache.copy.copy_read(owner_id="wang", turns=20) is cache.client.Outcome.ERROR
    assert cache.client.breaker.bugs == 1 and not cache.client.breaker.down
    assert redis_client.client_id() == connection
    assert redis_client.delete(key) == 1
    assert selectors.context_get(owner_id="wang")["source"] == "database"
    context = selectors.context_get(owner_id="wang")
    assert context["source"] == "cache" and contents(context) == ["one"]


ARGUMENT = st.one_of(st.text(max_size=40), st.binary(max_size=40), st.integers(), st.floats())


@settings(max_examples=100, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    commands=st.lists(
        st.tuples(st.sampled_from(["HMGET", "EXPIRE", "EVALSHA"]), st.lists(ARGUMENT, max_size=6)),
        min_size=1,
        max_size=3,
    )
)
def test_commands_are_sent_as_redis_py_packs_them(commands):
    """The warm read's own packing (``client.commands_run``) against its specification, the
    packer of redis-py's connections, sync and async."""
    commands = [(name, *arguments) for name, arguments in commands]
    for connection in (Connection(), AsyncConnection()):
        packed = cache.wire._packed(connection.encoder.encode, commands)
        assert packed == b"".join(connection.pack_commands(commands))


def test_dead_cache_reads_and_writes_answer_false_without_raising(dead_cache):
    # NOTE: named outright: a default name asks the server's run first, and finds it down.
    read = cache.copy.copy_read(owner_id="wang", turns=20, epoch="0")
    assert read is cache.client.Outcome.DOWN
    assert cache.history.history_epoch() is None
    assert cache.copy.copy_apply(owner_id="wang", prev_stamp=0, stamp=1) is False
    assert cache.copy.copy_drop(owner_id="wang", stamp=1) is False
    assert cache.ping() == "down"
    assert cache.stats()["cache"] == "down"


def test_stats_count_hits_misses_and_rehydrations(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        append("wang", "one")
    selectors.context_get(owner_id="wang")
    selectors.context_get(owner_id="wang")
    counters = cache.stats()["counters"]
    assert counters["misses"] >= 1
    assert counters["hits"] >= 1
    assert counters["rehydrations"] >= 1
    assert cache.stats()["keys"] >= 1


@pytest.mark.django_db(transaction=True)
def test_a_warm_async_read_is_native_and_a_cold_one_takes_one_thread_hop(monkeypatch):
    import asyncio

    from django.db import connections

    from memory.cache import aio

    services.turn_append(owner_id="wang", session_id="s", role="user", content="one")
    hops: list[str] = []
    real = aio.sync_to_async

    def counted(fn, *args, **kwargs):
        hops.append(getattr(fn, "__name__", repr(fn)))
        return real(fn, *args, **kwargs)

    monkeypatch.setattr(aio, "sync_to_async", counted)

    def load(n):
        return selectors.context.database_read("wang", n)

    async def twice():
        first = await cache.aread_through(owner_id="wang", turns=20, load=load)
        second = await cache.aread_through(owner_id="wang", turns=20, load=load)
        # NOTE: the thread-sensitive worker opened a connection of its own; close it there.
        await real(connections.close_all)()
        return first, second

    (cold, cold_source), (warm, warm_source) = asyncio.run(twice())
    assert (cold_source, warm_source) == ("database", "cache")
    assert cold == warm and [t["content"] for t in warm.turns] == ["one"]
    assert hops == ["read_through"]  # the cold read only
