"""Tests of services.memory_link: an anonymous owner merged into a known one (turns, facts,
sessions, idempotency keys), forgotten, with no stale cache; twice, concurrently, and across
two app instances."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from memory import ops, selectors, services
from memory.models import (
    CacheInvalidation,
    Fact,
    FactVersion,
    Owner,
    OwnerLink,
    Session,
    Turn,
)
from memory.services import LinkResult
from memory.signals import memory_forgotten
from tests import instance
from tests.test_concurrency import Thread

ANON = "anon-7f3a"

db = pytest.mark.django_db
db_transaction = pytest.mark.django_db(transaction=True)


def append(owner_id: str, content: str, session_id: str = "tab", role: str = "assistant", **kw):
    return services.turn_append(
        owner_id=owner_id, session_id=session_id, role=role, content=content, **kw
    )


def contents(owner_id: str) -> list[tuple[int, str]]:
    turns = Turn.objects.filter(owner__external_id=owner_id).order_by("seq")
    return list(turns.values_list("seq", "content"))


def history(owner_id: str, key: str) -> list[tuple[int, Any, bool]]:
    return [
        (v["version"], v["value"], v["deleted"])
        for v in selectors.fact_history(owner_id=owner_id, key=key).results
    ]


def link(owner_id: str = "wang", from_owner_id: str = ANON) -> LinkResult:
    return services.memory_link(owner_id=owner_id, from_owner_id=from_owner_id)


@pytest.fixture(params=[None, 1], ids=["one-batch", "batches-of-1"])
def batches(request: Any, settings: Any) -> None:
    """The test twice: its link in one batch (the default holds every turn), and one turn per
    transaction; every guarantee holds either way."""
    if request.param is not None:
        settings.MEMORY = {**settings.MEMORY, "LINK_BATCH_TURNS": request.param}


@db
def test_turns_follow_the_owners_in_order(batches, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        for text in ["w1", "w2", "w3"]:
            append("wang", text)
        for text in ["a1", "a2", "a3", "a4"]:
            append(ANON, text)
        services.turn_delete(owner_id=ANON, seq=2)
        result = link()
        after = append("wang", "w4")
    assert result == LinkResult(turns_moved=3, facts_moved=0)
    assert contents("wang") == [
        (1, "w1"),
        (2, "w2"),
        (3, "w3"),
        (4, "a1"),
        (5, "a3"),
        (6, "a4"),
        (7, "w4"),
    ]
    assert after.seq == 7
    assert Owner.objects.get(external_id="wang").last_seq == 7
    assert not Owner.objects.filter(external_id=ANON).exists()
    assert contents(ANON) == []


@db
def test_link_into_an_owner_with_no_memory_yet(batches, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        append(ANON, "a1")
        append(ANON, "a2")
        services.fact_put(owner_id=ANON, key="name", value="Jim")
        result = link()
    assert result == LinkResult(2, 1)
    assert contents("wang") == [(1, "a1"), (2, "a2")]
    assert selectors.context_get(owner_id="wang")["facts"] == {"name": "Jim"}


@db
def test_facts_merge_newest_wins_and_history_is_kept(batches, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        services.fact_put(owner_id=ANON, key="name", value="Jim")
        services.fact_put(owner_id="wang", key="name", value="Wang")
        services.fact_put(owner_id="wang", key="name", value="Wang Jianguo")  # newest: stays
        services.fact_put(owner_id="wang", key="location", value="Beijing")
        services.fact_put(owner_id=ANON, key="location", value="Shanghai")  # newest: wins
        services.fact_put(owner_id=ANON, key="likes", value=["basketball"])
        services.fact_put(owner_id=ANON, key="likes", value=["basketball", "tea"])
        services.fact_put(owner_id="wang", key="occupation", value="teacher")
        services.fact_put(owner_id="wang", key="language", value="French")
        services.fact_delete(owner_id="wang", key="language")
        services.fact_put(owner_id=ANON, key="language", value="Cantonese")
        services.fact_put(owner_id=ANON, key="pet", value="cat")
        services.fact_delete(owner_id=ANON, key="pet")
        result = link()
    assert result == LinkResult(turns_moved=0, facts_moved=3)
    facts = {f["key"]: (f["value"], f["version"]) for f in selectors.fact_list(owner_id="wang")}
    assert facts == {
        "name": ("Wang Jianguo", 2),
        "location": ("Shanghai", 2),
        "likes": (["basketball", "tea"], 2),
        "occupation": ("teacher", 1),
        "language": ("Cantonese", 3),
    }
    assert history("wang", "name") == [(2, "Wang Jianguo", False), (1, "Wang", False)]
    assert history("wang", "location") == [(2, "Shanghai", False), (1, "Beijing", False)]
    assert history("wang", "likes") == [
        (2, ["basketball", "tea"], False),
        (1, ["basketball"], False),
    ]
    assert history("wang", "language") == [
        (3, "Cantonese", False),
        (2, None, True),
        (1, "French", False),
    ]
    assert history("wang", "pet") == [(2, None, True), (1, "cat", False)]
    # The next change of a key continues its numbering.
    fact, _ = services.fact_put(owner_id="wang", key="pet", value="dog")
    assert fact.version == 3
    location, _ = services.fact_put(owner_id="wang", key="location", value="Hangzhou")
    assert location.version == 3
    assert not Fact.objects.filter(owner__external_id=ANON).exists()
    assert not FactVersion.objects.filter(owner__external_id=ANON).exists()


@db
def test_a_tie_keeps_the_known_owners_value(batches, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        mine, _ = services.fact_put(owner_id="wang", key="name", value="Wang")
        theirs, _ = services.fact_put(owner_id=ANON, key="name", value="Jim")
        Fact.objects.filter(pk=theirs.pk).update(updated_at=mine.updated_at)
        result = link()
    assert result.facts_moved == 0
    assert selectors.fact_list(owner_id="wang")[0]["value"] == "Wang"


@db
def test_source_turn_seq_follows_its_turn(batches, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        append("wang", "hello")
        append("wang", "hi there")
        append(ANON, "hello", role="user")
        append(ANON, "I like basketball", role="user")  # anon seq 2: writes `likes`
        append(ANON, "I live in Shanghai", role="user")  # anon seq 3: writes `location`
        services.turn_delete(owner_id=ANON, seq=3)
        link()
    likes = Fact.objects.get(owner__external_id="wang", key="likes")
    assert likes.value == ["basketball"]
    assert contents("wang")[likes.source_turn_seq - 1] == (4, "I like basketball")
    versions = FactVersion.objects.filter(owner__external_id="wang", key="likes")
    assert [v.source_turn_seq for v in versions] == [4]
    # Its turn was deleted: no seq to point at rather than another turn's.
    location = Fact.objects.get(owner__external_id="wang", key="location")
    assert location.source_turn_seq is None


@db
def test_sessions_of_one_id_merge(batches, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        first = append(ANON, "a1", session_id="tab")
        append(ANON, "a2", session_id="phone")
        append("wang", "w1", session_id="tab")
        last = append("wang", "w2", session_id="tab")
        append("wang", "w3", session_id="laptop")
        link()
    sessions = {s["session_id"]: s for s in selectors.session_list(owner_id="wang").results}
    assert {sid: s["turn_count"] for sid, s in sessions.items()} == {
        "tab": 3,
        "phone": 1,
        "laptop": 1,
    }
    tab = Session.objects.get(owner__external_id="wang", session_id="tab")
    assert (tab.first_seen, tab.last_seen) == (first.created_at, last.created_at)
    assert not Session.objects.filter(owner__external_id=ANON).exists()


@db
def test_idempotency_keys_the_owner_used_are_cleared_on_moved_turns(
    batches, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        mine = append("wang", "w1", idempotency_key="req-1")
        append(ANON, "a1", idempotency_key="req-1")
        append(ANON, "a2", idempotency_key="req-2")
        link()
        retry_mine = append("wang", "w1", idempotency_key="req-1")
        retry_theirs = append("wang", "a2", idempotency_key="req-2")
    assert retry_mine.pk == mine.pk
    assert (retry_theirs.seq, retry_theirs.content) == (3, "a2")
    moved = Turn.objects.get(owner__external_id="wang", content="a1")
    assert moved.idempotency_key is None
    assert contents("wang") == [(1, "w1"), (2, "a1"), (3, "a2")]


@db
def test_linking_twice_moves_nothing_the_second_time(batches, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        append("wang", "w1")
        append(ANON, "a1")
        services.fact_put(owner_id=ANON, key="name", value="Jim")
        first = link()
        owner = Owner.objects.get(external_id="wang")
        second = link()
    assert first == LinkResult(1, 1)
    assert second == LinkResult(0, 0)
    assert Owner.objects.get(external_id="wang").stamp == owner.stamp
    assert contents("wang") == [(1, "w1"), (2, "a1")]


@db
def test_linking_an_unknown_owner_changes_nothing():
    assert link("nobody", "anon-unknown") == LinkResult(0, 0)
    assert not Owner.objects.exists()


@db
@pytest.mark.parametrize(
    ("owner_id", "from_owner_id", "field"),
    [
        ("wang", "wang", "from_user_id"),
        ("wang", "bad id!", "from_user_id"),
        ("wang", "", "from_user_id"),
        ("bad id!", ANON, "user_id"),
    ],
)
def test_bad_link_is_a_validation_error_and_changes_nothing(owner_id, from_owner_id, field):
    append(ANON, "a1")
    with pytest.raises(ValidationError) as info:
        link(owner_id, from_owner_id)
    assert field in info.value.message_dict
    assert contents(ANON) == [(1, "a1")]


@db
def test_the_anonymous_owner_is_forgotten_like_memory_forget(
    batches, django_capture_on_commit_callbacks
):
    forgotten: list[str] = []

    def receiver(sender: Any, owner_id: str, **kwargs: Any) -> None:
        forgotten.append(owner_id)

    memory_forgotten.connect(receiver)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            append(ANON, "a1")
            services.fact_put(owner_id="wang", key="name", value="Wang")
            services.fact_put(owner_id=ANON, key="name", value="Jim")
            services.fact_put(owner_id="wang", key="name", value="Wang Jianguo")
            link()
    finally:
        memory_forgotten.disconnect(receiver)
    assert forgotten == [ANON]
    assert not Owner.objects.filter(external_id=ANON).exists()
    # The outbox row of the anonymous owner's cache drop went once Redis confirmed it.
    assert not CacheInvalidation.objects.exists()
    assert not Owner.objects.filter(cache_dirty=True).exists()


@db
def test_no_stale_cached_copy_of_either_owner(batches, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        append("wang", "w1")
        append(ANON, "a1")
        services.fact_put(owner_id=ANON, key="likes", value=["tea"])
    for owner_id in ("wang", ANON):
        selectors.context_get(owner_id=owner_id)
        assert selectors.context_get(owner_id=owner_id)["source"] == "cache"
    with django_capture_on_commit_callbacks(execute=True):
        link()
    wang = selectors.context_get(owner_id="wang")
    assert wang["source"] == "database"
    assert [t["content"] for t in wang["turns"]] == ["w1", "a1"]
    assert wang["facts"] == {"likes": ["tea"]}
    assert selectors.context_get(owner_id="wang") == {**wang, "source": "cache"}
    anon = selectors.context_get(owner_id=ANON)
    assert (anon["turns"], anon["facts"]) == ([], {})


@db
def test_linked_turns_are_searched_as_the_owners(batches, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        append(ANON, "我喜欢打篮球")
        link()
    assert [t["seq"] for t in selectors.turn_search(owner_id="wang", q="篮球")] == [1]
    assert selectors.turn_search(owner_id=ANON, q="篮球") == []


# Concurrency -------------------------------------------------------------------------------


def _writer(owner_id: str, prefix: str, count: int, started: threading.Event) -> list[int]:
    seqs = []
    for i in range(count):
        seqs.append(append(owner_id, f"{prefix}-{i}", session_id=prefix).seq)
        if i == count // 3:
            started.set()
    return seqs


def _linker(waits: list[threading.Event]) -> LinkResult:
    for event in waits:
        event.wait(timeout=30)
    return link()


@db_transaction
def test_link_while_both_owners_are_appended_to(batches):
    for i in range(10):
        append("wang", f"wang-0-{i}", session_id="wang-0")
        append(ANON, f"anon-0-{i}", session_id="anon-0")
    for owner_id in ("wang", ANON):
        selectors.context_get(owner_id=owner_id)
    events = [threading.Event() for _ in range(4)]
    writers = [
        Thread(_writer, owner_id, f"{name}-{n}", 30, events[2 * (n - 1) + k])
        for n in (1, 2)
        for k, (owner_id, name) in enumerate([("wang", "wang"), (ANON, "anon")])
    ]
    linker = Thread(_linker, events)
    for thread in [*writers, linker]:
        thread.start()
    for thread in [*writers, linker]:
        thread.join()
    assert all(thread.error is None for thread in [*writers, linker])

    wang, anon = dict(contents("wang")), dict(contents(ANON))
    # No seq skipped or repeated, on either owner.
    assert sorted(wang) == list(range(1, len(wang) + 1))
    assert sorted(anon) == list(range(1, len(anon) + 1))
    # No turn lost or doubled: every turn written is on exactly one of the two owners.
    written = {f"{p}-0-{i}" for p in ("wang", "anon") for i in range(10)} | {
        f"{p}-{n}-{i}" for p in ("wang", "anon") for n in (1, 2) for i in range(30)
    }
    assert sorted([*wang.values(), *anon.values()]) == sorted(written)
    # The owner's own turns kept the seq their append returned.
    for thread in writers[0::2]:
        prefix = f"wang-{1 + writers.index(thread) // 2}"
        assert [wang[seq] for seq in thread.result] == [f"{prefix}-{i}" for i in range(30)]
    # Moved turns kept their order; the anonymous owner's later turns started a new owner.
    moved = [text for _, text in sorted(wang.items()) if text.startswith("anon")]
    assert linker.result.turns_moved == len(moved)
    for prefix in ("anon-0", "anon-1", "anon-2"):
        mine = [text for text in moved if text.startswith(prefix + "-")]
        assert mine == sorted(mine, key=lambda text: int(text.rsplit("-", 1)[1]))
    where = {text: seq for seq, text in anon.items()}
    for thread in writers[1::2]:
        prefix = f"anon-{1 + writers.index(thread) // 2}"
        late = [(i, seq) for i, seq in enumerate(thread.result) if f"{prefix}-{i}" in where]
        assert all(where[f"{prefix}-{i}"] == seq for i, seq in late)
    # Sessions count every turn once; the cached contexts equal the database.
    for owner_id, turns in (("wang", wang), (ANON, anon)):
        counted = Session.objects.filter(owner__external_id=owner_id)
        assert sum(counted.values_list("turn_count", flat=True)) == len(turns)
        first = selectors.context_get(owner_id=owner_id, turns=50)
        second = selectors.context_get(owner_id=owner_id, turns=50)
        assert (
            first["turns"]
            == second["turns"]
            == selectors.context.database_read(owner_id, 50)[0].turns
        )


@db_transaction
def test_links_racing_each_other_merge_once_and_never_deadlock():
    for i in range(5):
        append("wang", f"w{i}")
        append(ANON, f"a{i}")
    go = threading.Event()

    def racer(owner_id: str, from_owner_id: str) -> LinkResult:
        go.wait(timeout=30)
        return link(owner_id, from_owner_id)

    racers = [Thread(racer, "wang", ANON), Thread(racer, "wang", ANON), Thread(racer, ANON, "wang")]
    for thread in racers:
        thread.start()
    go.set()
    for thread in racers:
        thread.join()
    assert all(thread.error is None for thread in racers)
    # The first link to lock both rows moves five turns; a same-way link after it finds no
    # anonymous owner, and the opposite link, if it comes after, moves all ten back.
    results = [thread.result for thread in racers]
    assert LinkResult(5, 0) in results
    assert set(results) <= {LinkResult(0, 0), LinkResult(5, 0), LinkResult(10, 0)}
    (survivor,) = Owner.objects.values_list("external_id", flat=True)
    turns = contents(survivor)
    assert [seq for seq, _ in turns] == list(range(1, 11))
    assert sorted(text for _, text in turns) == sorted(
        [f"w{i}" for i in range(5)] + [f"a{i}" for i in range(5)]
    )


@db_transaction
def test_no_stale_copy_on_two_instances():
    for text in ["w1", "w2"]:
        append("wang", text)
    for text in ["a1", "a2"]:
        append(ANON, text)
    services.fact_put(owner_id=ANON, key="name", value="Jim")

    # Instance A and this process both hold warm copies of both owners.
    warm = instance.run("contexts", "10", "2", "wang", ANON)
    assert [context["source"] for context in warm] == ["database", "database", "cache", "cache"]
    for owner_id in ("wang", ANON):
        assert selectors.context_get(owner_id=owner_id, turns=10)["source"] == "cache"
    # Instance B links.
    assert instance.run("link", "wang", ANON) == {"turns_moved": 2, "facts_moved": 1}
    # Neither another instance nor this one reads a stale copy of either owner (the copies
    # live in Redis, shared by every instance; a process keeps none of its own).
    for wang, anon in (
        instance.run("contexts", "10", "1", "wang", ANON),
        [selectors.context_get(owner_id=owner_id, turns=10) for owner_id in ("wang", ANON)],
    ):
        assert [(t["seq"], t["content"]) for t in wang["turns"]] == [
            (1, "w1"),
            (2, "w2"),
            (3, "a1"),
            (4, "a2"),
        ]
        assert wang["facts"] == {"name": "Jim"}
        assert (anon["turns"], anon["facts"]) == ([], {})


@db
def test_a_link_past_max_facts_is_refused_whole(write, memory_settings):
    with write():
        services.facts_merge(owner_id="wang", facts={"name": "Wang", "likes": ["golf"]})
        services.facts_merge(owner_id="anon-1", facts={"location": "上海", "pet": "cat"})
        services.turn_append(owner_id="anon-1", session_id="tab", role="user", content="hi")
    with memory_settings(MAX_FACTS=3), pytest.raises(ValidationError) as refused:
        services.memory_link(owner_id="wang", from_owner_id="anon-1")
    assert set(refused.value.message_dict) == {"from_user_id"}
    assert "MAX_FACTS" in refused.value.message_dict["from_user_id"][0]
    assert {f["key"] for f in selectors.fact_list(owner_id="wang")} == {"likes", "name"}
    assert len(selectors.turn_list(owner_id="anon-1")[0]) == 1
    with memory_settings(MAX_FACTS=4):
        assert services.memory_link(owner_id="wang", from_owner_id="anon-1").facts_moved == 2


@db
def test_a_link_from_an_owner_with_a_key_made_only_of_dots_is_refused_whole(write):
    """Such a key (stored before the rule) is not written into the owner: the link waits for
    ``memory_fact_keys --rename``, then goes through."""
    with write():
        services.fact_put(owner_id=ANON, key="tmp", value="x")
        services.turn_append(owner_id=ANON, session_id="tab", role="user", content="hi")
    Fact.objects.filter(owner__external_id=ANON, key="tmp").update(key="..")
    with pytest.raises(ValidationError) as refused:
        link()
    assert "memory_fact_keys --rename" in refused.value.message_dict["from_user_id"][0]
    assert not Owner.objects.filter(external_id="wang").exists()
    assert contents(ANON) == [(1, "hi")]
    with write():
        assert ops.fact_dot_keys_rename(owner_id=ANON) == {"..": "dotdot"}
        assert link() == LinkResult(1, 1)
    assert {f["key"] for f in selectors.fact_list(owner_id="wang")} == {"dotdot"}


# Linking in bounded steps -------------------------------------------------------------------


def _words(n: int, size: int = 4000) -> str:
    """Text of ``size`` characters, different for each ``n`` (its search document is work)."""
    return " ".join(f"w{n}x{i}" for i in range(size // 8))[:size]


@db_transaction
def test_a_long_link_lets_the_owners_writers_in_between_its_batches(memory_settings):
    for i in range(60):
        append(ANON, f"anon {i} {_words(i)}")
    append("wang", "wang first")
    linking = threading.Event()
    done = threading.Event()

    def writer() -> list[int]:
        seqs = []
        while not done.is_set():
            seqs.append(append("wang", f"wang while linking {len(seqs)}").seq)
            linking.set()
        return seqs

    def linker() -> LinkResult:
        linking.wait(timeout=30)
        try:
            return link()
        finally:
            done.set()

    with memory_settings(LINK_BATCH_TURNS=5):
        threads = [Thread(writer), Thread(linker)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    assert all(thread.error is None for thread in threads)
    writes, result = threads[0].result, threads[1].result
    assert result == LinkResult(turns_moved=60, facts_moved=0)
    turns = contents("wang")
    assert [seq for seq, _ in turns] == list(range(1, len(turns) + 1))
    moved = [seq for seq, text in turns if text.startswith("anon ")]
    # Order kept: the anonymous turns in their order, each batch continuing the owner's seq.
    assert [text.split()[1] for _, text in turns if text.startswith("anon ")] == [
        str(i) for i in range(60)
    ]
    # NOTE: the point: the owner's appends did not wait for the whole link; some landed
    # between two of its batches (one transaction would put all of them before or after).
    assert any(moved[0] < seq < moved[-1] for seq in writes)
    assert not Owner.objects.filter(external_id=ANON).exists()
    counted = Session.objects.filter(owner__external_id="wang")
    assert sum(counted.values_list("turn_count", flat=True)) == len(turns)
    context = selectors.context_get(owner_id="wang", turns=50)
    assert context["turns"] == selectors.context.database_read("wang", 50)[0].turns


def _moved(owner_id: str) -> int:
    return Turn.objects.filter(owner__external_id=owner_id, content__startswith="anon ").count()


def _anon_with_a_fact(turns: int = 60) -> None:
    """anon's turns, its turn 2 ("anon 1 ...", moved in an early batch) the source of a fact."""
    for i in range(turns):
        append(ANON, f"anon {i} {_words(i)}")
    services.fact_put(owner_id=ANON, key="name", value="Jim")
    Fact.objects.filter(owner__external_id=ANON).update(source_turn_seq=2)
    FactVersion.objects.filter(owner__external_id=ANON).update(source_turn_seq=2)


def _cut_off_link(owner_id: str, at_least: int) -> int:
    """Another instance links ANON into ``owner_id``, five turns a batch, and is killed
    (SIGKILL) once ``at_least`` turns moved; how many had."""
    proc = instance.spawn("link", owner_id, ANON, "5")
    try:
        deadline = time.monotonic() + 60
        while _moved(owner_id) < at_least and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        proc.kill()
    finally:
        proc.communicate(timeout=30)
    return _moved(owner_id)


@db_transaction
def test_a_link_cut_off_resumes_where_it_stopped():
    _anon_with_a_fact()
    append("wang", "wang first")
    cut = _cut_off_link("wang", 10)
    # Cut off: the batches that committed moved, the rest waits on the anonymous owner.
    assert 0 < cut < 60
    assert cut % 5 == 0
    assert Turn.objects.filter(owner__external_id=ANON).count() == 60 - cut
    for owner_id in ("wang", ANON):
        seqs = [seq for seq, _ in contents(owner_id)]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    # Linking again finishes it: every turn once, in order, the fact's source turn followed.
    assert link() == LinkResult(turns_moved=60 - cut, facts_moved=1)
    turns = contents("wang")
    assert [seq for seq, _ in turns] == list(range(1, 62))
    assert [text.split()[1] for _, text in turns[1:]] == [str(i) for i in range(60)]
    fact = Fact.objects.get(owner__external_id="wang", key="name")
    assert turns[fact.source_turn_seq - 1][1].startswith("anon 1 ")
    assert not Owner.objects.filter(external_id=ANON).exists()
    assert not OwnerLink.objects.exists()
    assert link() == LinkResult(0, 0)


@db_transaction
def test_a_link_cut_off_and_then_made_into_another_owner_starts_over():
    _anon_with_a_fact()
    cut = _cut_off_link("wang", 10)
    assert 0 < cut < 60
    assert link("li") == LinkResult(turns_moved=60 - cut, facts_moved=1)
    # The turns first moved stay with wang; the rest went to li, in order; the fact's source
    # turn is wang's now, so li's fact names none rather than another turn.
    assert [text.split()[1] for _, text in contents("wang")] == [str(i) for i in range(cut)]
    assert [text.split()[1] for _, text in contents("li")] == [str(i) for i in range(cut, 60)]
    assert [seq for seq, _ in contents("li")] == list(range(1, 61 - cut))
    assert Fact.objects.get(owner__external_id="li", key="name").source_turn_seq is None
    assert not Owner.objects.filter(external_id=ANON).exists()
    assert not OwnerLink.objects.exists()
