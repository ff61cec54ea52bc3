"""Tests of ``users/{user_id}/facts/``: listing, merging, putting (with If-Match), deleting,
and the history of one fact."""

from __future__ import annotations

import pytest

from memory import services
from memory.models import Fact, FactVersion

pytestmark = pytest.mark.django_db

FACTS = "/api/memory/users/wang/facts/"
NAME = "/api/memory/users/wang/facts/name/"


@pytest.fixture
def write(django_capture_on_commit_callbacks):
    """Send a writing request with its on-commit cache updates run, as outside a test."""

    def send(client, method, path, data=None, **extra):
        with django_capture_on_commit_callbacks(execute=True):
            return getattr(client, method)(path, data, format="json", **extra)

    return send


def test_put_creates_with_201_then_changes_with_200(owner_client, write):
    created = write(owner_client, "put", NAME, {"value": "Wang Jianguo", "session_id": "tab"})
    changed = write(owner_client, "put", NAME, {"value": "Jim"})
    assert created.status_code == 201
    assert changed.status_code == 200
    assert set(created.json()) == {
        "key",
        "value",
        "session_id",
        "updated_at",
        "version",
        "expires_at",
    }
    assert (created.json()["version"], created.json()["session_id"]) == (1, "tab")
    assert (changed.json()["version"], changed.json()["value"]) == (2, "Jim")
    assert changed.json()["session_id"] is None


def test_put_same_value_changes_nothing(owner_client, write):
    write(owner_client, "put", NAME, {"value": ["basketball"]})
    again = write(owner_client, "put", NAME, {"value": ["basketball"]})
    assert again.status_code == 200
    assert again.json()["version"] == 1
    assert FactVersion.objects.count() == 1


def test_put_of_the_same_number_in_another_json_type_is_a_change(owner_client, write):
    """``true``, ``1``, ``1.0`` and ``"1"`` are four values (issue 21): each PUT over the
    other is stored as a new version, and the same one again changes nothing."""
    versions = []
    for value in [1, True, 1.0, "1", 1, [1], [True], {"n": 1}, {"n": 1.0}, {"n": 1.0}]:
        response = write(owner_client, "put", NAME, {"value": value})
        assert response.status_code in (200, 201)
        assert response.json()["value"] == value
        assert type(response.json()["value"]) is type(value)
        versions.append(response.json()["version"])
    assert versions == [1, 2, 3, 4, 5, 6, 7, 8, 9, 9]
    stored = Fact.objects.get(owner__external_id="wang", key="name").value
    assert stored == {"n": 1.0} and type(stored["n"]) is float
    assert owner_client.get(FACTS).json()["facts"][0]["value"] == {"n": 1.0}
    history = [v["value"] for v in reversed(owner_client.get(f"{NAME}history/").json()["results"])]
    assert [type(v) for v in history[:5]] == [int, bool, float, str, int]
    assert [type(v[0]) for v in history[5:7]] == [int, bool]
    assert [type(v["n"]) for v in history[7:]] == [int, float]


def test_patch_of_the_same_number_in_another_json_type_is_a_change(owner_client, write):
    write(owner_client, "patch", FACTS, {"facts": {"n": 1, "m": 1.0}})
    response = write(owner_client, "patch", FACTS, {"facts": {"n": True, "m": 1.0}})
    assert response.status_code == 200
    facts = {f["key"]: f for f in response.json()["facts"]}
    assert (facts["n"]["value"], facts["n"]["version"]) == (True, 2)
    assert (facts["m"]["value"], facts["m"]["version"]) == (1.0, 1)
    assert FactVersion.objects.filter(key="n").count() == 2


def test_a_float_the_database_keeps_as_an_integer_is_the_same_value_again(owner_client, write):
    """Postgres ``jsonb`` keeps ``1e16`` as the number ``10000000000000000`` (read back as an
    int): a PUT of it again is no change, as is a PUT of that integer."""
    write(owner_client, "put", NAME, {"value": [1e16, 1.5e17]})
    for value in ([1e16, 1.5e17], [10**16, 15 * 10**16]):
        again = write(owner_client, "put", NAME, {"value": value})
        assert (again.status_code, again.json()["version"]) == (200, 1)
    assert FactVersion.objects.count() == 1


@pytest.mark.parametrize(
    "value", [None, 0, -1.5, True, "", "文字", [], [1, "a", None], {"nested": {"list": [1]}}]
)
def test_put_takes_any_json_value(owner_client, write, value):
    response = write(owner_client, "put", NAME, {"value": value})
    assert response.status_code == 201
    assert response.json()["value"] == value
    assert owner_client.get(FACTS).json()["facts"][0]["value"] == value


@pytest.mark.parametrize("if_match", ["1", '"1"', ' "1" '])
def test_put_with_current_version_succeeds(owner_client, write, if_match):
    write(owner_client, "put", NAME, {"value": "A"})
    response = write(owner_client, "put", NAME, {"value": "B"}, HTTP_IF_MATCH=if_match)
    assert response.status_code == 200
    assert response.json()["version"] == 2


@pytest.mark.parametrize("if_match", ["1", '"1"', "3", "0", "999999999999999999"])
def test_put_with_stale_version_is_412_and_changes_nothing(owner_client, write, if_match):
    write(owner_client, "put", NAME, {"value": "A"})
    write(owner_client, "put", NAME, {"value": "B"})
    response = write(owner_client, "put", NAME, {"value": "C"}, HTTP_IF_MATCH=if_match)
    assert response.status_code == 412
    assert set(response.json()) == {"detail"}
    assert Fact.objects.get().value == "B"
    assert FactVersion.objects.count() == 2


def test_put_with_if_match_on_a_missing_fact_is_412(owner_client, write):
    response = write(owner_client, "put", NAME, {"value": "A"}, HTTP_IF_MATCH="1")
    assert response.status_code == 412
    assert Fact.objects.count() == 0


@pytest.mark.parametrize("if_match", ["", "abc", "1.0", "-1", "*", 'W/"1"', '"1', "1" * 19, "٣"])
def test_put_with_non_integer_if_match_is_400(owner_client, write, if_match):
    write(owner_client, "put", NAME, {"value": "A"})
    response = write(owner_client, "put", NAME, {"value": "B"}, HTTP_IF_MATCH=if_match)
    assert response.status_code == 400
    assert list(response.json()) == ["If-Match"]
    assert Fact.objects.get().value == "A"


def test_delete_answers_204_then_404(owner_client, write):
    write(owner_client, "put", NAME, {"value": "A"})
    deleted = write(owner_client, "delete", NAME)
    again = write(owner_client, "delete", NAME)
    assert deleted.status_code == 204
    assert deleted.content == b""
    assert again.status_code == 404
    assert owner_client.get(FACTS).json() == {"facts": []}


def test_delete_with_stale_if_match_is_412(owner_client, write):
    write(owner_client, "put", NAME, {"value": "A"})
    write(owner_client, "put", NAME, {"value": "B"})
    assert write(owner_client, "delete", NAME, HTTP_IF_MATCH="1").status_code == 412
    assert write(owner_client, "delete", NAME, HTTP_IF_MATCH="2").status_code == 204


def test_get_one_fact_answers_it_or_404(owner_client, other_client, write):
    assert owner_client.get(NAME).status_code == 404
    put = write(owner_client, "put", NAME, {"value": "Wang Jianguo", "session_id": "tab"}).json()
    write(owner_client, "put", "/api/memory/users/wang/facts/likes/", {"value": ["golf"]})
    response = owner_client.get(NAME)
    assert response.status_code == 200
    assert response.json() == put
    assert response.json() == owner_client.get(FACTS).json()["facts"][1]
    assert owner_client.get("/api/memory/users/wang/facts/location/").status_code == 404
    # NOTE: another user's fact is a 404, as their whole memory is.
    assert other_client.get(NAME).status_code == 404
    write(owner_client, "delete", NAME)
    assert owner_client.get(NAME).status_code == 404


def test_get_one_fact_reads_through_the_cached_copy_as_the_list_does(owner_client, write):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from memory import selectors

    write(owner_client, "put", NAME, {"value": "Wang"})
    assert selectors.fact_list(owner_id="wang")[0]["value"] == "Wang"
    with CaptureQueriesContext(connection) as queries:
        assert selectors.fact_get(owner_id="wang", key="name")["value"] == "Wang"
    assert len(queries) == 0


def test_list_facts_by_key(owner_client, write):
    write(owner_client, "put", "/api/memory/users/wang/facts/name/", {"value": "Wang"})
    write(owner_client, "put", "/api/memory/users/wang/facts/likes/", {"value": ["golf"]})
    response = owner_client.get(FACTS)
    assert response.status_code == 200
    assert [(f["key"], f["value"]) for f in response.json()["facts"]] == [
        ("likes", ["golf"]),
        ("name", "Wang"),
    ]


def test_list_facts_of_an_unknown_user_is_empty(service_client):
    assert service_client.get("/api/memory/users/nobody/facts/").json() == {"facts": []}


def test_patch_merges_and_answers_all_facts(owner_client, write):
    write(owner_client, "put", NAME, {"value": "Wang"})
    write(owner_client, "put", "/api/memory/users/wang/facts/location/", {"value": "Beijing"})
    response = write(
        owner_client,
        "patch",
        FACTS,
        {"facts": {"location": "Shanghai", "likes": ["basketball"]}, "session_id": "tab"},
    )
    assert response.status_code == 200
    facts = {f["key"]: f for f in response.json()["facts"]}
    assert list(facts) == ["likes", "location", "name"]
    assert (facts["location"]["value"], facts["location"]["version"]) == ("Shanghai", 2)
    assert facts["location"]["session_id"] == "tab"
    assert (facts["name"]["value"], facts["name"]["version"]) == ("Wang", 1)
    assert facts["likes"]["version"] == 1


def test_patch_with_no_keys_changes_nothing(owner_client, write):
    write(owner_client, "put", NAME, {"value": "Wang"})
    response = write(owner_client, "patch", FACTS, {"facts": {}})
    assert response.status_code == 200
    assert [f["key"] for f in response.json()["facts"]] == ["name"]


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        ({}, {"facts": ["This field is required."]}),
        ({"facts": None}, {"facts": ["This field may not be null."]}),
        ({"facts": ["name"]}, {"facts": ['Expected a dictionary of items but got type "list".']}),
        (
            {"facts": {"name": "ok", "Bad Key": 1}},
            {
                "facts": {
                    "Bad Key": ["Enter 1-64 characters of lower-case letters, digits and _ - ."]
                }
            },
        ),
        ({"facts": {"name": "a\x00b"}}, {"facts": {"name": ["Null characters are not allowed."]}}),
        (
            {"facts": {"name": "x"}, "session_id": ""},
            {"session_id": ["This field may not be blank."]},
        ),
    ],
)
def test_patch_bad_input_is_400_and_stores_nothing(owner_client, write, body, errors):
    response = write(owner_client, "patch", FACTS, body)
    assert response.status_code == 400
    assert response.json() == errors
    assert Fact.objects.count() == 0


def test_patch_with_too_many_keys_is_400(owner_client, write):
    response = write(owner_client, "patch", FACTS, {"facts": {f"k{i}": i for i in range(257)}})
    assert response.status_code == 400
    assert Fact.objects.count() == 0


def test_history_lists_versions_newest_first(owner_client, write):
    write(owner_client, "put", NAME, {"value": "A", "session_id": "tab"})
    write(owner_client, "put", NAME, {"value": "B"})
    write(owner_client, "delete", NAME)
    response = owner_client.get(f"{NAME}history/")
    assert response.status_code == 200
    assert response.json()["next"] is None
    results = response.json()["results"]
    assert [(v["version"], v["value"], v["deleted"]) for v in results] == [
        (3, None, True),
        (2, "B", False),
        (1, "A", False),
    ]
    assert set(results[0]) == {
        "key",
        "value",
        "version",
        "session_id",
        "updated_at",
        "source_turn_seq",
        "deleted",
        "actor",
        "expires_at",
    }
    assert results[2]["session_id"] == "tab"


def test_history_shows_the_source_turn(owner_client, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        services.fact_put(owner_id="wang", key="name", value="Wang", source_turn_seq=4)
    assert owner_client.get(f"{NAME}history/").json()["results"][0]["source_turn_seq"] == 4


def test_history_of_a_key_that_never_existed_is_404(owner_client):
    response = owner_client.get(f"{NAME}history/")
    assert response.status_code == 404
    assert set(response.json()) == {"detail"}


@pytest.mark.parametrize("path", ["facts/Name/", "facts/na%20me/", f"facts/{'k' * 65}/"])
def test_malformed_fact_key_in_the_path_is_404(owner_client, write, path):
    response = write(owner_client, "put", f"/api/memory/users/wang/{path}", {"value": 1})
    assert response.status_code == 404
    assert Fact.objects.count() == 0


def test_longest_fact_key_is_accepted(owner_client, write):
    response = write(owner_client, "put", f"{FACTS}{'k' * 64}/", {"value": 1})
    assert response.status_code == 201


@pytest.fixture
def versions(django_capture_on_commit_callbacks):
    """Wang's fact "name" at 11 versions: 1-9 set, 10 deleted, 11 set again."""
    with django_capture_on_commit_callbacks(execute=True):
        for i in range(1, 10):
            services.fact_put(owner_id="wang", key="name", value=f"v{i}")
        services.fact_delete(owner_id="wang", key="name")
        services.fact_put(owner_id="wang", key="name", value="v11")
        services.fact_put(owner_id="li", key="name", value="li's")


@pytest.mark.parametrize("limit", [1, 2, 3, 5, 10, 11, 12, 500])
def test_history_pages_newest_first_following_next(owner_client, versions, limit):
    url, pages = f"{NAME}history/?limit={limit}", []
    while url is not None:
        response = owner_client.get(url)
        assert response.status_code == 200
        pages.append(response.json()["results"])
        url = response.json()["next"]
    assert [v["version"] for page in pages for v in page] == list(range(11, 0, -1))
    assert all(len(page) == limit for page in pages[:-1])
    assert {v["key"] for page in pages for v in page} == {"name"}


def test_history_limit_defaults_to_50(owner_client, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        for i in range(51):
            services.fact_put(owner_id="wang", key="name", value=i)
    first = owner_client.get(f"{NAME}history/").json()
    assert len(first["results"]) == 50
    assert first["next"].startswith("http://testserver/api/memory/users/wang/facts/name/history/?")
    assert [v["version"] for v in owner_client.get(first["next"]).json()["results"]] == [1]


@pytest.mark.parametrize(
    "params",
    [
        {"limit": "0"},
        {"limit": "501"},
        {"limit": "-1"},
        {"cursor": ""},
        {"cursor": "%%%"},
        {"cursor": "WyJ4Il0"},  # ["x"]
        {"cursor": "WzEsMl0"},  # [1,2]
        {"cursor": "dHJ1ZQ"},  # true
        {"cursor": "W3RydWVd"},  # [true]
    ],
)
def test_history_bad_page_params_are_400(owner_client, versions, params):
    response = owner_client.get(f"{NAME}history/", params)
    assert response.status_code == 400
    assert list(response.json()) == list(params)


def test_history_of_a_deleted_fact_is_its_versions(owner_client, write):
    write(owner_client, "put", NAME, {"value": "A"})
    write(owner_client, "delete", NAME)
    results = owner_client.get(f"{NAME}history/").json()["results"]
    assert [(v["version"], v["deleted"]) for v in results] == [(2, True), (1, False)]


def test_history_python_api_returns_a_page(versions):
    from memory import selectors

    page = selectors.fact_history(owner_id="wang", key="name", limit=4)
    rest = selectors.fact_history(owner_id="wang", key="name", limit=500, cursor=page.next_cursor)
    assert [v["version"] for v in page.results] == [11, 10, 9, 8]
    assert [v["version"] for v in rest.results] == list(range(7, 0, -1))
    assert rest.next_cursor is None
    assert selectors.fact_history(owner_id="wang", key="ghost") == ([], None)


def test_a_deep_history_page_starts_at_the_cursor_in_the_index(versions):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from memory import selectors

    cursor = selectors.fact_history(owner_id="wang", key="name", limit=6).next_cursor
    with CaptureQueriesContext(connection) as queries:
        selectors.fact_history(owner_id="wang", key="name", limit=2, cursor=cursor)
    [sql] = [q["sql"] for q in queries if '"memory_factversion"' in q["sql"]]
    with connection.cursor() as db:
        # NOTE: eleven rows are cheapest read any way and sorted; what matters is whether an
        # index serves this order and starts at the cursor, as it must for 100,000 versions.
        for method in ("seqscan", "bitmapscan", "sort"):
            db.execute(f"SET LOCAL enable_{method} = off")
        db.execute(f"EXPLAIN {sql}")
        plan = [row[0] for row in db.fetchall()]
    [scan] = [line for line in plan if "memory_factversion" in line and "Scan" in line]
    assert "memory_factversion_uniq" in scan
    assert "Index Cond" in plan[plan.index(scan) + 1]
    assert "version <" in plan[plan.index(scan) + 1]
    assert not any("Sort" in line for line in plan)


@pytest.fixture
def three_facts(memory_settings, django_capture_on_commit_callbacks):
    """MAX_FACTS is 3 and wang holds three facts: a, b, c."""
    with memory_settings(MAX_FACTS=3):
        with django_capture_on_commit_callbacks(execute=True):
            services.facts_merge(owner_id="wang", facts={"a": 1, "b": 2, "c": 3})
        yield


def _stored():
    return (
        sorted(Fact.objects.values_list("key", "value", "version")),
        FactVersion.objects.count(),
    )


def test_put_of_a_new_key_past_max_facts_is_400_and_stores_nothing(
    owner_client, write, three_facts
):
    before = _stored()
    response = write(owner_client, "put", "/api/memory/users/wang/facts/d/", {"value": 4})
    assert response.status_code == 400
    [message] = response.json()["key"]
    assert "at most 3 facts" in message
    assert "MAX_FACTS" in message
    assert _stored() == before
    assert owner_client.get(FACTS).json()["facts"][-1]["key"] == "c"


def test_put_of_a_held_key_at_max_facts_is_accepted(owner_client, write, three_facts):
    response = write(owner_client, "put", "/api/memory/users/wang/facts/c/", {"value": 30})
    assert (response.status_code, response.json()["version"]) == (200, 2)


def test_put_after_a_delete_at_max_facts_is_accepted(owner_client, write, three_facts):
    write(owner_client, "delete", "/api/memory/users/wang/facts/a/")
    response = write(owner_client, "put", "/api/memory/users/wang/facts/d/", {"value": 4})
    assert response.status_code == 201


def test_patch_past_max_facts_is_400_and_stores_none_of_it(owner_client, write, three_facts):
    before = _stored()
    response = write(owner_client, "patch", FACTS, {"facts": {"a": 10, "d": 4}})
    assert response.status_code == 400
    [message] = response.json()["facts"]
    assert "adds 1" in message
    assert _stored() == before


def test_patch_up_to_max_facts_is_accepted(owner_client, write, memory_settings):
    with memory_settings(MAX_FACTS=3):
        first = write(owner_client, "patch", FACTS, {"facts": {"a": 1, "b": 2}})
        second = write(owner_client, "patch", FACTS, {"facts": {"b": 20, "c": 3}})
        third = write(owner_client, "patch", FACTS, {"facts": {"d": 4}})
    assert (first.status_code, second.status_code, third.status_code) == (200, 200, 400)
    assert [f["key"] for f in second.json()["facts"]] == ["a", "b", "c"]


def test_new_user_past_max_facts_is_not_created(owner_client, write, memory_settings):
    from memory.models import Owner

    with memory_settings(MAX_FACTS=2):
        response = write(owner_client, "patch", FACTS, {"facts": {"a": 1, "b": 2, "c": 3}})
    assert response.status_code == 400
    assert not Owner.objects.exists()


def test_default_max_facts_is_200(owner_client, write):
    facts = {f"k{i:03}": i for i in range(200)}
    assert write(owner_client, "patch", FACTS, {"facts": facts}).status_code == 200
    response = write(owner_client, "put", "/api/memory/users/wang/facts/one-more/", {"value": 1})
    assert response.status_code == 400
    assert Fact.objects.count() == 200


def test_facts_merge_past_max_facts_raises(memory_settings, three_facts):
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError) as raised:
        services.facts_merge(owner_id="wang", facts={"x": 1})
    assert set(raised.value.message_dict) == {"facts"}
    assert Fact.objects.count() == 3


# Keys made only of dots (issue 23, finding 2): `.` and `..` are URL dot segments, which HTTP
# clients collapse, so `DELETE users/victim/facts/../` goes out as `DELETE users/victim/`.

DOT_KEYS = [".", "..", "...", "." * 64]
DOTS_MESSAGE = "A key may not be made only of dots (. and .. are URL dot segments)."


@pytest.mark.parametrize("key", DOT_KEYS)
def test_a_key_made_only_of_dots_is_refused_by_put_and_patch(owner_client, write, key):
    """No such key is ever stored, so no client builds a fact URL that names the user."""
    put = write(owner_client, "put", f"{FACTS}{key}/", {"value": 1})
    put_encoded = write(owner_client, "put", f"{FACTS}{'%2E' * len(key)}/", {"value": 1})
    patch = write(owner_client, "patch", FACTS, {"facts": {"name": "Wang", key: 1}})
    assert (put.status_code, put_encoded.status_code) == (404, 404)
    assert patch.status_code == 400
    assert patch.json() == {"facts": {key: [DOTS_MESSAGE]}}
    assert Fact.objects.count() == 0


@pytest.mark.parametrize("key", ["..", "%2E%2E", "%2e", "."])
@pytest.mark.parametrize("method", ["get", "put", "delete"])
def test_a_dot_segment_that_arrives_uncollapsed_reaches_no_endpoint(
    owner_client, write, method, key
):
    """``facts/../`` sent as it is (or percent-encoded) is a 404 of the fact URLs' own, and
    neither the fact view nor the user's ``DELETE`` sees it."""
    write(owner_client, "put", NAME, {"value": "Wang"})
    services.turn_append(owner_id="wang", session_id="s", role="user", content="hi")
    for path in (f"{FACTS}{key}/", f"{FACTS}{key}/history/"):
        response = write(owner_client, method, path, {"value": 1} if method == "put" else None)
        assert response.status_code == 404, path
        assert set(response.json()) == {"detail"}
    assert Fact.objects.filter(owner__external_id="wang").count() == 1
    assert owner_client.get("/api/memory/users/wang/turns/").json()["results"] != []


@pytest.mark.parametrize("key", [".a", "a.", "a..b", "-.", "._", "..0"])
def test_keys_with_dots_and_something_else_are_accepted(owner_client, write, key):
    assert write(owner_client, "put", f"{FACTS}{key}/", {"value": 1}).status_code == 201
    assert owner_client.get(f"{FACTS}{key}/history/").status_code == 200
    assert write(owner_client, "delete", f"{FACTS}{key}/").status_code == 204


@pytest.mark.parametrize("key", DOT_KEYS)
def test_fact_put_and_facts_merge_refuse_a_key_made_only_of_dots(key):
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError) as put:
        services.fact_put(owner_id="wang", key=key, value=1)
    with pytest.raises(ValidationError) as merge:
        services.facts_merge(owner_id="wang", facts={"name": "Wang", key: 1})
    assert set(put.value.message_dict) == {"key"}
    assert merge.value.messages == [DOTS_MESSAGE]
    assert Fact.objects.count() == 0


def test_a_made_up_tampered_or_foreign_history_cursor_is_400(owner_client, versions):
    """A cursor is opaque, taken from ``next`` (issue 23): not one a client made, changed, or
    took from another fact's or another owner's listing."""
    import base64

    from memory import selectors

    cursor = selectors.fact_history(owner_id="wang", key="name", limit=2).next_cursor
    services.fact_put(owner_id="wang", key="likes", value=1)
    services.fact_put(owner_id="wang", key="likes", value=2)
    theirs = selectors.fact_history(owner_id="li", key="name", limit=1).next_cursor
    assert cursor is not None
    for path, made in [
        (NAME, base64.urlsafe_b64encode(b"[5]").decode().rstrip("=")),  # before version 5
        (NAME, cursor[:-1] + ("A" if cursor[-1] != "A" else "B")),
        (f"{FACTS}likes/", cursor),  # another fact's
        (NAME, theirs or "x"),  # another owner's
    ]:
        response = owner_client.get(f"{path}history/", {"cursor": made})
        assert response.status_code == 400, (path, made)
        assert response.json() == {"cursor": ["Invalid cursor."]}
    assert owner_client.get(f"{NAME}history/", {"cursor": cursor}).status_code == 200
