"""The demo under uvicorn (ASGI) through a Redis pause, with clients that go away mid-read: a
host site's async views read the context while Redis does not answer, and clients leave while
those reads probe it (Django cancels the view). Once Redis is back the process's cache is whole
again within 2 s: reads from it, and writes landing in it."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from tests.instance import ROOT, environment
from tests.servers import RedisServer, free_port

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def uvicorn_app(own_redis: RedisServer) -> Iterator[int]:
    """The demo project, with a host site's async views, under uvicorn on this test's
    database and own redis-server; its port."""
    port = free_port()
    # NOTE: the demo's own settings (a repairer thread per process, as in production), on the
    # test's database and key prefix.
    env = {
        **environment(),
        "DJANGO_SETTINGS_MODULE": "tests.instance_settings",
        "MEMORY_TEST_URLCONF": "tests.host_site",
        "MEMORY_OVERRIDES": json.dumps({"KEY_PREFIX": settings.TEST_KEY_PREFIX}),
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": "asgi-faults-only-secret-key-" + "x" * 40,
        "REDIS_URL": own_redis.url,
        "REDIS_SOCKET_TIMEOUT": "0.25",
        "MEMORY_LOG_LEVEL": "WARNING",
    }
    log_path = Path(f"/tmp/memory-asgi-faults-{port}.log")
    command = [
        sys.executable, "-m", "uvicorn", "memoryproj.asgi:application",
        "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
    ]  # fmt: skip
    with log_path.open("wb") as log:
        server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                assert server.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, "uvicorn did not start"
                time.sleep(0.1)
        yield port
    finally:
        server.terminate()
        server.wait(timeout=10)
        log_path.unlink(missing_ok=True)


def _request(port: int, method: str, path: str, body: str | None = None) -> dict[str, object]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body.encode() if body is not None else None)
        response = conn.getresponse()
        data = response.read()
        assert response.status in (200, 201), data[:500]
        return json.loads(data)
    finally:
        conn.close()


def _walk_away(port: int, path: str, after: float) -> None:
    """Ask for ``path`` and close the connection ``after`` seconds later, unanswered."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", path)
    time.sleep(after)
    assert conn.sock is not None
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()


def test_clients_that_leave_mid_read_during_a_redis_pause_leave_the_cache_whole(
    uvicorn_app, own_redis
):
    port = uvicorn_app
    context = "/host/wang/context/"
    _request(port, "POST", "/host/wang/turns/", "My name is Wang Jianguo")
    _request(port, "GET", context)
    assert _request(port, "GET", context)["source"] == "cache"
    own_redis.pause()
    try:
        assert _request(port, "GET", context)["source"] == "database"  # the breaker opens
        for _ in range(3):
            # NOTE: each time the breaker's window ends, the next read is its probe, and waits
            # on Redis; these clients leave while it does.
            time.sleep(1.1)
            leavers = [
                threading.Thread(target=_walk_away, args=(port, context, 0.05 + 0.03 * i))
                for i in range(3)
            ]
            for thread in leavers:
                thread.start()
            for thread in leavers:
                thread.join()
    finally:
        own_redis.resume()
    deadline = time.monotonic() + 2.0
    sources: list[object] = []
    while time.monotonic() < deadline and sources[-2:] != ["cache", "cache"]:
        sources.append(_request(port, "GET", context)["source"])
        time.sleep(0.05)
    assert sources[-2:] == ["cache", "cache"], sources
    # A write's update lands in the copy: the read after it is served from the cache.
    seq = _request(port, "POST", "/host/wang/turns/", "I like basketball")["seq"]
    after = _request(port, "GET", context)
    assert after["source"] == "cache"
    assert after["turns"][-1]["seq"] == seq
