"""memory.when: the dates a search takes, and the times a question names."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core.exceptions import ValidationError

from memory import when

# A Wednesday.
NOW = dt.datetime(2026, 5, 20, 15, 0, tzinfo=dt.UTC)


def test_dates_and_date_times_parse():
    assert when.when_parse("2026-05-01", field="after") == dt.datetime(2026, 5, 1, tzinfo=dt.UTC)
    assert when.when_parse("2026-05-01T12:30:00+02:00", field="after") == dt.datetime(
        2026, 5, 1, 10, 30, tzinfo=dt.UTC
    )
    assert when.when_parse(None, field="after") is None
    assert when.when_parse("", field="after") is None


@pytest.mark.parametrize("bad", ["yesterday", "2026-13-01", "2026-02-30", "05/01/2026", 5, "2026"])
def test_bad_dates_are_refused(bad):
    with pytest.raises(ValidationError) as e:
        when.when_parse(bad, field="after")
    assert list(e.value.message_dict) == ["after"]


@pytest.mark.parametrize(
    ("q", "days"),
    [
        ("what did I cook yesterday?", ("2026-05-19", "2026-05-20")),
        ("where did I go last week", ("2026-05-11", "2026-05-18")),
        ("what did I buy last month", ("2026-04-01", "2026-05-01")),
        ("which books did I read last year?", ("2025-01-01", "2026-01-01")),
        ("what did I plant last spring", ("2025-03-01", "2025-06-01")),
        ("what did we do 2 weeks ago", ("2026-05-04", "2026-05-11")),
        ("what happened in March", ("2026-03-01", "2026-04-01")),
        ("what happened in June", ("2025-06-01", "2025-07-01")),
        ("我上个月去了哪里", ("2026-04-01", "2026-05-01")),
        ("我去年养了什么宠物", ("2025-01-01", "2026-01-01")),
        ("上周我们聊了什么", ("2026-05-11", "2026-05-18")),
        ("我昨天吃了什么", ("2026-05-19", "2026-05-20")),
        ("三天前我说了什么", ("2026-05-17", "2026-05-18")),
        ("去年春天我去了哪里", ("2025-03-01", "2025-06-01")),
        ("我三月份做了什么", ("2026-03-01", "2026-04-01")),
    ],
)
def test_times_named_in_english_and_chinese(q, days):
    found, rest = when.when_in_query(q, NOW)
    assert found is not None
    start, end = found
    assert start == dt.datetime.fromisoformat(days[0]).replace(tzinfo=dt.UTC) - when.MARGIN
    assert end == min(
        dt.datetime.fromisoformat(days[1]).replace(tzinfo=dt.UTC) + when.MARGIN,
        NOW + dt.timedelta(seconds=1),
    )
    assert len(rest) < len(q)


@pytest.mark.parametrize(
    "q", ["what is my dog's name", "the week before my trip", "我喜欢什么运动", "may I ask"]
)
def test_questions_without_a_calendar_time_name_none(q):
    assert when.when_in_query(q, NOW) == (None, q)


@pytest.mark.parametrize(
    ("q", "days"),
    [
        ("what did I cook in early March?", ("2026-03-01", "2026-04-01")),
        ("what did I plant in late April", ("2026-04-01", "2026-05-01")),
        ("how much did I weigh at the start of the year?", ("2026-01-01", "2026-03-01")),
        ("what book was I reading over Christmas?", ("2025-12-20", "2026-01-03")),
        ("年初的时候我有多重？", ("2026-01-01", "2026-03-01")),
        ("春节那几天我在看什么书？", ("2026-01-20", "2026-02-24")),
        ("去年春节我在哪", ("2025-01-20", "2025-02-24")),
        ("三月份我给爸爸买了什么？", ("2026-03-01", "2026-04-01")),
        # A season still to come this year names nothing before now: this year, then.
        ("今年夏初我做了什么菜？", ("2026-01-01", "2027-01-01")),
        # Easter: Good Friday to Easter Monday, the last begun (2026: April 5).
        ("Who came to stay with us over Easter?", ("2026-04-03", "2026-04-07")),
        ("复活节我们去了哪里？", ("2026-04-03", "2026-04-07")),
        ("what did I do this spring", ("2026-03-01", "2026-06-01")),
    ],
)
def test_more_times_named(q, days):
    named, rest = when.when_in_query(q, NOW)
    assert named is not None
    start, end = (dt.datetime.fromisoformat(day).replace(tzinfo=dt.UTC) for day in days)
    assert named == (start - when.MARGIN, min(end + when.MARGIN, NOW + dt.timedelta(seconds=1)))
    # The expression leaves the text matched, 份 and the words around it included.
    assert "份" not in rest and "christmas" not in rest.lower() and "start of" not in rest


@pytest.mark.parametrize(
    "q",
    [
        "Can you recommend a curry recipe for me to try this weekend?",
        "What should I cook tonight?",
        "这周末推荐去哪玩？",
        "我今天应该穿什么？",
        # This winter is still to come: not the winter that is over.
        "Suggest somewhere for me to go on holiday this winter.",
    ],
)
def test_a_request_or_a_plan_for_a_time_around_now_is_not_a_filter(q):
    assert when.when_in_query(q, NOW) == (None, q)


@pytest.mark.parametrize(
    ("q", "read"),
    [
        # A bare season or month in a Chinese request is the one to come.
        ("春天想找个城市玩三天，推荐一下？", False),
        ("五月想去哪玩，给点建议", False),
        # With a year, or about what was recommended, it is a time past.
        ("去年春天推荐的那家店叫什么？", True),
        ("你三月推荐的那本书叫什么？", True),
        ("春天的时候我们全家去哪儿看花了？", True),
    ],
)
def test_a_bare_chinese_season_in_a_request_is_not_a_filter(q, read):
    named, _ = when.when_in_query(q, NOW)
    assert (named is not None) is read


def test_easter_day_by_the_computus():
    assert [when.easter_day(y) for y in (2000, 2019, 2024, 2025, 2026, 2285)] == [
        dt.date(2000, 4, 23),
        dt.date(2019, 4, 21),
        dt.date(2024, 3, 31),
        dt.date(2025, 4, 20),
        dt.date(2026, 4, 5),
        dt.date(2285, 3, 22),
    ]
    # Before this year's Good Friday, Easter is last year's.
    named, _ = when.when_in_query("over Easter", dt.datetime(2026, 3, 1, tzinfo=dt.UTC))
    assert named is not None and named[0].date() == dt.date(2025, 4, 18) - when.MARGIN


def test_a_past_question_about_a_time_around_now_is_still_a_filter():
    named, _ = when.when_in_query(
        "What did I eat this weekend?", dt.datetime(2026, 5, 24, 12, tzinfo=dt.UTC)
    )
    assert named is not None
    # A plan for a time that is over is read as that time.
    named, _ = when.when_in_query("Which film did you recommend last week?", NOW)
    assert named is not None


@pytest.mark.parametrize(
    ("q", "phrase", "relation", "days"),
    [
        ("What did I buy the week before my trip to Lisbon?", "my trip to lisbon", "before", 7),
        ("What did I start after I moved to Berlin?", "i moved to berlin", "after", None),
        ("Where did we eat the day after the wedding?", "the wedding", "after", 1),
        ("What was I reading during my hospital stay?", "my hospital stay", "during", None),
        ("How far did I run in the month before the marathon?", "the marathon", "before", 31),
        ("What did I do two weeks after the move", "the move", "after", 14),
        ("What did I eat right before the exam?", "the exam", "before", None),
        ("After my knee surgery, what was I told to do?", "my knee surgery", "after", None),
        ("Who fed my cat while I was in Spain?", "i was in spain", "during", None),
        ("Who looked after my cat while I was in Spain?", "i was in spain", "during", None),
        ("What have I read since the vacation and why?", "the vacation", "after", None),
        ("出差前那个星期我买了什么？", "出差", "before", 7),
        ("去成都出差前那个星期我买了什么？", "去成都出差", "before", 7),
        ("搬家以后我报了什么课？", "搬家", "after", None),
        ("婚礼前一天我在忙什么？", "婚礼", "before", 1),
        ("孩子出生以后的那个月我睡得怎么样？", "孩子出生", "after", 31),
        ("手术后一周医生让我注意什么？", "手术", "after", 7),
        ("出差前两天我在干嘛", "出差", "before", 2),
        ("装修之前我们住在哪里？", "装修", "before", None),
        ("去云南旅行的时候我吃了什么？", "去云南旅行", "during", None),
    ],
)
def test_times_relative_to_an_event_in_english_and_chinese(q, phrase, relation, days):
    event = when.event_in_query(q)
    assert event is not None
    assert (event.phrase, event.relation) == (phrase, relation)
    assert event.span == (None if days is None else dt.timedelta(days=days))


@pytest.mark.parametrize(
    "q",
    [
        "Have we talked about this before?",
        "What did I say before that?",
        "What did I cook the day before yesterday?",
        "Who looked after my cat?",
        "What did I eat after all?",
        "What did we do the week after we got her?",
        "我以前住在哪里？",
        "我之前说过的那家餐厅叫什么？",
        "后来怎么样了？",
        "最后一天去了哪里？",
        "三天前我吃了什么？",
        "Which gigs have I been to since the spring?",
        "年初的时候我有多重？",
        "Where are we going after the wedding?",
        "How long did you tell me to wait before moving the furniture back?",
        "你说炖牛肉的时候要加什么香料？",
        "Should I stretch before my run?",
    ],
)
def test_questions_without_an_event_name_none(q):
    assert when.event_in_query(q) is None


def test_an_event_window_around_the_day_it_was_told_of_and_never_past_now():
    told = dt.datetime(2026, 3, 10, 18, 30, tzinfo=dt.UTC)
    day = dt.datetime(2026, 3, 10, tzinfo=dt.UTC)
    week = dt.timedelta(days=7)
    next_day = day + dt.timedelta(days=1)
    before = when.Event("the trip", "before", week)
    assert before.window(told, NOW) == (day - week - when.MARGIN, next_day + when.MARGIN)
    assert when.Event("the trip", "before", None).window(told, NOW) == (
        None,
        next_day + when.MARGIN,
    )
    after = when.Event("the trip", "after", week)
    assert after.window(told, NOW) == (day - when.MARGIN, next_day + week + when.MARGIN)
    late = NOW - dt.timedelta(days=1)
    assert when.Event("the trip", "after", None).window(late, NOW) == (
        dt.datetime(2026, 5, 19, tzinfo=dt.UTC) - when.MARGIN,
        NOW,
    )
    assert when.Event("the trip", "after", week).window(late, NOW)[1] == NOW + dt.timedelta(
        seconds=1
    )
    assert when.Event("the trip", "during", None).window(told, NOW) == (
        day - when.DURING,
        next_day + when.DURING,
    )
