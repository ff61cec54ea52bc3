"""Regression tests of the cache protocol (memory.cache), one per hole it closes, driven step by
step: a loader that races a write in, a breaker told its window is over, repair rounds run by
hand. Each names the stale path it shuts."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time

import pytest
import redis
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from memory import cache, selectors, services
from memory.cache import client as cache_client
from memory.conf import conf
from memory.models import CacheInvalidation, Fact, Owner, Turn
from tests.instance import ROOT
from tests.servers import HOST, RedisServer

pytestmark = pytest.mark.django_db


def append(owner_id: str, content: str) -> None:
    services.turn_append(owner_id=owner_id, session_id="s", role="user", content=content)


def contents(context) -> list[str]:
    return [turn["content"] for turn in context["turns"]]


def another_instance() -> None:
    """From here on, act as a process that never saw this one's errors or pending updates."""
    cache.reset()


def copy_stamp(client, owner_id: str) -> int | None:
    rev = client.hget(cache.keys.owner_key(owner_id), "rev")
    return int(rev) if rev is not None else None


def db_stamp(owner_id: str) -> int:
    return Owner.objects.get(external_id=owner_id).stamp


# 1. Every read served from a copy passes the same validity step (facts/ used to skip it).


@pytest.mark.faults
def test_facts_are_not_served_from_a_copy_behind_a_write_lost_while_redis_was_paused(
    own_redis, write
):
    with write():
        services.fact_put(owner_id="wang", key="name", value="Bob")
    assert selectors.fact_list(owner_id="wang")[0]["value"] == "Bob"
    own_redis.pause()
    client = redis.Redis.from_url(own_redis.url)
    try:
        with write():
            services.fact_put(owner_id="wang", key="name", value="Wang Jianguo")
    finally:
        own_redis.resume()
    # NOTE: Redis received nothing of that write while paused, so the copy is still at "Bob"
    # unless the paused Redis ran the buffered update on resume; make it stale for certain.
    stale = cache.copy.fact_pack(
        {"key": "name", "value": "Bob", "session_id": None, "version": 1,
         "updated_at": "2026-01-01T00:00:00Z", "expires_at": None}
    )  # fmt: skip
    client.hset(
        cache.keys.owner_key("wang"),
        mapping={"fkeys": "name", "fends": len(stale).to_bytes(4), "facts": stale},
    )
    # The writer knows its update did not land: neither facts nor context serve the copy.
    assert [f["value"] for f in selectors.fact_list(owner_id="wang")] == ["Wang Jianguo"]
    assert selectors.context_get(owner_id="wang")["facts"] == {"name": "Wang Jianguo"}
    # Another process that saw no error either: the writer's repair (its next round) drops it.
    assert cache.run_once() == 1
    another_instance()
    assert [f["value"] for f in selectors.fact_list(owner_id="wang")] == ["Wang Jianguo"]
    assert [f["value"] for f in selectors.fact_list(owner_id="wang")] == ["Wang Jianguo"]


def test_a_suspect_process_checks_each_copy_against_the_database(write, redis_client):
    with write():
        services.fact_put(owner_id="wang", key="name", value="Bob")
    selectors.context_get(owner_id="wang")
    # A copy left behind by another process's lost update: its stamp is the old one.
    with transaction.atomic():
        Owner.objects.filter(external_id="wang").update(stamp=db_stamp("wang") + 1000)
        Fact.objects.filter(owner__external_id="wang").update(value="Wang Jianguo")
    assert selectors.fact_list(owner_id="wang")[0]["value"] == "Bob"  # not suspect: the bound
    cache.client.breaker.failed(OSError("seen down"), "test")
    cache.client.breaker.succeeded()
    assert cache.client.breaker.suspect()
    assert selectors.fact_list(owner_id="wang")[0]["value"] == "Wang Jianguo"
    assert selectors.context_get(owner_id="wang")["facts"] == {"name": "Wang Jianguo"}
    assert copy_stamp(redis_client, "wang") == db_stamp("wang")


# 2./3. Writes after recovery land; the breaker's half-open admits one probe.


@pytest.mark.faults
def test_a_write_right_after_a_stall_updates_the_copy_although_the_breaker_is_open(
    own_redis, write
):
    with write():
        append("wang", "one")
    selectors.context_get(owner_id="wang")
    own_redis.pause()
    try:
        assert selectors.context_get(owner_id="wang")["source"] == "database"
    finally:
        own_redis.resume()
    assert cache.client.breaker.state == "open"
    with write():
        append("wang", "two")
    client = redis.Redis.from_url(own_redis.url)
    assert copy_stamp(client, "wang") == db_stamp("wang")
    assert cache.client.breaker.state == "closed"
    another_instance()
    context = selectors.context_get(owner_id="wang")
    assert context["source"] == "cache"
    assert contents(context) == ["one", "two"]


def test_half_open_breaker_admits_one_probe_and_writes_wait_for_it():
    breaker = cache_client.Breaker()
    assert breaker.admit(write=False) == cache_client.Pass()  # closed: go, no probe
    breaker.failed(OSError("down"), "test")
    assert breaker.admit(write=False) is None  # open: reads skip
    breaker.expire()
    ticket = breaker.admit(write=False)  # half-open: this reader is the probe
    assert isinstance(ticket, cache_client.Pass) and ticket.probe is not None
    assert breaker.admit(write=False) is None  # every other reader keeps skipping
    probe = breaker.admit(write=True)
    assert probe is ticket.probe and not probe.is_set()  # a write waits for it
    breaker.succeeded()
    assert probe.is_set()
    assert breaker.admit(write=False) == cache_client.Pass() and breaker.state == "closed"


def test_an_open_breaker_never_skips_a_write():
    breaker = cache_client.Breaker()
    breaker.failed(OSError("down"), "test")
    assert breaker.state == "open"
    ticket = breaker.admit(write=True)  # no probe in flight: the write is the probe
    assert isinstance(ticket, cache_client.Pass) and ticket.probe is not None


def test_a_probe_given_back_lets_the_next_caller_probe():
    breaker = cache_client.Breaker()
    breaker.failed(OSError("down"), "test")
    breaker.expire()
    ticket = breaker.admit(write=False)
    assert isinstance(ticket, cache_client.Pass)
    waiting = breaker.admit(write=True)
    breaker.release(ticket)  # cancelled before Redis answered
    assert isinstance(waiting, threading.Event) and waiting.is_set()
    assert breaker.state == "half-open"
    again = breaker.admit(write=False)
    assert isinstance(again, cache_client.Pass) and again.probe is not None


# 4. Writes that bypass the services follow the protocol.


def test_an_orm_fact_edit_takes_a_stamp_and_a_dirty_mark_in_its_transaction(
    write, dead_cache, memory_settings
):
    with write():
        services.fact_put(owner_id="wang", key="name", value="Bob")
    before = db_stamp("wang")
    with write(), transaction.atomic():
        fact = Fact.objects.get(owner__external_id="wang", key="name")
        fact.value = "Wang Jianguo"
        fact.save()
        owner = Owner.objects.get(external_id="wang")
        assert owner.stamp > before and owner.cache_dirty
    # Redis was down for the drop: the mark stays until a repair lands.
    assert Owner.objects.get(external_id="wang").cache_dirty
    assert cache.repair.pending_count() == 1


def test_an_orm_write_drops_the_copy_after_commit(write, redis_client):
    with write():
        append("wang", "one")
    selectors.context_get(owner_id="wang")
    with write(), transaction.atomic():
        turn = Turn.objects.get(owner__external_id="wang", seq=1)
        turn.content = "corrected"
        turn.save()
    assert not redis_client.hexists(cache.keys.owner_key("wang"), "rev")
    assert Owner.objects.get(external_id="wang").cache_dirty is False
    assert contents(selectors.context_get(owner_id="wang")) == ["corrected"]
    with write():
        Fact.objects.create(
            owner=Owner.objects.get(external_id="wang"),
            key="name",
            value="W",
            updated_at="2026-01-01T00:00Z",
        )
    assert selectors.fact_list(owner_id="wang")[0]["value"] == "W"
    with write():
        Fact.objects.get(owner__external_id="wang", key="name").delete()
    assert selectors.fact_list(owner_id="wang") == []


def _orm_delete_turn(how: str) -> None:
    """Delete Wang's turn 1 through the ORM, as a shell or a data migration would."""
    if how == "instance":
        Turn.objects.get(owner__external_id="wang", seq=1).delete()
    elif how == "queryset":
        Turn.objects.filter(owner__external_id="wang", seq__lte=1).delete()
    else:
        with transaction.atomic():
            Turn.objects.filter(owner__external_id="wang", seq=1).delete()


@pytest.mark.parametrize("how", ["instance", "queryset", "queryset in a transaction"])
def test_an_orm_delete_of_a_turn_drops_the_copy_after_commit(how, write, redis_client):
    with write():
        append("wang", "one")
        append("wang", "two")
    assert contents(selectors.context_get(owner_id="wang")) == ["one", "two"]
    assert selectors.context_get(owner_id="wang")["source"] == "cache"
    before = db_stamp("wang")
    with write():
        _orm_delete_turn(how)
    assert not redis_client.hexists(cache.keys.owner_key("wang"), "rev")
    owner = Owner.objects.get(external_id="wang")
    assert owner.stamp > before and owner.cache_dirty is False
    for source in ("database", "cache"):
        context = selectors.context_get(owner_id="wang")
        assert (context["source"], contents(context)) == (source, ["two"])
    another_instance()
    assert contents(selectors.context_get(owner_id="wang")) == ["two"]


def test_an_orm_delete_of_a_turn_takes_a_stamp_and_a_dirty_mark_in_its_transaction(
    write, dead_cache
):
    with write():
        append("wang", "one")
        append("li", "one")
    before = {owner: db_stamp(owner) for owner in ("wang", "li")}
    with write(), transaction.atomic():
        Turn.objects.filter(seq=1).delete()
        owners = {o.external_id: o for o in Owner.objects.all()}
        assert all(owners[o].stamp > before[o] and owners[o].cache_dirty for o in before)
    # Redis was down for the drops: the marks stay until a repair lands.
    assert Owner.objects.filter(cache_dirty=True).count() == 2
    assert cache.repair.pending_count() == 2


def test_an_orm_delete_of_facts_drops_the_copy_after_commit(write, redis_client):
    with write():
        services.facts_merge(owner_id="wang", facts={"name": "Wang", "location": "Shanghai"})
    assert selectors.context_get(owner_id="wang")["facts"] == {
        "name": "Wang",
        "location": "Shanghai",
    }
    with write():
        Fact.objects.filter(owner__external_id="wang", key="location").delete()
    assert not redis_client.hexists(cache.keys.owner_key("wang"), "rev")
    assert selectors.context_get(owner_id="wang")["facts"] == {"name": "Wang"}
    assert [f["key"] for f in selectors.fact_list(owner_id="wang")] == ["name"]


def test_an_orm_delete_of_an_owner_drops_its_copy_after_commit(write, redis_client):
    with write():
        append("wang", "one")
    selectors.context_get(owner_id="wang")
    with write():
        Owner.objects.get(external_id="wang").delete()
    assert not redis_client.hexists(cache.keys.owner_key("wang"), "rev")
    assert not CacheInvalidation.objects.exists()
    for _ in range(2):
        assert contents(selectors.context_get(owner_id="wang")) == []


def test_forget_still_deletes_every_turn_in_one_statement(write):
    """The ORM safety net for turns (``Turn.delete``, ``TurnQuerySet.delete``) is no signal
    receiver: with one, Django would load every turn of the owner to forget it."""
    with write():
        for i in range(5):
            append("wang", f"turn {i}")
    with CaptureQueriesContext(connection) as queries, write():
        services.memory_forget(owner_id="wang")
    statements = [q["sql"] for q in queries]
    assert len([sql for sql in statements if sql.startswith('DELETE FROM "memory_turn"')]) == 1
    assert not [sql for sql in statements if sql.startswith('SELECT "memory_turn".')]
    assert not Turn.objects.exists()


# 5. No floor key is load-bearing: every fill is verified after it is stored.


def _racing_load(owner_id: str, write, lose_floor):
    """A loader that reads the database, then lets a write commit and its cache update land
    (leaving a floor), then loses that floor, and only then hands back what it read."""

    def load(n: int):
        stale = selectors.context.database_read(owner_id, n)
        with write():
            append(owner_id, "written during the fill")
        lose_floor()
        return stale

    return load


@pytest.mark.faults
@pytest.mark.parametrize("loss", ["delete", "flushall"])
def test_a_lost_floor_cannot_let_a_stale_fill_stay(loss, write, own_redis):
    with write():
        append("wang", "one")
    client = redis.Redis.from_url(own_redis.url)

    def lose_floor() -> None:
        assert client.hget(cache.keys.owner_key("wang"), "floor") is not None
        if loss == "delete":
            client.delete(cache.keys.owner_key("wang"))
        else:
            client.flushall()

    snapshot, source = cache.read_through(
        owner_id="wang", turns=20, load=_racing_load("wang", write, lose_floor)
    )
    assert source == "database" and [t["content"] for t in snapshot.turns] == ["one"]
    # The fill was stored (no floor stopped it), then verified and taken out again.
    assert copy_stamp(client, "wang") in (None, db_stamp("wang"))
    another_instance()
    for _ in range(2):
        assert contents(selectors.context_get(owner_id="wang")) == [
            "one",
            "written during the fill",
        ]


@pytest.mark.faults
def test_an_evicted_floor_cannot_let_a_stale_fill_stay(write, own_redis):
    """volatile-ttl eviction takes the key with the shortest TTL first: the floor."""
    with write():
        append("wang", "one")
    client = redis.Redis.from_url(own_redis.url)

    def evict_floor() -> None:
        client.config_set("maxmemory-policy", "volatile-ttl")
        used = client.info("memory")["used_memory"]
        client.config_set("maxmemory", used + 200_000)
        for i in range(2000):
            client.set(f"filler:{i}", "x" * 1000, ex=86400)
            if not client.exists(cache.keys.owner_key("wang")):
                break
        assert not client.exists(cache.keys.owner_key("wang"))
        client.config_set("maxmemory", 0)

    cache.read_through(owner_id="wang", turns=20, load=_racing_load("wang", write, evict_floor))
    assert copy_stamp(client, "wang") in (None, db_stamp("wang"))
    another_instance()
    assert contents(selectors.context_get(owner_id="wang")) == ["one", "written during the fill"]


# 6. Errors are not outages; settings are validated and coerced when read.


def test_a_wrongtype_error_is_logged_as_a_bug_and_opens_no_breaker(redis_client, caplog, write):
    with write():
        append("wang", "one")
    redis_client.set(cache.keys.owner_key("wang"), "not a hash")
    with caplog.at_level(logging.ERROR, logger="memory.cache"):
        context = selectors.context_get(owner_id="wang")
    assert contents(context) == ["one"] and context["source"] == "database"
    assert cache.client.breaker.state == "closed" and cache.client.breaker.outages == 0
    assert cache.client.breaker.bugs >= 1
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR][:1]
    assert "read" in record.getMessage() and "WRONGTYPE" in record.getMessage()


def test_a_float_fill_wait_is_coerced_and_the_fill_lock_works(memory_settings, write):
    with write():
        append("wang", "one")
    with memory_settings(FILL_WAIT_MS=200.0):
        assert conf.FILL_WAIT_MS == 200 and isinstance(conf.FILL_WAIT_MS, int)
        first = cache.copy.copy_read(owner_id="wang", turns=20)
        assert isinstance(first, cache.copy.Miss) and first.fill_token
    assert cache.client.breaker.bugs == 0 and cache.client.breaker.outages == 0


@pytest.mark.parametrize(
    ("name", "value"),
    [("FILL_WAIT_MS", 1.5), ("CACHE_TTL", "3600"), ("RECONCILE_GRACE", -1), ("REPAIR_THREAD", 1)],
)
def test_bad_settings_raise_naming_the_key_when_read(memory_settings, name, value):
    with memory_settings(**{name: value}), pytest.raises(ImproperlyConfigured, match=name):
        getattr(conf, name)


def test_a_misconfigured_app_does_not_start_under_any_server():
    env = {
        "DJANGO_SETTINGS_MODULE": "tests.instance_settings",
        "MEMORY_OVERRIDES": json.dumps({"FILL_WAIT_MS": "soon"}),
        "PATH": "/usr/bin:/bin",
    }
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env={**env, "DJANGO_SECRET_KEY": "x" * 50, "DJANGO_DEBUG": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "MEMORY['FILL_WAIT_MS']" in done.stderr


# 7. One clock: graces are measured on the database's.


def test_the_dirty_sweep_measures_the_grace_on_the_database_clock(
    write, django_capture_on_commit_callbacks
):
    with write():
        append("wang", "one")
    selectors.context_get(owner_id="wang")
    with django_capture_on_commit_callbacks(execute=False):
        append("wang", "two")
    another_instance()
    assert cache.run_once(grace=60) == 0
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE memory_owner SET updated_at = statement_timestamp() - interval '61 seconds'"
            " WHERE external_id = %s",
            ["wang"],
        )
    assert cache.run_once(grace=60) == 1
    assert contents(selectors.context_get(owner_id="wang")) == ["one", "two"]


def test_a_forget_outbox_row_is_stamped_by_the_database(write, django_capture_on_commit_callbacks):
    with write():
        append("wang", "one")
    with django_capture_on_commit_callbacks(execute=False):
        services.memory_forget(owner_id="wang")
    row = CacheInvalidation.objects.get(external_id="wang")
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        (now,) = cursor.fetchone()
    assert abs((now - row.created_at).total_seconds()) < 60


# Replicas: an update counts as landed only once CACHE_REPLICAS replicas hold it.


def test_an_update_no_replica_acknowledged_has_not_landed(write, memory_settings):
    """The suite's Redis has no replica: with CACHE_REPLICAS 1, WAIT answers 0, so the write's
    update stays unconfirmed (owner dirty, repair pending) and its writer reads the database."""
    with write():
        append("wang", "one")
    selectors.context_get(owner_id="wang")
    with memory_settings(CACHE_REPLICAS=1, CACHE_REPLICA_WAIT_MS=10):
        with write():
            append("wang", "two")
        assert Owner.objects.get(external_id="wang").cache_dirty
        assert cache.repair.pending_count() == 1
        context = selectors.context_get(owner_id="wang")
        assert (context["source"], contents(context)) == ("database", ["one", "two"])
        assert cache.client.breaker.state == "closed"  # Redis answered: not an outage
    with memory_settings(CACHE_REPLICAS=0):
        assert cache.run_once() == 1
    assert not Owner.objects.get(external_id="wang").cache_dirty


def test_a_replica_that_dropped_off_is_waited_for_within_the_grace(
    own_redis, write, memory_settings
):
    """A replica whose link broke still holds its older copies and may yet be promoted: updates
    to its primary count as not landed for CACHE_REPLICA_GRACE after the first write that
    missed it (the owner stays dirty, the drop is repaired), and land again once it has passed."""
    replica = RedisServer(extra_args=["--replicaof", HOST, str(own_redis.port)]).start()
    try:
        primary = redis.Redis.from_url(own_redis.url)
        deadline = time.monotonic() + 10
        while primary.info("replication").get("slave0", {}).get("state") != "online":
            assert time.monotonic() < deadline, "the replica did not come online"
            time.sleep(0.05)
        with memory_settings(CACHE_REPLICAS=1, CACHE_REPLICA_GRACE=0.5):
            with write():
                append("wang", "one")
            cache.run_once()
            assert not Owner.objects.get(external_id="wang").cache_dirty
            replica.pause()
            try:
                primary.client_kill_filter(_type="replica")
                with write():
                    append("wang", "two")  # its WAIT times out: not landed
                assert cache.repair.pending_count() == 1
                # Within the grace the repair's drop does not land either, nor a new write.
                assert cache.run_once() == 0
                with write():
                    append("wang", "three")
                assert Owner.objects.get(external_id="wang").cache_dirty
                context = selectors.context_get(owner_id="wang")
                assert (context["source"], contents(context)) == (
                    "database",
                    ["one", "two", "three"],
                )
                time.sleep(0.6)
                # Past the grace the primary's replicas online are what a write waits for.
                assert cache.run_once() >= 1
                with write():
                    append("wang", "four")
                cache.run_once()
                assert not Owner.objects.get(external_id="wang").cache_dirty
                assert cache.repair.pending_count() == 0
            finally:
                replica.resume()
    finally:
        replica.cleanup()


# 8. A writer that exits normally leaves no mark for another process's sweep.

EXIT_SCRIPT = """
import django
django.setup()
from django.conf import settings
settings.MEMORY = {**settings.MEMORY, "REPAIR_THREAD": True, "RECONCILE_INTERVAL": 3600}
from memory import selectors, services
from memory.cache import repair
selectors.context_get(owner_id="wang")
services.turn_append(owner_id="wang", session_id="s", role="user", content="hello")
# NOTE: confirmed, its mark left for the repairer's batched clear, which sleeps meanwhile.
assert repair._state.confirmed, "the mark was cleared before the exit"
"""


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_writer_clears_the_marks_it_confirmed_before_it_exits(redis_client):
    from tests.instance import environment

    done = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT],
        cwd=ROOT,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    owner = Owner.objects.get(external_id="wang")
    assert (owner.last_seq, owner.cache_dirty) == (1, False)
    # NOTE: so the next process's sweep finds nothing to drop: the copy stays.
    assert cache.repair.sweep(grace=0) == 0
    assert selectors.context_get(owner_id="wang")["source"] == "cache"
