"""JSON numbers at every door: a number that would not read back unchanged from Postgres
``jsonb`` and the cache's codec is a 400 naming the field, and an owner that already holds one
(stored by SQL, as the code before the rule stored it) still reads with 200 on every path."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import orjson
import pytest
import redis
from django.core.exceptions import ValidationError
from django.db import connection
from django.urls import reverse
from django.utils import timezone
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memory import codec, selectors, services
from memory.models import Fact, Owner, Summary, Turn
from memory.validators import (
    MAX_JSON_INT,
    MIN_JSON_INT,
    number_round_trips,
    validate_json_value,
)

pytestmark = pytest.mark.django_db

WANG = "/api/memory/users/wang"
# Numbers the old code took and jsonb turned into an integer past 64 bits.
WIDE = [1e20, -1e20, 1.8446744073709552e19, 1.5e300, -1e300, 9.3e18]


def jsonb_back(text: str) -> Any:
    """The Python value Postgres gives back for the JSON ``text`` stored as ``jsonb``."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT (%s::jsonb)::text", [text])
        return json.loads(cursor.fetchone()[0])


@pytest.mark.parametrize(
    ("value", "taken"),
    [
        (0, True),
        (MAX_JSON_INT, True),
        (MIN_JSON_INT, True),
        (MAX_JSON_INT + 1, False),
        (MIN_JSON_INT - 1, False),
        (10**30, False),
        (1.0, True),
        (-0.0, True),
        (0.1, True),
        (5e-324, True),
        (1e-300, True),
        (9999999999999998.0, True),
        (1e16, True),
        (1.5e17, True),
        (9.2e18, True),
        (1.2345678901234567e18, False),
        (-9.223372036854776e18, False),
        (*WIDE[:1], False),
        (1.7976931348623157e308, False),
    ],
)
def test_a_number_is_taken_when_jsonb_gives_it_back_equal_within_64_bits(value, taken):
    assert number_round_trips(value) is taken
    if taken:
        for text in (json.dumps(value), orjson.dumps(value).decode()):
            back = jsonb_back(text)
            assert back == value and MIN_JSON_INT <= int(back) <= MAX_JSON_INT
            assert codec.loads(codec.dumps(back)) == value


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    value=st.floats(allow_nan=False, allow_infinity=False)
    | st.integers(-(2**70), 2**70)
    | st.floats(min_value=1e15, max_value=1e20)
)
@example(value=2.0**63)
@example(value=-(2.0**63))
@example(value=9.223372036854775e18)
def test_the_rule_is_what_postgres_and_the_codec_do(value):
    """Taken exactly when, stored as Python's and orjson's encoders write it, jsonb gives back
    an equal number, an integer within signed 64 bits (a bigint) if it gives back an integer,
    that the codec writes and reads back equal."""
    kept = []
    for text in {json.dumps(value), codec.dumps(value).decode()}:
        back = jsonb_back(text)
        within = not isinstance(back, int) or MIN_JSON_INT <= back <= MAX_JSON_INT
        kept.append(within and back == value and codec.loads(codec.dumps(back)) == value)
    assert number_round_trips(value) is all(kept)


@pytest.mark.parametrize("value", [*WIDE, [1, {"n": 1e20}], 2**64])
def test_every_door_refuses_such_a_number_naming_the_field(owner_client, write, value):
    with write():
        put = owner_client.put(f"{WANG}/facts/n/", {"value": value}, format="json")
        patch = owner_client.patch(f"{WANG}/facts/", {"facts": {"n": value}}, format="json")
        turn = owner_client.post(
            f"{WANG}/turns/",
            {"session_id": "s", "role": "user", "content": "hi", "metadata": {"n": value}},
            format="json",
        )
        tool = owner_client.post(
            f"{WANG}/tools/remember_fact/",
            {"arguments": {"key": "n", "value": value}},
            format="json",
        )
    assert (put.status_code, list(put.json())) == (400, ["value"])
    assert (patch.status_code, list(patch.json())) == (400, ["facts"])
    assert (turn.status_code, list(turn.json())) == (400, ["metadata"])
    assert tool.status_code == 400 and "value" in json.dumps(tool.json())
    assert "Numbers must read back unchanged" in put.json()["value"][0]
    with pytest.raises(ValidationError):
        services.fact_put(owner_id="wang", key="n", value=value)
    with pytest.raises(ValidationError):
        services.turn_append(
            owner_id="wang", session_id="s", role="user", content="hi", metadata={"n": value}
        )
    assert not Fact.objects.exists() and not Turn.objects.exists()


def test_an_import_document_with_such_a_number_is_refused(write):
    with write():
        services.fact_put(owner_id="wang", key="n", value=1)
    facts = selectors.fact_list(owner_id="wang")
    document = {
        "format": "memory-export",
        "version": 1,
        "user_id": "wang",
        "exported_at": timezone.now().isoformat(),
        "facts": [{**facts[0], "value": 1e20}],
        "fact_history": selectors.fact_history(owner_id="wang", key="n").results,
        "turns": [],
        "sessions": [],
        "summary": None,
    }
    with pytest.raises(ValidationError) as e:
        services.memory_import(document=document, owner_id="wang2")
    assert any("value" in field for field in e.value.message_dict)
    assert not Owner.objects.filter(external_id="wang2").exists()


def test_the_admin_refuses_such_a_number(admin_client, write):
    with write():
        services.fact_put(owner_id="wang", key="n", value=1)
    fact = Fact.objects.get(key="n")
    response = admin_client.post(
        reverse("admin:memory_fact_change", args=[fact.pk]),
        {"value": "1e20", "expected_version": "1"},
    )
    assert response.status_code == 200
    assert "value" in response.context["adminform"].form.errors
    assert Fact.objects.get(pk=fact.pk).value == 1


def test_a_taken_number_reads_back_equal_from_the_database_and_the_cache(
    owner_client, write, own_redis
):
    values = [1e16, 9.2e18, MAX_JSON_INT, MIN_JSON_INT, 0.1, 5e-324, 1.0]
    with write():
        assert owner_client.put(f"{WANG}/facts/n/", {"value": values}, format="json").status_code
        owner_client.post(
            f"{WANG}/turns/",
            {"session_id": "s", "role": "user", "content": "hi", "metadata": {"n": values}},
            format="json",
        )
    for _ in range(2):
        redis.Redis.from_url(own_redis.url).flushall()
        for _ in range(2):
            context = owner_client.get(f"{WANG}/context/").json()
            assert context["facts"]["n"] == values
            assert context["turns"][0]["metadata"]["n"] == values


def _seed_wide_numbers() -> None:
    """An owner with a fact, a version, a turn and a summary holding integers past 64 bits,
    written by SQL as the old code stored floats such as 1e20."""
    services.fact_put(owner_id="wang", key="n", value=0)
    services.turn_append(
        owner_id="wang", session_id="s", role="user", content="hi", metadata={"n": 0}
    )
    owner = Owner.objects.get(external_id="wang")
    Summary.objects.create(owner=owner, text="Wang.", through_seq=1, updated_at=timezone.now())
    wide = json.dumps({"n": WIDE})
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE memory_fact SET value = %s::jsonb WHERE owner_id = %s", [wide, owner.pk]
        )
        cursor.execute(
            "UPDATE memory_factversion SET value = %s::jsonb WHERE owner_id = %s", [wide, owner.pk]
        )
        cursor.execute(
            "UPDATE memory_turn SET metadata = %s::jsonb WHERE owner_id = %s", [wide, owner.pk]
        )


READS = ["context/", "context/messages/", "facts/", "summary/", "export/", "turns/"]


# NOTE: committed, as the export reads from a snapshot of its own connection.
@pytest.mark.django_db(transaction=True)
def test_an_owner_already_holding_wide_integers_reads_on_every_path(owner_client, write, own_redis):
    with write():
        _seed_wide_numbers()
    assert Fact.objects.get(key="n").value["n"][0] == 10**20
    flush = redis.Redis.from_url(own_redis.url).flushall
    for round_ in range(3):
        if round_:
            flush()
        for path in READS:
            for _ in range(2):
                response = owner_client.get(f"{WANG}/{path}")
                assert response.status_code == 200, (path, response.content[:200])
                body = (
                    b"".join(response.streaming_content) if response.streaming else response.content
                )
                # NOTE: the same decimals, in whichever form: the database's digits, or a
                # float's shortest form once the cache's orjson read them as floats.
                found = _decimals(json.loads(body, parse_float=Decimal, parse_int=Decimal))
                if path != "summary/":
                    assert {Decimal(repr(n)) for n in WIDE} <= found, path
    assert selectors.context_get(owner_id="wang")["source"] == "cache"


def _decimals(value: Any) -> set[Decimal]:
    if isinstance(value, Decimal):
        return {value}
    if isinstance(value, dict):
        return set().union(*map(_decimals, value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*map(_decimals, value)) if value else set()
    return set()


def test_the_codec_writes_a_wide_integer_as_its_digits():
    value = {"n": [10**20, -(10**300), 2**64 - 1, True, "x"]}
    assert codec.dumps(value) == json.dumps(value, separators=(",", ":")).encode()
    validate_json_value({"n": [2**63 - 1]})
