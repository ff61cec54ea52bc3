"""A Postgres primary killed under two real app instances' load, with a failover engine in charge:
pg_auto_failover (tests/pgaf.py: a monitor, a primary and a synchronous standby) sees the primary
gone, promotes the standby, and takes the old primary back as a standby once it runs again. The
instances reach both nodes with libpq's multi-host URL and follow it without a restart.

Through it: every write answered 201 (turns, facts, forgets) is stored exactly once, every read
of the other instance is current from the write's acknowledgement on, what fails in the window
is a 503 with Retry-After (never a 500, never a hang), and both instances serve again.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.pgaf import (
    PGAF_MISSING,
    REQUEST_TIMEOUT,
    AutoFailover,
    failover_under_load,
    pg_autoctl_binary,
)
from tests.servers import RedisServer
from tests.stack import AppStack, turns_listed

pytestmark = [
    pytest.mark.faults,
    # NOTE: scripts/ensure-pg-auto-failover installs it (make test runs it).
    pytest.mark.skipif(pg_autoctl_binary() is None, reason=PGAF_MISSING),
]


@pytest.fixture(scope="module")
def formation_and_stack(cache_server: RedisServer) -> Iterator[tuple[AutoFailover, AppStack]]:
    formation = AutoFailover()
    stack = AppStack(server_url=formation.url("postgres"), redis_url=cache_server.url)
    try:
        formation.start_primary()
        # NOTE: the instances migrate and start while the engine makes the standby a base
        # backup of the primary (its database as it is by then), which saves the suite seconds.
        # The stack starts in the other thread: the nodes' processes die with the thread that
        # started them (tests/servers.py), the instances do not.
        with ThreadPoolExecutor(1) as pool:
            starting = pool.submit(stack.start)
            formation.start_standbys()
            starting.result()
        yield formation, stack
    finally:
        stack.stop()
        formation.cleanup()


def test_the_engine_s_failover_loses_no_acknowledged_write_and_both_instances_follow_it(
    formation_and_stack: tuple[AutoFailover, AppStack],
):
    formation, stack = formation_and_stack
    run = failover_under_load(formation, stack, f"li-{uuid.uuid4().hex[:8]}")
    load = run.load
    print(f"\n{run}")
    # What failed failed cleanly: a 503 saying when to retry, never a 500 or a hang.
    assert all(status == 503 and retry == "1" for _, status, retry, _ in load.failed), load.failed
    assert max(load.took) < REQUEST_TIMEOUT
    # No read answered 200 without a turn acknowledged before it was sent.
    assert load.stale == []
    # Every acknowledged turn is stored exactly once, in one gapless sequence (a turn whose
    # answer was lost with the primary may be stored too: its commit had reached the standby).
    stored = turns_listed(stack, load.owner)
    contents = [t["content"] for t in stored]
    assert len(contents) == len(set(contents))
    assert {content for _, _, content in load.acked} <= set(contents) <= load.tried
    assert [t["seq"] for t in stored] == list(range(1, len(stored) + 1))
    # Every instance serves all of it, without a restart; its health names the new primary.
    for i in range(stack.instances):
        deadline = time.monotonic() + 10
        while True:
            context = stack.request(i, "GET", f"/api/memory/users/{load.owner}/context/?turns=50")
            facts = stack.request(i, "GET", f"/api/memory/users/{load.owner}/facts/")
            if (
                context.status == facts.status == 200
                and [t["content"] for t in context.data["turns"]] == contents[-50:]
            ):
                break
            assert time.monotonic() < deadline, f"instance {i} does not serve what is stored"
            time.sleep(0.05)
        values = {fact["key"]: fact["value"] for fact in facts.data["facts"]}
        for key, acked_values in load.facts.items():
            # The last value acknowledged, or one sent after it whose answer was lost.
            assert values[key] in load.facts_tried[key] and values[key] >= acked_values[-1]
        health = stack.request(i, "GET", "/api/memory/health/").data
        assert health["database_primary"] == formation.nodes.index(run.new)
        # What was forgotten stays forgotten, in the database and in the cache.
        for gone in load.forgotten:
            listed = stack.request(i, "GET", f"/api/memory/users/{gone}/turns/")
            assert listed.status == 200 and listed.data["results"] == [], gone
            context = stack.request(i, "GET", f"/api/memory/users/{gone}/context/")
            assert context.status == 200 and context.data["turns"] == [], gone
