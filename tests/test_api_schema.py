"""Tests of the OpenAPI schema the demo serves at ``/api/schema/``: as precise as the
validation (patterns, lengths, property names, NUL characters), every status each operation can
answer, the links of a fact's history; and repeated query parameters refused everywhere."""

from __future__ import annotations

import pytest
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.settings import patched_settings
from drf_spectacular.validation import validate_schema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory.serializers import DATE_TIME_PATTERN, MAX_FACTS_PER_MERGE, ExpiresAtField
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
    **{
        f"tool_{name}": {200, 400, 401, 403, 404, 413, 414, 415, 429, 503}
        for name in ("search_memory", "get_profile", "remember_fact", "forget_fact", "recent_turns")
    },
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
    assert schema["openapi"] == "3.1.0"
    assert facts["propertyNames"] == {
        "type": "string",
        "minLength": 1,
        "maxLength": 64,
        "pattern": FACT_KEY_RE.pattern,
    }
    assert facts["additionalProperties"] == {"$ref": "#/components/schemas/JsonValue"}
    assert "1-64 lower-case letters, digits and _ - ., not only dots" in facts["description"]
    assert facts["maxProperties"] == MAX_FACTS_PER_MERGE
    assert body_schema(schema, "facts_merge")["required"] == ["facts"]


def test_in_openapi_3_0_the_descriptions_state_the_rules(db):
    """OpenAPI 3.0 has no propertyNames and no null beside other types: a host site that
    serves it gets the rules in the descriptions."""
    with patched_settings({"OAS_VERSION": "3.0.3"}):
        schema = SchemaGenerator().get_schema(request=None, public=True)
    validate_schema(schema)
    facts = body_schema(schema, "facts_merge")["properties"]["facts"]
    assert "propertyNames" not in facts
    assert "1-64 lower-case letters, digits and _ - ., not only dots" in facts["description"]
    assert facts["additionalProperties"]["nullable"] is True
    assert "NUL" in facts["additionalProperties"]["description"]
    value = body_schema(schema, "fact_put")["properties"]["value"]
    assert value["nullable"] is True
    assert "numbers must read back unchanged" in value["description"]
    assert "JsonValue" not in schema["components"]["schemas"]


def test_json_values_have_their_rules_in_the_schema(schema):
    """``JsonValue``: what the server stores, recursively: no NUL in a string or key, integers
    within 64 bits, floats below 1e16 (larger ones are taken only when exact: sent as integers)."""
    import jsonschema

    components = schema["components"]["schemas"]
    validator = jsonschema.Draft202012Validator(
        {"$ref": "#/components/schemas/JsonValue", "components": {"schemas": components}}
    )
    for value, valid in [
        (None, True),
        ("a", True),
        ("a\x00", False),
        (2**63 - 1, True),
        (2**63, False),
        (-(2**63) - 1, False),
        (0.5, True),
        (1e15, True),
        (1e20, False),
        ([1, None, {"k": [True]}], True),
        ([{"k": "\x00"}], False),
        ({"\x00": 1}, False),
    ]:
        assert validator.is_valid(value) is valid, value
    put = body_schema(schema, "fact_put")["properties"]["value"]
    assert put["anyOf"] == [{"$ref": "#/components/schemas/JsonValue"}, {"type": "null"}]
    metadata = body_schema(schema, "turn_append")["properties"]["metadata"]
    assert metadata["additionalProperties"] == {"$ref": "#/components/schemas/JsonValue"}
    assert metadata["propertyNames"] == {"not": {"pattern": "\\u0000"}}


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
    assert page["properties"]["next"]["type"] == ["string", "null"]


def test_each_operation_is_tagged_with_the_entity_of_its_view_module(schema):
    tags = {operation_id: op["tags"] for operation_id, op in operations(schema).items()}
    assert tags["turn_append"] == tags["turn_list"] == tags["turn_search"] == ["turns"]
    assert tags["context_get"] == tags["context_messages"] == tags["summary_get"] == ["context"]
    assert tags["session_list"] == ["sessions"]
    assert tags["memory_forget"] == tags["memory_link"] == tags["owner_export"] == ["users"]
    assert {tag for tagged in tags.values() for tag in tagged} == {
        "turns",
        "context",
        "facts",
        "sessions",
        "users",
        "tools",
        "health",
    }


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


@pytest.mark.parametrize(
    "text", ["a", "  a  ", " ", "\u3000\t", "\x1f", "a\x00", "\x85b", "x" * 200, "x" * 201]
)
def test_search_texts_the_schema_allows_are_the_ones_the_server_takes(schema, service_client, text):
    import jsonschema

    for operation_id, name in (("turn_search", "q"), ("context_messages", "query")):
        op = operations(schema)[operation_id]
        rule = next(p["schema"] for p in op["parameters"] if p["name"] == name)
        allowed = jsonschema.Draft202012Validator(rule).is_valid(text)
        url = "/api/memory/users/wang/" + ("search/" if name == "q" else "context/messages/")
        response = service_client.get(url, {name: text})
        # NOTE: the schema counts the spaces a server strips; past 200 with them it is stricter.
        assert response.status_code == (200 if allowed else 400) or (
            not allowed and text.strip() and len(text) > 200 >= len(text.strip())
        ), (operation_id, text, response.content)


def test_search_modes_are_the_ones_this_site_answers(schema):
    from memory.selectors.search import semantic_on

    op = operations(schema)["turn_search"]
    mode = next(p["schema"] for p in op["parameters"] if p["name"] == "mode")
    assert mode["enum"] == (["text", "semantic", "hybrid"] if semantic_on() else ["text"])


def test_the_answers_refused_for_state_are_documented(schema):
    ops = operations(schema)
    for operation_id in ("session_list", "fact_history"):
        assert "cursor" in ops[operation_id]["responses"]["400"]["description"]
    assert "max_tokens" in ops["context_messages"]["responses"]["400"]["description"]
    assert "expires_at" in ops["fact_put"]["responses"]["400"]["description"]
    for op in ops.values():
        assert "414" in op["responses"]


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=st.from_regex(DATE_TIME_PATTERN, fullmatch=True))
def test_every_expiry_the_schema_allows_the_server_parses(text):
    ExpiresAtField().to_internal_value(text)


def test_an_expiry_is_an_rfc_3339_date_time_in_the_schema(schema):
    """``format: date-time`` alone is an annotation: Schemathesis sent ``""`` as a valid
    ``expires_at`` and met a 400; the pattern says what the server parses."""
    import jsonschema

    rule = body_schema(schema, "fact_put")["properties"]["expires_at"]
    validator = jsonschema.Draft202012Validator(rule)
    for text in ("2030-01-31T00:00:00Z", "2028-02-29T23:59:59.5+08:00", None):
        assert validator.is_valid(text), text
    for text in (
        "",
        "2030-02-29T00:00:00Z",
        "2030-01-01",
        "2030-01-01T00:00:00",
        "9999-12-31T23:59:59-01:00",
    ):
        assert not validator.is_valid(text), text
