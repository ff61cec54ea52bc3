"""Tests of ``manage.py memory_eval`` (memory.evaluation) on small files of LongMemEval's and
LoCoMo's formats written here, on the real PostgreSQL (and pgvector for the modes by meaning),
and of the quality set of ``bench/quality.py``."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from memory.evaluation import metrics
from memory.models import Owner, Turn

pytestmark = pytest.mark.django_db

E5 = "memory.recall.embedders.multilingual_e5"


def _session(*pairs: tuple[str, str], answer: int | None = None) -> list[dict[str, Any]]:
    turns = []
    for i, (user, assistant) in enumerate(pairs):
        turns.append({"role": "user", "content": user, "has_answer": i == answer})
        turns.append({"role": "assistant", "content": assistant, "has_answer": False})
    return turns


FILLER = [
    ("How do I keep basil alive on a windowsill?", "Water it when the top of the soil is dry."),
    ("What's a quick pasta sauce?", "Garlic, chilli and olive oil with some pasta water."),
    ("Any tips for a job interview?", "Prepare three stories about problems you solved."),
]


def longmemeval_file(tmp_path: Path) -> Path:
    """Two questions in LongMemEval's format: one answerable, one not (``_abs``)."""
    sessions = [
        _session(FILLER[0], FILLER[1]),
        _session(
            FILLER[2],
            ("My greyhound Pepper loves the beach at Camber Sands.", "What a lovely dog!"),
            answer=1,
        ),
        _session(FILLER[1], FILLER[0]),
    ]
    base = {
        "question_type": "single-session-user",
        "answer": "Pepper",
        "haystack_session_ids": ["sharegpt_a", "answer_b1", "ultrachat_c"],
        "haystack_dates": [
            "2023/05/20 (Sat) 02:21",
            "2023/05/22 (Mon) 10:05",
            "2023/05/25 (Thu) 18:40",
        ],
        "haystack_sessions": sessions,
    }
    data = [
        {
            **base,
            "question_id": "q1",
            "question": "Which beach does my greyhound love?",
            "question_date": "2023/05/30 (Tue) 23:40",
            "answer_session_ids": ["answer_b1"],
        },
        {
            **base,
            "question_id": "q2_abs",
            "question_type": "single-session-user",
            "question": "What is the name of my parrot?",
            "question_date": "2023/05/30 (Tue) 23:40",
            "answer_session_ids": [],
            "haystack_sessions": [_session(FILLER[0]), _session(FILLER[1]), _session(FILLER[2])],
        },
    ]
    path = tmp_path / "longmemeval_small.json"
    path.write_text(json.dumps(data))
    return path


def locomo_file(tmp_path: Path) -> Path:
    """One conversation in LoCoMo's format, two sessions, three questions (one whose evidence
    names no turn of the conversation)."""
    conversation = {
        "speaker_a": "Ines",
        "speaker_b": "Tomas",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ines", "dia_id": "D1:1", "text": "Hi Tomas, how was your week?"},
            {"speaker": "Tomas", "dia_id": "D1:2", "text": "Busy! I repaired my old canoe."},
            {
                "speaker": "Ines",
                "dia_id": "D1:3",
                "text": "I started pottery classes on Thursdays at the community hall.",
            },
            {"speaker": "Tomas", "dia_id": "D1:4", "text": "That sounds relaxing."},
        ],
        "session_2_date_time": "7:10 pm on 20 May, 2023",
        "session_2": [
            {
                "speaker": "Tomas",
                "dia_id": "D2:1",
                "text": "We took the canoe out on the lake on Sunday.",
                "blip_caption": "a photo of a red canoe on a lake",
            },
            {"speaker": "Ines", "dia_id": "D2:2", "text": "Lovely. My cat knocked over a vase."},
        ],
        "session_3_date_time": "9:00 am on 1 June, 2023",
    }
    qa = [
        {
            "question": "What class did Ines start?",
            "answer": "pottery",
            "evidence": ["D1:3"],
            "category": 4,
        },
        {
            "question": "Where did Tomas take his canoe?",
            "answer": "the lake",
            "evidence": ["D1:2", "D2:1"],
            "category": 1,
        },
        {"question": "What did Ines bake?", "evidence": ["D9:9"], "category": 5},
        {"question": "What vase did Tomas break?", "evidence": ["D2:2"], "category": 5},
    ]
    path = tmp_path / "locomo_small.json"
    path.write_text(json.dumps([{"sample_id": "conv-x", "conversation": conversation, "qa": qa}]))
    return path


def run(*args: str) -> str:
    out = StringIO()
    call_command("memory_eval", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def row(output: str, system: str) -> list[str]:
    line = next(x for x in output.splitlines() if x.startswith(f"| {system} |"))
    return [cell.strip() for cell in line.strip("|").split("|")][1:]


def test_a_longmemeval_file_is_measured_by_words_and_its_owners_forgotten(tmp_path):
    output = run(str(longmemeval_file(tmp_path)), "--mode", "text", "--k", "1,5")
    assert "1 questions with evidence over 2 conversations (1 without" in output
    header = next(x for x in output.splitlines() if x.startswith("| system |"))
    assert "turn any@1" in header and "session all@5" in header
    # The words are said together in the evidence turn only: found first, at both levels.
    assert row(output, "text")[:4] == ["1.000", "1.000", "1.000", "1.000"]
    assert "single-session-user" in output
    assert not Owner.objects.filter(external_id__startswith="eval-").exists()


def test_keep_keeps_the_owners_under_the_prefix(tmp_path):
    run(str(longmemeval_file(tmp_path)), "--mode", "text", "--prefix", "t-", "--keep")
    owners = sorted(Owner.objects.values_list("external_id", flat=True))
    assert owners == ["t-q1", "t-q2_abs"]
    turns = list(
        Turn.objects.filter(owner__external_id="t-q1")
        .order_by("seq")
        .values_list("session_id", "created_at")
    )
    # In the order they were said, each session on its date.
    assert [s for s, _ in turns[::2]] == ["sharegpt_a"] * 2 + ["answer_b1"] * 2 + [
        "ultrachat_c"
    ] * 2
    assert turns[4][1].isoformat().startswith("2023-05-22T10:05")


def test_reuse_searches_the_kept_owners_without_loading_them_again(tmp_path):
    path = str(longmemeval_file(tmp_path))
    first = run(path, "--mode", "text", "--keep")
    before = dict(Owner.objects.values_list("external_id", "stamp"))
    again = run(path, "--mode", "text", "--reuse")
    assert row(again, "text") == row(first, "text")
    # Nothing was written to the kept owners (their stamps did not move), and they stay.
    assert dict(Owner.objects.values_list("external_id", "stamp")) == before


def test_a_locomo_file_is_measured_in_every_mode_beside_the_baselines(
    tmp_path, memory_settings, request
):
    request.getfixturevalue("pgvector_required")
    with memory_settings(EMBEDDER=E5):
        output = run(str(locomo_file(tmp_path)), "--baselines", "--limit", "3", "--ndcg")
    # The adversarial question (category 5) is shown by category only.
    assert "2 questions with evidence over 1 conversations (0 without, 1 skipped, 1 of " in output
    header = next(x for x in output.splitlines() if x.startswith("| system |"))
    assert "evidence@10" in header and "turn ndcg@5" in header
    for system in ("text", "semantic", "hybrid", "bm25", "dense", "bm25+dense"):
        assert len(row(output, system)) == header.count("|") - 2
    assert "evidence recall@10 by category:" in output
    assert [x.split("|")[1].strip() for x in output.splitlines() if x.startswith("| 5 |")] == ["5"]
    # Everything of a two-session conversation is within the top 10: all evidence found.
    assert row(output, "dense")[-1] == "1.000"
    assert not Owner.objects.filter(external_id__startswith="eval-").exists()


@pytest.fixture
def pgvector_required(db: None) -> None:
    from django.db import connection

    from memory.recall import vectors

    vectors.vectors_forget_ready()
    if not vectors.vectors_ready(connection.alias):
        pytest.skip("pgvector is not installed in this PostgreSQL: run scripts/ensure-pgvector")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "is not JSON"),
        ('{"a": 1}', "Expected a JSON list"),
        ('[{"a": 1}]', "Neither format"),
        ('[{"haystack_sessions": []}]', "is not a LongMemEval question"),
    ],
)
def test_a_file_of_neither_format_is_refused(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(CommandError, match=message):
        run(str(path), "--mode", "text")
    assert not Owner.objects.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--k", "0"], "from 1 to 100"),
        (["--k", "5,x"], "numbers such as"),
        (["--limit", "0"], "at least 1"),
        (["--prefix", ""], "must not be empty"),
        (["--mode", "semantic"], "Search by meaning is off"),
    ],
)
def test_bad_options_are_refused(tmp_path, args, message):
    with pytest.raises(CommandError, match=message):
        run(str(longmemeval_file(tmp_path)), *args)
    assert not Owner.objects.exists()


def test_the_metrics_are_longmemevals():
    corpus = ["s1_1", "s1_2", "s2_1", "s2_2", "s3_1"]
    ranking = ["s2_2", "s1_1", "s3_1", "s2_1"]
    assert metrics.retrieval_scores(ranking=ranking, correct={"s2_1"}, corpus=corpus, k=1) == (
        0.0,
        0.0,
        0.0,
    )
    any_, all_, ndcg = metrics.retrieval_scores(
        ranking=ranking, correct={"s1_1", "s2_1"}, corpus=corpus, k=4
    )
    assert (any_, all_) == (1.0, 1.0)
    # DCG: the second place counts 1/log2(2), the fourth 1/log2(4); the ideal is 1 + 1.
    assert ndcg == pytest.approx((1 + 0.5) / 2)
    session_of = {doc: doc.split("_")[0] for doc in corpus}
    # k=2 sessions needs the top 2 turns (s2, s1): s3 is not among them.
    assert metrics.session_scores(
        ranking=ranking, correct={"s3"}, corpus=corpus, session_of=session_of, k=2
    )[:2] == (0.0, 0.0)
    assert metrics.session_scores(
        ranking=["s2_2", "s2_1", "s1_1"], correct={"s1"}, corpus=corpus, session_of=session_of, k=2
    )[:2] == (1.0, 1.0)
    assert metrics.evidence_recall(ranking=ranking, evidence={"s1_1", "s1_2"}, k=3) == 0.5


def test_bm25_ranks_by_rare_words_in_english_and_chinese():
    bm25 = metrics.Bm25(
        [
            ("a", "I walk the dog every morning"),
            ("b", "My greyhound Pepper loves the beach"),
            ("c", "我周末喜欢去公园跑步"),
            ("d", "我家的猫叫豆豆"),
        ]
    )
    assert bm25.ranking("what is my greyhound called?", 10) == ["b"]
    assert bm25.ranking("猫的名字", 10)[0] == "d"
    assert bm25.ranking("the", 10) == []
    assert metrics.rrf([["a", "b"], ["b", "c"]], 3) == ["b", "a", "c"]


# The quality set of the bench ------------------------------------------------------------------


def test_the_quality_set_is_in_longmemevals_shape_and_deterministic():
    from bench import quality

    items = quality.quality_items()
    assert quality.QUALITY_SET.stat().st_size < 300_000
    assert len({item["id"] for item in items}) == len(items)
    for lang in quality.LANGS:
        mine = [item for item in items if item["lang"] == lang]
        assert len(mine) >= 60
        assert {item["cat"] for item in mine} == set(quality.CATEGORIES)
    for item in items:
        stack = quality.haystack_build(item)
        sessions = stack.document["sessions"]
        assert 30 <= len(sessions) <= 38, item["id"]
        assert all(4 <= s["turn_count"] <= 12 for s in sessions), item["id"]
        assert len(stack.evidence) == len(item.get("ev", [])), item["id"]
        assert (item["cat"] == "absent") == (not stack.evidence), item["id"]
        assert (item["cat"] == "changed") == bool(stack.old), item["id"]
        turns = stack.document["turns"]
        assert [t["seq"] for t in turns] == list(range(1, len(turns) + 1))
        assert [t["created_at"] for t in turns] == sorted(t["created_at"] for t in turns)
        # Said before the question, and the question's words are not one turn's words.
        assert turns[-1]["created_at"] < stack.asked_at.isoformat()
        assert item["q"] not in {t["content"] for t in turns}
    again = quality.haystack_build(items[0])
    assert again.document == quality.haystack_build(items[0]).document


def _earlier_sets_said(monkeypatch, before):
    """The questions and the turns of the quality set and of the sets ``before``."""
    from bench import quality

    asked: set[str] = set()
    said: set[str] = set()
    for earlier in (quality.QUALITY_SET.name, *before):
        monkeypatch.setattr(quality, "_set_file", quality.QUALITY_SET.parent / earlier)
        seen = quality.quality_set()
        asked.update(item["q"] for item in seen["items"])
        for item in seen["items"]:
            for kind in ("ev", "old", "decoy"):
                blocks = item.get(kind, [])
                said.update(line.lstrip("*")[3:] for _, block in blocks for line in block)
    return asked, said


# NOTE: the second held-out set asks five short questions the quality set asks too, word for
# word ("What's my blood type?", "我现在住在哪个城市？"), over turns and haystacks of its own.
@pytest.mark.parametrize(
    ("name", "before", "questions"),
    [
        ("holdout_set.json", (), True),
        ("holdout2_set.json", ("holdout_set.json",), False),
        ("holdout3_set.json", ("holdout_set.json", "holdout2_set.json"), True),
    ],
)
def test_a_held_out_set_has_the_quality_sets_shape_and_none_of_the_earlier_sets_text(
    monkeypatch, name, before, questions
):
    from bench import quality

    asked, said = _earlier_sets_said(monkeypatch, before)
    said |= asked
    monkeypatch.setattr(quality, "_set_file", quality.QUALITY_SET.parent / name)
    items = quality.quality_items()
    assert len({item["id"] for item in items}) == len(items)
    for lang in quality.LANGS:
        mine = [item for item in items if item["lang"] == lang]
        assert {item["cat"] for item in mine} == set(quality.CATEGORIES)
        assert sum(item["cat"] == "absent" for item in mine) >= 5
    for item in items:
        assert not questions or item["q"] not in said
        stack = quality.haystack_build(item)
        assert 30 <= len(stack.document["sessions"]) <= 38, item["id"]
        assert (item["cat"] == "absent") == (not stack.evidence), item["id"]
        assert not {t["content"] for t in stack.document["turns"]} & said, item["id"]


# NOTE: the second abstention set asks one question the first held-out set asks too, word for
# word ("What colour did we paint the nursery?"), over turns of its own.
@pytest.mark.parametrize(
    ("name", "before"),
    [
        ("abstain_set.json", ("holdout_set.json", "holdout2_set.json")),
        ("abstain2_set.json", ("holdout_set.json", "holdout2_set.json", "abstain_set.json")),
    ],
)
def test_an_abstention_set_is_half_never_answered_over_turns_of_its_own(monkeypatch, name, before):
    from bench import quality

    _, said = _earlier_sets_said(monkeypatch, before)
    monkeypatch.setattr(quality, "_set_file", quality.QUALITY_SET.parent / name)
    items = quality.quality_items()
    assert len({item["id"] for item in items}) == len(items)
    for lang in quality.LANGS:
        mine = [item for item in items if item["lang"] == lang]
        absent = [item for item in mine if item["cat"] == "absent"]
        assert len(absent) * 2 == len(mine)
        assert all(item.get("decoy") and not item.get("ev") for item in absent)
    for item in items:
        stack = quality.haystack_build(item)
        assert 30 <= len(stack.document["sessions"]) <= 38, item["id"]
        assert (item["cat"] == "absent") == (not stack.evidence), item["id"]
        assert not {t["content"] for t in stack.document["turns"]} & said, item["id"]


def test_the_quality_bench_prints_a_row_per_embedder_and_mode():
    from bench import quality

    items = {item["cat"]: item for item in quality.quality_items(langs=["en"])}
    report = quality.Report()
    for mode, seqs in (("semantic", [3, 1]), ("hybrid", [1, 3])):
        report.results.append(quality.Result(items["user"], mode, seqs, 0.9, 0.01, [{1}], [], []))
        report.results.append(quality.Result(items["absent"], mode, [2], 0.1, 0.03, [], [], []))
    rows = [("a.b", figures) for figures in quality.quality_summary(report)]
    table = quality.embedder_table(rows).splitlines()
    assert len(table) == 4
    assert table[2].startswith("| a.b | semantic | 1.00 | 1.00 | 1.00 | - | - | 1.00 |")
    assert table[3].startswith("| a.b | hybrid | 1.00 |")


def test_the_events_set_asks_times_relative_to_events_over_text_of_its_own(monkeypatch):
    from bench import quality

    said: set[str] = set()
    for earlier in ("quality", "holdout", "holdout2", "holdout3", "abstain"):
        monkeypatch.setattr(
            quality, "_set_file", quality.QUALITY_SET.parent / f"{earlier}_set.json"
        )
        for item in quality.quality_set()["items"]:
            said.add(item["q"])
            for kind in ("ev", "old", "decoy"):
                said.update(line.lstrip("*")[3:] for _, b in item.get(kind, []) for line in b)
    monkeypatch.setattr(quality, "_set_file", quality.QUALITY_SET.parent / "events_set.json")
    items = quality.quality_items()
    assert len({item["id"] for item in items}) == len(items) >= 24
    assert {item["lang"] for item in items} == set(quality.LANGS)
    for item in items:
        assert item["cat"] == "temporal" and item["q"] not in said
        stack = quality.haystack_build(item)
        assert len(stack.evidence) == 1, item["id"]
        assert not {t["content"] for t in stack.document["turns"]} & said, item["id"]
