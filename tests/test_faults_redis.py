"""Redis misbehaving under two real app instances (gunicorn on loopback, one Postgres, one
redis-server of this module's own): flushed, evicting under maxmemory, killed and restarted,
paused mid-write. Requests keep succeeding, and afterwards every instance serves what
Postgres holds; with the instances connected to Postgres directly and through a PgBouncer in
transaction mode."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from tests.servers import RedisServer
from tests.stack import POOLERS, AppStack, app_stack

pytestmark = pytest.mark.faults

GRACE = 0.5
INTERVAL = 0.5


@pytest.fixture(scope="module", params=POOLERS, ids=["direct", "pgbouncer"])
def stack(request: pytest.FixtureRequest, cache_server: RedisServer) -> Iterator[AppStack]:
    with app_stack(
        server_url=os.environ["DATABASE_URL"],
        redis_url=cache_server.url,
        memory={"RECONCILE_GRACE": GRACE, "RECONCILE_INTERVAL": INTERVAL},
        # NOTE: one process per instance, so that "instance 0 saw an error" means one process.
        workers=1,
        pooler=request.param,
    ) as stack:
        yield stack


@pytest.fixture
def owner() -> str:
    return f"wang-{uuid.uuid4().hex[:8]}"


def tell(stack: AppStack, i: int, owner: str, session: str, content: str) -> dict:
    response = stack.request(
        i,
        "POST",
        f"/api/memory/users/{owner}/turns/",
        {"session_id": session, "role": "user", "content": content},
    )
    assert response.status == 201, response
    return response.data


def context(stack: AppStack, i: int, owner: str, turns: int = 50) -> dict:
    response = stack.request(i, "GET", f"/api/memory/users/{owner}/context/?turns={turns}")
    assert response.status == 200, response
    return response.data


def warmed(stack: AppStack, i: int, owner: str) -> dict:
    """Instance ``i``'s context of ``owner`` once it comes from the cache: a read that falls back
    to the database (its Redis call past the stack's 0.2 s timeout on a loaded machine) fills no
    copy, and the next one tries again; at most 20 reads."""
    for _ in range(20):
        read = context(stack, i, owner)
        if read["source"] == "cache":
            return read
        time.sleep(0.1)
    raise AssertionError(f"instance {i} never served {owner} from the cache")


def truth(stack: AppStack, owner: str, turns: int = 50) -> tuple[list[dict], dict]:
    """What Postgres holds: the turn listing and the facts endpoint read the database."""
    listed: list[dict] = []
    after = 0
    while True:
        page = stack.request(0, "GET", f"/api/memory/users/{owner}/turns/?after={after}&limit=500")
        assert page.status == 200, page
        listed += page.data["results"]
        if not page.data["next"]:
            break
        after = listed[-1]["seq"]
    return listed[-turns:], {}


def assert_serves_truth(stack: AppStack, owner: str) -> None:
    turns, _ = truth(stack, owner)
    for i in range(stack.instances):
        for _ in range(2):
            assert context(stack, i, owner)["turns"] == turns


def put_fact(stack: AppStack, i: int, owner: str, key: str, value: object) -> None:
    response = stack.request(i, "PUT", f"/api/memory/users/{owner}/facts/{key}/", {"value": value})
    assert response.status in (200, 201), response


def test_user_returns_on_another_instance_after_redis_flushall(stack, cache_server, owner):
    tell(stack, 0, owner, "laptop", "My name is Wang Jianguo")
    put_fact(stack, 0, owner, "name", "Wang Jianguo")
    assert context(stack, 1, owner)["facts"]["name"] == "Wang Jianguo"
    redis.Redis.from_url(cache_server.url).flushall()
    after = context(stack, 1, owner)
    assert after["source"] == "database"
    assert after["facts"]["name"] == "Wang Jianguo"
    assert [t["content"] for t in after["turns"]] == ["My name is Wang Jianguo"]
    assert context(stack, 0, owner)["source"] == "cache"


def test_memory_survives_lru_eviction_under_small_maxmemory(stack, cache_server):
    admin = redis.Redis.from_url(cache_server.url)
    owners = [f"lru-{uuid.uuid4().hex[:6]}-{n}" for n in range(40)]
    admin.config_set("maxmemory-policy", "allkeys-lru")
    admin.config_set("maxmemory", "1mb")
    try:
        for n, owner in enumerate(owners):
            for j in range(4):
                tell(stack, n % 2, owner, f"tab-{j}", f"{owner} says {'x' * 2000} #{j}")
            context(stack, (n + 1) % 2, owner)
        assert admin.info("stats")["evicted_keys"] > 0
        for owner in owners:
            assert_serves_truth(stack, owner)
    finally:
        admin.config_set("maxmemory", "0")


def test_redis_killed_and_restarted_mid_conversation(stack, cache_server, owner):
    tell(stack, 0, owner, "laptop", "one")
    context(stack, 1, owner)
    cache_server.kill()
    try:
        tell(stack, 1, owner, "phone", "two, while Redis is gone")
        assert [t["content"] for t in context(stack, 0, owner)["turns"]] == [
            "one",
            "two, while Redis is gone",
        ]
        assert stack.request(0, "GET", "/api/memory/health/").data["cache"] == "down"
    finally:
        cache_server.start()
    time.sleep(1.2)  # the one-second circuit breaker of each process
    tell(stack, 0, owner, "laptop", "three")
    assert_serves_truth(stack, owner)


def test_write_during_redis_pause_is_not_hidden_after_resume(stack, cache_server, owner):
    """A Redis that hangs (SIGSTOP) while one instance writes: the write's cache update cannot
    land, and the copies both instances warmed before must not hide it afterwards."""
    tell(stack, 0, owner, "laptop", "one")
    put_fact(stack, 0, owner, "location", "Beijing")
    for i in range(stack.instances):
        warmed(stack, i, owner)
    cache_server.pause()
    try:
        started = time.monotonic()
        tell(stack, 0, owner, "laptop", "two, while Redis hangs")
        put_fact(stack, 0, owner, "location", "Shanghai")
        # NOTE: within the socket timeouts, not hung for as long as Redis is.
        assert time.monotonic() - started < 5
    finally:
        cache_server.resume()
    expected = ["one", "two, while Redis hangs"]
    wait_until_served(stack, 1, owner, expected, {"location": "Shanghai"})
    assert_serves_truth(stack, owner)


def test_a_write_right_after_a_stall_is_visible_at_once_on_another_instance(
    stack, cache_server, owner
):
    """Instance 0 saw Redis time out once and its breaker is open; a write it takes once Redis
    answers again still updates the copy (writes never skip the breaker), so instance 1 serves
    it at once, from the cache."""
    tell(stack, 0, owner, "laptop", "one")
    for i in range(stack.instances):
        context(stack, i, owner)
    cache_server.pause()
    try:
        context(stack, 0, owner)  # times out once: instance 0's breaker opens
    finally:
        cache_server.resume()
    tell(stack, 0, owner, "laptop", "two, right after the stall")
    seen = context(stack, 1, owner)
    assert [t["content"] for t in seen["turns"]] == ["one", "two, right after the stall"]


def test_a_fact_written_while_redis_was_paused_is_served_by_facts_on_another_instance(
    stack, cache_server, owner
):
    """The write's update times out; within a second of Redis answering, instance 1's facts/
    (not only its context/) serves the new value, and keeps serving it."""
    put_fact(stack, 0, owner, "name", "Bob")
    for i in range(stack.instances):
        facts(stack, i, owner)
        facts(stack, i, owner)
    cache_server.pause()
    try:
        put_fact(stack, 0, owner, "name", "Wang Jianguo")
    finally:
        cache_server.resume()
    answered = time.monotonic()
    while facts(stack, 1, owner) != {"name": "Wang Jianguo"}:
        assert time.monotonic() - answered < 1.0, "facts/ on instance 1 still serves the old copy"
        time.sleep(0.02)
    for _ in range(20):
        assert facts(stack, 1, owner) == {"name": "Wang Jianguo"}
        assert context(stack, 1, owner)["facts"] == {"name": "Wang Jianguo"}


def facts(stack: AppStack, i: int, owner: str) -> dict:
    response = stack.request(i, "GET", f"/api/memory/users/{owner}/facts/")
    assert response.status == 200, response
    return {fact["key"]: fact["value"] for fact in response.data["facts"]}


def wait_until_served(stack, i, owner, expected, facts) -> None:
    deadline = time.monotonic() + 1.2 + GRACE + INTERVAL + 3
    while True:
        seen = [context(stack, i, owner) for _ in range(2)]
        if all(
            [t["content"] for t in c["turns"]] == expected
            and all(c["facts"].get(k) == v for k, v in facts.items())
            for c in seen
        ):
            return
        assert time.monotonic() < deadline, f"instance {i} still serves a stale copy: {seen}"
        time.sleep(0.05)
