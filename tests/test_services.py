"""Tests of memory.services: the writes, on real Postgres with the cache on real Redis."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.core.exceptions import ValidationError

from memory import cache, ops, selectors, services
from memory.exceptions import FactNotFound, FactVersionConflict, IdempotencyKeyReused
from memory.models import CacheInvalidation, Fact, FactVersion, Owner, Session, Turn

pytestmark = pytest.mark.django_db


def append(owner_id: str, content: str, session_id: str = "tab-1", role: str = "user", **kwargs):
    return services.turn_append(
        owner_id=owner_id, session_id=session_id, role=role, content=content, **kwargs
    )


def test_turn_append_numbers_turns_per_owner(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        seqs_a = [append("wang", f"a{i}").seq for i in range(3)]
        seqs_b = [append("li", f"b{i}").seq for i in range(2)]
    assert seqs_a == [1, 2, 3]
    assert seqs_b == [1, 2]
    assert Owner.objects.get(external_id="wang").last_seq == 3


def test_turn_append_returns_stored_turn(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        turn = append("wang", "hello", metadata={"lang": "en"})
    stored = Turn.objects.get(pk=turn.pk)
    assert (stored.seq, stored.session_id, stored.role, stored.content, stored.metadata) == (
        1,
        "tab-1",
        "user",
        "hello",
        {"lang": "en"},
    )


def test_non_ascii_content_round_trips_exactly(django_capture_on_commit_callbacks):
    text = "我叫王建国，我喜欢打篮球 🏀 — naïve café"
    with django_capture_on_commit_callbacks(execute=True):
        append("wang", text, metadata={"备注": "中文"})
    cold = selectors.context_get(owner_id="wang")
    warm = selectors.context_get(owner_id="wang")
    assert (cold["source"], warm["source"]) == ("database", "cache")
    assert cold["turns"][0]["content"] == warm["turns"][0]["content"] == text
    assert warm["turns"][0]["metadata"] == {"备注": "中文"}


def test_idempotency_key_retry_stores_nothing_new(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        first = append("wang", "hello", idempotency_key="req-1", metadata={"a": [1, 2.5]})
        retry = append("wang", "hello", idempotency_key="req-1", metadata={"a": [1, 2.5]})
        other = append("wang", "next", idempotency_key="req-2")
    assert retry.pk == first.pk
    assert retry.seq == 1
    assert retry.content == "hello"
    assert other.seq == 2
    assert Turn.objects.filter(owner__external_id="wang").count() == 2
    assert Session.objects.get(session_id="tab-1").turn_count == 2


@pytest.mark.parametrize(
    "changed",
    [
        {"session_id": "tab-2"},
        {"role": "assistant"},
        {"content": "hello again"},
        {"metadata": {"a": 1}},
        {"metadata": {}},
        # NOTE: JSON types, not Python's ==: true is not 1, 1 is not 1.0 (issue 21).
        {"metadata": {"lang": "en", "n": True}},
        {"metadata": {"lang": "en", "n": 1.0}},
    ],
)
def test_idempotency_key_with_another_body_raises_and_stores_nothing(
    django_capture_on_commit_callbacks, changed
):
    body = {"content": "hello", "metadata": {"lang": "en"}}
    if "n" in changed.get("metadata", {}):
        body["metadata"] = {"lang": "en", "n": 1}
    with django_capture_on_commit_callbacks(execute=True):
        first = append("wang", idempotency_key="req-1", **body)
    stamp = Owner.objects.get(external_id="wang").stamp
    with pytest.raises(IdempotencyKeyReused) as raised:
        append("wang", idempotency_key="req-1", **{**body, **changed})
    assert (raised.value.key, raised.value.turn.pk) == ("req-1", first.pk)
    assert list(Turn.objects.values_list("pk", "content")) == [(first.pk, "hello")]
    assert Session.objects.get().turn_count == 1
    assert Owner.objects.get(external_id="wang").stamp == stamp


def test_idempotency_key_is_per_owner(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        a = append("wang", "x", idempotency_key="same")
        b = append("li", "y", idempotency_key="same")
    assert a.pk != b.pk


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"content": "a\x00b"}, "content"),
        ({"content": "x" * 32769}, "content"),
        ({"role": "robot"}, "role"),
        ({"owner_id": "bad id!"}, "user_id"),
        ({"owner_id": ""}, "user_id"),
        ({"owner_id": "x" * 129}, "user_id"),
        ({"session_id": ""}, "session_id"),
        ({"session_id": "a\x00"}, "session_id"),
        ({"session_id": "a\udfff"}, "session_id"),
        ({"content": "a\ud800b"}, "content"),
        ({"metadata": {"k": "v\x00"}}, "metadata"),
        ({"idempotency_key": "é"}, "idempotency_key"),
        ({"idempotency_key": ""}, "idempotency_key"),
    ],
)
def test_turn_append_rejects_bad_input_and_stores_nothing(kwargs, field):
    args = {"owner_id": "wang", "session_id": "s", "role": "user", "content": "ok", **kwargs}
    with pytest.raises(ValidationError) as info:
        services.turn_append(**args)
    assert field in info.value.message_dict
    assert Turn.objects.count() == 0
    assert Owner.objects.count() == 0


def test_sessions_only_label_turns(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        append("wang", "My name is Wang Jianguo", session_id="laptop")
        append("wang", "I like basketball", session_id="phone")
        append("wang", "hi again", session_id="reconnect-42")
    context = selectors.context_get(owner_id="wang")
    assert [t["content"] for t in context["turns"]] == [
        "My name is Wang Jianguo",
        "I like basketball",
        "hi again",
    ]
    sessions = {s["session_id"]: s for s in selectors.session_list(owner_id="wang").results}
    assert set(sessions) == {"laptop", "phone", "reconnect-42"}
    assert all(s["turn_count"] == 1 for s in sessions.values())


def test_session_tracks_first_and_last_seen(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        first = append("wang", "one", session_id="tab")
        last = append("wang", "two", session_id="tab")
    session = Session.objects.get(owner__external_id="wang", session_id="tab")
    assert session.first_seen == first.created_at
    assert session.last_seen == last.created_at
    assert session.turn_count == 2


def test_fact_put_creates_then_versions(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        fact, created = services.fact_put(owner_id="wang", key="name", value="Wang Jianguo")
        again, created_again = services.fact_put(
            owner_id="wang", key="name", value="Jim", session_id="tab"
        )
    assert (created, fact.version) == (True, 1)
    assert (created_again, again.version, again.value, again.session_id) == (False, 2, "Jim", "tab")
    history = selectors.fact_history(owner_id="wang", key="name").results
    assert [(v["version"], v["value"]) for v in history] == [(2, "Jim"), (1, "Wang Jianguo")]


def test_fact_put_same_value_changes_nothing(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        services.fact_put(owner_id="wang", key="likes", value=["basketball"])
        fact, created = services.fact_put(owner_id="wang", key="likes", value=["basketball"])
    assert (fact.version, created) == (1, False)
    assert FactVersion.objects.count() == 1


@pytest.mark.parametrize(
    ("first", "then"),
    [
        (1, True),
        (True, 1),
        (0, False),
        (1, 1.0),
        (1.0, 1),
        (1, "1"),
        ([1], [True]),
        ({"a": 1}, {"a": 1.0}),
    ],
)
def test_fact_put_of_another_json_type_is_a_new_version(
    django_capture_on_commit_callbacks, first, then
):
    with django_capture_on_commit_callbacks(execute=True):
        services.fact_put(owner_id="wang", key="n", value=first)
        fact, created = services.fact_put(owner_id="wang", key="n", value=then)
    assert (created, fact.version) == (False, 2)
    stored = Fact.objects.get(key="n").value
    assert repr(stored) == repr(then)
    assert [repr(v["value"]) for v in selectors.fact_history(owner_id="wang", key="n").results] == [
        repr(then),
        repr(first),
    ]
    assert repr(selectors.context_get(owner_id="wang")["facts"]["n"]) == repr(then)


def test_facts_merge_of_another_json_type_is_a_new_version(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        services.facts_merge(owner_id="wang", facts={"a": 1, "b": [1.0], "c": "x"})
        facts = services.facts_merge(owner_id="wang", facts={"a": True, "b": [1], "c": "x"})
    assert [(f.key, repr(f.value), f.version) for f in facts] == [
        ("a", "True", 2),
        ("b", "[1]", 2),
        ("c", "'x'", 1),
    ]


def test_fact_put_with_stale_version_conflicts_and_changes_nothing(
    django_capture_on_commit_callbacks,
):
    with django_capture_on_commit_callbacks(execute=True):
        services.fact_put(owner_id="wang", key="name", value="A")
        services.fact_put(owner_id="wang", key="name", value="B", expected_version=1)
        with pytest.raises(FactVersionConflict) as info:
            services.fact_put(owner_id="wang", key="name", value="C", expected_version=1)
    assert info.value.current == 2
    assert Fact.objects.get().value == "B"


def test_fact_delete_leaves_deleted_version_and_recreation_continues(
    django_capture_on_commit_callbacks,
):
    with django_capture_on_commit_callbacks(execute=True):
        services.fact_put(owner_id="wang", key="location", value="Shanghai")
        services.fact_delete(owner_id="wang", key="location")
        fact, created = services.fact_put(owner_id="wang", key="location", value="Beijing")
    assert created
    assert fact.version == 3
    history = selectors.fact_history(owner_id="wang", key="location").results
    assert [(v["version"], v["deleted"]) for v in history] == [(3, False), (2, True), (1, False)]


def test_fact_delete_missing_raises(db):
    with pytest.raises(FactNotFound):
        services.fact_delete(owner_id="wang", key="name")


def test_fact_delete_with_stale_version_conflicts(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        services.fact_put(owner_id="wang", key="name", value="A")
        with pytest.raises(FactVersionConflict):
            services.fact_delete(owner_id="wang", key="name", expected_version=7)
    assert Fact.objects.filter(key="name").exists()


def test_facts_merge_changes_only_changed_keys(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        services.fact_put(owner_id="wang", key="name", value="Wang")
        facts = services.facts_merge(
            owner_id="wang", facts={"name": "Wang", "location": "Shanghai"}, session_id="tab"
        )
    assert [(f.key, f.version) for f in facts] == [("location", 1), ("name", 1)]
    assert Fact.objects.get(key="location").session_id == "tab"


def test_facts_merge_rejects_bad_keys_and_stores_nothing(db):
    with pytest.raises(ValidationError):
        services.facts_merge(owner_id="wang", facts={"ok": 1, "Bad Key": 2})
    with pytest.raises(ValidationError):
        services.facts_merge(owner_id="wang", facts={"ok": "nul\x00"})
    assert Fact.objects.count() == 0


def test_memory_forget_removes_every_row(django_capture_on_commit_callbacks, redis_client):
    with django_capture_on_commit_callbacks(execute=True):
        append("wang", "My name is Wang Jianguo")
        services.fact_put(owner_id="wang", key="name", value="Wang Jianguo")
        append("li", "keep me")
    selectors.context_get(owner_id="wang")
    with django_capture_on_commit_callbacks(execute=True):
        assert services.memory_forget(owner_id="wang") is True
    assert not Owner.objects.filter(external_id="wang").exists()
    assert not Turn.objects.filter(content__contains="Wang").exists()
    assert not Fact.objects.filter(value="Wang Jianguo").exists()
    assert not FactVersion.objects.filter(value="Wang Jianguo").exists()
    assert not Session.objects.filter(owner__external_id="wang").exists()
    assert not CacheInvalidation.objects.exists()
    assert Turn.objects.filter(owner__external_id="li").count() == 1
    context = selectors.context_get(owner_id="wang")
    assert context["turns"] == [] and context["facts"] == {}
    # Only a content-free guard (a stamp under a digest of the id) remains, for a minute.
    assert redis_client.hgetall(cache.keys.owner_key("wang")).keys() == {b"floor"}
    assert 0 < redis_client.ttl(cache.keys.owner_key("wang")) <= cache.copy.GUARD_TTL
    for key in redis_client.scan_iter(match=f"{settings.TEST_KEY_PREFIX}*"):
        if redis_client.type(key) == b"hash":
            assert b"Wang" not in b"".join(redis_client.hvals(key))
        assert b"wang" not in key


def test_memory_forget_unknown_owner_is_false(db):
    assert services.memory_forget(owner_id="nobody") is False


def test_forgotten_owner_starts_again_at_seq_one(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        append("wang", "one")
        append("wang", "two")
        services.memory_forget(owner_id="wang")
        turn = append("wang", "new life")
    assert turn.seq == 1
    assert [t["content"] for t in selectors.context_get(owner_id="wang")["turns"]] == ["new life"]


def test_turn_delete_drops_turn_and_cached_copy(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        for text in ("one", "two", "three"):
            append("wang", text)
    assert selectors.context_get(owner_id="wang")["source"] == "database"
    with django_capture_on_commit_callbacks(execute=True):
        assert services.turn_delete(owner_id="wang", seq=2) is True
        assert services.turn_delete(owner_id="wang", seq=2) is False
    context = selectors.context_get(owner_id="wang")
    assert context["source"] == "database"
    assert [t["seq"] for t in context["turns"]] == [1, 3]
    assert Session.objects.get().turn_count == 2


def test_writes_leave_owner_clean_once_cache_confirmed(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        append("wang", "one")
    assert Owner.objects.get(external_id="wang").cache_dirty is False


def test_stamps_grow_across_forget_and_recreation(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        append("wang", "one")
        before = Owner.objects.get(external_id="wang").stamp
        services.memory_forget(owner_id="wang")
        append("wang", "two")
    assert Owner.objects.get(external_id="wang").stamp > before


def test_turns_prune_keep_last_deletes_oldest_in_batches(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        for i in range(1, 8):
            append("wang", f"t{i}", session_id="a" if i <= 3 else "b")
    selectors.context_get(owner_id="wang")
    stamp = Owner.objects.get(external_id="wang").stamp
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        assert ops.turns_prune(owner_id="wang", keep_last=2, batch_size=2) == 5
    assert len(callbacks) == 3  # one transaction, and one cache drop, per batch
    assert Owner.objects.get(external_id="wang").stamp > stamp
    assert list(Turn.objects.values_list("seq", flat=True)) == [6, 7]
    context = selectors.context_get(owner_id="wang")
    assert (context["source"], [t["seq"] for t in context["turns"]]) == ("database", [6, 7])
    # A session left with no turn goes.
    assert dict(Session.objects.values_list("session_id", "turn_count")) == {"b": 2}


def test_turns_prune_before_deletes_older_turns(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        turns = [append("wang", f"t{i}") for i in range(1, 6)]
        assert ops.turns_prune(owner_id="wang", before=turns[3].created_at) == 3
    assert [t["seq"] for t in selectors.context_get(owner_id="wang")["turns"]] == [4, 5]


def test_turns_prune_with_both_criteria_needs_both(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        turns = [append("wang", f"t{i}") for i in range(1, 6)]
        deleted = ops.turns_prune(owner_id="wang", before=turns[3].created_at, keep_last=4)
    assert deleted == 1
    assert list(Turn.objects.values_list("seq", flat=True)) == [2, 3, 4, 5]


def test_turns_prune_dry_run_counts_and_changes_nothing(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        for i in range(5):
            append("wang", f"t{i}")
    stamp = Owner.objects.get(external_id="wang").stamp
    assert ops.turns_prune(owner_id="wang", keep_last=1, dry_run=True) == 4
    assert ops.turns_prune(owner_id="nobody", keep_last=1, dry_run=True) == 0
    assert Turn.objects.count() == 5
    assert Owner.objects.get(external_id="wang").stamp == stamp


def test_turns_prune_with_nothing_to_prune_writes_nothing(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        append("wang", "only")
    stamp = Owner.objects.get(external_id="wang").stamp
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        assert ops.turns_prune(owner_id="wang", keep_last=1) == 0
        assert ops.turns_prune(owner_id="nobody", keep_last=0) == 0
    assert callbacks == []
    assert Owner.objects.get(external_id="wang").stamp == stamp


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({}, "before"),
        ({"keep_last": -1}, "keep_last"),
        ({"keep_last": 1, "batch_size": 0}, "batch_size"),
        ({"keep_last": 1, "owner_id": "bad id!"}, "user_id"),
    ],
)
def test_turns_prune_rejects_bad_input(kwargs, field):
    with pytest.raises(ValidationError) as info:
        ops.turns_prune(**{"owner_id": "wang", **kwargs})
    assert field in info.value.message_dict


@pytest.mark.django_db(transaction=True)
def test_an_append_with_nothing_else_to_write_is_one_statement(redis_client):
    """In autocommit (a request's usual mode): one statement, which commits itself, whether or
    not it carries an Idempotency-Key; a retry of the key is one statement too (issue 13: the
    write path at the floor)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    services.turn_append(owner_id="wang", session_id="s", role="user", content="first")
    selectors.context_get(owner_id="wang")
    cases = [{}, {"idempotency_key": "req-1"}, {"idempotency_key": "req-1"}]
    seqs = []
    for extra in cases:
        with CaptureQueriesContext(connection) as queries:
            turn = services.turn_append(
                owner_id="wang", session_id="s", role="user", content="nothing to extract", **extra
            )
        # NOTE: without the repairer thread (as in this suite) the dirty mark is cleared inline
        # after the cache update; a server's repairer batches that off the request.
        statements = [q["sql"] for q in queries if "synchronous_commit" not in q["sql"]]
        assert len(statements) == 1, statements
        seqs.append(turn.seq)
    assert seqs == [2, 3, 3]
    context = selectors.context_get(owner_id="wang")
    assert context["source"] == "cache"
    assert [t["seq"] for t in context["turns"]] == [1, 2, 3]
    assert selectors.session_list(owner_id="wang").results[0]["turn_count"] == 3
