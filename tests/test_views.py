"""Tests of memory.views' JSON renderer: DRF's JSON, written by orjson where that is the same
JSON, and by DRF itself otherwise."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from decimal import Decimal

import pytest
from rest_framework.exceptions import ErrorDetail
from rest_framework.renderers import BrowsableAPIRenderer
from rest_framework.renderers import JSONRenderer as DRFJSONRenderer

from memory import services
from memory.views.renderers import JSONRenderer

PLAIN = [
    {"results": [], "next": None},
    {"content": "我叫王建国，我住在上海。「你好」🙂", "metadata": {"a": [1, True, None, "x"]}},
    {"line": "one\u2028two\u2029three", "quote": '"\\\n\t', "nul-free": "\x01\x1f"},
    {"seq": 2**63 - 1, "negative": -5, "zero": 0, "float": 1.5, "small": 0.1},
    [{"nested": {"deeper": [{"k": "v"}]}}],
    "a string",
]


@pytest.mark.parametrize("data", PLAIN)
def test_the_same_bytes_as_drfs_renderer(data):
    assert JSONRenderer().render(data) == DRFJSONRenderer().render(data)


@dataclasses.dataclass
class Point:
    x: int


@pytest.mark.parametrize(
    "data",
    [
        {"at": dt.datetime(2026, 12, 1, 20, 0, 0, 123456, tzinfo=dt.UTC)},
        {"amount": Decimal("1.10")},
        {"detail": ErrorDetail("Not found.", code="not_found")},
        {"big": 2**70},
    ],
)
def test_what_orjson_would_write_otherwise_is_drfs(data):
    assert JSONRenderer().render(data) == DRFJSONRenderer().render(data)


def test_what_neither_writes_fails_as_drfs_does():
    with pytest.raises(TypeError, match="Point"):
        DRFJSONRenderer().render({"point": Point(1)})
    with pytest.raises(TypeError, match="Point"):
        JSONRenderer().render({"point": Point(1)})


def test_an_indent_asked_for_is_drfs():
    media_type = "application/json; indent=2"
    data = {"a": [1, 2]}
    assert JSONRenderer().render(data, media_type) == DRFJSONRenderer().render(data, media_type)
    assert b"\n" in JSONRenderer().render(data, media_type)


def test_a_float_is_the_same_number():
    data = {"big": 1e16, "tiny": 1e-7}
    assert json.loads(JSONRenderer().render(data)) == data


@pytest.mark.django_db
def test_the_api_answers_with_it_and_keeps_the_sites_other_renderers(owner_client, write):
    with write():
        for content in ("我喜欢打篮球", "line\u2028break"):
            services.turn_append(owner_id="wang", session_id="s", role="user", content=content)
    response = owner_client.get("/api/memory/users/wang/turns/")
    assert isinstance(response.accepted_renderer, JSONRenderer)
    assert response.content == DRFJSONRenderer().render(response.data)
    assert b"\\u2028" in response.content
    html = owner_client.get("/api/memory/users/wang/turns/", HTTP_ACCEPT="text/html")
    assert isinstance(html.accepted_renderer, BrowsableAPIRenderer)
