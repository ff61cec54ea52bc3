"""Tests of memory.codec: the JSON-typed equality every comparison of stored values uses."""

from __future__ import annotations

import pytest

from memory.codec import json_equal, json_key


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
