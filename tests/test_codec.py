"""Tests of memory.codec: the JSON-typed equality every comparison of stored values uses, and
the encoding of cached payloads."""

from __future__ import annotations

import json

import pytest

from memory.codec import dumps, dumps_all, json_equal, json_key, loads_jsonb, loads_jsonb_rows


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (True, 1),
        (False, 0),
        (1, 1.0),
        (0, 0.0),
        (1, "1"),
        (None, False),
        ("", None),
        ([1], [True]),
        ([1, 2], [2, 1]),
        ({"n": 1}, {"n": 1.0}),
        ({"n": [True]}, {"n": [1]}),
        ([], {}),
        (10**16 + 1, 1e16),
    ],
)
def test_values_python_takes_for_equal_are_other_json_values(a, b):
    assert not json_equal(a, b)
    assert not json_equal(b, a)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (1, 1),
        (1.5, 1.5),
        ("文字", "文字"),
        (None, None),
        ({"a": 1, "b": [1.0, None]}, {"b": [1.0, None], "a": 1}),
        # NOTE: Postgres jsonb keeps these floats as the integers they denote.
        (1e16, 10**16),
        ([1.5e17], [15 * 10**16]),
        (-1e20, -(10**20)),
        (0.0, -0.0),
    ],
)
def test_the_same_json_value_is_equal(a, b):
    assert json_equal(a, b)
    assert json_key(a) == json_key(b)


def test_payloads_encoded_together_are_encoded_as_one_by_one():
    # NOTE: one integer past 64 bits sends the whole batch the slow way, every value still exact.
    for values in ([[1, "文字", {"a": None}], (2, 1.5)], [[1], [2**64, -(10**30)], {"n": 3}]):
        assert dumps_all(values) == [dumps(value) for value in values]
    assert loads_jsonb(dumps_all([[2**64]])[0].decode()) == [2**64]
    with pytest.raises(TypeError):
        dumps_all([[1], {1j}])


@pytest.mark.parametrize(
    "value",
    [
        "{}",
        '{"a": [1.5, 0.1, -0.0, 9223372036854775807, 18446744073709551615], "b": "x"}',
        '{"n": 18446744073709551616}',
        "[-9223372036854775809]",
        '{"n": 1' + "0" * 400 + "}",
        '{"n": 12345678901234567890.5}',
        "[9.3e18]",
    ],
)
def test_rows_decode_their_jsonb_as_each_value_alone_would(value):
    text = f'[[1, "12345678901234567890123", {value}], [2, "x", {{}}]]'
    rows = loads_jsonb_rows(text, 2)
    assert json_key(rows) == json_key(json.loads(text))
    assert json_key(rows[0][2]) == json_key(loads_jsonb(value))
