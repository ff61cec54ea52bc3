"""pytest plugin (``-p tests.services``) that points DATABASE_URL and REDIS_URL at live servers.

It runs before pytest-django loads settings: a set env var wins, then the default local server,
then a throwaway server of the run's own (tests/servers.py); else the run stops with one line.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import pytest

from tests.servers import PostgresServer, RedisServer, ServerUnavailable

DEFAULT_DATABASE_URLS = (
    "postgres://postgres@127.0.0.1:5432/memory",
    # NOTE: the docker-compose.yml service, so `docker compose up -d` alone is enough.
    "postgres://memory:memory@127.0.0.1:5432/memory",
)
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
POSTGRES_SCHEMES = ("postgres://", "postgresql://", "pgsql://", "postgis://")
HINT = "run `docker compose up -d`, or set DATABASE_URL/REDIS_URL"


@dataclass
class Choice:
    """The server one env var ended up pointing at, and why."""

    var: str
    url: str
    source: str
    server: PostgresServer | RedisServer | None = None
    previous: str | None = None

    def describe(self, service: str) -> str:
        return f"{service} at {_where(self.url)} ({self.source})"


_choices: dict[str, Choice] = {}


def _where(url: str) -> str:
    """host:port of a URL, without credentials."""
    netloc = url.split("://", 1)[-1].split("/", 1)[0]
    return netloc.rsplit("@", 1)[-1] or "localhost"


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def postgres_error(url: str, *, timeout: int = 2) -> str | None:
    """Why the server of ``url`` takes no connection, or None if it does.

    The server is reached through its ``postgres`` database, or the URL's own, as the URL's
    database need not exist yet (pytest-django creates ``test_<name>`` from ``postgres``).
    """
    import dj_database_url
    import psycopg

    config = dj_database_url.parse(url)
    params = {
        "host": config.get("HOST") or None,
        "port": config.get("PORT") or None,
        "user": config.get("USER") or None,
        "password": config.get("PASSWORD") or None,
        **config.get("OPTIONS", {}),
    }
    error: str | None = None
    for dbname in dict.fromkeys(("postgres", config.get("NAME") or "postgres")):
        try:
            # NOTE: libpq rounds connect_timeout up to 2 s, the floor of this probe.
            with psycopg.connect(dbname=dbname, connect_timeout=timeout, **params):
                return None
        except psycopg.Error as e:
            error = error or _first_line(e)
    return error


def redis_error(url: str, *, timeout: float = 1.0) -> str | None:
    """Why the Redis of ``url`` does not answer PING, or None if it does."""
    import redis

    try:
        client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
    except ValueError as e:
        return _first_line(e)
    try:
        client.ping()
    except (redis.RedisError, OSError) as e:
        return _first_line(e)
    finally:
        client.close()
    return None


def _choose_postgres(problems: list[str]) -> Choice | None:
    url = os.environ.get("DATABASE_URL", "").strip()
    if url:
        if not url.startswith(POSTGRES_SCHEMES):
            problems.append(
                f"DATABASE_URL is {url.split('://')[0]}://..., the suite needs PostgreSQL"
            )
            return None
        if error := postgres_error(url):
            problems.append(f"DATABASE_URL ({_where(url)}) is not reachable: {error}")
            return None
        return Choice("DATABASE_URL", url, "DATABASE_URL")
    for candidate in DEFAULT_DATABASE_URLS:
        if postgres_error(candidate) is None:
            return Choice("DATABASE_URL", candidate, "default")
    try:
        server = PostgresServer().start()
    except ServerUnavailable as e:
        problems.append(f"no PostgreSQL at 127.0.0.1:5432 and no throwaway one ({e})")
        return None
    return Choice("DATABASE_URL", server.url_for("memory"), f"throwaway pid {server.pid}", server)


def _choose_redis(problems: list[str]) -> Choice | None:
    url = os.environ.get("REDIS_URL", "").strip()
    if url:
        if error := redis_error(url):
            problems.append(f"REDIS_URL ({_where(url)}) is not reachable: {error}")
            return None
        return Choice("REDIS_URL", url, "REDIS_URL")
    if redis_error(DEFAULT_REDIS_URL) is None:
        return Choice("REDIS_URL", DEFAULT_REDIS_URL, "default")
    try:
        server = RedisServer().start()
    except ServerUnavailable as e:
        problems.append(f"no Redis at 127.0.0.1:6379 and no throwaway one ({e})")
        return None
    return Choice("REDIS_URL", server.url, f"throwaway pid {server.pid}", server)


def _stop_started() -> None:
    for choice in _choices.values():
        if choice.server is not None:
            choice.server.cleanup()
        if choice.previous is None:
            os.environ.pop(choice.var, None)
        else:
            os.environ[choice.var] = choice.previous
    _choices.clear()


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, parser: pytest.Parser, args: list[str]
) -> None:
    """Set DATABASE_URL and REDIS_URL before pytest-django imports tests.settings."""
    problems: list[str] = []
    for choose in (_choose_postgres, _choose_redis):
        choice = choose(problems)
        if choice is not None:
            choice.previous = os.environ.get(choice.var)
            os.environ[choice.var] = choice.url
            _choices[choice.var] = choice
    if problems:
        _stop_started()
        # NOTE: pytest.exit() this early escapes pytest's handling as a traceback; a line on
        # stderr (re-emitted by the capture plugin) and SystemExit give one clean line.
        reasons = "; ".join(problem.rstrip(". ") for problem in problems)
        sys.stderr.write(f"memory tests need PostgreSQL and Redis: {reasons}; {HINT}\n")
        raise SystemExit(2)


def _redis_db(url: str) -> int:
    path = url.split("://", 1)[-1].split("?", 1)[0].partition("/")[2]
    return int(path or 0)


def touched_lines(*, test_database: str, key_prefix: str) -> list[str]:
    """What the run will do to the servers it chose, said before it does it: the database it
    creates and drops, and the keys it writes and deletes (never a FLUSHDB of a server it did
    not start). A server that is not the run's own is called shared."""
    lines = []
    if (choice := _choices.get("DATABASE_URL")) is not None:
        shared = "" if choice.server else "; a shared server: DATABASE_URL picks another"
        lines.append(
            f"memory tests: {choice.describe('postgres')}: creates and drops the database "
            f"{test_database} (MEMORY_TEST_DB names it){shared}"
        )
    if (choice := _choices.get("REDIS_URL")) is not None:
        shared = "" if choice.server else "; a shared server: REDIS_URL picks another"
        lines.append(
            f"memory tests: {choice.describe('redis')} db {_redis_db(choice.url)}: writes and "
            f"deletes only keys under {key_prefix}, never flushes it{shared}"
        )
    return lines


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    from django.conf import settings

    lines = touched_lines(
        test_database=settings.DATABASES["default"]["TEST"]["NAME"],
        key_prefix=settings.MEMORY["KEY_PREFIX"],
    )
    return lines or None


def pytest_unconfigure(config: pytest.Config) -> None:
    _stop_started()
