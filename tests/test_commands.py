"""Tests of the management commands (memory_stats, memory_cache, memory_forget, memory_prune),
run with ``call_command`` on real Postgres and Redis."""

from __future__ import annotations

import datetime as dt
import io
import json
import re

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from memory import ops, selectors, services
from memory.models import Owner, Session, Turn

pytestmark = pytest.mark.django_db


@pytest.fixture
def chat(write):
    """Wang chatted 10 turns over two tabs and has two facts; Li, written last, said one thing."""
    with write():
        services.fact_put(owner_id="wang", key="name", value="王建国")
        services.fact_put(owner_id="wang", key="likes", value=["篮球"])
        for i in range(1, 11):
            services.turn_append(
                owner_id="wang",
                session_id="laptop" if i <= 4 else "phone",
                role="user",
                content=f"turn {i}",
            )
        services.turn_append(owner_id="li", session_id="web", role="user", content="hello")


def run(*args: str, **options: object) -> tuple[str, str]:
    """Run a command; return what it wrote to stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err, **options)
    return out.getvalue(), err.getvalue()


def seqs(owner_id: str) -> list[int]:
    return list(Turn.objects.filter(owner__external_id=owner_id).values_list("seq", flat=True))


def age_turns(owner_id: str, seq_upto: int, days: int) -> None:
    """Make the owner's turns up to ``seq_upto`` look ``days`` old."""
    Turn.objects.filter(owner__external_id=owner_id, seq__lte=seq_upto).update(
        created_at=timezone.now() - dt.timedelta(days=days)
    )


# memory_stats


def test_stats_counts_rows_and_cache_counters(chat):
    selectors.context_get(owner_id="wang")
    selectors.context_get(owner_id="wang")
    out, _ = run("memory_stats")
    table = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in out.splitlines())
    assert [table[name] for name in ("owners", "sessions", "turns", "facts")] == [
        "2",
        "3",
        "11",
        "2",
    ]
    assert table["cache"] == "ok"
    assert [table[name] for name in ("hits", "misses", "rehydrations")] == ["1", "1", "1"]
    assert table["hit rate"] == "50.0%"
    assert table["cache memory"].endswith(" bytes)") or table["cache memory"].endswith(" bytes")


def test_stats_json_reports_redis_memory_of_the_apps_keys(chat):
    selectors.context_get(owner_id="wang")
    stats = json.loads(run("memory_stats", "--json")[0])
    assert (stats["owners"], stats["turns"], stats["facts"]) == (2, 11, 2)
    assert stats["cache"]["cache"] == "ok"
    assert stats["cache"]["keys"] >= 1
    assert stats["cache"]["memory_bytes"] > 0
    assert stats["cache"]["counters"]["misses"] == 1


def test_stats_with_redis_down_still_counts_rows(chat, dead_cache):
    out, _ = run("memory_stats")
    table = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in out.splitlines())
    assert table == {"owners": "2", "sessions": "3", "turns": "11", "facts": "2", "cache": "down"}


def test_stats_without_a_cache(chat, no_cache):
    stats = json.loads(run("memory_stats", "--json")[0])
    assert stats["cache"]["cache"] == "disabled"


# memory_cache


def test_cache_warm_owner_rehydrates_its_copy(chat):
    out, _ = run("memory_cache", "warm", "--owner", "wang", "--owner", "li")
    assert out == "Warmed 2 owner(s).\n"
    assert selectors.context_get(owner_id="wang")["source"] == "cache"
    assert selectors.context_get(owner_id="li")["source"] == "cache"


def test_cache_warm_recent_takes_the_last_written_owners(chat):
    run("memory_cache", "warm", "--recent", "1")
    assert selectors.context_get(owner_id="li")["source"] == "cache"
    assert selectors.context_get(owner_id="wang")["source"] == "database"


def test_cache_warm_verbose_says_what_it_did(chat):
    run("memory_cache", "warm", "--owner", "wang")
    out, _ = run("memory_cache", "warm", "--owner", "wang", "--owner", "li", verbosity=2)
    assert out.splitlines() == ["wang: was warm", "li: rehydrated", "Warmed 2 owner(s)."]


def test_cache_warm_skips_unknown_owners(chat):
    out, err = run("memory_cache", "warm", "--owner", "nobody")
    assert err == "nobody: nothing stored, skipped.\n"
    assert out == "Warmed 0 owner(s).\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("warm", "--owner", "bad id!"), "Bad owner id 'bad id!'"),
        (("warm", "--recent", "0"), "--recent must be at least 1."),
        (("warm",), "one of the arguments --owner --recent is required"),
        (("warm", "--owner", "wang", "--recent", "2"), "not allowed with argument"),
        (("drop",), "the following arguments are required: --owner"),
        (("flush",), "invalid choice: 'flush'"),
    ],
)
def test_cache_rejects_bad_input(chat, args, message):
    with pytest.raises(CommandError, match=message):
        run("memory_cache", *args)


def test_cache_drop_makes_the_next_read_rehydrate(chat):
    selectors.context_get(owner_id="wang")
    out, _ = run("memory_cache", "drop", "--owner", "wang")
    assert out == "Dropped the cached copy of 1 owner(s).\n"
    assert selectors.context_get(owner_id="wang")["source"] == "database"


def test_cache_with_redis_down_is_an_error(chat, dead_cache):
    with pytest.raises(CommandError, match="The cache is down"):
        run("memory_cache", "warm", "--owner", "wang")


def test_cache_without_a_cache_is_an_error(chat, no_cache):
    with pytest.raises(CommandError, match="The cache is disabled"):
        run("memory_cache", "drop", "--owner", "wang")


# memory_forget


def test_forget_with_yes_forgets_and_drops_the_copy(chat, write):
    selectors.context_get(owner_id="wang")
    with write():
        out, _ = run("memory_forget", "wang", "--yes")
    assert out.splitlines() == [
        "wang: 10 turns in 2 sessions, 2 facts (2 versions).",
        "Forgot 1 owner(s).",
    ]
    assert not Owner.objects.filter(external_id="wang").exists()
    context = selectors.context_get(owner_id="wang")
    assert (context["turns"], context["facts"]) == ([], {})
    assert seqs("li") == [1]


def test_forget_asks_and_a_no_keeps_everything(chat, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("no\n"))
    out, _ = run("memory_forget", "wang")
    assert out.splitlines()[-1] == "Nothing forgotten."
    assert len(seqs("wang")) == 10


def test_forget_asks_and_a_yes_forgets(chat, monkeypatch, write):
    monkeypatch.setattr("sys.stdin", io.StringIO("yes\n"))
    with write():
        out, _ = run("memory_forget", "wang", "li")
    assert out.splitlines()[-1] == "Forgot 2 owner(s)."
    assert not Owner.objects.exists()


def test_forget_noinput_is_an_alias_of_yes(chat, write):
    with write():
        run("memory_forget", "li", "--noinput")
    assert not Owner.objects.filter(external_id="li").exists()


def test_forget_unknown_owner_asks_nothing(db):
    out, _ = run("memory_forget", "nobody")
    assert out == "nobody: nothing stored.\n"


def test_forget_rejects_a_bad_owner_id_before_forgetting_anyone(chat):
    with pytest.raises(CommandError, match="Bad owner id 'bad id!'"):
        run("memory_forget", "wang", "bad id!", "--yes")
    assert Owner.objects.count() == 2


# memory_prune


def test_prune_dry_run_prints_what_would_go_and_deletes_nothing(chat):
    out, _ = run("memory_prune", "--keep-last", "3", "--dry-run")
    assert out.splitlines() == [
        "wang: would delete 7 turn(s)",
        "Dry run: would delete 7 turn(s) of 1 owner(s).",
    ]
    assert len(seqs("wang")) == 10


def test_prune_keep_last_keeps_each_owners_newest_turns(chat, write):
    selectors.context_get(owner_id="wang")
    with write():
        out, _ = run("memory_prune", "--keep-last", "3", "--batch-size", "2")
    assert out.splitlines() == ["wang: deleted 7 turn(s)", "Deleted 7 turn(s) of 1 owner(s)."]
    assert seqs("wang") == [8, 9, 10]
    assert seqs("li") == [1]
    context = selectors.context_get(owner_id="wang")
    assert [turn["seq"] for turn in context["turns"]] == [8, 9, 10]
    sessions = dict(
        Session.objects.filter(owner__external_id="wang").values_list("session_id", "turn_count")
    )
    assert sessions == {"phone": 3}  # a session left with no turn goes


def test_prune_older_than_deletes_old_turns_of_every_owner(chat, write):
    age_turns("wang", 6, days=40)
    age_turns("li", 1, days=40)
    with write():
        out, _ = run("memory_prune", "--older-than", "30d")
    assert out.splitlines()[-1] == "Deleted 7 turn(s) of 2 owner(s)."
    assert seqs("wang") == [7, 8, 9, 10]
    assert seqs("li") == []
    assert [t["seq"] for t in selectors.context_get(owner_id="wang")["turns"]] == [7, 8, 9, 10]


def test_prune_with_both_criteria_deletes_only_turns_meeting_both(chat, write):
    age_turns("wang", 9, days=40)
    with write():
        run("memory_prune", "--older-than", "30d", "--keep-last", "5")
    assert seqs("wang") == [6, 7, 8, 9, 10]
    assert seqs("li") == [1]


def test_prune_only_the_owners_named(chat, write):
    age_turns("wang", 10, days=2)
    age_turns("li", 1, days=2)
    with write():
        run("memory_prune", "--older-than", "1d", "--owner", "li")
    assert len(seqs("wang")) == 10
    assert seqs("li") == []


def test_prune_keeps_seqs_growing_after_it(chat, write):
    with write():
        run("memory_prune", "--keep-last", "0", "--owner", "wang")
        turn = services.turn_append(owner_id="wang", session_id="s", role="user", content="next")
    assert turn.seq == 11
    assert [t["seq"] for t in selectors.context_get(owner_id="wang")["turns"]] == [11]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "Give --older-than, --keep-last, or both."),
        (("--older-than", "30"), "give a positive number and a unit"),
        (("--older-than", "0d"), "give a positive number and a unit"),
        (("--older-than", "3 days"), "give a positive number and a unit"),
        (("--keep-last", "-1"), "--keep-last must be 0 or more."),
        (("--keep-last", "x"), "invalid int value"),
        (("--keep-last", "5", "--batch-size", "0"), "--batch-size must be at least 1."),
        (("--keep-last", "5", "--owner", "a b"), "Bad owner id 'a b'"),
    ],
)
def test_prune_rejects_bad_input(chat, args, message):
    with pytest.raises(CommandError, match=message):
        run("memory_prune", *args)
    assert len(seqs("wang")) == 10


# memory_fact_keys


def dot_facts(**keys_by_owner: list[str]) -> None:
    """Facts whose key is made only of dots, as stored before such keys were refused: written
    through the service under another key, then renamed past the services' rule."""
    from memory.models import Fact

    for owner_id, keys in keys_by_owner.items():
        for i, key in enumerate(keys):
            services.fact_put(owner_id=owner_id, key=f"tmp{i}", value=f"{owner_id} {key}")
            Fact.objects.filter(owner__external_id=owner_id, key=f"tmp{i}").update(key=key)


def test_fact_keys_lists_the_keys_made_only_of_dots(chat):
    dot_facts(wang=["..", "."], li=["..."])
    out, _ = run("memory_fact_keys")
    assert out.splitlines() == [
        "li ...",
        "wang .",
        "wang ..",
        "3 fact(s) with a key made only of dots.",
    ]
    assert {f["key"] for f in selectors.fact_list(owner_id="wang")} >= {".", ".."}


def test_fact_keys_rename_renames_them_with_history_and_no_collision(chat, write):
    from django.core.checks import run_checks

    with write():
        services.fact_put(owner_id="wang", key="dot", value="taken")
    dot_facts(wang=[".", ".."], li=["...", "." * 64])
    selectors.context_get(owner_id="wang")  # a cached copy, brought up to date after commit
    with write():
        out, _ = run("memory_fact_keys", "--rename")
    assert out.splitlines() == [
        "li: ... -> dots-3",
        f"li: {'.' * 64} -> dots-64",
        "wang: . -> dot-2",
        "wang: .. -> dotdot",
        "Renamed 4 fact(s).",
    ]
    facts = {f["key"]: f["value"] for f in selectors.fact_list(owner_id="wang")}
    assert facts == {"dot": "taken", "dot-2": "wang .", "dotdot": "wang ..", "likes": ["篮球"],
                     "name": "王建国"}  # fmt: skip
    context = selectors.context_get(owner_id="wang")
    assert context["source"] == "cache"
    assert context["facts"] == facts
    # NOTE: the old key's earlier versions are those of the key it was stored under (tmp1).
    old = selectors.fact_history(owner_id="wang", key="..").results
    assert [(v["version"], v["deleted"]) for v in old] == [(2, True)]
    new = selectors.fact_history(owner_id="wang", key="dotdot").results
    assert [(v["version"], v["value"]) for v in new] == [(1, "wang ..")]
    assert not [m for m in run_checks(databases=["default"]) if m.id == "memory.W010"]
    assert run("memory_fact_keys", "--rename")[0] == "Renamed 0 fact(s).\n"


# memory_forget_idle


def idle(owner_id: str, days: int) -> None:
    """Make the owner look unwritten for ``days``."""
    Owner.objects.filter(external_id=owner_id).update(
        updated_at=timezone.now() - dt.timedelta(days=days)
    )


def test_forget_idle_forgets_owners_of_the_prefix_idle_longer_and_drops_their_copy(write):
    with write():
        for owner_id in ("anon-old", "anon-new", "wang"):
            services.turn_append(owner_id=owner_id, session_id="s", role="user", content="hi")
    for owner_id in ("anon-old", "wang"):
        idle(owner_id, 40)
    selectors.context_get(owner_id="anon-old")
    assert selectors.context_get(owner_id="anon-old")["source"] == "cache"
    out, _ = run("memory_forget_idle", "--prefix", "anon-", "--idle-for", "30d", "--dry-run")
    assert "1 owner(s)" in out
    assert Owner.objects.filter(external_id="anon-old").exists()
    with write():
        out, _ = run("memory_forget_idle", "--prefix", "anon-", "--idle-for", "30d")
    assert "Forgot 1 owner(s)" in out
    assert set(Owner.objects.values_list("external_id", flat=True)) == {"anon-new", "wang"}
    assert selectors.context_get(owner_id="anon-old")["turns"] == []


def test_forget_idle_keeps_an_owner_written_meanwhile(write):
    with write():
        services.turn_append(owner_id="anon-1", session_id="s", role="user", content="hi")
    idle("anon-1", 40)
    with write():
        services.turn_append(owner_id="anon-1", session_id="s", role="user", content="back")
    assert ops.owners_forget_idle(prefix="anon-", idle_for=dt.timedelta(days=30)) == 0
    assert seqs("anon-1") == [1, 2]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--idle-for", "30d"], "--prefix"),
        (["--prefix", "", "--idle-for", "30d"], "--prefix"),
        (["--prefix", "anon-"], "--idle-for"),
        (["--prefix", "anon-", "--idle-for", "soon"], "--idle-for"),
        (["--prefix", "anon-", "--idle-for", "0d"], "--idle-for"),
    ],
)
def test_forget_idle_rejects_bad_input(chat, args, message):
    with pytest.raises(CommandError, match=message):
        run("memory_forget_idle", *args)
    assert Owner.objects.count() == 2
