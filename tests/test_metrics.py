"""Tests of ``memory.metrics``: who may scrape (service callers, the bearer token), and that
the exposition counts what the cache layer and the API did, on real Postgres and Redis."""

from __future__ import annotations

import subprocess
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from memory import ops, selectors, services
from memory.views.metrics import DIRTY_OWNERS_LIMIT
from tests.instance import ROOT, environment

pytestmark = pytest.mark.django_db

METRICS = "/metrics"
TOKEN = "a-scraper-token-of-32-characters"


def scrape(client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = client.get(METRICS)
    assert response.status_code == 200, response
    assert response["Content-Type"].startswith("text/plain")
    return samples(response.content.decode())


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def event(values: dict, name: str) -> float:
    return values.get(("memory_cache_events_total", (("event", name),)), 0.0)


def test_anonymous_callers_get_no_metrics(anon_client):
    assert anon_client.get(METRICS).status_code in (401, 403)


def test_ordinary_users_get_no_metrics(owner_client):
    assert owner_client.get(METRICS).status_code == 403


def test_service_callers_read_the_metrics(service_client):
    values = scrape(service_client)
    assert ("memory_dirty_owners", ()) in values
    assert ("memory_cache_unreachable", ()) in values


def test_the_bearer_token_reads_the_metrics(anon_client, memory_settings):
    with memory_settings(METRICS_TOKEN=TOKEN):
        response = anon_client.get(METRICS, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    assert ("memory_dirty_owners", ()) in samples(response.content.decode())


def test_a_wrong_bearer_token_reads_nothing(anon_client, memory_settings):
    with memory_settings(METRICS_TOKEN=TOKEN):
        wrong = anon_client.get(METRICS, HTTP_AUTHORIZATION=f"Bearer {TOKEN[:-1]}x")
        prefix = anon_client.get(METRICS, HTTP_AUTHORIZATION=f"Bearer {TOKEN[:8]}")
    assert wrong.status_code in (401, 403)
    assert prefix.status_code in (401, 403)


def test_a_bearer_token_is_refused_when_none_is_configured(anon_client):
    response = anon_client.get(METRICS, HTTP_AUTHORIZATION="Bearer anything-at-all-here")
    assert response.status_code in (401, 403)


def test_a_bearer_token_does_not_reach_the_memory_api(anon_client, memory_settings):
    with memory_settings(METRICS_TOKEN=TOKEN):
        response = anon_client.get(
            "/api/memory/users/wang/context/", HTTP_AUTHORIZATION=f"Bearer {TOKEN}"
        )
    assert response.status_code in (401, 403)


def test_cache_events_are_counted(service_client, write):
    before = scrape(service_client)
    with write():
        services.turn_append(owner_id="wang", session_id="s", role="user", content="hello")
    selectors.context_get(owner_id="wang")  # a miss, then a rehydration and a fill
    selectors.context_get(owner_id="wang")  # a hit
    with write():
        services.turn_append(owner_id="wang", session_id="s", role="user", content="again")
    after = scrape(service_client)
    for name in ("misses", "rehydrations", "fills", "hits", "deltas"):
        assert event(after, name) >= event(before, name) + 1, name


def test_a_refused_fill_is_counted(service_client, write):
    with write():
        services.turn_append(owner_id="wang", session_id="s", role="user", content="hello")
    selectors.context_get(owner_id="wang")
    before = scrape(service_client)
    from memory import cache

    # NOTE: a fill read at an older stamp than the copy holds: the protocol refuses it.
    stale = cache.Snapshot(stamp=0, turns=[], facts=[])
    assert (
        cache.copy.copy_fill(owner_id="wang", loaded=cache.Loaded(stale, True))
        is cache.copy.Fill.REFUSED
    )
    assert event(scrape(service_client), "fills_refused") == event(before, "fills_refused") + 1


def test_request_latency_is_observed_by_view(service_client):
    key = (("method", "GET"), ("view", "memory:context"))
    before = scrape(service_client)
    assert service_client.get("/api/memory/users/wang/context/").status_code == 200
    after = scrape(service_client)
    count = "memory_request_duration_seconds_count"
    assert after[(count, key)] == before.get((count, key), 0.0) + 1
    status = (("method", "GET"), ("status", "200"), ("view", "memory:context"))
    assert after[("memory_responses_total", status)] >= 1


def test_an_outage_shows_in_the_breaker_gauge_and_the_down_time(service_client, dead_cache):
    before = scrape(service_client)
    selectors.health_get()  # the first failed probe opens the outage
    during = scrape(service_client)
    selectors.health_get()  # a failed retry adds the time since
    after = scrape(service_client)
    assert during[("memory_cache_unreachable", ())] == 1
    assert (
        during[("memory_cache_outages_total", ())] == before[("memory_cache_outages_total", ())] + 1
    )
    assert (
        after[("memory_cache_down_seconds_total", ())]
        > during[("memory_cache_down_seconds_total", ())]
    )


def test_a_recovered_cache_clears_the_breaker_gauge(service_client, dead_cache, memory_settings):
    selectors.health_get()
    assert scrape(service_client)[("memory_cache_unreachable", ())] == 1
    with memory_settings(CACHE_ALIAS="memory"):
        selectors.health_get()
        assert scrape(service_client)[("memory_cache_unreachable", ())] == 0


def test_dirty_owners_are_counted_from_the_database(service_client, dead_cache, write):
    assert scrape(service_client)[("memory_dirty_owners", ())] == 0
    for owner in ("wang", "li"):
        with write():
            services.turn_append(owner_id=owner, session_id="s", role="user", content="hi")
    # NOTE: Redis is down: neither write's cache update landed, so both owners stay marked.
    assert scrape(service_client)[("memory_dirty_owners", ())] == 2
    assert ops.owner_dirty_count(limit=1) == 1
    assert DIRTY_OWNERS_LIMIT >= 1000


def test_a_scrape_while_the_database_is_down_shows_the_process_metrics(
    anon_client, memory_settings, dead_database, caplog
):
    """The dirty-owners gauge is left out, and the scrape still answers (its count raised
    ``MemoryUnavailable``, which the collector did not catch, once it had the guard)."""
    with memory_settings(METRICS_TOKEN=TOKEN):
        response = anon_client.get(METRICS, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    values = samples(response.content.decode())
    assert ("memory_cache_unreachable", ()) in values
    assert ("memory_dirty_owners", ()) not in values
    assert "Could not count the owners with pending cache updates" in caplog.text


def test_the_scrape_does_not_touch_redis(service_client, dead_cache):
    before = scrape(service_client)
    after = scrape(service_client)
    assert after[("memory_cache_outages_total", ())] == before[("memory_cache_outages_total", ())]


@pytest.mark.slow
def test_multiprocess_mode_adds_up_every_process(tmp_path):
    """With PROMETHEUS_MULTIPROC_DIR set, a scrape sums the counters of every process that
    wrote there, as under gunicorn workers (docs/metrics.md)."""
    code = (
        "import django, sys; django.setup();"
        "from prometheus_client import generate_latest;"
        "from memory import counters;"
        "from memory.views import metrics;"
        "counters.cache_event('hits', int(sys.argv[1]));"
        "print(generate_latest(metrics.registry_for_scrape()).decode())"
    )
    env = {**environment(), "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    outputs = [
        subprocess.run(
            [sys.executable, "-c", code, str(n)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout
        for n in (3, 4)
    ]
    assert event(samples(outputs[0]), "hits") == 3
    assert event(samples(outputs[1]), "hits") == 7


def test_invented_methods_share_one_label(service_client):
    for method in ("BREW", "WHEN"):
        response = service_client.generic(method, "/api/memory/users/wang/context/")
        assert response.status_code == 405
    values = scrape(service_client)
    methods = {
        dict(labels)["method"]
        for (name, labels) in values
        if name == "memory_responses_total" and dict(labels)["view"] == "memory:context"
    }
    assert "other" in methods
    assert not methods & {"BREW", "WHEN"}
