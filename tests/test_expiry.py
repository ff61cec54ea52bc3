"""Tests of facts that expire and of who changed what (issue 27, parts 3-4): ``expires_at``
through the services and ``PUT``, every read leaving an expired fact out (a warm copy on
another instance included, with no write in between), the sweep (``ops.facts_expire``,
``manage.py memory_expire``, the task) and the ``actor`` of every fact version."""

from __future__ import annotations

import datetime as dt
import io
import json
import time
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from memory import cache, ops, selectors, services
from memory.models import Fact, FactVersion, Owner
from tests import instance

pytestmark = pytest.mark.django_db

FACTS = "/api/memory/users/wang/facts/"


def soon(seconds: float) -> dt.datetime:
    return timezone.now() + dt.timedelta(seconds=seconds)


def wait_past(at: dt.datetime) -> None:
    """Sleep until ``at`` has passed on this process's clock: real time, no clock mocked."""
    time.sleep(max((at - timezone.now()).total_seconds(), 0) + 0.05)


def cached_fact_keys(redis_client: Any) -> list[str]:
    """The keys of the facts wang's copy holds (its ``fkeys`` field)."""
    listed = redis_client.hget(cache.keys.owner_key("wang"), "fkeys") or b""
    return [key.decode() for key in listed.split()]


def history(owner_id: str, key: str) -> list[tuple[int, bool, str]]:
    versions = selectors.fact_history(owner_id=owner_id, key=key).results
    return [(v["version"], v["deleted"], v["actor"]) for v in versions]


def stamp(owner_id: str) -> int:
    return Owner.objects.get(external_id=owner_id).stamp


@pytest.fixture
def expiring(write) -> dt.datetime:
    """Wang's ``name`` (kept) and ``trip`` (expiring in a second), with a warm cached copy
    taken while both were there; returns when ``trip`` expires."""
    at = soon(1)
    with write():
        services.fact_put(owner_id="wang", key="name", value="王建国")
        services.fact_put(owner_id="wang", key="trip", value="东京", expires_at=at)
        services.turn_append(owner_id="wang", session_id="s", role="assistant", content="好的")
    selectors.context_get(owner_id="wang")
    warm = selectors.context_get(owner_id="wang")
    assert warm["source"] == "cache" and warm["facts"] == {"name": "王建国", "trip": "东京"}
    return at


# Writing an expiry ---------------------------------------------------------------------------


def test_a_fact_shows_its_expiry_and_a_write_without_one_clears_it(owner_client, write):
    at = soon(3600)
    with write():
        created = owner_client.put(
            f"{FACTS}trip/", {"value": "东京", "expires_at": at.isoformat()}, format="json"
        )
    assert created.status_code == 201
    assert dt.datetime.fromisoformat(created.json()["expires_at"]) == at
    assert owner_client.get(FACTS).json()["facts"][0]["expires_at"] == created.json()["expires_at"]
    with write():
        again = owner_client.put(f"{FACTS}trip/", {"value": "东京"}, format="json")
    assert again.status_code == 200
    assert (again.json()["expires_at"], again.json()["version"]) == (None, 2)
    assert Fact.objects.get(key="trip").expires_at is None


def test_the_same_value_with_the_same_expiry_changes_nothing(write):
    at = soon(3600)
    with write():
        services.fact_put(owner_id="wang", key="trip", value="东京", expires_at=at)
        fact, created = services.fact_put(owner_id="wang", key="trip", value="东京", expires_at=at)
    assert (fact.version, created) == (1, False)
    with write():
        fact, _ = services.fact_put(
            owner_id="wang", key="trip", value="东京", expires_at=at + dt.timedelta(days=1)
        )
    assert fact.version == 2


@pytest.mark.parametrize(
    "expires_at",
    [
        "2001-01-01T00:00:00Z",
        "now",
        "not a time",
        "",
        12,
        {"at": "2999-01-01T00:00:00Z"},
        ["2999-01-01T00:00:00Z"],
        "2999-13-40T99:00:00Z",
    ],
)
def test_a_put_with_an_expiry_not_in_the_future_or_not_a_time_is_a_400_changing_nothing(
    owner_client, write, expires_at
):
    with write():
        services.fact_put(owner_id="wang", key="trip", value="上海")
    before = stamp("wang")
    response = owner_client.put(
        f"{FACTS}trip/", {"value": "东京", "expires_at": expires_at}, format="json"
    )
    assert response.status_code == 400
    assert "expires_at" in response.json()
    fact = Fact.objects.get(key="trip")
    assert (fact.value, fact.version, fact.expires_at) == ("上海", 1, None)
    assert history("wang", "trip") == [(1, False, "python")]
    assert stamp("wang") == before


def test_a_put_with_an_expiry_just_past_is_a_400(owner_client):
    response = owner_client.put(
        f"{FACTS}trip/", {"value": "东京", "expires_at": timezone.now().isoformat()}, format="json"
    )
    assert response.status_code == 400
    assert not Fact.objects.exists()


def test_the_python_api_refuses_a_past_or_naive_expiry():
    for bad in (timezone.now() - dt.timedelta(seconds=1), dt.datetime(2999, 1, 1), "2999-01-01"):
        with pytest.raises(ValidationError) as e:
            services.fact_put(owner_id="wang", key="trip", value="东京", expires_at=bad)
        assert "expires_at" in e.value.message_dict
    assert not Owner.objects.exists()


# Every read leaves an expired fact out --------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_fact_expiring_between_two_reads_of_a_warm_copy_on_another_instance_is_gone_from_the_second():  # noqa: E501
    at = soon(4)
    services.fact_put(owner_id="wang", key="name", value="王建国")
    services.fact_put(owner_id="wang", key="trip", value="东京", expires_at=at)
    services.turn_append(owner_id="wang", session_id="s", role="user", content="我要去东京")
    selectors.context_get(owner_id="wang")
    assert selectors.context_get(owner_id="wang")["source"] == "cache"
    before = stamp("wang")
    # NOTE: another process, with its own connections and Redis pool, reads the warm copy
    # before the fact expires and again after, with nothing written in between.
    first, second = instance.run("context_across", "wang", at.isoformat())
    assert dt.datetime.fromisoformat(first["at"]) < at <= dt.datetime.fromisoformat(second["at"])
    assert (first["source"], first["facts"]) == ("cache", {"name": "王建国", "trip": "东京"})
    assert (second["source"], second["facts"]) == ("cache", {"name": "王建国"})
    assert stamp("wang") == before
    assert Fact.objects.filter(key="trip").exists()


def test_a_warm_copy_drops_an_expired_fact_with_no_write_sync_and_async(expiring, redis_client):
    before = stamp("wang")
    wait_past(expiring)
    context = selectors.context_get(owner_id="wang")
    assert (context["source"], context["facts"]) == ("cache", {"name": "王建国"})
    assert [f["key"] for f in selectors.fact_list(owner_id="wang")] == ["name"]
    warm = async_to_sync(selectors.acontext_get)(owner_id="wang")
    assert (warm["source"], warm["facts"]) == ("cache", {"name": "王建国"})
    assert [f["key"] for f in async_to_sync(selectors.afact_list)(owner_id="wang")] == ["name"]
    # NOTE: the copy still holds the fact (nothing wrote); the read drops it by the clock.
    assert "trip" in cached_fact_keys(redis_client)
    assert stamp("wang") == before


def test_a_cold_read_leaves_an_expired_fact_out_of_the_database_read_and_the_fill(
    expiring, redis_client
):
    wait_past(expiring)
    cache.copy.copy_evict(owner_id="wang")
    context = selectors.context_get(owner_id="wang")
    assert (context["source"], context["facts"]) == ("database", {"name": "王建国"})
    assert "trip" not in cached_fact_keys(redis_client)
    assert selectors.context_get(owner_id="wang")["facts"] == {"name": "王建国"}


# NOTE: committed rows: the export reads on a connection of its own (its snapshot).
@pytest.mark.django_db(transaction=True)
def test_every_door_leaves_an_expired_fact_out_before_any_sweep(expiring, owner_client):
    wait_past(expiring)
    assert [f["key"] for f in owner_client.get(FACTS).json()["facts"]] == ["name"]
    assert owner_client.get(f"{FACTS}trip/").status_code == 404
    assert owner_client.get(f"{FACTS}name/").json()["value"] == "王建国"
    assert owner_client.get("/api/memory/users/wang/context/").json()["facts"] == {"name": "王建国"}
    messages = owner_client.get("/api/memory/users/wang/context/messages/").json()
    assert messages["facts"] == {"name": "王建国"}
    assert "东京" not in messages["messages"][0]["content"]
    profile = owner_client.post(
        "/api/memory/users/wang/tools/get_profile/", {"arguments": {}}, format="json"
    )
    assert profile.json() == {"result": {"facts": {"name": "王建国"}}}
    document = json.loads(b"".join(owner_client.get("/api/memory/users/wang/export/")))
    assert [f["key"] for f in document["facts"]] == ["name"]
    # NOTE: its history stays, until the sweep adds the last version.
    assert ("trip", 1) in [(v["key"], v["version"]) for v in document["fact_history"]]
    assert Fact.objects.filter(key="trip").exists()


def test_an_expired_fact_is_none_to_a_delete_and_new_to_a_put(expiring, owner_client, write):
    wait_past(expiring)
    assert owner_client.delete(f"{FACTS}trip/").status_code == 404
    with write():
        created = owner_client.put(f"{FACTS}trip/", {"value": "东京"}, format="json")
    assert created.status_code == 201
    assert selectors.context_get(owner_id="wang")["facts"]["trip"] == "东京"
    assert history("wang", "trip") == [(2, False, "api:wang"), (1, False, "python")]


def test_an_expired_fact_does_not_count_toward_max_facts(expiring, memory_settings, write):
    wait_past(expiring)
    with memory_settings(MAX_FACTS=2), write():
        services.fact_put(owner_id="wang", key="city", value="北京")
    assert selectors.context_get(owner_id="wang")["facts"] == {"city": "北京", "name": "王建国"}


def test_the_extractor_writes_over_an_expired_fact_as_a_new_one(write):
    at = soon(1)
    with write():
        services.fact_put(owner_id="wang", key="location", value="上海", expires_at=at)
    wait_past(at)
    with write():
        services.turn_append(owner_id="wang", session_id="s", role="user", content="我住在北京")
    fact = Fact.objects.get(key="location")
    assert (fact.value, fact.version, fact.expires_at) == ("北京", 2, None)
    assert history("wang", "location") == [(2, False, "extractor"), (1, False, "python")]


# The sweep ------------------------------------------------------------------------------------


def test_the_sweep_deletes_expired_facts_leaving_a_deleted_version_by_expiry(
    expiring, redis_client, write
):
    with write():
        services.fact_put(owner_id="li", key="plan", value="later", expires_at=soon(3600))
    wait_past(expiring)
    with write():
        assert ops.facts_expire() == 1
    assert history("wang", "trip") == [(2, True, "expiry"), (1, False, "python")]
    assert not Fact.objects.filter(key="trip").exists()
    assert Fact.objects.filter(key="plan").exists()
    # NOTE: the copy took the delete after commit, as fact_delete's does: still a hit.
    assert "trip" not in cached_fact_keys(redis_client)
    context = selectors.context_get(owner_id="wang")
    assert (context["source"], context["facts"]) == ("cache", {"name": "王建国"})
    with write():
        assert ops.facts_expire() == 0


def test_the_sweep_keeps_a_fact_written_again_before_it(expiring, write):
    with write():
        services.fact_put(owner_id="wang", key="trip", value="京都")
    wait_past(expiring)
    with write():
        assert ops.facts_expire() == 0
    assert selectors.context_get(owner_id="wang")["facts"]["trip"] == "京都"


def test_the_command_pages_through_every_expired_fact_of_every_owner(write):
    at = soon(1)
    with write():
        for owner_id in ("wang", "li", "han"):
            for key in ("a", "b"):
                services.fact_put(owner_id=owner_id, key=key, value=1, expires_at=at)
        services.fact_put(owner_id="li", key="c", value=1)
    wait_past(at)
    out = io.StringIO()
    with write():
        call_command("memory_expire", "--batch-size", "2", stdout=out)
    assert out.getvalue() == "Deleted 6 expired fact(s).\n"
    assert list(Fact.objects.values_list("key", flat=True)) == ["c"]
    deleted = FactVersion.objects.filter(deleted=True)
    assert sorted(deleted.values_list("actor", flat=True)) == ["expiry"] * 6


def test_the_sweep_stops_after_the_page_that_reached_its_limit(write):
    at = soon(1)
    with write():
        for key in "abcde":
            services.fact_put(owner_id="wang", key=key, value=1, expires_at=at)
    wait_past(at)
    with write():
        assert ops.facts_expire(batch_size=2, limit=3) == 4
        assert ops.facts_expire(batch_size=2) == 1


def test_the_sweeps_queries_per_page_do_not_grow_with_the_facts_left(write):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    at = soon(1)
    with write():
        for key in "abcdefgh":
            services.fact_put(owner_id="wang", key=key, value=1, expires_at=at)
    wait_past(at)
    # NOTE: a first sweep outside the count: what a process does once (a first query of a
    # kind, a setting read) is not growth.
    with write():
        ops.facts_expire(batch_size=2, limit=1)
    with CaptureQueriesContext(connection) as first, write():
        ops.facts_expire(batch_size=2, limit=1)
    with CaptureQueriesContext(connection) as second, write():
        ops.facts_expire(batch_size=2, limit=1)
    assert len(first.captured_queries) == len(second.captured_queries)


@pytest.mark.parametrize("args", [["--batch-size", "0"], ["--limit", "-1"]])
def test_the_command_refuses_bad_numbers(db, args):
    with pytest.raises(CommandError):
        call_command("memory_expire", *args, stdout=io.StringIO())


def test_the_service_refuses_bad_numbers(db):
    for kwargs in ({"batch_size": 0}, {"limit": True}, {"batch_size": "5"}):
        with pytest.raises(ValidationError):
            ops.facts_expire(**kwargs)


def test_the_task_runs_the_sweep(write):
    deferred = pytest.importorskip("memory.services.deferred")
    at = soon(1)
    with write():
        services.fact_put(owner_id="wang", key="trip", value="东京", expires_at=at)
    wait_past(at)
    with write():
        assert deferred.facts_expire_run.call() == 1
    assert history("wang", "trip")[0] == (2, True, "expiry")


# Who changed what -----------------------------------------------------------------------------


def test_every_version_names_its_actor(owner_client, admin_client, write):
    with write():
        services.fact_put(owner_id="wang", key="name", value="Wang")
        owner_client.put(f"{FACTS}name/", {"value": "Jim"}, format="json")
        owner_client.patch(FACTS, {"facts": {"name": "Jimmy"}}, format="json")
        owner_client.post(
            "/api/memory/users/wang/tools/remember_fact/",
            {"arguments": {"key": "name", "value": "J"}},
            format="json",
        )
        fact = Fact.objects.get(key="name")
        admin_client.post(
            f"/admin/memory/fact/{fact.pk}/change/",
            {"value": '"王建国"', "expected_version": "4"},
        )
        owner_client.delete(f"{FACTS}name/")
        services.turn_append(owner_id="wang", session_id="s", role="user", content="我叫王小明")
    assert [actor for _, _, actor in history("wang", "name")] == [
        "extractor",
        "api:wang",
        "admin:admin",
        "api:wang",
        "api:wang",
        "api:wang",
        "python",
    ]
    response = owner_client.get(f"{FACTS}name/history/?limit=1")
    assert response.json()["results"][0]["actor"] == "extractor"


def test_the_python_api_takes_an_actor_and_checks_it(write):
    with write():
        services.fact_put(owner_id="wang", key="name", value="Wang", actor="crm-sync")
        services.facts_merge(owner_id="wang", facts={"name": "Jim"}, actor="crm-sync")
        services.fact_delete(owner_id="wang", key="name", actor="gdpr-bot")
    assert [a for _, _, a in history("wang", "name")] == ["gdpr-bot", "crm-sync", "crm-sync"]
    for bad in ("", "a\nb", "x" * 201, 7):
        with pytest.raises(ValidationError) as e:
            services.fact_put(owner_id="wang", key="name", value="Bob", actor=bad)
        assert "actor" in e.value.message_dict


def test_an_import_keeps_the_documents_actors_and_says_import_where_it_has_none(write):
    document: dict[str, Any] = {
        "format": "memory-export",
        "version": 1,
        "user_id": "li",
        "exported_at": "2026-01-01T00:00:00Z",
        "facts": [
            {
                "key": "name",
                "value": "李雷",
                "session_id": None,
                "updated_at": "2025-01-02T00:00:00Z",
                "version": 2,
            }
        ],
        "fact_history": [
            {
                "key": "name",
                "value": "Li",
                "version": 1,
                "session_id": None,
                "updated_at": "2025-01-01T00:00:00Z",
                "source_turn_seq": None,
                "deleted": False,
            },
            {
                "key": "name",
                "value": "李雷",
                "version": 2,
                "session_id": None,
                "updated_at": "2025-01-02T00:00:00Z",
                "source_turn_seq": None,
                "deleted": False,
                "actor": "admin:ops",
            },
        ],
        "turns": [],
        "sessions": [],
        "summary": None,
    }
    with write():
        services.memory_import(document=document)
    assert history("li", "name") == [(2, False, "admin:ops"), (1, False, "import")]
    assert selectors.fact_list(owner_id="li")[0]["expires_at"] is None


def test_a_link_offers_no_expired_fact_and_replaces_an_expired_one(write):
    at = soon(1)
    with write():
        services.fact_put(owner_id="wang", key="city", value="上海", expires_at=at)
        services.fact_put(owner_id="anon-1", key="trip", value="东京", expires_at=at)
    with write():
        services.fact_put(owner_id="anon-1", key="city", value="北京")
    wait_past(at)
    with write():
        services.memory_link(owner_id="wang", from_owner_id="anon-1")
    assert selectors.context_get(owner_id="wang")["facts"] == {"city": "北京"}
    city = Fact.objects.get(owner__external_id="wang", key="city")
    assert (city.expires_at, city.version) == (None, 2)
    assert not Fact.objects.filter(key="trip").exists()
