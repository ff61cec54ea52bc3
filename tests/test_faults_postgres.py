"""The database going away under two real app instances: a PostgreSQL cluster of this module's
own is stopped mid-conversation and started again. Writes get 503 and are not stored, no cache
entry claims them, and service resumes by itself. Each test runs with the instances connected
directly and through a PgBouncer in transaction mode, where a write must answer 503 rather
than wait for a server connection; the PgBouncer itself is restarted too."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from tests.servers import PostgresServer, RedisServer
from tests.stack import POOLERS, AppStack, app_stack

pytestmark = pytest.mark.faults


@pytest.fixture(scope="module")
def database_server() -> Iterator[PostgresServer]:
    with PostgresServer() as server:
        yield server


@pytest.fixture(scope="module", params=POOLERS, ids=["direct", "pgbouncer"])
def stack(
    request: pytest.FixtureRequest, database_server: PostgresServer, cache_server: RedisServer
) -> Iterator[AppStack]:
    with app_stack(
        server_url=database_server.url, redis_url=cache_server.url, pooler=request.param
    ) as stack:
        yield stack


def test_database_down_mid_conversation_gives_503_and_recovers(
    stack: AppStack, database_server: PostgresServer, cache_server: RedisServer
):
    owner = f"wang-{uuid.uuid4().hex[:8]}"
    assert stack.post_turn(0, owner, "My name is Wang Jianguo").status == 201
    for i in range(stack.instances):
        assert stack.request(i, "GET", f"/api/memory/users/{owner}/context/").status == 200
    database_server.stop()
    try:
        for i in range(stack.instances):
            # NOTE: behind PgBouncer, within its query_wait_timeout (3 s), not hung.
            lost = stack.post_turn(i, owner, f"never stored {i}")
            assert lost.status == 503, lost
            assert "detail" in lost.data
            fact = stack.request(
                i, "PUT", f"/api/memory/users/{owner}/facts/name/", {"value": "never stored"}
            )
            assert fact.status == 503, fact
            health = stack.request(i, "GET", "/api/memory/health/")
            assert (health.status, health.data["database"]) == (503, "down")
    finally:
        database_server.start()
    # NOTE: service resumes by itself: no restart of the instances.
    deadline = time.monotonic() + 15
    while stack.request(0, "GET", "/api/memory/health/").status != 200:
        assert time.monotonic() < deadline, "instance 0 did not reconnect"
        time.sleep(0.2)
    for i in range(stack.instances):
        assert stack.post_turn(i, owner, f"back {i}").status == 201
        assert stack.request(i, "GET", "/api/memory/health/").status == 200
    for i in range(stack.instances):
        context = stack.request(i, "GET", f"/api/memory/users/{owner}/context/").data
        assert [t["content"] for t in context["turns"]] == [
            "My name is Wang Jianguo",
            "back 0",
            "back 1",
        ]
        assert [t["seq"] for t in context["turns"]] == [1, 2, 3]
        assert context["facts"].get("name") != "never stored"
    client = redis.Redis.from_url(cache_server.url)
    for key in client.scan_iter():
        if client.type(key) == b"hash":
            assert b"never stored" not in b"".join(client.hvals(key))
    if stack.pooler is not None:
        stack.assert_pooled()


@pytest.mark.parametrize("stack", ["pgbouncer"], indirect=True)
def test_pgbouncer_restarted_mid_conversation_costs_no_request(stack: AppStack):
    """The instances' kept connections to PgBouncer die with it: each is found dead by the
    request's first statement, replaced, and the statement run again; nothing answers 503."""
    assert stack.pooler is not None
    owner = f"li-{uuid.uuid4().hex[:8]}"
    expected = []
    for n in range(8):
        expected.append(f"before {n}")
        assert stack.post_turn(n % 2, owner, expected[-1]).status == 201
        assert stack.request(n % 2, "GET", f"/api/memory/users/{owner}/context/").status == 200
    stack.pooler.kill()
    stack.pooler.start()
    for n in range(8):
        expected.append(f"after {n}")
        written = stack.post_turn(n % 2, owner, expected[-1])
        assert written.status == 201, written
        read = stack.request((n + 1) % 2, "GET", f"/api/memory/users/{owner}/context/?turns=50")
        assert read.status == 200, read
        assert [t["content"] for t in read.data["turns"]] == expected
    stack.assert_pooled()
