"""Tests of the tools over REST: ``GET tools/`` and ``POST users/{user_id}/tools/{name}/``, with
the other user endpoints' authentication, owner check, throttles, limits and error mapping; the
same results as ``memory.tools.call``; bad arguments a 400 in DRF's shape that stores nothing;
and a fuzz of each tool's arguments from its JSON Schema that finds no 500."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from rest_framework.throttling import UserRateThrottle

from memory import limits, selectors, services, tools
from tests.jsonschema_strategies import from_schema
from tests.test_tools import _breaks_value_rules, _invalid_arguments, stored

pytestmark = pytest.mark.django_db

TOOLS = "/api/memory/tools/"
WANG = "/api/memory/users/wang/tools"
FUZZ = settings(
    max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)


def post(client: Any, url: str, body: Any) -> Any:
    return client.post(url, body, format="json")


@pytest.fixture
def wang(write: Any) -> None:
    with write():
        services.fact_put(owner_id="wang", key="name", value="Wang Jianguo")
        services.turn_append(
            owner_id="wang", session_id="s", role="user", content="The basketball game"
        )


def test_the_tools_are_listed_for_an_authenticated_caller(owner_client, anon_client):
    response = owner_client.get(TOOLS)
    assert response.status_code == 200
    assert response.json() == {"tools": tools.definitions()}
    assert "no-store" in response["Cache-Control"]
    assert anon_client.get(TOOLS).status_code == 401


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("get_profile", {}),
        ("recent_turns", {"limit": 1}),
        ("search_memory", {"query": "basketball"}),
        ("forget_fact", {"key": "nothing"}),
    ],
)
def test_a_call_answers_what_the_python_call_answers(wang, owner_client, name, arguments):
    response = post(owner_client, f"{WANG}/{name}/", {"arguments": arguments})
    assert response.status_code == 200
    assert response.json() == {"result": tools.call(name, arguments, owner_id="wang")}


def test_remember_and_forget_over_rest(owner_client, write):
    with write():
        response = post(
            owner_client, f"{WANG}/remember_fact/", {"arguments": {"key": "city", "value": "上海"}}
        )
        assert response.status_code == 200
        assert response.json()["result"]["fact"]["value"] == "上海"
        assert selectors.context_get(owner_id="wang")["facts"] == {"city": "上海"}
        response = post(owner_client, f"{WANG}/forget_fact/", {"arguments": {"key": "city"}})
    assert response.json() == {"result": {"deleted": True}}


def test_another_users_memory_is_a_404_and_untouched(wang, other_client, anon_client, write):
    before = stored("wang")
    with write():
        for name, arguments in (
            ("get_profile", {}),
            ("remember_fact", {"key": "name", "value": "Li"}),
            ("forget_fact", {"key": "name"}),
        ):
            assert (
                post(other_client, f"{WANG}/{name}/", {"arguments": arguments}).status_code == 404
            )
            assert post(anon_client, f"{WANG}/{name}/", {"arguments": arguments}).status_code == 401
    assert stored("wang") == before
    assert selectors.context_get(owner_id="wang")["facts"] == {"name": "Wang Jianguo"}


def test_a_service_caller_reaches_any_owner(wang, service_client):
    response = post(service_client, f"{WANG}/get_profile/", {"arguments": {}})
    assert response.json() == {"result": {"facts": {"name": "Wang Jianguo"}}}


def test_an_unknown_tool_is_a_404(owner_client):
    response = post(owner_client, f"{WANG}/lookup_user/", {"arguments": {}})
    assert response.status_code == 404
    assert "search_memory" in response.json()["detail"]


BAD = [
    ({}, {"arguments": ["This field is required."]}),
    ({"arguments": [1]}, {"arguments": ['Expected a dictionary of items but got type "list".']}),
    ({"arguments": {"key": "..", "value": 1}}, None),
    ({"arguments": {"key": "a", "value": 1, "owner_id": "li"}}, None),
    ({"arguments": {"key": "a"}}, {"arguments": {"value": ["This field is required."]}}),
]


@pytest.mark.parametrize(("body", "errors"), BAD)
def test_bad_arguments_are_a_400_in_drfs_shape_storing_nothing(owner_client, write, body, errors):
    with write():
        response = post(owner_client, f"{WANG}/remember_fact/", body)
    assert response.status_code == 400
    if errors is not None:
        assert response.json() == errors
    else:
        (field,) = response.json()["arguments"]
        assert field in ("key", "owner_id")
    assert stored("wang") == (0, 0, 0, 0)


def test_a_fact_past_the_cap_is_a_400(wang, owner_client, memory_settings, write):
    with memory_settings(MAX_FACTS=1), write():
        response = post(
            owner_client, f"{WANG}/remember_fact/", {"arguments": {"key": "b", "value": 2}}
        )
    assert response.status_code == 400
    assert "MAX_FACTS" in response.json()["arguments"]["key"][0]


def test_a_body_that_is_not_json_is_refused(owner_client):
    response = owner_client.post(f"{WANG}/get_profile/", "{", content_type="application/json")
    assert response.status_code == 400
    response = owner_client.post(f"{WANG}/get_profile/", "x", content_type="text/plain")
    assert response.status_code == 415


def test_a_search_holds_one_of_the_callers_heavy_read_slots(
    wang, owner_client, owner_user, memory_settings
):
    with (
        memory_settings(HEAVY_READS_PER_CALLER=1),
        limits.heavy_read(caller=f"user:{owner_user.pk}"),
    ):
        response = post(owner_client, f"{WANG}/search_memory/", {"arguments": {"query": "game"}})
        assert response.status_code == 429
        assert "Retry-After" in response
        # A cheap read is no heavy one.
        assert post(owner_client, f"{WANG}/get_profile/", {"arguments": {}}).status_code == 200
    assert limits.in_flight(caller=f"user:{owner_user.pk}") == 0


def test_calls_are_throttled_as_the_other_endpoints(owner_client, monkeypatch, fresh_window):
    monkeypatch.setitem(UserRateThrottle.THROTTLE_RATES, "user", "2/minute")
    statuses = [
        post(owner_client, f"{WANG}/get_profile/", {"arguments": {}}).status_code for _ in range(3)
    ]
    assert statuses == [200, 200, 429]


def test_a_lost_database_is_a_503(owner_client, dead_database):
    response = post(owner_client, f"{WANG}/get_profile/", {"arguments": {}})
    assert response.status_code == 503
    assert response.json() == {"detail": "The memory database is unavailable; try again later."}


@pytest.mark.parametrize("definition", tools.definitions(), ids=lambda d: d["name"])
def test_fuzzed_arguments_never_get_a_500(definition, service_client, write):
    url = f"/api/memory/users/fuzz/tools/{definition['name']}/"
    validator = jsonschema.Draft202012Validator(definition["parameters"])

    @FUZZ
    @given(
        arguments=from_schema(definition["parameters"])
        | _invalid_arguments(definition["parameters"])
    )
    def check(arguments: Any) -> None:
        with write():
            response = post(service_client, url, {"arguments": arguments})
        valid = validator.is_valid(arguments)
        if valid and not (
            definition["name"] == "remember_fact" and _breaks_value_rules(arguments["value"])
        ):
            assert response.status_code == 200, (arguments, response.json())
        else:
            assert response.status_code == 400, (arguments, response.json())
            assert stored("fuzz") == (0, 0, 0, 0)
        if definition["name"] == "remember_fact" and response.status_code == 200:
            with write():
                services.memory_forget(owner_id="fuzz")

    check()
