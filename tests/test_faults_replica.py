"""A read replica that is behind, under two real app instances: the instances send cold reads
(and the fills they store) to a hot standby (``MEMORY["READ_DATABASE"]``) only when it holds
the owner's last acknowledged write. With the standby's replay paused for seconds while both
instances write and read, every read and every fill holds every acknowledged write, and the
replica still serves the owners nobody wrote since it paused.

Seen failing with the replica's answer always taken (no stamp comparison): 134 stale reads
and 67 stale fills in 268 reads."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from tests.servers import PostgresServer, PostgresStandby, RedisServer
from tests.stack import AppStack, _swap_database, app_stack

pytestmark = pytest.mark.faults


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[PostgresServer, PostgresStandby]]:
    with PostgresServer() as primary, PostgresStandby(primary) as standby:
        yield primary, standby


@pytest.fixture(scope="module")
def stack(
    cluster: tuple[PostgresServer, PostgresStandby], cache_server: RedisServer
) -> Iterator[AppStack]:
    _, standby = cluster
    with app_stack(
        server_url=cluster[0].url,
        redis_url=cache_server.url,
        before_start=lambda s: s.extra_env.update(
            DATABASE_REPLICA_URL=_swap_database(standby.url, s.database)
        ),
    ) as stack:
        yield stack


def counts(cache_server: RedisServer) -> dict[str, int]:
    """The instances' shared cache counters (they flush them with their reads)."""
    client = redis.Redis.from_url(cache_server.url)
    keys = [k for k in client.scan_iter(match="*:stats") if client.type(k) == b"hash"]
    return {k.decode(): int(v) for key in keys for k, v in client.hgetall(key).items()}


def evict(client: redis.Redis) -> None:
    """Delete every copy (as an eviction would), not the shared counters."""
    doomed = [k for k in client.scan_iter() if not k.endswith(b":stats")]
    if doomed:
        client.delete(*doomed)


def test_a_paused_replica_serves_no_stale_read_and_no_stale_fill(
    cluster: tuple[PostgresServer, PostgresStandby], stack: AppStack, cache_server: RedisServer
):
    _, standby = cluster
    client = redis.Redis.from_url(cache_server.url)
    writer, quiet = f"wang-{uuid.uuid4().hex[:8]}", f"li-{uuid.uuid4().hex[:8]}"
    said: dict[str, list[str]] = {writer: [], quiet: []}

    def tell(i: int, owner: str, content: str) -> None:
        response = stack.post_turn(i, owner, content)
        assert response.status == 201, response
        said[owner].append(content)

    def read(i: int, owner: str) -> tuple[str, list[str]]:
        response = stack.request(i, "GET", f"/api/memory/users/{owner}/context/?turns=50")
        assert response.status == 200, response
        return response.data["source"], [t["content"] for t in response.data["turns"]]

    tell(0, quiet, "I live in Chengdu")
    tell(1, writer, "first words")
    standby.wait_replayed()
    before = counts(cache_server)
    standby.sql("SELECT pg_wal_replay_pause()")
    stale_reads = stale_fills = reads = 0
    try:
        deadline = time.monotonic() + 4.0
        n = 0
        while time.monotonic() < deadline:
            n += 1
            tell(n % 2, writer, f"turn {n}")
            # NOTE: the copies go (as an eviction or a flush would): every read below is cold
            # and fills, on the instance that did not write.
            evict(client)
            for owner in (writer, quiet):
                for i in (1 - n % 2, n % 2):
                    source, turns = read(i, owner)
                    reads += 1
                    if source == "database":
                        # The next read is served by the fill this one stored.
                        _, filled = read(i, owner)
                        stale_fills += filled != said[owner][-50:]
                    stale_reads += turns != said[owner][-50:]
        assert not standby.replayed(), "the replica caught up: the test proves nothing"
        health = stack.request(0, "GET", "/api/memory/health/").data
        assert health["read_replica"]["reachable"] is True
        assert health["read_replica"]["lag_bytes"] > 0
    finally:
        standby.sql("SELECT pg_wal_replay_resume()")
    # NOTE: each worker adds its counts to the shared ones at most once a second, on a read:
    # a second later, warm reads on every worker flush them.
    time.sleep(1.1)
    for n in range(40):
        read(n % 2, quiet)
    after = counts(cache_server)
    served = after.get("replica_served", 0) - before.get("replica_served", 0)
    behind = after.get("replica_behind", 0) - before.get("replica_behind", 0)
    print(f"\n{reads} reads, {n} writes: replica served {served}, behind for {behind}")
    assert (stale_reads, stale_fills) == (0, 0)
    # The quiet owner's cold reads, nobody having written to it since the pause, went to the
    # replica; the writer's, to the primary.
    assert served > 0 and behind > 0
    standby.wait_replayed()
    evict(client)
    assert read(0, writer) == ("database", said[writer][-50:])
