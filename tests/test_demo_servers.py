"""The demo project under real servers (uvicorn for ASGI, gunicorn for WSGI) on this test's
database: its connections to PostgreSQL stay bounded under concurrent requests (issue 23)."""

from __future__ import annotations

import http.client
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from tests.instance import ROOT, database_url, environment
from tests.servers import free_port

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SERVERS = {
    "uvicorn": ["-m", "uvicorn", "memoryproj.asgi:application", "--host", "127.0.0.1",
                "--port", "{port}", "--log-level", "warning"],
    "gunicorn": ["-m", "gunicorn", "memoryproj.wsgi:application", "--bind", "127.0.0.1:{port}",
                 "--workers", "2", "--worker-class", "gthread", "--threads", "4",
                 "--log-level", "warning"],
}  # fmt: skip


class Server:
    """A demo server process on a port of its own, and its log."""

    def __init__(self, port: int, process: subprocess.Popen[bytes], log: Path) -> None:
        self.port, self.process, self.log = port, process, log

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 30,
    ) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()


@contextmanager
def demo_server(name: str, tmp_path: Path, **env: str) -> Iterator[Server]:
    """The demo under ``name`` (a key of SERVERS) on this test's database, without Redis (every
    read reaches the database) or throttles; ``env`` adds to its environment."""
    port = free_port()
    full_env = {
        **environment(),
        "DJANGO_SETTINGS_MODULE": "tests.instance_settings",
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": "demo-servers-only-secret-key-" + "x" * 40,
        "REDIS_URL": "",
        "MEMORY_THROTTLE_USER": "",
        "MEMORY_THROTTLE_ANON": "",
        "MEMORY_LOG_LEVEL": "WARNING",
        **env,
    }
    log = tmp_path / f"{name}.log"
    command = [sys.executable, *(a.format(port=port) for a in SERVERS[name])]
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=ROOT, env=full_env, stdout=out, stderr=out)
    server = Server(port, process, log)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                server.request("GET", "/api/memory/health/", timeout=2)
                break
            except OSError:
                assert process.poll() is None, log.read_text()
                assert time.monotonic() < deadline, f"{name} did not start: {log.read_text()}"
                time.sleep(0.1)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def service_token() -> str:
    from django.contrib.auth.models import Permission, User
    from rest_framework.authtoken.models import Token

    user = User.objects.create_user("svc")
    user.user_permissions.add(Permission.objects.get(codename="access_all_memories"))
    return Token.objects.create(user=user).key


def connections_of(application_name: str) -> int:
    """How many connections to PostgreSQL the server's processes hold now."""
    with psycopg.connect(database_url(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            [application_name],
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_under_uvicorn_concurrent_reads_hold_at_most_the_pools_connections(tmp_path):
    """The reviewer's run: concurrent reads for seconds under uvicorn. With a kept connection per
    request thread (CONN_MAX_AGE 60) they left dozens of idle connections, and then 503s; with
    Django's pool the process holds at most DATABASE_POOL_SIZE, and every request is served."""
    from memory import services

    token = service_token()
    services.turn_append(owner_id="wang", session_id="s", role="user", content="My name is Wang")
    name = f"memory-asgi-{free_port()}"
    statuses: list[int] = []
    most = 0
    with demo_server(
        "uvicorn",
        tmp_path,
        DATABASE_URL=f"{database_url()}?application_name={name}",
        DATABASE_POOL_SIZE="4",
    ) as server:
        stop = time.monotonic() + 3

        def read() -> None:
            while time.monotonic() < stop:
                status, _ = server.request(
                    "GET",
                    "/api/memory/users/wang/context/",
                    headers={"Authorization": f"Token {token}"},
                )
                statuses.append(status)

        readers = [threading.Thread(target=read) for _ in range(12)]
        for thread in readers:
            thread.start()
        while any(thread.is_alive() for thread in readers):
            most = max(most, connections_of(name))
            time.sleep(0.1)
        for thread in readers:
            thread.join()
        time.sleep(0.5)
        after = connections_of(name)
        health, _ = server.request("GET", "/api/memory/health/")
    assert statuses and set(statuses) == {200}, sorted(set(statuses))
    assert health == 200
    assert most <= 4, most
    assert after <= 4, after
    assert "memory.W011" not in server.log.read_text()


def test_under_uvicorn_persistent_connections_without_a_pool_are_warned_of(tmp_path):
    """A site served by uvicorn need not set ASGI_APPLICATION: the first ASGI request logs
    check memory.W011 (here the demo told to keep connections and use no pool)."""
    with demo_server(
        "uvicorn", tmp_path, DATABASE_POOL_SIZE="0", DATABASE_CONN_MAX_AGE="60"
    ) as server:
        assert server.request("GET", "/api/memory/health/")[0] == 200
        time.sleep(0.2)
    logged = server.log.read_text()
    assert logged.count("(memory.W011)") == 1, logged


def test_under_gunicorn_threads_keep_one_connection_each(tmp_path):
    """WSGI keeps what it had: a connection per gunicorn thread, kept between requests."""
    token = service_token()
    name = f"memory-wsgi-{free_port()}"
    with demo_server(
        "gunicorn", tmp_path, DATABASE_URL=f"{database_url()}?application_name={name}"
    ) as server:
        statuses = []
        for _ in range(20):
            statuses.append(
                server.request(
                    "GET",
                    "/api/memory/users/wang/facts/",
                    headers={"Authorization": f"Token {token}"},
                )[0]
            )
        kept = connections_of(name)
    assert set(statuses) == {200}
    # NOTE: 2 workers of 4 threads, and nothing else of the demo's connects here.
    assert 1 <= kept <= 8, kept
