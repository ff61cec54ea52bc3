"""Tests of searching turns (memory.search, selectors.turn_search): English and Chinese, ranking,
owner isolation, hostile queries, and the GIN indexes at work on a large table (EXPLAIN)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.utils import timezone

from memory import checks, ops, search, selectors, services
from memory.conf import conf
from memory.exceptions import SearchTimeout
from memory.models import Owner, Turn

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parent.parent


def append(owner_id: str, *contents: str, session_id: str = "tab-1") -> list[int]:
    return [
        services.turn_append(
            owner_id=owner_id, session_id=session_id, role="user", content=content
        ).seq
        for content in contents
    ]


def found(owner_id: str, q: str, **kwargs) -> list[str]:
    return [turn["content"] for turn in selectors.turn_search(owner_id=owner_id, q=q, **kwargs)]


def test_english_words_match_in_any_case_and_form():
    append(
        "wang",
        "I like playing basketball",
        "We played tennis on Sunday",
        "Nothing to see here",
    )
    assert found("wang", "Basketball") == ["I like playing basketball"]
    assert found("wang", "PLAYS") == ["We played tennis on Sunday", "I like playing basketball"]
    assert found("wang", "tennis sunday") == ["We played tennis on Sunday"]
    # A turn need not hold every word; one that holds more of them ranks first.
    assert set(found("wang", "basketball sunday")) == {
        "We played tennis on Sunday",
        "I like playing basketball",
    }
    assert found("wang", "tennis on sunday, or basketball")[0] == "We played tennis on Sunday"


def test_search_returns_whole_turns():
    append("wang", "hello there")
    (turn,) = selectors.turn_search(owner_id="wang", q="hello")
    assert 0 <= turn.pop("score") <= 1
    assert turn.pop("context") == []
    assert turn == selectors.turn_list(owner_id="wang")[0][0]


def test_chinese_text_without_spaces_is_found():
    append("wang", "我喜欢打篮球", "我叫王建国", "周末去公园玩")
    assert found("wang", "篮球") == ["我喜欢打篮球"]
    assert found("wang", "球") == ["我喜欢打篮球"]
    assert found("wang", "打篮球") == ["我喜欢打篮球"]
    assert found("wang", "王建国") == ["我叫王建国"]
    assert found("wang", "我") == ["我叫王建国", "我喜欢打篮球"]
    assert found("wang", "足球") == []


def test_chinese_run_must_appear_as_written():
    # Both pairs of 打篮球 appear, but never the three characters together: it ranks below.
    append("wang", "打篮 然后 篮球", "他在打篮球")
    assert found("wang", "打篮球") == ["他在打篮球", "打篮 然后 篮球"]


def test_mixed_english_and_chinese_query():
    append("wang", "I like 篮球 a lot", "I like football", "篮球 is fun")
    assert found("wang", "like 篮球")[0] == "I like 篮球 a lot"


def test_japanese_korean_and_full_width_text():
    append("wang", "東京タワーに行きました", "한국어를 공부해요", "我喜欢ｂａｓｋｅｔｂａｌｌ")
    assert found("wang", "タワー") == ["東京タワーに行きました"]
    assert found("wang", "한국어") == ["한국어를 공부해요"]
    assert found("wang", "basketball") == ["我喜欢ｂａｓｋｅｔｂａｌｌ"]
    assert found("wang", "ＢＡＳＫＥＴＢＡＬＬ") == ["我喜欢ｂａｓｋｅｔｂａｌｌ"]


@pytest.mark.parametrize(
    "text",
    [
        "\u3041\u30ff",  # hiragana, katakana
        "\u3400\u4dbf",  # CJK extension A
        "\u4e00\u9fff",  # CJK unified ideographs
        "\uac00\ud7a3",  # Hangul syllables
        "\U00020000\U0002a6df",  # CJK extension B
    ],
)
def test_every_cjk_range_is_indexed_like_the_query_reads_it(text):
    append("wang", f"x{text}y")
    assert found("wang", text) == [f"x{text}y"]
    assert found("wang", text[0]) == [f"x{text}y"]


def test_best_match_first_and_newest_first_among_equals():
    append(
        "wang",
        "basketball",  # 1
        "a long story about the weather, cats, dogs, food, and then basketball once, and more",
        "I like basketball and I play basketball every week",  # 3
        "basketball",  # 4: same as 1, newer
    )
    results = selectors.turn_search(owner_id="wang", q="basketball")
    assert [turn["seq"] for turn in results] == [4, 1, 3, 2]


def test_words_close_together_rank_first():
    append(
        "wang",
        "I play chess on mondays, and on fridays we watch basketball",
        "I play basketball",
        "basketball players play",
    )
    assert found("wang", "play basketball") == [
        "I play basketball",
        "basketball players play",
        "I play chess on mondays, and on fridays we watch basketball",
    ]


def test_limit_caps_the_results():
    append("wang", *[f"turn {i} about jazz" for i in range(30)])
    assert len(found("wang", "jazz")) == 20
    assert len(found("wang", "jazz", limit=5)) == 5
    assert found("wang", "jazz", limit=1) == ["turn 29 about jazz"]


def test_only_the_owners_turns_are_searched():
    append("wang", "I like basketball")
    append("li", "I like basketball too", "我喜欢打篮球")
    assert found("wang", "basketball") == ["I like basketball"]
    assert found("wang", "篮球") == []
    assert found("wang", "basketbal") == ["I like basketball"]
    assert found("nobody", "basketball") == []


@pytest.mark.parametrize(
    "q",
    [
        "basktball",  # a letter dropped
        "basketbsll",  # changed
        "basketblal",  # two swapped
        "basketballl",  # added
        "BASKTBALL",
        "basketbals",  # one dropped, one added
        "basketba",  # the start of a word
    ],
)
def test_a_typo_finds_the_word_meant(q):
    append("wang", "I like basketball", "we talked about the weather", "my basket is full")
    assert found("wang", q) == ["I like basketball"]


def test_the_start_of_a_word_finds_every_word_it_starts():
    append("wang", "I like basketball", "we talked about the weather", "my basket is full")
    assert found("wang", "bask") == ["my basket is full", "I like basketball"]


def test_typos_of_several_words_must_all_match_one_turn():
    append("wang", "my memory of the museum", "a museum", "memory games")
    assert found("wang", "memroy musuem") == ["my memory of the museum"]
    assert found("wang", "memroy musuem xylophone") == []


def test_misspelt_or_partial_word_falls_back_to_similar_words():
    append("wang", "I like basketball", "my friend Jianguo called")
    assert found("wang", "basketbal") == ["I like basketball"]
    assert found("wang", "baskettball") == ["I like basketball"]
    assert found("wang", "Jiangu") == ["my friend Jianguo called"]
    assert found("wang", "bask") == ["I like basketball"]
    # A word that matches is enough: no fallback then.
    assert found("wang", "basketbal friend") == ["my friend Jianguo called"]
    # A short word is like too many others: it matches only as it is.
    assert found("wang", "li") == []
    assert found("wang", "js basketbal") == []
    assert found("wang", "my basketbal") == ["I like basketball"]  # "my" is a stop word
    assert found("wang", "xylophone") == []


def _vocabulary(owner_id: str) -> set[tuple[str, str]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT key, word FROM memory_searchword WHERE owner_id ="
            " (SELECT id FROM memory_owner WHERE external_id = %s)",
            [owner_id],
        )
        return set(cursor.fetchall())


def _words_of_forgotten_owners() -> int:
    # NOTE: a transactional test's flush (TRUNCATE) fires no trigger and leaves the words of the
    # owners it truncated; each test here compares with the count it started with.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM memory_searchword AS w"
            " WHERE NOT EXISTS (SELECT FROM memory_owner AS o WHERE o.id = w.owner_id)"
        )
        return cursor.fetchone()[0]


def test_the_vocabulary_holds_each_word_and_its_keys_and_leaves_with_the_owner():
    orphans = _words_of_forgotten_owners()
    append("wang", "Jazz 篮球 ｃａｆｅ", "jazz again")
    words = _vocabulary("wang")
    assert {word for _, word in words} == {"jazz", "cafe", "again"}
    # Four letters or more: the word and each spelling one letter shorter.
    assert {key for key, word in words if word == "jazz"} == {"jazz", "azz", "jzz", "jaz"}
    assert {key for key, word in words if word == "cafe"} == {"cafe", "afe", "cfe", "cae", "caf"}
    services.memory_forget(owner_id="wang")
    assert _words_of_forgotten_owners() == orphans


def test_linked_turns_bring_their_words():
    orphans = _words_of_forgotten_owners()
    append("anon-1", "my xylophone lessons")
    append("wang", "hello")
    services.memory_link(owner_id="wang", from_owner_id="anon-1")
    assert found("wang", "xylophon") == ["my xylophone lessons"]
    assert found("wang", "xylophne") == ["my xylophone lessons"]
    assert _words_of_forgotten_owners() == orphans


def test_only_the_newest_matches_are_ranked(monkeypatch):
    append("wang", "jazz jazz jazz", *[f"jazz and a long story number {i}" for i in range(5)])
    assert found("wang", "jazz", limit=1) == ["jazz jazz jazz"]
    monkeypatch.setattr(search, "RANK_WINDOW", 3)
    assert found("wang", "jazz") == [f"jazz and a long story number {i}" for i in (4, 3, 2)]


@pytest.mark.parametrize(
    ("contents", "expected"),
    [
        # A common word: the newest 3 matches lie among the newest 9 turns.
        (
            [f"jazz story {i}" for i in range(12)],
            [f"jazz story {i}" for i in (11, 10, 9)],
        ),
        # A rare one: no match among the newest 9 turns; the older ones are found all the same.
        (
            [*(f"jazz story {i}" for i in range(4)), *(f"blues {i}" for i in range(10))],
            [f"jazz story {i}" for i in (3, 2, 1)],
        ),
        # Some among the newest, the rest older: the newest 3 of them all.
        (
            ["jazz old", *(f"blues {i}" for i in range(7)), "jazz a", "blues x", "jazz b"],
            ["jazz b", "jazz a", "jazz old"],
        ),
    ],
)
def test_the_newest_matches_are_ranked_whether_the_word_is_common_or_rare(
    monkeypatch, contents, expected
):
    append("wang", *contents)
    monkeypatch.setattr(search, "RANK_WINDOW", 3)
    assert sorted(found("wang", "jazz")) == sorted(expected)


def test_search_runs_under_the_time_limit_and_leaves_no_setting(memory_settings):
    append("wang", "I like basketball")
    statements: list[str] = []

    def record(execute, sql, params, many, context):
        statements.append(sql % tuple(params) if isinstance(params, (list, tuple)) else sql)
        return execute(sql, params, many, context)

    def show(name: str) -> str:
        with connection.cursor() as cursor:
            cursor.execute(f"SHOW {name}")
            return cursor.fetchone()[0]

    before = {name: show(name) for name in ("statement_timeout", "random_page_cost", "jit")}
    with memory_settings(SEARCH_TIMEOUT_MS=1234), connection.execute_wrapper(record):
        assert found("wang", "basktball") == ["I like basketball"]
    # The limit is set first, in the search's own savepoint, then every statement runs.
    assert statements[0].startswith("SAVEPOINT")
    assert "set_config('statement_timeout', 1234ms, true)" in statements[1]
    assert any("memory_searchword" in sql for sql in statements)
    assert {name: show(name) for name in before} == before


def test_the_first_statement_runs_with_the_settings_and_they_are_put_back():
    append("wang", "I like basketball")
    owner_sql = "SELECT id, external_id FROM memory_owner WHERE external_id = %s"
    with connection.cursor() as cursor:
        cursor.execute("SHOW random_page_cost")
        before = cursor.fetchone()[0]
    with (
        search.search_transaction(
            using="default",
            milliseconds=1234,
            settings={"hnsw.ef_search": "123"},
            first=(owner_sql, ["wang"]),
        ) as row,
        connection.cursor() as cursor,
    ):
        assert row == (Owner.objects.get(external_id="wang").pk, "wang")
        cursor.execute(
            "SELECT current_setting('statement_timeout'), current_setting('hnsw.ef_search')"
        )
        assert cursor.fetchone() == ("1234ms", "123")
    with search.search_transaction(
        using="default", milliseconds=1234, first=(owner_sql, ["nobody"])
    ) as row:
        assert row is None
    with search.search_transaction(using="default", milliseconds=1234) as row:
        assert row is None
    # Inside the test's transaction: each setting as it was before the block.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('statement_timeout'), current_setting('random_page_cost'),"
            " coalesce(current_setting('hnsw.ef_search', true), '')"
        )
        timeout, cost, ef_search = cursor.fetchone()
    assert (timeout, cost) == ("0", before)
    assert ef_search != "123"


def test_a_search_statement_starts_no_parallel_workers():
    # Parallel plans made as cheap as can be: a scan of the turns gathers workers outside a
    # search, and inside one the planner setting keeps it in the backend.
    append("wang", "I like basketball")
    sql = "EXPLAIN SELECT count(*) FROM memory_turn WHERE content LIKE '%basket%'"
    with connection.cursor() as cursor:
        for name in ("parallel_setup_cost", "parallel_tuple_cost", "min_parallel_table_scan_size"):
            cursor.execute(f"SET LOCAL {name} = 0")
        cursor.execute("SET LOCAL max_parallel_workers_per_gather = 2")
        cursor.execute(sql)
        assert "Gather" in "\n".join(row[0] for row in cursor.fetchall())
    with search.search_transaction(using="default", milliseconds=1234), connection.cursor() as c:
        c.execute(sql)
        assert "Gather" not in "\n".join(row[0] for row in c.fetchall())


def test_a_statement_past_the_limit_raises_search_timeout_and_rolls_back():
    append("wang", "I like basketball")
    with (
        pytest.raises(SearchTimeout) as info,
        search.search_transaction(using="default", milliseconds=20),
        connection.cursor() as cursor,
    ):
        cursor.execute("SELECT pg_sleep(5)")
    assert info.value.milliseconds == 20
    # The caller's transaction (the test's) goes on, with its own settings.
    assert found("wang", "basketball") == ["I like basketball"]
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        assert cursor.fetchone() == ("0",)


@pytest.mark.parametrize("value", [0, -1, 2.5, "500", None])
def test_a_bad_search_timeout_fails_the_checks(value, memory_settings):
    with memory_settings(SEARCH_TIMEOUT_MS=value):
        ids = [message.id for message in checks.check_memory_settings()]
    assert ids == ["memory.E002"]


def test_the_search_timeout_setting():
    assert conf.SEARCH_TIMEOUT_MS == 500


@pytest.mark.parametrize("value", [0, -1, 2.5, "5000", None])
def test_a_bad_query_embed_timeout_fails_the_checks(value, memory_settings):
    with memory_settings(QUERY_EMBED_TIMEOUT_MS=value):
        ids = [message.id for message in checks.check_memory_settings()]
    assert ids == ["memory.E002"]


def test_stop_words_alone_match_nothing():
    append("wang", "the cat is on the mat")
    assert found("wang", "the") == []
    assert found("wang", "cat the") == ["the cat is on the mat"]


def test_turns_written_outside_the_services_are_searchable():
    owner = Owner.objects.create(external_id="wang", last_seq=2)
    at = timezone.now()
    Turn.objects.bulk_create(
        [
            Turn(owner=owner, seq=seq, session_id="s", role="user", content=text, created_at=at)
            for seq, text in [(1, "bulk basketball"), (2, "我喜欢打篮球")]
        ]
    )
    assert found("wang", "basketball") == ["bulk basketball"]
    assert found("wang", "篮球") == ["我喜欢打篮球"]
    Turn.objects.filter(owner=owner, seq=1).update(content="now about tennis")
    assert found("wang", "basketball") == []
    assert found("wang", "tennis") == ["now about tennis"]


HOSTILE = [
    "'",
    '"',
    "''",
    '"unclosed',
    "it's",
    "a & b",
    "a | b",
    "!a",
    "a:*",
    "basket:*",
    "a <-> b",
    "a <2> b",
    "(a | b) & !c",
    "&",
    "|",
    "!",
    ":*",
    "\\",
    "\\\\",
    "a\\'b",
    "'; DROP TABLE memory_turn; --",
    "%",
    "_",
    "%_%",
    "$1",
    "%s",
    "%(q)s",
    "{}",
    "\x01\x1f",
    "🏀🏀",
    "篮球 & 足球",
    "篮球:*",
    "&" * 200,
    "篮" * 200,
    "篮球" * 100,
    "x" * 200,
    "a " * 100,
    "\\" * 200,
]


@pytest.mark.parametrize("q", HOSTILE)
def test_hostile_queries_are_text_never_syntax(q):
    append("wang", "I like basketball", "我喜欢打篮球 & 足球", "it's a basket:* \\ 'quoted'")
    results = selectors.turn_search(owner_id="wang", q=q)
    assert isinstance(results, list)
    for turn in results:
        assert turn["content"] in {
            "I like basketball",
            "我喜欢打篮球 & 足球",
            "it's a basket:* \\ 'quoted'",
        }


@pytest.mark.parametrize(
    ("q", "words"),
    [
        ("basketball | tennis", "basketball tennis"),
        ("!basketball", "basketball"),
        ("'basketball'", "basketball"),
        ('"basketball" & (tennis)', "basketball tennis"),
        ("bask:*", "bask"),
        ("basketball <-> tennis", "basketball tennis"),
        ("篮球:* | 足球", "篮球 足球"),
    ],
)
def test_query_syntax_characters_change_nothing(q, words):
    append("wang", "I like basketball", "I like tennis", "basketball and tennis", "篮球和足球")
    assert found("wang", q) == found("wang", words)
    assert found("wang", q) != []


@pytest.mark.parametrize(
    ("q", "field"),
    [
        ("", "q"),
        ("   ", "q"),
        ("\t\n", "q"),
        ("x" * 201, "q"),
        ("a\x00b", "q"),
        ("\ud800", "q"),
        (None, "q"),
        (42, "q"),
    ],
)
def test_bad_query_is_a_validation_error(q, field):
    with pytest.raises(ValidationError) as info:
        selectors.turn_search(owner_id="wang", q=q)
    assert field in info.value.message_dict


@pytest.mark.parametrize("limit", [0, -1, 101, True, "5", 2.5])
def test_bad_limit_is_a_validation_error(limit):
    with pytest.raises(ValidationError) as info:
        selectors.turn_search(owner_id="wang", q="x", limit=limit)
    assert "limit" in info.value.message_dict


def test_bad_owner_id_is_a_validation_error():
    with pytest.raises(ValidationError) as info:
        selectors.turn_search(owner_id="bad id!", q="x")
    assert "user_id" in info.value.message_dict


def test_query_of_200_characters_is_accepted_after_stripping():
    append("wang", "x" * 10)
    assert found("wang", "  " + "y" * 200 + "  ") == []


def test_search_queryset_spans_owners_best_first():
    append("wang", "basketball", "tennis")
    append("li", "basketball and basketball", "我喜欢打篮球")
    matches = ops.turn_search_queryset(q="basketball").select_related("owner")
    assert [(t.owner.external_id, t.content) for t in matches] == [
        ("li", "basketball and basketball"),
        ("wang", "basketball"),
    ]
    assert [t.content for t in ops.turn_search_queryset(q="篮球")] == ["我喜欢打篮球"]
    only_wang = Turn.objects.filter(owner__external_id="wang")
    assert [t.content for t in ops.turn_search_queryset(q="Basketball", queryset=only_wang)] == [
        "basketball"
    ]
    # No typo fallback across owners: it reads one owner's vocabulary.
    assert list(ops.turn_search_queryset(q="basktball", queryset=only_wang)) == []


# The indexes at work on a large table ------------------------------------------------------

# NOTE: 10% of the table belongs to one owner, as in "100,000 turns in a table of 1,000,000",
# scaled down so that seeding takes seconds; MEMORY_SEARCH_TABLE_ROWS=1000000 runs it at scale.
TABLE_ROWS = int(os.environ.get("MEMORY_SEARCH_TABLE_ROWS", "100000"))
BIG_OWNER_ROWS = TABLE_ROWS // 10
OTHER_OWNERS = 400


def _seed_large_table() -> int:
    """Fill memory_turn with TABLE_ROWS turns in one statement; return the big owner's pk."""
    big = Owner.objects.create(external_id="big", last_seq=BIG_OWNER_ROWS)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO memory_owner (external_id, last_seq, stamp, cache_dirty, created_at,"
            " updated_at) SELECT 'owner-' || g, 0, 0, false, now(), now()"
            " FROM generate_series(1, %s) AS g",
            [OTHER_OWNERS],
        )
        cursor.execute(
            "SELECT min(id) FROM memory_owner WHERE external_id LIKE 'owner-%%'",
        )
        (first_other,) = cursor.fetchone()
        # NOTE: indexes are dropped and re-created from their own definitions around the bulk
        # insert (what a bulk load does anyway): the GIN indexes build in a fraction of the
        # time that row-by-row maintenance would take. The transaction rolls it all back.
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'memory_turn'"
            " AND indexname = 'memory_turn_search_idx'"
        )
        indexes = cursor.fetchall()
        assert len(indexes) == 1
        for name, _ in indexes:
            cursor.execute(f"DROP INDEX {name}")
        cursor.execute(
            "INSERT INTO memory_turn (owner_id, seq, session_id, role, content, metadata,"
            " created_at)"
            " SELECT CASE WHEN g <= %(big_rows)s THEN %(big)s"
            "             ELSE %(first)s + (g %% %(others)s) END,"
            "        g, 's', 'user',"
            "        (ARRAY['I like', 'we talked about', 'remember', 'tomorrow', 'please book'])"
            "          [1 + g %% 5]"
            "        || ' ' || (ARRAY['basketball', 'noodles', 'the museum', 'coffee', 'jazz'])"
            "          [1 + (g / 5) %% 5]"
            "        || ' w' || (g %% 5000)"
            "        || CASE WHEN g %% 7 = 0 THEN ' 我喜欢打篮球' ELSE '' END,"
            "        '{}', now()"
            " FROM generate_series(1, %(rows)s) AS g",
            {
                "big_rows": BIG_OWNER_ROWS,
                "big": big.pk,
                "first": first_other,
                "others": OTHER_OWNERS,
                "rows": TABLE_ROWS,
            },
        )
        # NOTE: the foreign keys are checked at commit (deferred), and an index cannot be built
        # over rows with checks pending: run them now.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("SET LOCAL maintenance_work_mem = '256MB'")
        for _, definition in indexes:
            cursor.execute(definition)
        cursor.execute("ANALYZE memory_owner, memory_turn")
    return big.pk


@pytest.mark.slow
def test_plan_uses_the_owner_and_the_document_in_one_gin_index():
    started = time.monotonic()
    big = _seed_large_table()
    seeded = time.monotonic() - started
    turns = selectors.search.owner_turns(big)
    with search.search_transaction(using="default", milliseconds=60_000):
        for q in ["w123", "basketball", "篮球", "jazz coffee"]:
            plan = search.turns_matching(turns, q).explain()
            assert "Bitmap Index Scan on memory_turn_search_idx" in plan, plan
            assert f"(owner_id = '{big}'::bigint) AND (" in plan, plan
            assert "Seq Scan" not in plan, plan
        # Ranking the newest matches only: a rare word's few off the document's index, a
        # common one's by walking the owner's turns backwards; never all of the owner's.
        rare = search.turns_matching(turns, "w123", window=search.RANK_WINDOW).explain()
        assert "Bitmap Index Scan on memory_turn_search_idx" in rare, rare
        common = search.turns_matching(turns, "jazz", window=search.RANK_WINDOW).explain()
        assert "Index Scan Backward using memory_turn_owner_seq_uniq" in common, common
        for plan in (rare, common):
            assert "Seq Scan" not in plan, plan
            assert "Index Scan using memory_turn_pkey" in plan, plan
        # The typo fallback: one owner's vocabulary by its B-tree, then the document's index.
        with connection.cursor() as cursor:
            cursor.execute(
                "EXPLAIN " + search._SIMILAR_SQL,
                {"words": "basktball cofee", "owner": big, "min_chars": 4, "limit": 12,
                 "starts": 50, "top": chr(0x10FFFF)},
            )  # fmt: skip
            vocabulary = "\n".join(row[0] for row in cursor.fetchall())
        assert "Index Only Scan using memory_searchword_pk" in vocabulary, vocabulary
        assert "Seq Scan" not in vocabulary, vocabulary
        similar = search.turns_similar(turns, "basktball", owner_pk=big, window=1000)
        assert similar is not None
        plan = similar.explain()
        assert "memory_turn_owner_seq_uniq" in plan or "memory_turn_search_idx" in plan, plan
        assert "Seq Scan" not in plan, plan

    started = time.monotonic()
    rare = selectors.turn_search(owner_id="big", q="w123")
    common = selectors.turn_search(owner_id="big", q="basketball")
    chinese = selectors.turn_search(owner_id="big", q="篮球")
    typo = selectors.turn_search(owner_id="big", q="remembr basktball")
    elapsed = time.monotonic() - started
    assert len(rare) == BIG_OWNER_ROWS // 5000
    assert len(common) == len(chinese) == len(typo) == 20
    assert all("basketball" in turn["content"] for turn in common)
    assert all("remember basketball" in turn["content"] for turn in typo)
    # NOTE: generous: a shared CI machine; locally the three take tens of milliseconds.
    assert elapsed < 5, elapsed
    print(f"seeded {TABLE_ROWS} rows in {seeded:.1f} s; three searches in {elapsed:.3f} s")


def test_small_owner_in_a_large_table_reads_only_its_rows():
    big = Owner.objects.create(external_id="big")
    small = Owner.objects.create(external_id="small")
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO memory_turn (owner_id, seq, session_id, role, content, metadata,"
            " created_at) SELECT %s, g, 's', 'user', 'basketball w' || g, '{}', now()"
            " FROM generate_series(1, 5000) AS g",
            [big.pk],
        )
        cursor.execute("ANALYZE memory_turn")
    append("small", "I like basketball")
    plan = search.turns_matching(selectors.search.owner_turns(small.pk), "basketball").explain()
    assert "Seq Scan" not in plan, plan
    assert found("small", "basketball") == ["I like basketball"]
