"""Tests of tests/servers.py: throwaway Redis, PostgreSQL and PgBouncer really start, pause, die
and return.

No Django database here: each test talks to a server of its own with plain redis-py / psycopg.
"""

from __future__ import annotations

import os
import pwd
import socket
import struct
import time
from collections.abc import Iterator

import psycopg
import pytest
import redis

from tests.servers import (
    HOST,
    PGBOUNCER_MISSING,
    PgBouncerServer,
    PostgresServer,
    RedisCluster,
    RedisSentinel,
    RedisServer,
    free_port,
    pgbouncer_binary,
)

pytestmark = pytest.mark.faults


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture(scope="module")
def postgres_server() -> Iterator[PostgresServer]:
    # NOTE: module scope: initdb is the slow part, and each test leaves the server running.
    with PostgresServer() as server:
        yield server


@pytest.fixture
def pgbouncer(postgres_server: PostgresServer) -> Iterator[PgBouncerServer]:
    if pgbouncer_binary() is None:
        pytest.skip(PGBOUNCER_MISSING)
    with PgBouncerServer(postgres_server.url) as server:
        yield server


def _client(server: RedisServer) -> redis.Redis:
    return redis.Redis.from_url(server.url, socket_timeout=0.2, socket_connect_timeout=0.2)


def _postgres_answers(server: PostgresServer, timeout: float = 0.3) -> bool:
    """True if the server answers an SSLRequest in time (libpq's own timeout floor is 2 s)."""
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as sock:
            sock.sendall(struct.pack("!ii", 8, 80877103))
            return sock.recv(1) in (b"N", b"S")
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_free_port_is_bindable() -> None:
    port = free_port()

    assert 1024 < port < 65536


def test_redis_starts_and_answers_ping(redis_server: RedisServer) -> None:
    assert redis_server.url == f"redis://127.0.0.1:{redis_server.port}/0"
    assert _client(redis_server).ping() is True
    assert _alive(redis_server.pid)


def test_redis_extra_args_reach_the_server() -> None:
    with RedisServer(extra_args=["--maxmemory", "1mb", "--maxmemory-policy", "allkeys-lru"]) as srv:
        config = _client(srv).config_get("maxmemory*")

    assert config["maxmemory"] == "1048576"
    assert config["maxmemory-policy"] == "allkeys-lru"


def test_redis_pause_times_out_and_resume_answers(redis_server: RedisServer) -> None:
    client = _client(redis_server)
    client.ping()

    redis_server.pause()
    with pytest.raises(redis.exceptions.TimeoutError):
        client.ping()
    redis_server.resume()

    assert _client(redis_server).ping() is True


def test_redis_restart_keeps_port_and_loses_data(redis_server: RedisServer) -> None:
    port, pid = redis_server.port, redis_server.pid
    _client(redis_server).set("key", "value")

    redis_server.restart()

    assert redis_server.port == port
    assert redis_server.pid != pid
    assert _client(redis_server).get("key") is None


def test_redis_kill_refuses_connections(redis_server: RedisServer) -> None:
    pid = redis_server.pid

    redis_server.kill()

    assert not redis_server.running
    assert not _alive(pid)
    with pytest.raises(redis.exceptions.ConnectionError):
        _client(redis_server).ping()


def test_redis_stop_while_paused(redis_server: RedisServer) -> None:
    pid = redis_server.pid
    redis_server.pause()

    redis_server.stop()

    assert not _alive(pid)


def test_redis_cleanup_removes_tmpdir() -> None:
    server = RedisServer().start()
    tmpdir = server.tmpdir

    server.cleanup()

    assert not tmpdir.exists()


def test_postgres_starts_and_takes_a_query(postgres_server: PostgresServer) -> None:
    with psycopg.connect(postgres_server.url, connect_timeout=2) as conn:
        assert conn.execute("SELECT 1 + 1").fetchone() == (2,)
    assert postgres_server.url.startswith("postgres://")
    assert postgres_server.url.endswith(f"@127.0.0.1:{postgres_server.port}/postgres")
    assert _alive(postgres_server.pid)


def test_postgres_runs_as_postgres_when_root(postgres_server: PostgresServer) -> None:
    with psycopg.connect(postgres_server.url) as conn:
        user = conn.execute("SELECT current_user").fetchone()

    assert user == ("postgres" if os.geteuid() == 0 else postgres_server.user,)


def test_postgres_stop_refuses_connections_and_start_comes_back(
    postgres_server: PostgresServer,
) -> None:
    port = postgres_server.port
    open_conn = psycopg.connect(postgres_server.url)

    postgres_server.stop()

    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(postgres_server.url, connect_timeout=2)
    postgres_server.start()
    assert postgres_server.port == port
    with psycopg.connect(postgres_server.url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    open_conn.close()


def test_postgres_kill_drops_clients_and_recovers(postgres_server: PostgresServer) -> None:
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS kept (n int)")
        conn.execute("INSERT INTO kept VALUES (1)")
    victim = psycopg.connect(postgres_server.url)
    pid = postgres_server.pid

    postgres_server.kill()

    assert not _alive(pid)
    with pytest.raises(psycopg.OperationalError):
        victim.execute("SELECT 1")
    postgres_server.start()
    with psycopg.connect(postgres_server.url) as conn:
        assert conn.execute("SELECT count(*) FROM kept").fetchone() == (1,)
    victim.close()


def test_postgres_pause_hangs_connects_and_resume_answers(
    postgres_server: PostgresServer,
) -> None:
    assert _postgres_answers(postgres_server)

    postgres_server.pause()
    try:
        assert not _postgres_answers(postgres_server)
    finally:
        postgres_server.resume()

    assert _postgres_answers(postgres_server)
    with psycopg.connect(postgres_server.url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_redis_cluster_serves_every_slot_and_its_cleanup_reaps_every_node() -> None:
    cluster = RedisCluster(masters=3, replicas=1).start()
    try:
        roles = sorted(role for role, _ in cluster.topology().values())
        assert roles == ["master"] * 3 + ["replica"] * 3
        client = redis.RedisCluster.from_url(cluster.url)
        client.set("{a}x", 1)
        assert client.get("{a}x") == b"1"
        client.close()
        pids = [node.pid for node in cluster.nodes]
    finally:
        cluster.cleanup()
    assert not any(_alive(pid) for pid in pids)


def test_redis_sentinel_names_its_primary() -> None:
    with (
        RedisServer() as primary,
        RedisSentinel(
            master="t", primary_port=primary.port, timings={"info-period": 900}
        ) as sentinel,
    ):
        assert sentinel.primary() == primary.port
        with redis.Redis(host=HOST, port=sentinel.port) as client:
            timings = client.execute_command("SENTINEL", "DEBUG")
        assert timings[b"INFO-PERIOD"] == b"900"
        pid = sentinel.pid
    assert not _alive(pid)


def test_pgbouncer_pools_transactions_of_any_database_of_its_postgres(
    postgres_server: PostgresServer, pgbouncer: PgBouncerServer
) -> None:
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS pooled")
        conn.execute("CREATE DATABASE pooled")
    with psycopg.connect(pgbouncer.url_for("pooled"), autocommit=True) as conn:
        assert conn.execute("SELECT current_database(), inet_server_port()").fetchone() == (
            "pooled",
            postgres_server.port,
        )
    assert pgbouncer.url == f"postgres://postgres@127.0.0.1:{pgbouncer.port}/postgres"
    pools = {row["database"]: row["pool_mode"] for row in pgbouncer.show("POOLS")}
    assert pools["pooled"] == "transaction"
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        conn.execute("DROP DATABASE pooled WITH (FORCE)")


def test_pgbouncer_fails_queries_while_postgres_is_down_and_serves_once_it_is_back(
    postgres_server: PostgresServer, pgbouncer: PgBouncerServer
) -> None:
    client = psycopg.connect(pgbouncer.url, autocommit=True)
    client.execute("SELECT 1")

    postgres_server.stop()
    try:
        # NOTE: an error (query_wait_timeout, then "server login has been failing"), not a
        # query that waits for as long as Postgres is away.
        for _ in range(2):
            with pytest.raises(psycopg.OperationalError, match=r"query_wait_timeout|login"):
                client.execute("SELECT 1")
            client = psycopg.connect(pgbouncer.url, autocommit=True)
    finally:
        postgres_server.start()

    deadline = time.monotonic() + 10
    while True:
        try:
            assert client.execute("SELECT 1").fetchone() == (1,)
            break
        except psycopg.OperationalError:
            assert time.monotonic() < deadline, "PgBouncer did not reach Postgres again"
            client = psycopg.connect(pgbouncer.url, autocommit=True)
            time.sleep(0.1)
    client.close()


def test_pgbouncer_kill_and_restart_keep_its_port(pgbouncer: PgBouncerServer) -> None:
    port, pid = pgbouncer.port, pgbouncer.pid
    kept = psycopg.connect(pgbouncer.url, autocommit=True)

    pgbouncer.kill()

    assert not _alive(pid)
    with pytest.raises(psycopg.OperationalError):
        kept.execute("SELECT 1")
    pgbouncer.start()
    assert pgbouncer.port == port
    with psycopg.connect(pgbouncer.url, autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    kept.close()


def test_pgbouncer_runs_as_postgres_when_root(pgbouncer: PgBouncerServer) -> None:
    owner = os.stat(f"/proc/{pgbouncer.pid}").st_uid

    assert owner == (pwd.getpwnam("postgres").pw_uid if os.geteuid() == 0 else os.geteuid())


def test_the_run_says_which_database_and_keys_it_will_create_and_delete(settings) -> None:
    from tests import services

    lines = services.touched_lines(
        test_database=settings.DATABASES["default"]["TEST"]["NAME"],
        key_prefix=settings.MEMORY["KEY_PREFIX"],
    )
    postgres, redis_line = lines
    assert f"creates and drops the database {settings.DATABASES['default']['TEST']['NAME']}" in (
        postgres
    )
    assert f"deletes only keys under {settings.MEMORY['KEY_PREFIX']}, never flushes" in redis_line
    assert services._redis_db("redis://127.0.0.1:6379/7") == 7
    assert services._redis_db("redis://127.0.0.1:6379") == 0
