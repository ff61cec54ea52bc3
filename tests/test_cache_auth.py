"""The memory cache on a Redis that wants credentials or TLS: a password (``requirepass``), an
ACL user, ``rediss://``, and pool kwargs, configured the way django-redis documents them. Sync
and async reads and writes use the cache alike, and async traffic never turns it off."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.conf import settings
from django.test import override_settings

from memory import cache, selectors, services
from tests.loop import run
from tests.servers import RedisServer

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "s3cret-for-tests"


def _alias(server: RedisServer, **options: Any) -> dict[str, Any]:
    return {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": server.url,
        "OPTIONS": {
            # NOTE: no outage here is a timeout (wrong credentials answer at once): room for a
            # first async call's connect, AUTH and INFO on a loaded CI machine, which once took
            # more than 0.5 s.
            "SOCKET_CONNECT_TIMEOUT": 2.0,
            "SOCKET_TIMEOUT": 2.0,
            "SERIALIZER": "memory.codec.OrjsonSerializer",
            **options,
        },
    }


def _acl_user(server: RedisServer, *, info: bool = True) -> None:
    admin = redis.Redis(host="127.0.0.1", port=server.port, password=PASSWORD)
    try:
        # NOTE: what an operator grants an app: its keys and scripts, not the admin commands;
        # without INFO, copies are not named by the server's run (memory.cache.runs).
        admin.execute_command(
            "ACL", "SETUSER", "memoryapp", "on", ">app-pass", "~*", "+@all", "-@dangerous",
            "+info" if info else "-info", "+ping",
        )  # fmt: skip
    finally:
        admin.close()


def _cases() -> list[Any]:
    return [
        pytest.param(({"password": PASSWORD}, {"PASSWORD": PASSWORD}), id="password"),
        pytest.param(
            ({"password": PASSWORD}, {"USERNAME": "memoryapp", "PASSWORD": "app-pass"}),
            id="acl-user",
        ),
        pytest.param(
            ({"password": PASSWORD}, {"USERNAME": "memoryapp", "PASSWORD": "app-pass", "-info": 1}),
            id="acl-user-without-info",
        ),
        pytest.param(
            (
                {"password": PASSWORD, "tls": True},
                {"PASSWORD": PASSWORD, "CONNECTION_POOL_KWARGS": {"max_connections": 20}},
            ),
            id="tls",
        ),
    ]


@pytest.fixture(params=_cases())
def guarded_cache(request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    """The memory alias on a redis-server of the test's own that wants credentials."""
    server_kwargs, options = request.param
    options = dict(options)
    server = RedisServer(**server_kwargs)
    server.start()
    try:
        if "USERNAME" in options:
            _acl_user(server, info=options.pop("-info", None) is None)
        if server.tls:
            options = {
                **options,
                "CONNECTION_POOL_KWARGS": {
                    **options.get("CONNECTION_POOL_KWARGS", {}),
                    "ssl_ca_certs": str(server.ca_path),
                },
            }
        caches = {**settings.CACHES, "guarded": _alias(server, **options)}
        memory = {**settings.MEMORY, "CACHE_ALIAS": "guarded"}
        with override_settings(CACHES=caches, MEMORY=memory):
            cache.reset()
            yield server
    finally:
        server.cleanup()
        cache.reset()


def test_sync_and_async_traffic_both_use_a_cache_that_wants_credentials(guarded_cache):
    services.turn_append(owner_id="wang", session_id="s", role="user", content="我叫王建国")
    assert selectors.context_get(owner_id="wang")["source"] == "database"
    assert selectors.context_get(owner_id="wang")["source"] == "cache"

    async def main() -> list[str]:
        sources = [(await selectors.acontext_get(owner_id="wang"))["source"] for _ in range(3)]
        await services.aturn_append(owner_id="wang", session_id="s", role="user", content="hi")
        sources.append((await selectors.acontext_get(owner_id="wang"))["source"])
        sources.append(str(len(await selectors.afact_list(owner_id="wang"))))
        return sources

    assert run(main) == ["cache", "cache", "cache", "cache", "1"]
    # Async traffic left the cache on for the sync side too.
    assert cache.client.breaker.state == "closed"
    context = selectors.context_get(owner_id="wang")
    assert context["source"] == "cache"
    assert [t["content"] for t in context["turns"]] == ["我叫王建国", "hi"]
    assert selectors.health_get()["cache"] == "ok"


def test_wrong_credentials_are_an_outage_on_both_sides_and_never_an_error(guarded_cache):
    caches = {**settings.CACHES}
    # NOTE: another database of the same server: django-redis keeps one pool per URL.
    caches["guarded"] = {
        **caches["guarded"],
        "LOCATION": guarded_cache.url.replace("/0", "/1"),
        "OPTIONS": {**caches["guarded"]["OPTIONS"], "PASSWORD": "wrong"},
    }
    with override_settings(CACHES=caches):
        cache.reset()
        services.turn_append(owner_id="wang", session_id="s", role="user", content="hi")
        assert selectors.context_get(owner_id="wang")["source"] == "database"

        async def main() -> dict[str, Any]:
            return await selectors.acontext_get(owner_id="wang")

        context = run(main)
    assert context["source"] == "database"
    assert [t["content"] for t in context["turns"]] == ["hi"]
