"""Tests of ``memory.asgi.HealthFastPath``: ``health/`` answered ahead of Django, as the view
answers it, from a probe young enough; every other request handed to Django as it came.

The wrapper runs around Django's own ASGI handler, called from the test's thread
(``async_to_sync``), so that its probe runs on the test's database connection."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.handlers.asgi import ASGIHandler
from django.test import override_settings

from memory import cache, counters
from memory.asgi import HealthFastPath

pytestmark = pytest.mark.django_db(transaction=True)

HEALTH = "/api/memory/health/"
# A site without the memory API (``ROOT_URLCONF = "tests.test_asgi"``).
urlpatterns: list[Any] = []


class Django:
    """Django's ASGI handler, counting the requests it is handed."""

    def __init__(self) -> None:
        self.handler = ASGIHandler()
        self.calls = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.calls += 1
        await self.handler(scope, receive, send)


@pytest.fixture
def django_app() -> Iterator[Django]:
    """Django's ASGI handler. NOTE: its first request marks the process served under ASGI, for
    check memory.W011 (``checks.asgi_request_started``): unmarked after the test."""
    from django.core.signals import request_started

    from memory import checks

    served = checks._served.asgi
    yield Django()
    checks._served.asgi = served
    request_started.connect(checks.asgi_request_started, dispatch_uid=checks.ASGI_RECEIVER)


def call(
    app: Any,
    path: str = HEALTH,
    *,
    method: str = "GET",
    query: bytes = b"",
    headers: tuple[tuple[bytes, bytes], ...] = (),
    host: bytes = b"testserver",
    root_path: str = "",
) -> tuple[int, dict[str, str], bytes]:
    """One HTTP request through ``app``: its status, headers and body."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": root_path,
        "query_string": query,
        "headers": [(b"host", host), *headers],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    messages: list[dict[str, Any]] = []
    received = False

    async def receive() -> dict[str, Any]:
        nonlocal received
        if not received:
            received = True
            return {"type": "http.request", "body": b"", "more_body": False}
        # NOTE: the client stays until the answer is sent, as a real one does.
        finished = [m for m in messages if m["type"] == "http.response.body"]
        while not finished or finished[-1].get("more_body"):
            await asyncio.sleep(0.001)
            finished = [m for m in messages if m["type"] == "http.response.body"]
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    async_to_sync(app)(scope, receive, send)
    start = next(m for m in messages if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
    headers_sent = {name.decode().lower(): value.decode() for name, value in start["headers"]}
    return start["status"], headers_sent, body


@pytest.fixture
def down_cache() -> Iterator[Any]:
    """``with down_cache():`` the memory alias points at a dead port (``dead_cache``'s means)."""
    from django.conf import settings

    def down() -> Any:
        cache.reset()
        return override_settings(MEMORY={**settings.MEMORY, "CACHE_ALIAS": "dead"})

    yield down
    cache.reset()


def test_health_is_answered_ahead_of_django_as_the_view_answers_it(django_app, anon_client):
    status, headers, body = call(HealthFastPath(django_app))
    view = anon_client.get(HEALTH)
    assert django_app.calls == 0
    assert status == view.status_code == 200
    answer = json.loads(body)
    assert set(answer) == set(view.json()) == {"database", "cache", "latency_ms"}
    assert (answer["database"], answer["cache"]) == ("ok", "ok")
    assert set(answer["latency_ms"]) == {"database", "cache"}
    for name in ("content-type", "vary", "allow", "cache-control"):
        assert headers[name] == view[name]
    assert headers["content-length"] == str(len(body))


def test_health_accepting_json_or_anything_is_answered_ahead_of_django(django_app):
    app = HealthFastPath(django_app)
    for accept in (b"*/*", b"application/json"):
        assert call(app, headers=((b"accept", accept),))[0] == 200
    assert django_app.calls == 0


@pytest.mark.parametrize(
    "request_",
    [
        {"method": "HEAD"},
        {"method": "POST"},
        {"method": "OPTIONS"},
        {"query": b"format=json"},
        {"query": b"a=1&a=2"},
        {"headers": ((b"accept", b"text/html"),)},
        {"headers": ((b"accept", b"application/json; indent=4"),)},
        {"host": b"evil.example"},
        {"path": "/api/memory/health"},
        {"path": "/api/memory/users/wang/health/"},
    ],
    ids=lambda r: "-".join(str(v) for v in r.values()),
)
def test_any_other_request_goes_to_django(django_app, request_):
    status = call(HealthFastPath(django_app), **request_)[0]
    assert django_app.calls == 1
    assert status == call(django_app, **request_)[0]


def test_a_site_without_the_memory_api_gets_every_request_through(django_app):
    with override_settings(ROOT_URLCONF="tests.test_asgi"):
        status, _, _ = call(HealthFastPath(django_app))
    assert django_app.calls == 1
    assert status == 404


def test_health_is_503_when_the_database_is_down(django_app, dead_database):
    handler = logging.getLogger("django.request").handlers[0]
    stream = io.StringIO()
    previous = handler.setStream(stream)  # type: ignore[attr-defined]
    try:
        status, _, body = call(HealthFastPath(django_app, max_age=0))
    finally:
        handler.setStream(previous)  # type: ignore[attr-defined]
    assert django_app.calls == 0
    assert status == 503
    assert json.loads(body)["database"] == "down"
    # NOTE: as Django logs the view's 503.
    assert f"ERROR django.request: Service Unavailable: {HEALTH}" in stream.getvalue()


def test_health_says_the_cache_is_down(django_app, down_cache):
    with down_cache():
        status, _, body = call(HealthFastPath(django_app, max_age=0))
    assert status == 200
    assert (json.loads(body)["database"], json.loads(body)["cache"]) == ("ok", "down")


def test_an_answer_comes_from_a_probe_younger_than_max_age(django_app, down_cache):
    fast = HealthFastPath(django_app, max_age=3600)
    first = json.loads(call(fast)[2])
    with down_cache():
        again = json.loads(call(fast)[2])
        assert again == first and again["cache"] == "ok"
        live = json.loads(call(HealthFastPath(django_app, max_age=0))[2])
        assert live["cache"] == "down"


def test_an_older_probe_answers_while_the_next_runs_and_none_past_max_age(django_app, down_cache):
    fast = HealthFastPath(django_app, max_age=10)
    call(fast)
    assert fast._last is not None
    began, health = fast._last
    first = fast._next
    with down_cache():
        # NOTE: the last probe made 3 s old, past a quarter of max_age: the request starts the
        # next and answers with the last.
        fast._last = (began - 3, health)
        assert json.loads(call(fast)[2])["cache"] == "ok"
        assert fast._next is not first
        # NOTE: made 11 s old, past max_age: the request waits for a probe.
        fast._last = (began - 11, health)
        assert json.loads(call(fast)[2])["cache"] == "down"


def test_health_under_a_script_prefix_is_answered_ahead_of_django(django_app):
    status, _, body = call(HealthFastPath(django_app), path=f"/site{HEALTH}", root_path="/site")
    assert django_app.calls == 0
    assert (status, json.loads(body)["database"]) == (200, "ok")


def test_answers_are_counted_as_the_views_are(django_app):
    def counted() -> tuple[float | None, float | None]:
        labels = {"view": "memory:health", "method": "GET"}
        return (
            counters.REGISTRY.get_sample_value(
                "memory_responses_total", {**labels, "status": "200"}
            ),
            counters.REGISTRY.get_sample_value("memory_request_duration_seconds_count", labels),
        )

    answered, observed = counted()
    call(HealthFastPath(django_app))
    assert counted() == ((answered or 0) + 1, (observed or 0) + 1)
