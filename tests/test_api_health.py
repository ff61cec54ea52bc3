"""Tests of ``health/``: open to load-balancer probes, two words about the database and cache."""

from __future__ import annotations

import pytest

from memory import selectors

pytestmark = pytest.mark.django_db

HEALTH = "/api/memory/health/"


def test_health_with_everything_up(anon_client):
    response = anon_client.get(HEALTH)
    assert response.status_code == 200
    assert response.json() == {"database": "ok", "cache": "ok"}


def test_health_needs_no_credentials_and_ignores_bad_ones(anon_client):
    response = anon_client.get(HEALTH, HTTP_AUTHORIZATION="Token not-a-token")
    assert response.status_code == 200


def test_health_says_the_cache_is_down(anon_client, dead_cache):
    response = anon_client.get(HEALTH)
    assert response.status_code == 200
    assert response.json() == {"database": "ok", "cache": "down"}


def test_health_says_the_cache_is_disabled(anon_client, no_cache):
    assert anon_client.get(HEALTH).json() == {"database": "ok", "cache": "disabled"}


def test_health_is_503_when_the_database_is_down(anon_client, monkeypatch):
    # NOTE: the view's mapping alone; health_get itself is tested against a stopped server.
    monkeypatch.setattr(selectors, "health_get", lambda: {"database": "down", "cache": "ok"})
    response = anon_client.get(HEALTH)
    assert response.status_code == 503
    assert response.json() == {"database": "down", "cache": "ok"}


def test_health_answers_only_get(anon_client):
    assert anon_client.post(HEALTH, {}, format="json").status_code == 405
