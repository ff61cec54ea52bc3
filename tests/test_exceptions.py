"""``memory.exceptions`` on real PostgreSQL: a database error taken for an outage
(``MemoryUnavailable``) logs its cause, without the statement or its values, once per period."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from django.db import connection, transaction

from memory import exceptions
from memory.exceptions import MemoryUnavailable, database_guard

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_log() -> Iterator[None]:
    exceptions._UnavailableLog.logged.clear()
    yield
    exceptions._UnavailableLog.logged.clear()


def cancelled_statement() -> None:
    """A statement PostgreSQL cancels (its timeout), which names an owner and a turn's text."""
    with database_guard(), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL statement_timeout = 1")
        cursor.execute("SELECT pg_sleep(0.2), %s, %s", ["owner-wang-42", "my secret words"])


def causes(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "memory.db"]


def test_an_unavailable_database_logs_its_cause_once_per_period(caplog, monkeypatch):
    caplog.set_level(logging.WARNING, logger="memory.db")
    with pytest.raises(MemoryUnavailable):
        cancelled_statement()
    assert causes(caplog) == [
        "The memory database is unavailable: OperationalError (psycopg.errors.QueryCanceled): "
        "canceling statement due to statement timeout"
    ]
    assert caplog.records[-1].levelno == logging.WARNING
    for _ in range(2):
        with pytest.raises(MemoryUnavailable):
            cancelled_statement()
    assert len(causes(caplog)) == 1
    monkeypatch.setattr(exceptions, "UNAVAILABLE_LOG_SECONDS", 0.0)
    with pytest.raises(MemoryUnavailable):
        cancelled_statement()
    assert causes(caplog)[1].endswith("timeout (2 more since the last report)")
    logged = "\n".join(causes(caplog))
    assert "wang" not in logged and "secret" not in logged and "pg_sleep" not in logged


def test_each_cause_is_logged_on_its_own(caplog):
    caplog.set_level(logging.WARNING, logger="memory.db")
    with pytest.raises(MemoryUnavailable):
        cancelled_statement()
    with connection.cursor() as cursor:
        pass
    with pytest.raises(MemoryUnavailable), database_guard():
        cursor.execute("SELECT 1")
    assert causes(caplog)[1:] == [
        "The memory database is unavailable: InterfaceError (psycopg.InterfaceError): "
        "the cursor is closed"
    ]
