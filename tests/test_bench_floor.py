"""Tests of the append's floor (``bench/floor.py``) and the view that serves it behind DRF
(``bench.views.FloorView``, the ``http_post_floor`` row): it stores a turn in the app's own tables
and puts its JSON in Redis, after DRF's authentication."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from django.db import connection
from rest_framework.test import APIRequestFactory, force_authenticate

from bench.floor import SESSION_SQL, floor_append
from bench.views import FloorView
from memory.conf import conf
from memory.models import Owner, Session, Turn

pytestmark = pytest.mark.django_db


@pytest.fixture
def floor_owner() -> Owner:
    owner = Owner.objects.create(external_id="floor-1", last_seq=3, stamp=0)
    with connection.cursor() as cursor:
        cursor.execute(SESSION_SQL, {"owner": "floor-1", "session": "web"})
    return owner


def test_the_floor_stores_the_owner_s_next_turn_and_its_json(floor_owner: Owner, redis_client: Any):
    key = f"{conf.KEY_PREFIX}:floor:floor-1"

    def execute(sql: str, params: dict[str, Any]) -> Any:
        cursor = connection.cursor()
        cursor.execute(sql, params)
        return cursor

    seq = floor_append(
        execute, redis_client, owner="floor-1", session="web", content="hello", key=key, ttl=60
    )
    assert seq == 4
    turn = Turn.objects.get(owner=floor_owner, seq=4)
    assert (turn.session_id, turn.role, turn.content) == ("web", "user", "hello")
    assert Session.objects.get(owner=floor_owner, session_id="web").turn_count == 1
    stored = orjson.loads(redis_client.hget(key, "t:4"))
    assert stored["content"] == "hello" and stored["seq"] == 4
    assert 0 < redis_client.ttl(key) <= 60


def test_the_floor_view_appends_for_an_authenticated_caller_only(
    floor_owner: Owner, service_user: Any, redis_client: Any
):
    factory = APIRequestFactory()
    body = {"session_id": "web", "role": "user", "content": "hi there"}
    view = FloorView.as_view()

    anonymous = view(factory.post("/bench/floor/floor-1/", body, format="json"), owner_id="floor-1")
    assert anonymous.status_code in (401, 403)
    assert not Turn.objects.filter(owner=floor_owner).exists()

    request = factory.post("/bench/floor/floor-1/", body, format="json")
    force_authenticate(request, user=service_user)
    answer = view(request, owner_id="floor-1")
    assert answer.status_code == 201 and answer.data == {"seq": 4}
    assert Turn.objects.get(owner=floor_owner, seq=4).content == "hi there"
    assert redis_client.hexists(f"{conf.KEY_PREFIX}:floor:floor-1", "t:4")
