"""The demo under uvicorn (ASGI) through a Redis pause, with clients that go away mid-read: a
host site's async views read the context while Redis does not answer, and clients leave while
those reads probe it (Django cancels the view). Once Redis is back the process's cache is whole
again within 2 s: reads from it, and writes landing in it."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from django.conf import settings

from tests.instance import environment
from tests.servers import RedisServer, uvicorn_demo

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def uvicorn_app(own_redis: RedisServer) -> Iterator[int]:
    """The demo project, with a host site's async views, under uvicorn on this test's
    database and own redis-server; its port."""
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
        # NOTE: the throttles on, at rates no test reaches: their counts go through Redis too.
        "MEMORY_THROTTLE_USER": "1000000/hour",
        "MEMORY_THROTTLE_ANON": "1000000/hour",
    }
    with uvicorn_demo(env, name="asgi-faults") as port:
        yield port


def _request(
    port: int,
    method: str,
    path: str,
    body: str | None = None,
    headers: dict[str, str] | None = None,
) -> dict[str, object]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        data = body.encode() if body is not None else None
        conn.request(method, path, body=data, headers=headers or {})
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


def test_a_redis_pause_costs_the_requests_after_the_first_nothing_measurable(
    uvicorn_app, own_redis
):
    """Clients on the API (throttled, authenticated) and on ``health/`` while Redis is paused
    for 5 s: after the first requests that meet the pause, each answers within 50 ms of what
    it takes with Redis up (95th percentile), and none fails."""
    from django.contrib.auth.models import Permission, User
    from rest_framework.authtoken.models import Token

    port = uvicorn_app
    user = User.objects.create_user("svc-asgi")
    user.user_permissions.add(Permission.objects.get(codename="access_all_memories"))
    headers = {
        "Authorization": f"Token {Token.objects.create(user=user).key}",
        "Content-Type": "application/json",
    }
    durations: list[tuple[float, float, str]] = []
    errors: list[str] = []
    stop = threading.Event()

    def client(n: int) -> None:
        k = 0
        while not stop.is_set():
            owner = f"asgi-{n}"
            calls = [
                ("GET", f"/api/memory/users/{owner}/context/", None),
                ("POST", f"/api/memory/users/{owner}/turns/",
                 json.dumps({"session_id": "s", "role": "user", "content": f"hi {k}"})),
                ("GET", "/api/memory/health/", None),
            ]  # fmt: skip
            method, path, body = calls[k % len(calls)]
            started = time.monotonic()
            try:
                _request(port, method, path, body, headers)
            except AssertionError as e:
                errors.append(f"{method} {path}: {e}")
            durations.append((started, time.monotonic() - started, path))
            k += 1

    threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(2.0)
        paused_at = time.monotonic()
        own_redis.pause()
        time.sleep(5.0)
        own_redis.resume()
        resumed_at = time.monotonic()
        time.sleep(0.5)
    finally:
        stop.set()
        for thread in threads:
            thread.join()

    def p95(values: list[float]) -> float:
        return sorted(values)[int(len(values) * 0.95)]

    normal = [d for started, d, _ in durations if 0.5 < started < paused_at]
    # NOTE: "after the first": the requests in flight when Redis stopped, and those begun in
    # the first half second, each pay one socket timeout (0.25 s) before the breaker opens.
    during = [d for started, d, _ in durations if paused_at + 0.5 < started < resumed_at]
    assert errors == []
    assert len(normal) > 20 and len(during) > 20, (len(normal), len(during))
    assert p95(during) <= p95(normal) + 0.05, (p95(normal), p95(during), max(during))
