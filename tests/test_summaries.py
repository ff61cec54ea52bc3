"""Summaries (issue 26, part 1): the built-in and LLM summarizers, the trigger an append decides
in its own statement, the refresh in bounded batches (one at a time per owner, restartable after
a worker killed mid-summary), the summary as part of the owner's memory (API, cache, forget,
link) and in the context's messages; on real Postgres and Redis."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.cache import caches
from django.core.management import call_command
from django.db import connection
from django_tasks_db.models import DBTaskResult

from memory import ops, selectors, services
from memory.models import Owner, PendingSummary, Summary
from memory.payloads import TurnPayload
from memory.recall import LLMSummarizer, summarize
from memory.recall.summarizer import MAX_SUMMARY_CHARS
from memory.services import summaries, turns
from memory.tokens import estimate_counter
from tests import instance

pytestmark = pytest.mark.django_db


def turn(content: str, role: str = "user", seq: int = 1) -> TurnPayload:
    return {
        "seq": seq,
        "session_id": "s",
        "role": role,
        "content": content,
        "metadata": {},
        "created_at": "2026-01-01T00:00:00Z",
    }


def append(content: str, owner_id: str = "wang", role: str = "user") -> Any:
    return services.turn_append(owner_id=owner_id, session_id="s", role=role, content=content)


# A summarizer that writes down which turns it was given: the summary says, in order, every seq
# summarised, so a turn summarised twice or skipped shows.
def seqs_summarizer(previous: str | None, batch: Sequence[TurnPayload]) -> str:
    done = previous.split() if previous else []
    return " ".join([*done, *(str(t["seq"]) for t in batch)])


CALLS: list[list[int]] = []


def recording_summarizer(previous: str | None, batch: Sequence[TurnPayload]) -> str:
    CALLS.append([t["seq"] for t in batch])
    return seqs_summarizer(previous, batch)


# The built-in summarizer ---------------------------------------------------------------------


def test_the_built_in_summarizer_keeps_stated_facts_in_english_and_chinese():
    conversation = [
        turn("Hello! My name is Wang Jianguo. Can you help me plan a trip?"),
        turn("Of course. Where would you like to go?", role="assistant"),
        turn("I adopted a corgi called Mochi last month, so somewhere dog-friendly."),
        turn("What's the weather like in Hangzhou?"),
        turn("我喜欢打篮球。你觉得呢？"),
        turn("ok"),
    ]
    text = summarize(None, conversation)
    assert text.splitlines() == [
        "- My name is Wang Jianguo.",
        "- I adopted a corgi called Mochi last month, so somewhere dog-friendly.",
        "- 我喜欢打篮球。",
    ]
    # Deterministic, and the previous summary is kept as it goes on.
    assert summarize(None, conversation) == text
    assert summarize(text, [turn("I live in Shanghai")]) == text + "\n- I live in Shanghai"


def test_the_built_in_summary_is_bounded_and_keeps_facts_over_chatter():
    chatter = [turn(f"I think option {i} sounds fine for the plan we made.") for i in range(300)]
    text = summarize(None, [turn("My name is Wang Jianguo."), *chatter, turn("我喜欢打篮球")])
    assert len(text) <= MAX_SUMMARY_CHARS
    assert "- My name is Wang Jianguo." in text.splitlines()
    assert "- 我喜欢打篮球" in text.splitlines()
    # A later name outranks the earlier one.
    renamed = summarize(text, [turn("Actually, my name is Wang Xiaoming.")])
    lines = renamed.splitlines()
    assert "- Actually, my name is Wang Xiaoming." in lines


def test_the_llm_summarizer_asks_its_model_and_refuses_an_empty_reply():
    prompts: list[str] = []

    def complete(prompt: str) -> str:
        prompts.append(prompt)
        return "  The user is Wang Jianguo; he has a corgi, Mochi.  "

    summarizer = LLMSummarizer(complete, max_chars=30)
    assert summarizer("Earlier: none", [turn("My name is Wang Jianguo")]) == (
        "The user is Wang Jianguo; he h"
    )
    assert "Earlier: none" in prompts[0] and "user: My name is Wang Jianguo" in prompts[0]
    with pytest.raises(ValueError):
        LLMSummarizer(lambda prompt: " ")(None, [turn("hi")])


# The trigger -----------------------------------------------------------------------------------


@pytest.mark.parametrize("fast", [True, False])
def test_an_append_records_and_enqueues_a_refresh_once_the_tokens_pass_the_threshold(
    memory_settings, django_capture_on_commit_callbacks, fast
):
    # NOTE: the default estimate: "three" counts 2, the other words 1 each.
    with memory_settings(SUMMARY_AFTER_TOKENS=8):
        for content in ["one two", "three four", "five"]:
            with django_capture_on_commit_callbacks(execute=True):
                turns._turn_append("wang", "s", "user", content, None, None, fast=fast)
        owner = Owner.objects.get(external_id="wang")
        assert owner.summary_tokens == 6
        assert not PendingSummary.objects.exists()
        assert not DBTaskResult.objects.exists()
        for content in ["six", "seven eight", "nine"]:
            with django_capture_on_commit_callbacks(execute=True):
                turns._turn_append("wang", "s", "user", content, None, None, fast=fast)
    # One record and one task, however many appends pass the threshold before it runs.
    assert PendingSummary.objects.filter(owner=owner).count() == 1
    assert DBTaskResult.objects.count() == 1
    assert Owner.objects.get(pk=owner.pk).summary_tokens == 12


def test_nothing_is_counted_with_summaries_off(memory_settings):
    with memory_settings(SUMMARIZER=None, SUMMARY_AFTER_TOKENS=1):
        append("hello there")
    assert Owner.objects.get(external_id="wang").summary_tokens == 0
    assert not PendingSummary.objects.exists()


# The refresh -----------------------------------------------------------------------------------


def test_a_refresh_summarises_in_bounded_batches_and_ends_its_record(memory_settings, write):
    CALLS.clear()
    with memory_settings(
        SUMMARIZER="tests.test_summaries.recording_summarizer",
        SUMMARY_AFTER_TOKENS=5,
        SUMMARY_BATCH_TURNS=3,
    ):
        with write():
            for i in range(10):
                append(f"turn {i}")
        assert PendingSummary.objects.count() == 1
        with write():
            assert ops.summary_refresh(owner_id="wang") == 4
    assert CALLS == [[1, 2, 3], [4, 5, 6], [7, 8, 9], [10]]
    summary = Summary.objects.get(owner__external_id="wang")
    assert (summary.text, summary.through_seq) == ("1 2 3 4 5 6 7 8 9 10", 10)
    assert Owner.objects.get(external_id="wang").summary_tokens == 0
    assert not PendingSummary.objects.exists()
    # Nothing new: a second refresh summarises nothing.
    assert ops.summary_refresh(owner_id="wang") == 0
    assert ops.summary_refresh(owner_id="nobody") == 0


def test_a_refresh_whose_summary_moved_meanwhile_writes_nothing_twice(memory_settings, write):
    """Two refreshes of one owner at once (here the second inside the first's summarizer call,
    which the advisory lock lets through: the same session): every turn is summarised once."""
    calls: list[list[int]] = []

    def nested(previous: str | None, batch: Sequence[TurnPayload]) -> str:
        calls.append([t["seq"] for t in batch])
        if len(calls) == 1:
            summaries._refresh_locked(Owner.objects.get(external_id="wang").pk, seqs_summarizer)
        return seqs_summarizer(previous, batch)

    with memory_settings(SUMMARY_AFTER_TOKENS=1, SUMMARY_BATCH_TURNS=2):
        with write():
            for i in range(4):
                append(f"turn {i}")
        with write():
            summaries._refresh_locked(Owner.objects.get(external_id="wang").pk, nested)
    assert Summary.objects.get(owner__external_id="wang").text == "1 2 3 4"


def test_a_refresh_waits_for_none_while_another_process_holds_the_owners(memory_settings, write):
    with memory_settings(SUMMARIZER="tests.test_summaries.seqs_summarizer", SUMMARY_AFTER_TOKENS=1):
        with write():
            append("hello")
        owner = Owner.objects.get(external_id="wang")
        key = [summaries.LOCK_CLASS, owner.pk % 2147483647]
        with psycopg.connect(instance.database_url(), autocommit=True) as other:
            other.execute("SELECT pg_advisory_lock(%s, %s)", key)
            assert ops.summary_refresh(owner_id="wang") == 0
            assert not Summary.objects.exists()
            other.execute("SELECT pg_advisory_unlock(%s, %s)", key)
        with write():
            assert ops.summary_refresh(owner_id="wang") == 1
    assert Summary.objects.get(owner=owner).text == "1"


def test_a_long_conversation_keeps_the_users_stated_facts(memory_settings, write):
    with memory_settings(SUMMARY_AFTER_TOKENS=50, SUMMARY_BATCH_TURNS=40, FACT_EXTRACTOR=None):
        with write():
            append("Hi! My name is Wang Jianguo.")
            append("What is the capital of France?")
            append("I adopted a corgi called Mochi.")
            append("我喜欢打篮球。")
            for i in range(200):
                append(f"Could you tell me more about topic {i}?")
                append(f"Here is more about topic {i}: it is interesting.", role="assistant")
        with write():
            assert ops.summary_refresh(owner_id="wang") > 1
    summary = selectors.summary_get(owner_id="wang")
    assert summary is not None and summary["through_seq"] == 404
    assert summary["text"].splitlines() == [
        "- My name is Wang Jianguo.",
        "- I adopted a corgi called Mochi.",
        "- 我喜欢打篮球。",
    ]


KILLED_MID_SUMMARY = textwrap.dedent(
    """
    import django

    django.setup()
    from django.conf import settings

    from memory import ops

    settings.MEMORY = {
        **settings.MEMORY,
        "SUMMARIZER": "tests.test_summaries.blocking_summarizer",
        "SUMMARY_BATCH_TURNS": 2,
    }
    ops.summary_refresh(owner_id="wang")
    """
)


def blocking_summarizer(previous: str | None, batch: Sequence[TurnPayload]) -> str:
    """``seqs_summarizer``, but its second call announces itself and hangs (to be killed)."""
    if previous:
        Path(os.environ["MEMORY_TEST_SUMMARY_MARK"]).write_text(previous)
        time.sleep(600)
    return seqs_summarizer(previous, batch)


@pytest.mark.faults
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_summary_leaves_a_refresh_that_completes_once(
    memory_settings, tmp_path
):
    with memory_settings(SUMMARY_AFTER_TOKENS=1):
        for i in range(5):
            append(f"turn {i}")
    mark = tmp_path / "mark"
    worker = subprocess.Popen(
        [sys.executable, "-c", KILLED_MID_SUMMARY],
        cwd=instance.ROOT,
        env={**instance.environment(), "MEMORY_TEST_SUMMARY_MARK": str(mark)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not mark.exists():
            assert worker.poll() is None, worker.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
        worker.communicate()
    # NOTE: the server lets the killed worker's advisory lock go once it sees the connection
    # closed; wait for that (a refresh started before then would find the owner busy).
    key = [summaries.LOCK_CLASS, Owner.objects.get(external_id="wang").pk % 2147483647]
    deadline = time.monotonic() + 60
    while True:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                " AND classid = %s::bigint AND objid = %s::bigint",
                key,
            )
            if cursor.fetchone()[0] == 0:
                break
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # Killed in its second batch: the first stands, the second was never written.
    summary = Summary.objects.get(owner__external_id="wang")
    assert (summary.text, summary.through_seq) == ("1 2", 2)
    assert PendingSummary.objects.filter(owner__external_id="wang").exists()
    # The server let the dead worker's lock go: a restart runs, and summarises each turn once.
    with memory_settings(SUMMARIZER="tests.test_summaries.seqs_summarizer", SUMMARY_BATCH_TURNS=2):
        call_command("memory_summarize", "wang")
    summary = Summary.objects.get(owner__external_id="wang")
    assert (summary.text, summary.through_seq) == ("1 2 3 4 5", 5)
    assert not PendingSummary.objects.exists()
    assert selectors.summary_get(owner_id="wang")["text"] == "1 2 3 4 5"


def test_the_pending_command_enqueues_the_records_past_their_grace(memory_settings, write):
    with memory_settings(SUMMARY_AFTER_TOKENS=1), write():
        append("hello")
    assert DBTaskResult.objects.count() == 1
    call_command("memory_summarize", "--pending", "--older-than", "0")
    assert DBTaskResult.objects.count() == 2
    call_command("memory_summarize", "--pending")
    assert DBTaskResult.objects.count() == 2


# Part of the owner's memory --------------------------------------------------------------------


@pytest.fixture
def summarised(memory_settings, write):
    """Wang's 6 turns, the first 4 summarised (``seqs_summarizer``)."""
    with memory_settings(SUMMARIZER="tests.test_summaries.seqs_summarizer"):
        with write():
            for i in range(4):
                append(f"turn {i + 1}")
        with write():
            assert ops.summary_refresh(owner_id="wang") == 1
        with write():
            append("turn 5")
            append("turn 6", role="assistant")
        yield


def test_forget_leaves_no_summary_in_the_database_or_the_cache(summarised, write, redis_client):
    assert selectors.context_messages(owner_id="wang", turns=1)["summary_through_seq"] == 4
    assert selectors.context_messages(owner_id="wang", turns=1)["source"] == "cache"
    with write():
        services.memory_forget(owner_id="wang")
    assert not Summary.objects.exists()
    assert not PendingSummary.objects.exists()
    prefix = f"{settings.MEMORY['KEY_PREFIX']}:"
    for key in redis_client.scan_iter(match=f"{prefix}*"):
        assert not redis_client.hexists(key, "sum")
    assert selectors.summary_get(owner_id="wang") is None


def test_a_link_rebuilds_the_targets_summary_over_the_turns_it_gained(memory_settings, write):
    with memory_settings(SUMMARIZER="tests.test_summaries.seqs_summarizer", SUMMARY_AFTER_TOKENS=4):
        with write():
            for i in range(3):
                append(f"anon {i}", owner_id="anon-7f3a")
        with write():
            ops.summary_refresh(owner_id="anon-7f3a")
        with write():
            append("hello", owner_id="wang")
        assert Summary.objects.filter(owner__external_id="anon-7f3a").exists()
        with write():
            services.memory_link(owner_id="wang", from_owner_id="anon-7f3a")
        assert not Summary.objects.filter(owner__external_id="anon-7f3a").exists()
        wang = Owner.objects.get(external_id="wang")
        # The anonymous owner's summary went with it; wang's refresh is due over all 4 turns.
        assert PendingSummary.objects.filter(owner=wang).exists()
        assert wang.summary_tokens == 8
        with write():
            ops.summary_refresh(owner_id="wang")
    assert selectors.summary_get(owner_id="wang")["text"] == "1 2 3 4"
    assert selectors.summary_get(owner_id="wang")["through_seq"] == 4


def test_the_api_answers_the_summary_or_404(summarised, owner_client, other_client, anon_client):
    response = owner_client.get("/api/memory/users/wang/summary/")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"text", "through_seq", "tokens", "updated_at"}
    assert (body["text"], body["through_seq"]) == ("1 2 3 4", 4)
    assert body["tokens"] == 4 and body["updated_at"].endswith("Z")
    assert other_client.get("/api/memory/users/wang/summary/").status_code in (403, 404)
    assert anon_client.get("/api/memory/users/wang/summary/").status_code in (401, 403)


def test_the_api_answers_404_while_there_is_none_and_4xx_for_bad_ids(service_client):
    assert service_client.get("/api/memory/users/li/summary/").status_code == 404
    for bad in ["bad%20id", "x" * 129, "%00"]:
        status = service_client.get(f"/api/memory/users/{bad}/summary/").status_code
        assert 400 <= status < 500


def test_context_messages_carry_the_summary_where_the_turns_do_not_reach_it(summarised):
    # The last 2 turns (5, 6) do not reach back to through_seq 4: facts, summary, turns.
    sent = selectors.context_messages(owner_id="wang", turns=2)
    assert sent["summary_through_seq"] == 4 and sent["recalled"] == []
    assert [m["role"] for m in sent["messages"]] == ["system", "system", "user", "assistant"]
    assert sent["messages"][1]["content"] == (
        "Summary of the earlier conversation (turns 1-4):\n1 2 3 4"
    )
    # The last 3 do (turn 4): no summary.
    sent = selectors.context_messages(owner_id="wang", turns=3)
    assert sent["summary_through_seq"] is None
    assert [m["content"] for m in sent["messages"][1:]] == ["turn 4", "turn 5", "turn 6"]


def test_context_messages_fit_the_summary_within_max_tokens(summarised, write):
    system = selectors.context_messages(owner_id="wang", turns=0)["messages"][0]["content"]
    facts = estimate_counter(system)
    everything = selectors.context_messages(owner_id="wang", max_tokens=10_000)
    # With room for every turn, they reach back to the summary: none is sent.
    assert everything["summary_through_seq"] is None
    assert len(everything["messages"]) == 7
    long = " ".join(["word"] * 40)
    with write():
        append(long)
        append(long, role="assistant")
    # Room for one long turn and the summary (about 20 tokens), not for two long turns.
    sent = selectors.context_messages(owner_id="wang", max_tokens=facts + 70)
    assert sent["summary_through_seq"] == 4
    assert [m["content"] for m in sent["messages"][2:]] == [long]
    assert sent["tokens"] <= facts + 70
    for budget in range(facts, facts + 100):
        sent = selectors.context_messages(owner_id="wang", max_tokens=budget)
        assert sent["tokens"] <= budget
        contents = [m["content"] for m in sent["messages"][1:]]
        if sent["summary_through_seq"] is not None:
            assert contents[0].startswith("Summary of the earlier conversation")
            assert "turn 4" not in contents
        else:
            assert not any(c.startswith("Summary of") for c in contents)


def test_the_api_context_messages_have_the_summary(summarised, owner_client):
    response = owner_client.get("/api/memory/users/wang/context/messages/?turns=2")
    assert response.status_code == 200
    assert response.json()["summary_through_seq"] == 4
    assert response.json()["recalled"] == []


def test_a_refresh_replaces_the_cached_summary_and_a_flush_rehydrates_it(
    own_redis, summarised, memory_settings, write
):
    first = selectors.context_messages(owner_id="wang", turns=1)
    again = selectors.context_messages(owner_id="wang", turns=1)
    assert again["source"] == "cache" and again["messages"] == first["messages"]
    assert again["summary_through_seq"] == 4
    with write():
        append("turn 7")
    with write():
        assert ops.summary_refresh(owner_id="wang") == 1
    # The refresh dropped the copy: the next read is the database's, then cached again.
    read = selectors.context_messages(owner_id="wang", turns=0)
    assert (read["source"], read["summary_through_seq"]) == ("database", 7)
    summary = selectors.summary_get(owner_id="wang")
    assert summary is not None and summary["text"] == "1 2 3 4 5 6 7"
    cached = selectors.context_messages(owner_id="wang", turns=0)
    assert cached["source"] == "cache" and cached["messages"] == read["messages"]
    caches["own"].client.get_client(write=True).flushdb()
    flushed = selectors.context_messages(owner_id="wang", turns=0)
    assert flushed["source"] == "database" and flushed["messages"] == read["messages"]
    assert selectors.summary_get(owner_id="wang") == summary


def test_the_async_twin_reads_the_same_summary(summarised):
    assert async_to_sync(selectors.asummary_get)(owner_id="wang") == selectors.summary_get(
        owner_id="wang"
    )
    assert async_to_sync(selectors.asummary_get)(owner_id="nobody") is None


def test_the_summary_survives_a_dead_cache(summarised, dead_cache):
    summary = selectors.summary_get(owner_id="wang")
    assert summary is not None and summary["through_seq"] == 4


def _check_ids(**memory: Any) -> list[str]:
    from django.test import override_settings

    from memory.checks import check_memory_settings

    with override_settings(MEMORY={**settings.MEMORY, **memory}):
        return [message.id for message in check_memory_settings()]


def test_checks_name_a_bad_summarizer_and_a_refresh_run_in_the_request():
    assert "memory.E024" in _check_ids(SUMMARIZER="no.such.summarizer")
    assert "memory.E024" in _check_ids(SUMMARIZER="memory.recall.summarizer.MAX_SUMMARY_CHARS")
    assert "memory.E002" in _check_ids(SUMMARY_AFTER_TOKENS=0)
    assert not {"memory.E024", "memory.W012", "memory.W013"} & set(_check_ids())
    assert not {"memory.E024", "memory.W013"} & set(_check_ids(SUMMARIZER=None))
    from django.test import override_settings

    immediate = {"default": {"BACKEND": "django_tasks.backends.immediate.ImmediateBackend"}}
    with override_settings(TASKS=immediate):
        assert "memory.W013" in _check_ids()
        assert "memory.W013" not in _check_ids(SUMMARIZER=None)
