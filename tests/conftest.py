"""Fixtures of the suite: users and API clients, a clean cache per test, caches that are down
(a dead port) or of the test's own (a redis-server it may flush, kill or pause), and a
database that is down (a dead port)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission, User
from django.core.cache import caches
from django.test import override_settings
from rest_framework.test import APIClient

from memory import cache
from memory.services import embedding_triggers
from tests.servers import RedisServer

# The markers of the tests that take longest: servers killed and restarted, a wheel built, a
# browser driven (each counted thrice), and the merely slow ones.
LONG_MARKERS = {"faults": 3, "package": 3, "browser": 3, "slow": 1}


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The modules of the longest tests first, each module's tests together in their order:
    with `make test`'s two processes (pytest-xdist, a module each), the long modules start
    early and the short ones fill in around them, instead of one long module last."""
    weight: dict[str, int] = {}
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        module = item.nodeid.split("::", 1)[0]
        first.setdefault(module, index)
        weight[module] = weight.get(module, 0) + sum(
            points for name, points in LONG_MARKERS.items() if item.get_closest_marker(name)
        )
    items.sort(key=lambda item: (-weight[m := item.nodeid.split("::", 1)[0]], first[m]))


def _memory_settings(**overrides: Any) -> dict[str, Any]:
    return {**settings.MEMORY, **overrides}


def _clean_keys() -> None:
    client = caches["memory"].client.get_client(write=True)
    keys = list(client.scan_iter(match=f"{settings.TEST_KEY_PREFIX}*", count=1000))
    if keys:
        client.delete(*keys)


def _reset_process_state() -> None:
    cache.reset()
    embedding_triggers.debounce_reset()


@pytest.fixture(autouse=True)
def _clean_cache() -> Iterator[None]:
    """Every test starts with no cached memory and a healthy, quiet cache layer."""
    _reset_process_state()
    _clean_keys()
    yield
    _clean_keys()
    _reset_process_state()


@pytest.fixture
def memory_settings() -> Any:
    """``with memory_settings(CACHE_TTL=1):`` overrides MEMORY keys, keeping the test prefix."""
    return lambda **overrides: override_settings(MEMORY=_memory_settings(**overrides))


@pytest.fixture
def write(django_capture_on_commit_callbacks: Any) -> Any:
    """``with write():`` commits what happens inside and runs its on-commit cache updates."""
    return lambda: django_capture_on_commit_callbacks(execute=True)


@pytest.fixture
def wang_chat(write: Any) -> None:
    """Wang's name (and what the extractor took from his turns) and 30 turns over two sessions."""
    from memory import services

    with write():
        services.fact_put(owner_id="wang", key="name", value="Wang Jianguo", session_id="a")
        for i in range(30):
            services.turn_append(
                owner_id="wang",
                session_id="a" if i % 2 else "b",
                role="user" if i % 2 == 0 else "assistant",
                content=f"turn {i + 1}",
            )


@pytest.fixture
def redis_client() -> Any:
    """The raw redis-py client of the memory alias (the shared test Redis)."""
    return caches["memory"].client.get_client(write=True)


@pytest.fixture
def dead_cache() -> Iterator[None]:
    """The memory alias points at a port where no Redis listens."""
    with override_settings(MEMORY=_memory_settings(CACHE_ALIAS="dead")):
        _reset_process_state()
        yield
    _reset_process_state()


@pytest.fixture
def dead_database(transactional_db: None) -> Iterator[None]:
    """This thread's connection of the default alias points at a port where no database
    listens (as ``dead_cache`` does for Redis); the test's own rows are committed (a
    transactional test), and the connection is restored after it."""
    from django.db import connection

    saved = connection.settings_dict
    connection.close()
    connection.settings_dict = {**saved, "HOST": "127.0.0.1", "PORT": "1"}
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict = saved


@pytest.fixture
def no_cache() -> Iterator[None]:
    """No cache alias at all: every read from the database."""
    caches_without = {k: v for k, v in settings.CACHES.items() if k != "memory"}
    with override_settings(CACHES=caches_without, MEMORY=_memory_settings()):
        yield


@pytest.fixture(scope="module")
def cache_server() -> Iterator[RedisServer]:
    """A redis-server of the test module's own, for the app instances it starts."""
    with RedisServer() as server:
        yield server


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A redis-server of this test's own, used as the memory cache; free to flush, kill, pause."""
    server = RedisServer()
    server.start()
    own_caches = {
        **settings.CACHES,
        "own": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": server.url,
            "OPTIONS": {
                "SOCKET_CONNECT_TIMEOUT": 0.2,
                "SOCKET_TIMEOUT": 0.2,
                "SERIALIZER": "memory.codec.OrjsonSerializer",
            },
        },
    }
    try:
        with override_settings(CACHES=own_caches, MEMORY=_memory_settings(CACHE_ALIAS="own")):
            _reset_process_state()
            yield server
    finally:
        server.cleanup()
        _reset_process_state()


@pytest.fixture
def service_user(db: None) -> User:
    user = User.objects.create_user("svc", password="pw")
    user.user_permissions.add(Permission.objects.get(codename="access_all_memories"))
    return User.objects.get(pk=user.pk)


@pytest.fixture
def owner_user(db: None) -> User:
    return User.objects.create_user("wang", password="pw")


@pytest.fixture
def other_user(db: None) -> User:
    return User.objects.create_user("li", password="pw")


@pytest.fixture
def staff_user(db: None) -> User:
    return User.objects.create_user("ops", password="pw", is_staff=True)


def _client_for(user: User | None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


@pytest.fixture
def service_client(service_user: User) -> APIClient:
    return _client_for(service_user)


@pytest.fixture
def owner_client(owner_user: User) -> APIClient:
    return _client_for(owner_user)


@pytest.fixture
def other_client(other_user: User) -> APIClient:
    return _client_for(other_user)


@pytest.fixture
def anon_client(db: None) -> APIClient:
    return _client_for(None)


CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"


@pytest.fixture
def sync_playwright() -> Any:
    """Playwright's sync API; skips, saying why, where it or Debian's Chromium is missing."""
    api = pytest.importorskip(
        "playwright.sync_api",
        reason="playwright is not installed: pip install -r requirements-dev.txt",
    )
    if not CHROMIUM.exists():
        pytest.skip(
            f"Chromium is not installed at {CHROMIUM}: run scripts/ensure-chromium as root "
            "(it uses apt-get), or apt-get install chromium"
        )
    return api.sync_playwright


@pytest.fixture
def chromium_options() -> dict[str, Any]:
    """``playwright.chromium.launch(**chromium_options)``: Debian's Chromium, headless, offline."""
    return {
        "executable_path": str(CHROMIUM),
        "headless": True,
        "args": [
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ],
    }


@pytest.fixture
def artifacts() -> Path:
    """The folder for screenshots and other test artifacts (gitignored)."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


# Seconds a test that counts throttled requests needs left in the current window.
WINDOW_ROOM = 10.0


@pytest.fixture
def fresh_window() -> None:
    """Begin the test with ``WINDOW_ROOM`` seconds or more left in the wall clock's minute: the
    throttles count in fixed windows of it (``memory.cache.limits``), and a test's requests that
    straddled two windows were counted in both halves apart."""
    left = 60.0 - time.time() % 60.0
    if left < WINDOW_ROOM:
        time.sleep(left + 0.05)
