"""Tests of the OpenAPI schema the demo serves at ``/api/schema/``: as precise as the
validation (patterns, lengths, property names, NUL characters), every status each operation can
answer, the links of a fact's history; and repeated query parameters refused everywhere."""

from __future__ import annotations

import pytest
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.settings import patched_settings
from drf_spectacular.validation import validate_schema

from memory.serializers import MAX_FACTS_PER_MERGE
from memory.validators import FACT_KEY_RE, OWNER_ID_RE, SESSION_ID_RE

pytestmark = pytest.mark.django_db

BASE = "/api/memory/users/{user_id}/"


@pytest.fixture
def schema(anon_client):
    response = anon_client.get("/api/schema/?format=json")
    assert response.status_code == 200
    return response.json()


def operations(schema):
    return {
        op["operationId"]: op for methods in schema["paths"].values() for op in methods.values()
    }


def component(schema, ref):
    return schema["components"]["schemas"][ref.rsplit("/", 1)[-1]]


def body_schema(schema, operation_id):
    content = operations(schema)[operation_id]["requestBody"]["content"]["application/json"]
    return component(schema, content["schema"]["$ref"])


def test_the_served_schema_is_valid_openapi(schema):
    validate_schema(schema)


EXPECTED_STATUSES = {
    "turn_append": {201, 400, 401, 403, 404, 413, 415, 422, 429, 503},
    "turn_list": {200, 400, 401, 403, 404, 429, 503},
    "context_get": {200, 400, 401, 403, 404, 429, 503},
    "fact_list": {200, 400, 401, 403, 404, 429, 503},
    "fact_get": {200, 400, 401, 403, 404, 429, 503},
    "facts_merge": {200, 400, 401, 403, 404, 413, 415, 429, 503},
    "fact_put": {200, 201, 400, 401, 403, 404, 412, 413, 415, 429, 503},
    "fact_delete": {204, 400, 401, 403, 404, 412, 429, 503},
    "fact_history": {200, 400, 401, 403, 404, 429, 503},
    "session_list": {200, 400, 401, 403, 404, 429, 503},
    "memory_link": {200, 400, 401, 403, 404, 413, 415, 429, 503},
    "memory_forget": {204, 400, 401, 403, 404, 429, 503},
    "owner_export": {200, 400, 401, 403, 404, 429, 503},
    "tool_list": {200, 400, 401, 403, 429, 503},
    "tool_call": {200, 400, 401, 403, 404, 413, 415, 429, 503},
    "health_get": {200, 400, 503},
}


@pytest.mark.parametrize(("operation_id", "statuses"), list(EXPECTED_STATUSES.items()))
def test_every_status_an_operation_answers_is_in_the_schema(schema, operation_id, statuses):
    responses = operations(schema)[operation_id]["responses"]
    assert statuses <= {int(code) for code in responses}
    assert all(response["description"] for response in responses.values() if response)


def test_the_statuses_say_when_they_happen(schema):
    ops = operations(schema)
    assert "different body" in ops["turn_append"]["responses"]["422"]["description"]
    assert "linked to itself" in ops["memory_link"]["responses"]["400"]["description"]
    assert "MAX_FACTS" in ops["fact_put"]["responses"]["400"]["description"]
    assert "MAX_FACTS" in ops["facts_merge"]["responses"]["400"]["description"]
    for operation_id in ("fact_put", "fact_delete"):
        assert "If-Match" in ops[operation_id]["responses"]["412"]["description"]


def test_turn_content_refuses_nul_in_the_schema(schema):
    import jsonschema

    content = body_schema(schema, "turn_append")["properties"]["content"]
    rule = {k: v for k, v in content.items() if k != "description"}
    assert content["not"] == {"pattern": "\\u0000"}
    assert not jsonschema.Draft4Validator(rule).is_valid("a\x00b")
    assert jsonschema.Draft4Validator(rule).is_valid("a b")
    assert content["maxLength"] == 32768
    assert "NUL" in content["description"]
    assert "NUL" in body_schema(schema, "turn_append")["properties"]["metadata"]["description"]


def test_empty_turn_content_is_valid_in_the_schema_as_on_the_server(schema):
    """One string schema, not ``oneOf`` a pattern and an empty string, which ``""`` matches
    twice: the schema refused a turn the server stores (a schemathesis negative case)."""
    import jsonschema

    content = body_schema(schema, "turn_append")["properties"]["content"]
    assert "oneOf" not in content
    jsonschema.validate("", {k: v for k, v in content.items() if k != "description"})


def test_max_turn_chars_in_the_schema_follows_the_setting(anon_client, memory_settings):
    with memory_settings(MAX_TURN_CHARS=100):
        schema = anon_client.get("/api/schema/?format=json").json()
    content = body_schema(schema, "turn_append")["properties"]["content"]
    assert content["maxLength"] == 100


def test_patch_facts_map_states_the_key_rule(schema):
    facts = body_schema(schema, "facts_merge")["properties"]["facts"]
    # NOTE: OpenAPI 3.0 (the demo's) has no propertyNames: the description says the rule.
    assert schema["openapi"].startswith("3.0")
    assert "propertyNames" not in facts
    assert "1-64 lower-case letters, digits and _ - ., not only dots" in facts["description"]
    assert facts["maxProperties"] == MAX_FACTS_PER_MERGE
    assert facts["additionalProperties"]["nullable"] is True
    assert "NUL" in facts["additionalProperties"]["description"]
    assert body_schema(schema, "facts_merge")["required"] == ["facts"]


def test_patch_facts_map_has_property_names_in_openapi_3_1(db):
    with patched_settings({"OAS_VERSION": "3.1.0"}):
        schema = SchemaGenerator().get_schema(request=None, public=True)
    assert schema["openapi"] == "3.1.0"
    validate_schema(schema)
    facts = body_schema(schema, "facts_merge")["properties"]["facts"]
    assert facts["propertyNames"] == {
        "type": "string",
        "minLength": 1,
        "maxLength": 64,
        "pattern": FACT_KEY_RE.pattern,
    }
    assert "nullable" not in facts["additionalProperties"]
    assert "NUL" in facts["additionalProperties"]["description"]


def test_ids_and_keys_have_their_patterns(schema):
    link = body_schema(schema, "memory_link")["properties"]["from_user_id"]
    assert (link["pattern"], link["minLength"], link["maxLength"]) == (OWNER_ID_RE.pattern, 1, 128)
    session_id = body_schema(schema, "turn_append")["properties"]["session_id"]
    assert session_id["pattern"] == SESSION_ID_RE.pattern
    for op in operations(schema).values():
        for parameter in op.get("parameters", []):
            if parameter["name"] == "user_id":
                assert parameter["schema"]["pattern"] == OWNER_ID_RE.pattern
            if parameter["name"] == "key":
                assert parameter["schema"]["pattern"] == FACT_KEY_RE.pattern


@pytest.mark.parametrize("operation_id", ["session_list", "fact_history"])
def test_pages_have_limit_cursor_and_next(schema, operation_id):
    op = operations(schema)[operation_id]
    query = {p["name"]: p["schema"] for p in op["parameters"] if p["in"] == "query"}
    assert query["limit"] == {"type": "integer", "minimum": 1, "maximum": 500, "default": 50}
    assert query["cursor"]["pattern"] == "^[A-Za-z0-9_\\-]+$"
    page = component(
        schema, op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    )
    assert set(page["properties"]) == {"results", "next"}
    assert page["properties"]["next"]["nullable"] is True


def test_a_deleted_facts_history_is_linked_from_the_delete(schema):
    links = operations(schema)["fact_delete"]["responses"]["204"]["links"]
    assert links["FactHistory"]["operationId"] == "fact_history"
    assert links["FactHistory"]["parameters"] == {
        "user_id": "$request.path.user_id",
        "key": "$request.path.key",
    }
    assert "deleted: true" in links["FactHistory"]["description"]


def query_parameters(schema):
    """(path, parameter) for every query parameter of every GET in the schema."""
    return [
        (path, parameter["name"])
        for path, methods in schema["paths"].items()
        for method, op in methods.items()
        if method == "get"
        for parameter in op.get("parameters", [])
        if parameter["in"] == "query"
    ]


def test_repeated_query_parameters_are_400_everywhere(anon_client, service_client):
    schema = anon_client.get("/api/schema/?format=json").json()
    cases = query_parameters(schema)
    assert len(cases) >= 8
    for path, name in cases:
        url = path.replace("{user_id}", "wang").replace("{key}", "name")
        response = service_client.get(f"{url}?{name}=1&{name}=x")
        assert response.status_code == 400, (path, name)
        assert response.json() == {name: ["Give this parameter once."]}


@pytest.mark.parametrize(
    "url",
    [
        "/api/memory/health/?probe=1&probe=2",
        "/api/memory/users/wang/facts/?a=1&a=1",
        "/api/memory/users/wang/context/?turns=1&turns=x",
    ],
)
def test_any_repeated_query_parameter_is_400(service_client, url):
    response = service_client.get(url)
    assert response.status_code == 400
    assert len(response.json()) == 1


def test_a_repeated_parameter_on_another_users_memory_is_still_404(other_client):
    response = other_client.get("/api/memory/users/wang/context/?turns=1&turns=x")
    assert response.status_code == 404
