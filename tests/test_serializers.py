"""The input serializers' shortcuts: ``turn_input_accepted`` takes exactly the JSON bodies
that ``TurnInputSerializer`` takes, and gives what it gives."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memory.serializers import TurnInputSerializer, turn_input_accepted

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=8,
)
# Strings near the fields' rules: empty, control and NUL characters, surrogates, long ones.
TEXT = st.one_of(
    st.sampled_from(["", "web", " ", "a\x00b", "tab\t", "\ud800", "x" * 128, "x" * 129, "é 中"]),
    st.text(max_size=40),
    st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x2F), max_size=4),
)
VALUE = st.one_of(TEXT, JSON, st.sampled_from(["user", "assistant", "system", "tool", "User"]))
FIELDS = {
    "session_id": st.one_of(VALUE, st.sampled_from(["web", "手机"])),
    "role": st.one_of(VALUE, st.sampled_from(["user", "assistant", "system", "tool"])),
    "content": st.one_of(VALUE, st.sampled_from(["", "hi", "x" * 10, "x" * 11])),
}
BODY = st.one_of(
    st.fixed_dictionaries(
        FIELDS,
        optional={
            "metadata": st.one_of(st.dictionaries(st.text(max_size=3), JSON), VALUE),
            "extra": JSON,
        },
    ),
    # Fields missing: any of the three, or all.
    st.fixed_dictionaries({}, optional={**FIELDS, "metadata": JSON}),
    st.dictionaries(st.sampled_from(["session_id", "role", "content", "metadata", "x"]), VALUE),
    JSON,
)


# Past MAX_JSON_DEPTH (32).
DEEP: Any = "x"
for _ in range(40):
    DEEP = [DEEP]


def serializer_says(data: Any) -> dict[str, Any] | None:
    serializer = TurnInputSerializer(data=data)
    return dict(serializer.validated_data) if serializer.is_valid() else None


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(BODY)
@example({"session_id": "web", "role": "user", "content": "hi"})
@example({"session_id": "web", "role": "tool", "content": "", "metadata": {}})
@example({"session_id": "web", "role": "user", "content": "", "metadata": {"a": [1]}})
@example({"session_id": "web", "role": "user", "content": "hi", "metadata": None})
@example({"session_id": "web", "role": "user", "content": "hi", "extra": 1})
@example({"session_id": "\ud800", "role": "user", "content": "hi"})
@example({"session_id": "web", "role": "user", "content": "\ud800"})
@example({"session_id": "web", "role": "user", "content": "hi", "metadata": {"k": "\x00"}})
@example({"session_id": "web", "role": "user", "content": "hi", "metadata": {"k": 2**70}})
@example({"session_id": "web", "role": "user", "content": "hi", "metadata": {"k": float("nan")}})
def test_turn_input_accepted_is_the_serializers_answer(memory_settings, data):
    # NOTE: a short MAX_TURN_CHARS, so that the length rule is met as often as the others.
    with memory_settings(MAX_TURN_CHARS=10):
        assert typed(turn_input_accepted(data)) == typed(serializer_says(data))


def typed(value: Any) -> str:
    """A body as JSON text that tells ``1``, ``1.0`` and ``true`` apart."""
    return json.dumps(value, sort_keys=True, default=repr)


def test_turn_input_accepted_takes_the_usual_bodies():
    body = {"session_id": "web", "role": "user", "content": "hi", "metadata": {"a": [1]}}
    assert turn_input_accepted(body) == serializer_says(body) == body
    assert turn_input_accepted(body)["metadata"] is not body["metadata"]
    for role in ("user", "assistant", "system", "tool"):
        plain = {"session_id": "web", "role": role, "content": ""}
        assert turn_input_accepted(plain) == serializer_says(plain) == plain


@pytest.mark.parametrize(
    "change",
    [
        {"content": "x" * 11},
        {"content": "a\x00b"},
        {"session_id": ""},
        {"session_id": "x" * 129},
        {"role": "robot"},
        {"content": 12},
        {"metadata": []},
        {"metadata": {"deep": DEEP}},
    ],
)
def test_turn_input_accepted_leaves_every_refusal_to_the_serializer(memory_settings, change):
    body = {"session_id": "web", "role": "user", "content": "hi", **change}
    with memory_settings(MAX_TURN_CHARS=10):
        assert turn_input_accepted(body) is None
        assert serializer_says(body) is None
