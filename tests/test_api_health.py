"""Tests of ``health/``: open to load-balancer probes, the state of the database and cache, and
how long each took to answer."""

from __future__ import annotations

import pytest

from memory import selectors

pytestmark = pytest.mark.django_db

HEALTH = "/api/memory/health/"


def states(body: dict) -> tuple[str, str]:
    return body["database"], body["cache"]


def test_health_with_everything_up(anon_client):
    response = anon_client.get(HEALTH)
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"database", "cache", "latency_ms"}
    assert states(body) == ("ok", "ok")


def test_health_reports_each_dependency_latency_in_milliseconds(anon_client):
    latency = anon_client.get(HEALTH).json()["latency_ms"]
    assert set(latency) == {"database", "cache"}
    assert isinstance(latency["database"], float) and latency["database"] >= 0
    assert isinstance(latency["cache"], float) and latency["cache"] >= 0


def test_health_reports_the_latency_of_a_failed_probe(anon_client, dead_cache):
    # NOTE: how long the failed PING took is what an operator needs (a timeout, or a refusal).
    body = anon_client.get(HEALTH).json()
    assert states(body) == ("ok", "down")
    assert isinstance(body["latency_ms"]["cache"], float)


def test_health_needs_no_credentials_and_ignores_bad_ones(anon_client):
    response = anon_client.get(HEALTH, HTTP_AUTHORIZATION="Token not-a-token")
    assert response.status_code == 200


def test_health_says_the_cache_is_down(anon_client, dead_cache):
    response = anon_client.get(HEALTH)
    assert response.status_code == 200
    assert states(response.json()) == ("ok", "down")


def test_health_says_the_cache_is_disabled(anon_client, no_cache):
    body = anon_client.get(HEALTH).json()
    assert states(body) == ("ok", "disabled")
    assert body["latency_ms"]["cache"] is None


def test_health_is_503_when_the_database_is_down(anon_client, monkeypatch):
    # NOTE: the view's mapping alone; health_get itself is tested against a stopped server.
    down = {"database": "down", "cache": "ok", "latency_ms": {"database": 2.0, "cache": 0.1}}
    monkeypatch.setattr(selectors, "health_get", lambda: down)
    response = anon_client.get(HEALTH)
    assert response.status_code == 503
    assert response.json() == down


def test_health_answers_only_get(anon_client):
    assert anon_client.post(HEALTH, {}, format="json").status_code == 405
