"""Tests of memory.throttling: DRF's rate limits counted in the memory cache's Redis through its
breaker. Shared by every process while Redis answers; per process, at no wait, while it does
not (a dead port, a paused server), with the fallback counted in a metric."""

from __future__ import annotations

import time

import pytest
import redis
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from memory import cache, counters
from memory.cache.keys import prefix
from memory.throttling import UserRateThrottle

pytestmark = pytest.mark.django_db


def _local_counts() -> float:
    text = generate_latest(counters.REGISTRY).decode()
    for family in text_string_to_metric_families(text):
        if family.name == "memory_throttle_local":
            return sum(sample.value for sample in family.samples if sample.name.endswith("_total"))
    return 0.0


def _facts(client) -> int:
    return client.get("/api/memory/users/wang/facts/").status_code


def test_a_rate_is_counted_in_redis_and_shared_by_every_process(
    owner_client, monkeypatch, redis_client, fresh_window
):
    monkeypatch.setitem(UserRateThrottle.THROTTLE_RATES, "user", "3/minute")
    assert [_facts(owner_client) for _ in range(2)] == [200, 200]
    # Another process (its own memory, the same Redis) has only the rest of the allowance.
    cache.reset()
    assert [_facts(owner_client) for _ in range(2)] == [200, 429]
    assert list(redis_client.scan_iter(match=f"{prefix()}:limit:*"))


def test_a_throttled_answer_says_when_to_come_back(owner_client, monkeypatch, fresh_window):
    monkeypatch.setitem(UserRateThrottle.THROTTLE_RATES, "user", "1/minute")
    assert _facts(owner_client) == 200
    response = owner_client.get("/api/memory/users/wang/facts/")
    assert response.status_code == 429
    assert 0 < int(response["Retry-After"]) <= 60


def test_with_redis_down_the_limit_holds_per_process_and_shows_in_a_metric(
    owner_client, monkeypatch, dead_cache, fresh_window
):
    monkeypatch.setitem(UserRateThrottle.THROTTLE_RATES, "user", "2/minute")
    before = _local_counts()
    assert [_facts(owner_client) for _ in range(3)] == [200, 200, 429]
    assert _local_counts() - before == 3


@pytest.mark.faults
def test_a_paused_redis_costs_a_throttled_request_no_wait(owner_client, monkeypatch, own_redis):
    monkeypatch.setitem(UserRateThrottle.THROTTLE_RATES, "user", "1000/minute")
    assert _facts(owner_client) == 200
    own_redis.pause()
    try:
        assert _facts(owner_client) == 200  # the first meets the pause: one socket timeout
        started = time.monotonic()
        statuses = [_facts(owner_client) for _ in range(10)]
        elapsed = time.monotonic() - started
    finally:
        own_redis.resume()
    assert statuses == [200] * 10
    # NOTE: the breaker's contract, not a speed figure: after one timed-out call no request
    # waits on Redis (ten requests in far less than one 0.2 s timeout each).
    assert elapsed < 0.2 * 10 / 2
    assert redis.Redis.from_url(own_redis.url).ping()
