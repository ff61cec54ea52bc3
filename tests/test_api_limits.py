"""Work in flight per caller (``MEMORY["HEAVY_READS_PER_CALLER"]``): a caller's heavy reads
(search, contexts and messages of more turns than the cached copy holds, turn pages longer than
the default) past the limit answer 429 with ``Retry-After`` at once and read nothing; cheap
reads, other callers and ``health/`` are not held up. The reads are held in flight by a real
lock on the turn table, taken by another session."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.db import connection
from rest_framework.test import APIClient

from memory import selectors, services
from tests.test_api_search import _waiting, turns_locked

pytestmark = pytest.mark.django_db(transaction=True)

WANG = "/api/memory/users/wang"
SEARCH = f"{WANG}/search/?q=basketball"
# Each reads more turns than the cached copy holds (MEMORY["CACHE_TURNS"], 50).
HEAVY = (
    SEARCH,
    f"{WANG}/context/messages/?max_tokens=10000000",
    f"{WANG}/context/?turns=200",
    f"{WANG}/turns/?limit=500",
)
CHEAP = (
    f"{WANG}/context/",
    f"{WANG}/context/messages/?max_tokens=10000000&turns=20",
    f"{WANG}/facts/",
)


def _client(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


class Request(threading.Thread):
    """One GET in a thread of its own (with its own database connection)."""

    def __init__(self, user: User, path: str) -> None:
        super().__init__()
        self.user, self.path = user, path
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.body: object = None
        self.start()

    def run(self) -> None:
        try:
            response = _client(self.user).get(self.path)
            self.status, self.body = response.status_code, response.json()
            self.headers = dict(response.items())
        finally:
            connection.close()


def _until(condition: Callable[[], bool], bound: float = 30.0) -> None:
    deadline = time.monotonic() + bound
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture
def history(db: None) -> None:
    """Wang's 60 turns (more than the cached copy holds), the cache warm for a default context."""
    for i in range(60):
        services.turn_append(
            owner_id="wang", session_id="s", role="assistant", content=f"basketball {i}"
        )
    services.turn_append(owner_id="li", session_id="s", role="assistant", content="basketball")
    selectors.context_get(owner_id="wang")


def test_heavy_reads_past_the_callers_limit_get_429_at_once(
    owner_user, other_user, history, memory_settings
):
    with memory_settings(HEAVY_READS_PER_CALLER=1, SEARCH_TIMEOUT_MS=30_000):
        with turns_locked() as lock:
            first = Request(owner_user, SEARCH)
            _until(lambda: _waiting(lock) == 1)
            refused = [Request(owner_user, path) for path in HEAVY]
            cheap = [Request(owner_user, path) for path in CHEAP]
            # Another caller's heavy read takes a slot of its own: it waits for the lock too.
            other = Request(other_user, "/api/memory/users/li/search/?q=basketball")
            for request in [*refused, *cheap]:
                request.join(timeout=5)
            statuses = [(r.status, r.headers.get("Retry-After")) for r in refused]
            assert statuses == [(429, "1")] * len(HEAVY)
            assert all(set(r.body) == {"detail"} for r in refused)  # type: ignore[arg-type]
            assert [r.status for r in cheap] == [200] * len(CHEAP)
            _until(lambda: _waiting(lock) == 2)
            assert first.is_alive() and other.is_alive()
            health = _client(owner_user).get("/api/memory/health/")
            assert health.status_code == 200
        first.join(timeout=30)
        other.join(timeout=30)
    assert (first.status, other.status) == (200, 200)
    # The slot is given back: the same caller's next heavy read answers.
    assert _client(owner_user).get(SEARCH).status_code == 200


def test_a_service_caller_has_a_limit_per_owner(service_user, history, memory_settings):
    with memory_settings(HEAVY_READS_PER_CALLER=1, SEARCH_TIMEOUT_MS=30_000):
        with turns_locked() as lock:
            first = Request(service_user, SEARCH)
            _until(lambda: _waiting(lock) == 1)
            again = Request(service_user, SEARCH)
            again.join(timeout=5)
            assert again.status == 429
            # NOTE: a chat backend calls as one service user for all its end users: each end
            # user's memory has its own slots.
            other = Request(service_user, "/api/memory/users/li/search/?q=basketball")
            _until(lambda: _waiting(lock) == 2)
        first.join(timeout=30)
        other.join(timeout=30)
    assert (first.status, again.status, other.status) == (200, 429, 200)


def test_reads_within_the_limit_are_not_refused(owner_user, history, memory_settings):
    with memory_settings(HEAVY_READS_PER_CALLER=2, SEARCH_TIMEOUT_MS=30_000):
        with turns_locked() as lock:
            reads = [Request(owner_user, SEARCH) for _ in range(2)]
            _until(lambda: _waiting(lock) == 2)
            third = Request(owner_user, f"{WANG}/turns/?limit=500")
            third.join(timeout=5)
            assert third.status == 429
        for read in reads:
            read.join(timeout=30)
    assert [r.status for r in reads] == [200, 200]
