"""``memory.db`` on real PostgreSQL: a read-only statement is the connection's health check, so
that a request on a kept connection sends no ``SELECT 1`` first, and a connection the server
ended while it was idle is replaced and the statement run again, once. Behind a PgBouncer, a
database outage is not taken for a lost prepared statement."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest
from django.db import DataError, OperationalError, close_old_connections, connection
from django.db.backends.postgresql.base import DatabaseWrapper
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from memory import cache, db, selectors, services
from tests.instance import database_url
from tests.servers import (
    HOST,
    PGBOUNCER_MISSING,
    PgBouncerServer,
    PostgresServer,
    pgbouncer_binary,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """Each of Django's health checks (``is_usable``) from here on, with its answer."""
    monkeypatch.setattr(db._Prepared, "works", True)
    assert connection.settings_dict["CONN_HEALTH_CHECKS"]
    # A connection of its own: one this process opened longer ago than CONN_MAX_AGE would be
    # closed, as it should, at the test's first request's start.
    connection.close()
    connection.ensure_connection()
    done: list[bool] = []
    real = connection.is_usable

    def counted() -> bool:
        done.append(real())
        return done[-1]

    monkeypatch.setattr(connection, "is_usable", counted)
    yield done


@pytest.fixture
def client(service_user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=service_user).key}")
    return client


def new_request() -> None:
    """What a server does as a request starts: a kept connection is checked again."""
    close_old_connections()
    assert connection.connection is not None and not connection.health_check_done


def backend_ended(pid: int) -> None:
    """End the server process of the connection ``pid``, from a connection of its own."""
    with psycopg.connect(database_url(), autocommit=True) as other:
        assert other.execute("SELECT pg_terminate_backend(%s)", [pid]).fetchone() == (True,)
        deadline = time.monotonic() + 10
        while other.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone():
            assert time.monotonic() < deadline, "the backend did not end"
            time.sleep(0.01)


def pid() -> int:
    return connection.connection.info.backend_pid


def test_the_token_lookup_is_the_health_check_of_a_kept_connection(checks, client):
    assert client.get("/api/memory/users/wang/context/").status_code == 200
    for _ in range(3):
        new_request()
        assert client.get("/api/memory/users/wang/context/").status_code == 200
        assert connection.health_check_done
    assert checks == []


def test_a_statement_that_writes_leaves_the_check_to_django(checks):
    new_request()
    services.turn_append(owner_id="wang", session_id="s", role="user", content="hello")
    assert checks == [True]


@pytest.mark.parametrize(
    "first",
    [
        lambda client: client.get("/api/memory/users/wang/context/"),
        lambda client: client.post(
            "/api/memory/users/wang/turns/",
            {"session_id": "s", "role": "user", "content": "My name is Wang"},
            format="json",
        ),
    ],
    ids=["read", "append"],
)
def test_a_connection_the_server_ended_while_idle_is_replaced(
    checks, client, first: Callable[[APIClient], object]
):
    assert client.get("/api/memory/users/wang/context/").status_code == 200
    ended = pid()
    backend_ended(ended)
    new_request()
    response = first(client)
    assert response.status_code in (200, 201), response.content
    assert pid() != ended
    # NOTE: the token lookup found the connection dead and ran again; Django checked nothing.
    assert checks == []
    new_request()
    assert client.get("/api/memory/users/wang/context/").status_code == 200


def test_an_append_that_reads_its_token_looks_at_a_kept_connection(checks, client):
    """The append whose statement reads the token writes, so it is never sent twice: a kept
    connection that looks clean is used without Django's ``SELECT 1``; one the server ended
    while idle is found so, checked by Django and replaced before the statement is sent."""
    body = {"session_id": "s", "role": "user", "content": "what is a good name for a cat?"}
    assert client.post("/api/memory/users/wang/turns/", body, format="json").status_code == 201
    new_request()
    assert db.idle_clean(connection)
    assert client.post("/api/memory/users/wang/turns/", body, format="json").status_code == 201
    assert checks == []
    ended = pid()
    backend_ended(ended)
    new_request()
    assert not db.idle_clean(connection)
    assert client.post("/api/memory/users/wang/turns/", body, format="json").status_code == 201
    assert checks == [False]
    assert pid() != ended
    assert selectors.turn_list(owner_id="wang", limit=10)[0][-1]["seq"] == 3


def test_a_cold_context_read_is_one_prepared_statement(checks):
    services.turn_append(owner_id="wang", session_id="s", role="user", content="hello")
    services.fact_put(owner_id="wang", key="name", value="Wang")

    def runs() -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT coalesce(sum(generic_plans + custom_plans), 0) FROM pg_prepared_statements"
                " WHERE statement LIKE %s",
                ["%json_agg%memory_summary%"],
            )
            return int(cursor.fetchone()[0])

    before = runs()
    for n in (1, 2):
        assert cache.copy.copy_evict(owner_id="wang")
        context = selectors.context_get(owner_id="wang")
        assert context["source"] == "database"
        assert [turn["content"] for turn in context["turns"]] == ["hello"]
        assert context["facts"] == {"name": "Wang"}
        assert runs() == before + n


def test_an_execute_wrapper_sees_the_append_and_its_errors_are_djangos(checks):
    seen: list[str] = []

    def wrapper(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        services.turn_append(owner_id="wang", session_id="s", role="user", content="hello")
    assert any("memory_turn_append" in sql for sql in seen)
    # Without a wrapper, psycopg's cursor straight: its error is still Django's.
    with pytest.raises(DataError):
        db.prepared_fetchone(connection, "SELECT 1 / 0", [])
    turn = services.turn_append(owner_id="wang", session_id="s", role="user", content="again")
    assert turn.seq == 2


def test_a_statement_that_fails_on_a_live_connection_is_not_run_again(checks):
    with connection.cursor() as cursor:
        cursor.execute("CREATE SEQUENCE memory_test_runs")
    try:
        new_request()
        with pytest.raises(DataError):
            db.prepared_fetchone(
                connection, "SELECT nextval('memory_test_runs'), 1 / 0", [], read_only=True
            )
        with connection.cursor() as cursor:
            cursor.execute("SELECT last_value FROM memory_test_runs")
            assert cursor.fetchone() == (1,)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP SEQUENCE memory_test_runs")


@pytest.mark.faults
def test_a_database_outage_behind_pgbouncer_is_not_a_lost_prepared_statement(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    """PgBouncer answers a statement it cannot give a server connection with 08P01
    (query_wait_timeout), the code of a bind that does not fit a prepared statement, and
    closes the connection: the statement fails as it was, and the process goes on preparing."""
    if pgbouncer_binary() is None:
        pytest.skip(PGBOUNCER_MISSING)
    monkeypatch.setattr(db._Prepared, "works", True)
    # NOTE: one server connection, so that the statement the client prepared is there for its
    # next one, as in session pooling.
    settings = {"default_pool_size": "1", "query_wait_timeout": "1"}
    with PostgresServer() as server, PgBouncerServer(server.url, settings=settings) as pooler:
        pooled = DatabaseWrapper(
            {
                **connection.settings_dict,
                "NAME": "postgres",
                "USER": pooler.user,
                "PASSWORD": "",
                "HOST": HOST,
                "PORT": pooler.port,
                "OPTIONS": {},
                "CONN_MAX_AGE": 0,
            },
            alias="pooled",
        )
        try:
            assert db.prepared_fetchone(pooled, "SELECT %s::int + 1", [1]) == (2,)
            with pooled.cursor() as cursor:
                cursor.execute("SELECT count(*) FROM pg_prepared_statements")
                assert cursor.fetchone() == (1,)
            server.stop()
            with (
                caplog.at_level(logging.WARNING, logger="memory.db"),
                pytest.raises(OperationalError, match="query_wait_timeout"),
            ):
                db.prepared_fetchone(pooled, "SELECT %s::int + 1", [2])
            assert db._Prepared.works
            assert "lost a prepared statement" not in caplog.text
        finally:
            pooled.close()
