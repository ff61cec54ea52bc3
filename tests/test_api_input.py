"""Bad input over every writing endpoint, table-driven: each gets a 4xx (DRF's usual
``{"field": ["message"]}`` where a field is to blame), never a 500, and stores nothing."""

from __future__ import annotations

import json

import pytest

from memory.models import Fact, FactVersion, Owner, Session, Turn

pytestmark = pytest.mark.django_db

USER = "/api/memory/users/wang"
TURN = {"session_id": "s", "role": "user", "content": "ok"}


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# (id, method, path, raw body or JSON-able body, extra request kwargs, expected status, field)
CASES = [
    # Bodies that are not a JSON object.
    ("not json", "post", "/turns/", b"{'session_id': 's'", {}, 400, None),
    ("json array", "post", "/turns/", [TURN], {}, 400, "non_field_errors"),
    ("json string", "post", "/turns/", json.dumps("hello").encode(), {}, 400, "non_field_errors"),
    ("json null", "post", "/turns/", b"null", {}, 400, "non_field_errors"),
    ("empty body", "post", "/turns/", b"", {}, 400, "session_id"),
    (
        "NaN",
        "post",
        "/turns/",
        b'{"session_id": "s", "role": "user", "content": NaN}',
        {},
        400,
        None,
    ),
    ("bad utf-8", "post", "/turns/", b'{"session_id": "\xff\xfe", "role": "user"}', {}, 400, None),
    ("nested 100000", "post", "/turns/", nested(100_000).encode(), {}, 400, None),
    (
        "nested 950 in metadata",
        "post",
        "/turns/",
        json.dumps({**TURN, "metadata": {"a": "DEEP"}}).replace('"DEEP"', nested(950)).encode(),
        {},
        400,
        None,
    ),
    (
        "form body",
        "post",
        "/turns/",
        b"session_id=s&role=user&content=x",
        {"content_type": "application/x-www-form-urlencoded"},
        415,
        None,
    ),
    (
        "text body",
        "post",
        "/turns/",
        json.dumps(TURN).encode(),
        {"content_type": "text/plain"},
        415,
        None,
    ),
    (
        "rot13 charset",
        "post",
        "/turns/",
        json.dumps(TURN).encode(),
        {"content_type": "application/json; charset=rot13"},
        400,
        None,
    ),
    (
        "zlib charset",
        "post",
        "/turns/",
        json.dumps(TURN).encode(),
        {"content_type": "application/json; charset=zlib"},
        400,
        None,
    ),
    ("oversize body", "post", "/turns/", {**TURN, "content": "x" * (1024 * 1024)}, {}, 413, None),
    # Wrong fields of a turn.
    ("missing role", "post", "/turns/", {"session_id": "s", "content": "x"}, {}, 400, "role"),
    ("unknown role", "post", "/turns/", {**TURN, "role": "robot"}, {}, 400, "role"),
    ("role not a string", "post", "/turns/", {**TURN, "role": ["user"]}, {}, 400, "role"),
    ("content a number", "post", "/turns/", {**TURN, "content": 12}, {}, 400, "content"),
    ("content null", "post", "/turns/", {**TURN, "content": None}, {}, 400, "content"),
    ("content object", "post", "/turns/", {**TURN, "content": {"text": "x"}}, {}, 400, "content"),
    ("content NUL", "post", "/turns/", {**TURN, "content": "a\x00b"}, {}, 400, "content"),
    (
        "content surrogate",
        "post",
        "/turns/",
        b'{"session_id": "s", "role": "user", "content": "a\\ud800b"}',
        {},
        400,
        "content",
    ),
    ("content too long", "post", "/turns/", {**TURN, "content": "x" * 32769}, {}, 400, "content"),
    ("session_id blank", "post", "/turns/", {**TURN, "session_id": ""}, {}, 400, "session_id"),
    ("session_id a number", "post", "/turns/", {**TURN, "session_id": 7}, {}, 400, "session_id"),
    ("session_id NUL", "post", "/turns/", {**TURN, "session_id": "a\x00"}, {}, 400, "session_id"),
    (
        "session_id newline",
        "post",
        "/turns/",
        {**TURN, "session_id": "a\nb"},
        {},
        400,
        "session_id",
    ),
    (
        "session_id surrogate",
        "post",
        "/turns/",
        b'{"session_id": "\\udfff", "role": "user", "content": "x"}',
        {},
        400,
        "session_id",
    ),
    (
        "session_id too long",
        "post",
        "/turns/",
        {**TURN, "session_id": "s" * 129},
        {},
        400,
        "session_id",
    ),
    ("metadata a list", "post", "/turns/", {**TURN, "metadata": [1]}, {}, 400, "metadata"),
    ("metadata a string", "post", "/turns/", {**TURN, "metadata": "{}"}, {}, 400, "metadata"),
    (
        "metadata NUL value",
        "post",
        "/turns/",
        {**TURN, "metadata": {"k": "\x00"}},
        {},
        400,
        "metadata",
    ),
    (
        "metadata NUL key",
        "post",
        "/turns/",
        {**TURN, "metadata": {"k\x00": 1}},
        {},
        400,
        "metadata",
    ),
    (
        "metadata too deep",
        "post",
        "/turns/",
        {**TURN, "metadata": json.loads('{"a":' * 40 + "1" + "}" * 40)},
        {},
        400,
        "metadata",
    ),
    (
        "metadata too big",
        "post",
        "/turns/",
        {**TURN, "metadata": {"k": "x" * 20000}},
        {},
        400,
        "metadata",
    ),
    (
        "metadata huge int",
        "post",
        "/turns/",
        {**TURN, "metadata": {"k": 10**30}},
        {},
        400,
        "metadata",
    ),
    (
        "idempotency key",
        "post",
        "/turns/",
        TURN,
        {"HTTP_IDEMPOTENCY_KEY": "\u00e9t\u00e9"},
        400,
        "Idempotency-Key",
    ),
    # A fact.
    ("fact no value", "put", "/facts/name/", {"session_id": "s"}, {}, 400, "value"),
    ("fact body array", "put", "/facts/name/", [1], {}, 400, "non_field_errors"),
    ("fact NUL", "put", "/facts/name/", {"value": ["a\x00"]}, {}, 400, "value"),
    ("fact surrogate", "put", "/facts/name/", b'{"value": {"k": "\\ud83d"}}', {}, 400, "value"),
    ("fact too big", "put", "/facts/name/", {"value": "x" * 20000}, {}, 400, "value"),
    ("fact too deep", "put", "/facts/name/", {"value": json.loads(nested(40))}, {}, 400, "value"),
    (
        "fact bad session",
        "put",
        "/facts/name/",
        {"value": 1, "session_id": "\x01"},
        {},
        400,
        "session_id",
    ),
    (
        "fact If-Match",
        "put",
        "/facts/name/",
        {"value": 1},
        {"HTTP_IF_MATCH": "v1"},
        400,
        "If-Match",
    ),
    ("fact key upper case", "put", "/facts/Name/", {"value": 1}, {}, 404, None),
    ("fact key too long", "put", f"/facts/{'k' * 65}/", {"value": 1}, {}, 404, None),
    ("fact key NUL", "put", "/facts/na%00me/", {"value": 1}, {}, 404, None),
    # A merge.
    ("merge bad key", "patch", "/facts/", {"facts": {"ok": 1, "NOT OK": 2}}, {}, 400, "facts"),
    ("merge empty key", "patch", "/facts/", {"facts": {"": 1}}, {}, 400, "facts"),
    ("merge NUL", "patch", "/facts/", {"facts": {"ok": "\x00"}}, {}, 400, "facts"),
    ("merge list", "patch", "/facts/", {"facts": [["ok", 1]]}, {}, 400, "facts"),
    (
        "merge too many",
        "patch",
        "/facts/",
        {"facts": {f"k{i}": i for i in range(300)}},
        {},
        400,
        "facts",
    ),
    (
        "merge bad session",
        "patch",
        "/facts/",
        {"facts": {"ok": 1}, "session_id": 3},
        {},
        400,
        "session_id",
    ),
]


def counts() -> list[int]:
    return [model.objects.count() for model in (Owner, Turn, Fact, FactVersion, Session)]


@pytest.mark.parametrize(
    ("method", "path", "body", "extra", "status", "field"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_bad_input_is_4xx_and_stores_nothing(
    service_client, django_capture_on_commit_callbacks, method, path, body, extra, status, field
):
    kwargs = dict(extra)
    if isinstance(body, bytes):
        kwargs.setdefault("content_type", "application/json")
    else:
        kwargs["format"] = "json"
    with django_capture_on_commit_callbacks(execute=True):
        response = getattr(service_client, method)(f"{USER}{path}", body, **kwargs)
    assert response.status_code == status
    if status != 404:
        assert response["Content-Type"].startswith("application/json")
        errors = response.json()
        assert field in errors if field else errors
    assert counts() == [0, 0, 0, 0, 0]


@pytest.mark.parametrize(
    "user_id",
    ["bad%20id", "x" * 129, "%00", "wang%2Fli", "%E7%8E%8B", "wang%0A", "wang!", "a%ED%A0%80"],
)
def test_malformed_user_id_is_404_and_stores_nothing(
    service_client, django_capture_on_commit_callbacks, user_id
):
    with django_capture_on_commit_callbacks(execute=True):
        response = service_client.post(f"/api/memory/users/{user_id}/turns/", TURN, format="json")
    assert response.status_code == 404
    assert counts() == [0, 0, 0, 0, 0]


@pytest.mark.parametrize("user_id", ["a", "x" * 128, "anon-7f3a", "wang@example.com", "u:1.2_3"])
def test_well_formed_user_ids_are_accepted(
    service_client, django_capture_on_commit_callbacks, user_id
):
    with django_capture_on_commit_callbacks(execute=True):
        response = service_client.post(f"/api/memory/users/{user_id}/turns/", TURN, format="json")
    assert response.status_code == 201
    assert Owner.objects.get().external_id == user_id


def test_validation_errors_keep_drf_shape(service_client):
    response = service_client.post(f"{USER}/turns/", {"role": "robot"}, format="json")
    assert response.status_code == 400
    assert response.json() == {
        "session_id": ["This field is required."],
        "role": ['"robot" is not a valid choice.'],
        "content": ["This field is required."],
    }


def test_nul_message_is_given_once(service_client):
    response = service_client.post(f"{USER}/turns/", {**TURN, "content": "\x00"}, format="json")
    assert response.json() == {"content": ["Null characters are not allowed."]}
