"""``memory.db`` on real PostgreSQL: a read-only statement is the connection's health check, so
that a request on a kept connection sends no ``SELECT 1`` first, and a connection the server
ended while it was idle is replaced and the statement run again, once."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import psycopg
import pytest
from django.db import DataError, close_old_connections, connection
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from memory import db, services
from tests.instance import database_url

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """Each of Django's health checks (``is_usable``) from here on, with its answer."""
    monkeypatch.setattr(db._Prepared, "works", True)
    assert connection.settings_dict["CONN_HEALTH_CHECKS"]
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
