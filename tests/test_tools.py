"""Tests of memory.tools, the model's tools in Python: one definition each in the contract's
shape and in the chat APIs' (OpenAI, Anthropic), each tool's result, a model's mistakes as
``{"error": ...}`` results that store nothing, the OpenAI tool call loop (``resolve``), the
async twins, and JSON Schemas that agree with the validation (hypothesis-jsonschema)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import jsonschema
import orjson
import pytest
from django.core.exceptions import ValidationError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory import selectors, services, tools
from memory.conf import conf
from memory.exceptions import MemoryUnavailable
from memory.models import Fact, FactVersion, Owner, Turn
from memory.tools.definitions import TOOLS
from memory.validators import MAX_JSON_DEPTH, number_round_trips
from tests.jsonschema_strategies import from_schema
from tests.loop import run

pytestmark = pytest.mark.django_db

NAMES = ["search_memory", "get_profile", "remember_fact", "forget_fact", "recent_turns"]
FUZZ = settings(
    max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)


def stored(owner_id: str) -> tuple[int, ...]:
    """What the database holds of an owner: its row, turns, facts and fact versions."""
    return (
        Owner.objects.filter(external_id=owner_id).count(),
        Turn.objects.filter(owner__external_id=owner_id).count(),
        Fact.objects.filter(owner__external_id=owner_id).count(),
        FactVersion.objects.filter(owner__external_id=owner_id).count(),
    )


@pytest.fixture
def wang(write: Any) -> None:
    with write():
        services.fact_put(owner_id="wang", key="name", value="Wang Jianguo")
        for i, content in enumerate(
            ["The basketball game was great", "Nice!", "上海今天下雨", "好的"]
        ):
            services.turn_append(
                owner_id="wang",
                session_id="laptop" if i < 2 else "phone",
                role="user" if i % 2 == 0 else "assistant",
                content=content,
            )


# Definitions -------------------------------------------------------------------------------


def test_the_five_tools_of_the_contract_in_its_shape():
    defined = tools.definitions()
    assert [d["name"] for d in defined] == NAMES
    for definition in defined:
        assert set(definition) == {"name", "description", "parameters"}
        assert len(definition["description"]) > 80
        schema = definition["parameters"]
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object"
        assert schema["additionalProperties"] is False


def test_the_arguments_are_the_contracts():
    schemas = {d["name"]: d["parameters"] for d in tools.definitions()}
    query = schemas["search_memory"]["properties"]["query"]
    assert (query["type"], query["minLength"], query["maxLength"]) == ("string", 1, 200)
    limit = schemas["search_memory"]["properties"]["limit"]
    assert (limit["minimum"], limit["maximum"], limit["default"]) == (1, 20, 5)
    assert schemas["search_memory"]["required"] == ["query"]
    assert schemas["get_profile"]["properties"] == {}
    assert set(schemas["remember_fact"]["properties"]) == {"key", "value"}
    assert schemas["remember_fact"]["required"] == ["key", "value"]
    assert schemas["forget_fact"]["required"] == ["key"]
    limit = schemas["recent_turns"]["properties"]["limit"]
    assert (limit["minimum"], limit["maximum"], limit["default"]) == (1, 50, 10)


def test_no_schema_lets_an_argument_name_an_owner():
    for definition in tools.definitions():
        validator = jsonschema.Draft202012Validator(definition["parameters"])
        for name in ("owner_id", "user_id", "owner", "user"):
            assert name not in definition["parameters"]["properties"]
            assert not validator.is_valid({name: "li"})


def test_the_chat_api_shapes_come_from_the_one_definition():
    defined = tools.definitions()
    assert tools.openai_tools() == [{"type": "function", "function": d} for d in defined]
    assert tools.anthropic_tools() == [
        {"name": d["name"], "description": d["description"], "input_schema": d["parameters"]}
        for d in defined
    ]


def test_definitions_are_new_each_call():
    tools.definitions()[0]["parameters"]["properties"].clear()
    assert tools.definitions()[0]["parameters"]["properties"]


def test_the_value_rules_follow_the_setting(memory_settings):
    with memory_settings(MAX_JSON_BYTES=1000):
        value = tools.definitions()[2]["parameters"]["properties"]["value"]
    assert "1000 bytes" in value["description"]


# Each tool ---------------------------------------------------------------------------------


def test_get_profile_answers_the_facts(wang):
    assert tools.call("get_profile", {}, owner_id="wang") == {"facts": {"name": "Wang Jianguo"}}
    assert tools.call("get_profile", {}, owner_id="nobody") == {"facts": {}}


def test_remember_fact_sets_one_fact_and_answers_it(write):
    with write():
        first = tools.call("remember_fact", {"key": "likes", "value": ["jazz"]}, owner_id="li")
        second = tools.call("remember_fact", {"key": "likes", "value": ["golf"]}, owner_id="li")
    assert first["fact"]["value"] == ["jazz"] and first["fact"]["version"] == 1
    assert second["fact"]["value"] == ["golf"] and second["fact"]["version"] == 2
    assert set(second["fact"]) == {
        "key",
        "value",
        "session_id",
        "updated_at",
        "version",
        "expires_at",
    }
    assert selectors.context_get(owner_id="li")["facts"] == {"likes": ["golf"]}


def test_forget_fact_says_whether_there_was_one(wang, write):
    with write():
        assert tools.call("forget_fact", {"key": "name"}, owner_id="wang") == {"deleted": True}
        assert tools.call("forget_fact", {"key": "name"}, owner_id="wang") == {"deleted": False}
    assert selectors.context_get(owner_id="wang")["facts"] == {}


def test_recent_turns_answers_the_newest_oldest_first(wang):
    turns = tools.call("recent_turns", {"limit": 3}, owner_id="wang")["turns"]
    assert [t["content"] for t in turns] == ["Nice!", "上海今天下雨", "好的"]
    assert len(tools.call("recent_turns", {}, owner_id="wang")["turns"]) == 4


def test_search_memory_finds_english_and_chinese(wang):
    found = tools.call("search_memory", {"query": "basketball"}, owner_id="wang")["results"]
    assert [t["content"] for t in found] == ["The basketball game was great"]
    found = tools.call("search_memory", {"query": "上海", "limit": 1}, owner_id="wang")
    assert [t["content"] for t in found["results"]] == ["上海今天下雨"]
    assert tools.call("search_memory", {"query": "basketball"}, owner_id="li") == {"results": []}


def test_search_memory_takes_a_date_range_and_a_least_score(wang):
    found = tools.call(
        "search_memory", {"query": "basketball", "after": "2000-01-01"}, owner_id="wang"
    )
    assert [t["content"] for t in found["results"]] == ["The basketball game was great"]
    before = tools.call(
        "search_memory", {"query": "basketball", "before": "2000-01-01"}, owner_id="wang"
    )
    assert before == {"results": []}
    strict = tools.call("search_memory", {"query": "basketball", "min_score": 1}, owner_id="wang")
    assert strict == {"results": []}


def test_arguments_may_be_the_json_text_a_model_wrote(wang):
    assert tools.call("recent_turns", '{"limit": 1}', owner_id="wang")["turns"][0]["seq"] == 4
    assert tools.call("recent_turns", b'{"limit": 1}', owner_id="wang")["turns"][0]["seq"] == 4
    assert tools.call("get_profile", "", owner_id="wang")["facts"]
    assert tools.call("get_profile", None, owner_id="wang")["facts"]


# A model's mistakes ------------------------------------------------------------------------


MISTAKES = [
    ("lookup_user", {}, "There is no tool 'lookup_user'"),
    ("remember_fact", "{key: 'name'}", "Not valid JSON"),
    ("remember_fact", "[1, 2]", "Expected a JSON object"),
    ("remember_fact", {"key": "name"}, "value: This field is required."),
    ("remember_fact", {"key": "Name", "value": 1}, "key: Enter 1-64 characters"),
    ("remember_fact", {"key": "..", "value": 1}, "key: A key may not be made only of dots"),
    ("remember_fact", {"key": "a", "value": "x\x00"}, "Null characters"),
    ("remember_fact", {"key": "a", "value": 1, "owner_id": "li"}, "The owner is never"),
    ("forget_fact", {"key": "."}, "only of dots"),
    ("forget_fact", {"key": 3}, "key: Not a valid string."),
    ("search_memory", {"query": "   "}, "not only spaces"),
    ("search_memory", {"query": "x" * 201}, "no more than 200 characters"),
    ("search_memory", {"query": "a", "limit": "5"}, "limit: A valid integer is required."),
    ("search_memory", {"query": "a", "limit": 21}, "less than or equal to 20"),
    ("search_memory", {"query": "a", "limit": True}, "limit: A valid integer"),
    ("search_memory", {"query": "a", "after": "last week"}, "after: Enter an ISO-8601 date"),
    ("search_memory", {"query": "a", "before": "2026-13-01"}, "before: Enter an ISO-8601"),
    ("search_memory", {"query": "a", "min_score": 2}, "min_score: Ensure this value is less"),
    ("search_memory", {"query": "a", "min_score": "0.5"}, "min_score: A valid number"),
    ("recent_turns", {"limit": 0}, "greater than or equal to 1"),
    ("recent_turns", {"limit": 2.5}, "A valid integer"),
    ("recent_turns", {"turns": 5}, "Unknown argument; this tool takes limit."),
    ("get_profile", {"user_id": "li"}, "The owner is never an argument"),
]


@pytest.mark.parametrize(("name", "arguments", "says"), MISTAKES)
def test_a_models_mistake_is_a_result_it_can_read_and_stores_nothing(
    wang, write, name, arguments, says
):
    before = stored("wang"), stored("li")
    with write():
        result = tools.call(name, arguments, owner_id="wang")
    assert list(result) == ["error"]
    assert says in result["error"]
    assert (stored("wang"), stored("li")) == before


def test_a_fact_past_the_cap_is_an_error_and_stores_nothing(wang, write, memory_settings):
    with memory_settings(MAX_FACTS=1), write():
        before = stored("wang")
        result = tools.call("remember_fact", {"key": "city", "value": "Shanghai"}, owner_id="wang")
        assert "at most 1 facts" in result["error"]
        assert stored("wang") == before
        # The key held already is no new fact: it may change.
        changed = tools.call("remember_fact", {"key": "name", "value": "Wang"}, owner_id="wang")
    assert changed["fact"]["version"] == 2


def test_the_default_arguments_are_the_schemas(wang):
    schemas = {d["name"]: d["parameters"] for d in tools.definitions()}
    default = schemas["recent_turns"]["properties"]["limit"]["default"]
    with_default = tools.call("recent_turns", {"limit": default}, owner_id="wang")
    assert tools.call("recent_turns", {}, owner_id="wang") == with_default


def test_a_bad_owner_is_the_hosts_mistake_not_the_models():
    with pytest.raises(ValidationError) as raised:
        tools.call("get_profile", {}, owner_id="no spaces")
    assert "user_id" in raised.value.message_dict
    with pytest.raises(ValidationError):
        tools.Toolset(owner_id="")


def test_a_lost_database_raises_as_the_services_do(dead_database):
    with pytest.raises(MemoryUnavailable):
        tools.call("remember_fact", {"key": "name", "value": "x"}, owner_id="wang")
    with pytest.raises(MemoryUnavailable):
        tools.call("search_memory", {"query": "x"}, owner_id="wang")


# The OpenAI loop ---------------------------------------------------------------------------


def test_resolve_answers_a_tool_call_of_either_form(wang):
    as_dict = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_profile", "arguments": "{}"},
    }
    message = tools.resolve(as_dict, owner_id="wang")
    assert message == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": '{"facts":{"name":"Wang Jianguo"}}',
    }
    # The SDK's objects: attributes, not keys.
    as_object = SimpleNamespace(
        id="call_2",
        type="function",
        function=SimpleNamespace(name="recent_turns", arguments='{"limit": 1}'),
    )
    message = tools.resolve(as_object, owner_id="wang")
    assert message["tool_call_id"] == "call_2"
    assert json.loads(message["content"])["turns"][0]["content"] == "好的"


def test_resolve_answers_a_mistake_with_an_error_the_model_reads(wang):
    for tool_call in (
        {"id": "c", "type": "function", "function": {"name": "nope", "arguments": "{}"}},
        {"id": "c", "type": "function", "function": {"name": "get_profile", "arguments": "{"}},
        {"id": "c", "type": "custom", "custom": {"name": "get_profile", "input": ""}},
        {"id": "c", "type": "function"},
    ):
        message = tools.resolve(tool_call, owner_id="wang")
        assert message["tool_call_id"] == "c"
        assert list(json.loads(message["content"])) == ["error"]


def test_resolve_refuses_what_is_no_tool_call():
    with pytest.raises(ValueError, match="no id"):
        tools.resolve({"function": {"name": "get_profile"}}, owner_id="wang")


def test_a_toolset_binds_its_owner(wang, write):
    toolset = tools.Toolset(owner_id="li")
    assert toolset.openai_tools() == tools.openai_tools()
    assert toolset.anthropic_tools() == tools.anthropic_tools()
    assert toolset.definitions() == tools.definitions()
    with write():
        toolset.call("remember_fact", {"key": "name", "value": "Li"})
    assert toolset.call("get_profile", {}) == {"facts": {"name": "Li"}}
    assert tools.call("get_profile", {}, owner_id="wang") == {"facts": {"name": "Wang Jianguo"}}
    call = {"id": "c", "function": {"name": "get_profile", "arguments": '{"owner_id": "wang"}'}}
    assert "owner is never" in json.loads(toolset.resolve(call)["content"])["error"]


@pytest.mark.django_db(transaction=True)
def test_the_async_twins_answer_as_the_sync_ones():
    toolset = tools.Toolset(owner_id="wang")

    async def main() -> list[Any]:
        remembered = await tools.acall(
            "remember_fact", {"key": "name", "value": "W"}, owner_id="wang"
        )
        profile = await toolset.acall("get_profile", "{}")
        message = await tools.aresolve(
            {"id": "c", "function": {"name": "forget_fact", "arguments": '{"key": "name"}'}},
            owner_id="wang",
        )
        mistake = await toolset.aresolve({"id": "d", "function": {"name": "x", "arguments": ""}})
        return [remembered, profile, message, mistake]

    remembered, profile, message, mistake = run(main)
    assert remembered["fact"]["value"] == "W"
    assert profile == {"facts": {"name": "W"}}
    assert message == {"role": "tool", "tool_call_id": "c", "content": '{"deleted":true}'}
    assert "no tool 'x'" in json.loads(mistake["content"])["error"]
    assert selectors.fact_list(owner_id="wang") == []


# The schemas agree with the validation -----------------------------------------------------


def _breaks_value_rules(value: Any, depth: int = 0) -> bool:
    """Whether a JSON value breaks the rules its schema can only describe: a NUL in a string
    or key, more than 32 levels, more than MAX_JSON_BYTES of JSON, a number that would not read
    back unchanged (``number_round_trips``)."""
    if depth > MAX_JSON_DEPTH:
        return True
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, (int, float)):
        return not number_round_trips(value)
    if isinstance(value, list):
        return any(_breaks_value_rules(item, depth + 1) for item in value)
    if any("\x00" in key or _breaks_value_rules(item, depth + 1) for key, item in value.items()):
        return True
    return depth == 0 and len(orjson.dumps(value)) > conf.MAX_JSON_BYTES


@pytest.mark.parametrize("definition", tools.definitions(), ids=lambda d: d["name"])
def test_every_argument_set_the_schema_allows_is_accepted(definition, write):
    seen = {"n": 0}

    @FUZZ
    @given(arguments=from_schema(definition["parameters"]))
    def check(arguments: dict[str, Any]) -> None:
        seen["n"] += 1
        owner_id = f"fuzz-{seen['n']}"
        with write():
            result = tools.call(definition["name"], arguments, owner_id=owner_id)
        if "error" in result:
            # NOTE: the other refusal a schema cannot state: a fact value's nested rules.
            assert definition["name"] == "remember_fact", result
            assert _breaks_value_rules(arguments["value"]), (arguments, result)
            assert stored(owner_id) == (0, 0, 0, 0)

    check()


def _json_values() -> st.SearchStrategy[Any]:
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**63), max_value=2**63 - 1)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text()
    )
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
        max_leaves=8,
    )


def _invalid_arguments(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Arguments the schema refuses: a valid set with one value changed, a name added or a
    required one dropped, or any JSON at all; what the schema allows is filtered out."""
    names = [*schema["properties"], "owner_id", "user_id", "extra"]
    valid = from_schema(schema)
    changed = st.tuples(valid, st.sampled_from(names), _json_values()).map(
        lambda t: {**t[0], t[1]: t[2]}
    )
    dropped = valid.map(lambda args: {k: v for k, v in args.items() if k not in schema["required"]})
    validator = jsonschema.Draft202012Validator(schema)
    return (changed | dropped | _json_values()).filter(lambda args: not validator.is_valid(args))


@pytest.mark.parametrize("definition", tools.definitions(), ids=lambda d: d["name"])
def test_every_argument_set_the_schema_refuses_is_an_error_storing_nothing(definition, write):
    @FUZZ
    @given(arguments=_invalid_arguments(definition["parameters"]))
    def check(arguments: Any) -> None:
        # NOTE: None itself is no arguments, and a str is JSON text ("" none either): those go
        # as JSON only, where null and "" are no object.
        direct = [] if arguments is None or isinstance(arguments, str) else [arguments]
        for sent in [*direct, json.dumps(arguments)]:
            with write():
                result = tools.call(definition["name"], sent, owner_id="fuzz")
            assert list(result) == ["error"], (arguments, result)
            assert stored("fuzz") == (0, 0, 0, 0)

    check()


@pytest.mark.parametrize("definition", tools.definitions(), ids=lambda d: d["name"])
def test_the_fast_check_accepts_only_what_the_serializer_accepts_and_the_same(definition):
    arguments_class = TOOLS[definition["name"]].arguments
    schema = definition["parameters"]

    @FUZZ
    @given(arguments=from_schema(schema) | _invalid_arguments(schema))
    def check(arguments: Any) -> None:
        if not isinstance(arguments, dict):
            return
        accepted = arguments_class.accepted(arguments)
        serializer = arguments_class(data=arguments)
        if accepted is not None:
            assert serializer.is_valid(), (arguments, serializer.errors)
            assert accepted == dict(serializer.validated_data)

    check()


def test_the_fast_check_takes_the_common_calls():
    for name, arguments in (
        ("search_memory", {"query": "basketball"}),
        ("get_profile", {}),
        ("remember_fact", {"key": "likes", "value": ["jazz", {"since": 2019}]}),
        ("forget_fact", {"key": "likes"}),
        ("recent_turns", {"limit": 50}),
    ):
        assert TOOLS[name].arguments.accepted(arguments) is not None, name
