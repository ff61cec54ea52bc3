"""Times a search names: ``after``/``before``/``now`` checked, the date expressions of a
question ("last month", "上个月") read as a range against ``now``, and a time relative to an event
("the week before my trip", "搬家以后") read as that event and a window around its date.

Only calendar ranges and event windows are read; anything else is left to the search by words
and meaning.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

# A time named in a question is a little wider than the calendar says: a "last month" said on
# the 2nd may mean the days just before it, a season's edges are loose.
MARGIN = dt.timedelta(days=3)

_MONTHS = {
    name: i + 1
    for i, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ]
    )
    for name in names
}
_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "couple of": 2,
    "few": 3,
}
_ZH_NUMBERS = {
    "一": 1,
    "两": 2,
    "二": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
    "十": 10,
}
_ZH_MONTHS = {
    "一": 1, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9, "十": 10,
    "十一": 11, "十二": 12,
}  # fmt: skip
# Northern-hemisphere meteorological seasons: (first month, months).
_SEASONS = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12}
_ZH_SEASONS = {"春": 3, "夏": 6, "秋": 9, "冬": 12}

Range = tuple[dt.datetime, dt.datetime]


def when_parse(value: Any, *, field: str) -> dt.datetime | None:
    """An ISO-8601 date or date-time as an aware datetime (a date is its midnight); ``None`` for
    ``None`` or ``""``; without an offset, the current time zone. Raises ``ValidationError({field:
    ...})`` for anything else."""
    if value is None or value == "":
        return None
    if isinstance(value, dt.datetime):
        parsed: dt.datetime | None = value
    elif isinstance(value, dt.date):
        parsed = dt.datetime.combine(value, dt.time())
    elif isinstance(value, str):
        try:
            parsed = parse_datetime(value.strip())
            if parsed is None:
                day = parse_date(value.strip())
                parsed = None if day is None else dt.datetime.combine(day, dt.time())
        except ValueError:
            parsed = None
    else:
        parsed = None
    if parsed is None:
        raise ValidationError(
            {field: ["Enter an ISO-8601 date (2026-05-01) or date-time (2026-05-01T12:00:00Z)."]}
        )
    if timezone.is_naive(parsed):
        parsed = timezone.make_aware(parsed)
    # NOTE: in UTC: an offset past PostgreSQL's (+-15:59) is a valid ISO 8601 one.
    try:
        return parsed.astimezone(dt.UTC)
    except OverflowError as e:
        raise ValidationError(
            {field: ["Enter an ISO-8601 date (2026-05-01) or date-time (2026-05-01T12:00:00Z)."]}
        ) from e


def _month_start(year: int, month: int) -> dt.datetime:
    year += (month - 1) // 12
    month = (month - 1) % 12 + 1
    return dt.datetime(year, month, 1, tzinfo=dt.UTC)


def _months(year: int, month: int, count: int) -> Range:
    return _month_start(year, month), _month_start(year, month + count)


def _day(now: dt.datetime, back: int) -> Range:
    start = dt.datetime(now.year, now.month, now.day, tzinfo=dt.UTC) - dt.timedelta(days=back)
    return start, start + dt.timedelta(days=1)


def _week(now: dt.datetime, back: int) -> Range:
    monday = dt.datetime(now.year, now.month, now.day, tzinfo=dt.UTC) - dt.timedelta(
        days=now.weekday() + 7 * back
    )
    return monday, monday + dt.timedelta(days=7)


def _weekend(now: dt.datetime) -> Range:
    monday, _ = _week(now, 0 if now.weekday() >= 5 else 1)
    return monday + dt.timedelta(days=5), monday + dt.timedelta(days=7)


def _this_weekend(now: dt.datetime) -> Range:
    """The weekend of this week (Monday first): still to come on a weekday."""
    monday, _ = _week(now, 0)
    return monday + dt.timedelta(days=5), monday + dt.timedelta(days=7)


def _season(now: dt.datetime, first: int, last: bool, this: bool = False) -> Range:
    """The season starting in month ``first``: the latest one begun before now (``last``: the
    latest one over before now; ``this``: this year's, which may be still to come)."""
    year = now.year if this or now.month >= first else now.year - 1
    if first == 12 and now.month < 3:
        year = now.year - 1
    start, end = _months(year, first, 3)
    if last and end > now:
        start, end = _months(year - 1, first, 3)
    return start, end


def _before(now: dt.datetime, month: int) -> int:
    """The year of the latest month ``month`` that started before ``now``."""
    return now.year if month <= now.month else now.year - 1


_Build = Callable[[re.Match[str], dt.datetime], tuple[dt.datetime, dt.datetime]]

# The days and weeks both languages name in so many words: (English, Chinese, the range), each
# language's first expressions, in this order.
_DAYS_AND_WEEKS: list[tuple[str, str, Callable[[dt.datetime], Range]]] = [
    (r"\bday before yesterday\b", r"前天", lambda now: _day(now, 2)),
    (r"\byesterday\b", r"昨天|昨晚", lambda now: _day(now, 1)),
    (r"\btoday\b|\bthis morning\b|\btonight\b", r"今天|今晚", lambda now: _day(now, 0)),
    (r"\blast weekend\b|\bover the weekend\b", r"上个?周末|上个?星期六", _weekend),
    (r"\bthis weekend\b", r"这个?周末", _this_weekend),
    (r"\blast week\b", r"上个?(?:周|星期|礼拜)", lambda now: _week(now, 1)),
    (r"\bthis week\b", r"(?:这|本)个?(?:周|星期|礼拜)", lambda now: _week(now, 0)),
]


def _of_now(at: Callable[[dt.datetime], Range]) -> _Build:
    return lambda match, now: at(now)


_EN: list[tuple[str, _Build]] = [
    *((english, _of_now(at)) for english, _, at in _DAYS_AND_WEEKS),
    (r"\blast month\b", lambda m, now: _months(now.year, now.month - 1, 1)),
    (r"\bthis month\b", lambda m, now: _months(now.year, now.month, 1)),
    (r"\blast year\b", lambda m, now: _months(now.year - 1, 1, 12)),
    (r"\bthis year\b", lambda m, now: _months(now.year, 1, 12)),
    (
        r"\b(last|this|past) (spring|summer|autumn|fall|winter)\b",
        lambda m, now: _season(
            now, _SEASONS[m.group(2)], m.group(1) != "this", this=m.group(1) == "this"
        ),
    ),
    (
        r"\b(\d+|an?|one|two|three|four|five|six|seven|eight|nine|ten|couple of|few)"
        r" (day|week|month|year)s? ago\b",
        lambda m, now: _ago(now, m.group(1), m.group(2)),
    ),
    (
        r"\b(?:in|during|on|back in) (?:(?:the )?(?:early|mid|late|start of|end of) )?"
        r"(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")"
        r"(?: (\d{4}))?\b",
        lambda m, now: _months(
            int(m.group(2)) if m.group(2) else _before(now, _MONTHS[m.group(1)]),
            _MONTHS[m.group(1)],
            1,
        ),
    ),
    (r"\bin (\d{4})\b", lambda m, now: _months(int(m.group(1)), 1, 12)),
    (
        r"\b(?:(?:at|in) )?(?:the )?(?:start|beginning) of (?:the|this) year\b",
        lambda m, now: _months(now.year, 1, 2),
    ),
    (r"\b(?:(?:over|at|during|around|for) )?christmas\b", lambda m, now: _christmas(now)),
    (r"\b(?:(?:over|at|during|around|for) )?easter\b", lambda m, now: _easter(now)),
]


def easter_day(year: int) -> dt.date:
    """Easter Sunday of ``year`` in the Gregorian calendar (the anonymous computus)."""
    a, b, c = year % 19, year // 100, year % 100
    d, e = divmod(b, 4)
    g = (8 * b + 13) // 25
    h = (19 * a + b - d - g + 15) % 30
    i, k = divmod(c, 4)
    weekday = (32 + 2 * e + 2 * i - h - k) % 7
    m = (a + 11 * h + 19 * weekday) // 433
    month, day = divmod(h + weekday - 7 * m + 114, 31)
    return dt.date(year, month, day + 1)


def _easter(now: dt.datetime) -> Range:
    """The last Easter weekend begun before ``now``: Good Friday to Easter Monday."""
    year = now.year
    day = easter_day(year)
    if dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC) - dt.timedelta(days=2) > now:
        day = easter_day(year - 1)
    start = dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC) - dt.timedelta(days=2)
    return start, start + dt.timedelta(days=4)


def _christmas(now: dt.datetime) -> Range:
    """The last Christmas holidays begun before ``now``: December 20 to January 3."""
    year = now.year if now >= dt.datetime(now.year, 12, 20, tzinfo=dt.UTC) else now.year - 1
    start = dt.datetime(year, 12, 20, tzinfo=dt.UTC)
    return start, start + dt.timedelta(days=14)


def _spring_festival(now: dt.datetime, year: str | None) -> Range:
    """The weeks the Spring Festival falls in (late January to late February; its day moves
    with the moon) of this year, or of last year where ``year`` is 去年 or they are to come."""
    start = dt.datetime(now.year, 1, 20, tzinfo=dt.UTC)
    if year == "去年" or start > now:
        start = start.replace(year=start.year - 1)
    return start, start + dt.timedelta(days=35)


def _ago(now: dt.datetime, count: str, unit: str) -> Range:
    n = int(count) if count.isdigit() else _NUMBERS[count]
    if unit == "day":
        return _day(now, n)
    if unit == "week":
        return _week(now, n)
    if unit == "month":
        return _months(now.year, now.month - n, 1)
    return _months(now.year - n, 1, 12)


_ZH_NUM = "[一两二三四五六七八九十\\d]+"
_ZH: list[tuple[str, _Build]] = [
    *((chinese, _of_now(at)) for _, chinese, at in _DAYS_AND_WEEKS),
    (r"上上个?月", lambda m, now: _months(now.year, now.month - 2, 1)),
    (r"上个?月", lambda m, now: _months(now.year, now.month - 1, 1)),
    (r"(?:这|本)个?月", lambda m, now: _months(now.year, now.month, 1)),
    (r"(去年|今年)?(?:春节|过年)", lambda m, now: _spring_festival(now, m.group(1))),
    (r"(去年|今年)?年初", lambda m, now: _months(now.year - (m.group(1) == "去年"), 1, 2)),
    (r"圣诞", lambda m, now: _christmas(now)),
    (r"复活节", lambda m, now: _easter(now)),
    (
        r"(去年|今年)?(春|夏|秋|冬)(?:天|季|初|末)",
        lambda m, now: _zh_season(now, m.group(1), _ZH_SEASONS[m.group(2)]),
    ),
    (r"前年", lambda m, now: _months(now.year - 2, 1, 12)),
    (
        r"(去年|今年)?(十[一二]|[一二三四五六七八九十]|1[0-2]|[1-9])月(?!份?以)份?",
        lambda m, now: _zh_month(now, m.group(1), m.group(2)),
    ),
    (r"去年", lambda m, now: _months(now.year - 1, 1, 12)),
    (r"今年", lambda m, now: _months(now.year, 1, 12)),
    (
        "(" + _ZH_NUM + ")(天|周|个?星期|个?月|年)(?:以)?前",
        lambda m, now: _zh_ago(now, m.group(1), m.group(2)),
    ),
]


def _zh_count(text: str) -> int:
    if text.isdigit():
        return int(text)
    if text.startswith("十"):
        return 10 + _ZH_NUMBERS.get(text[1:], 0)
    if "十" in text:
        tens, _, ones = text.partition("十")
        return _ZH_NUMBERS.get(tens, 1) * 10 + _ZH_NUMBERS.get(ones, 0)
    return _ZH_NUMBERS.get(text, 1)


def _zh_ago(now: dt.datetime, count: str, unit: str) -> Range:
    n = _zh_count(count)
    if unit == "天":
        return _day(now, n)
    if unit.endswith("周") or unit.endswith("星期"):
        return _week(now, n)
    if unit.endswith("月"):
        return _months(now.year, now.month - n, 1)
    return _months(now.year - n, 1, 12)


def _zh_season(now: dt.datetime, year: str | None, first: int) -> Range:
    if year == "去年":
        return _months(now.year - 1, first, 3)
    if year == "今年":
        return _months(now.year, first, 3)
    return _season(now, first, last=False)


def _zh_month(now: dt.datetime, year: str | None, month: str) -> Range:
    number = int(month) if month.isdigit() else _ZH_MONTHS[month]
    if year == "去年":
        return _months(now.year - 1, number, 1)
    if year == "今年":
        return _months(now.year, number, 1)
    return _months(_before(now, number), number, 1)


# NOTE: a request or a plan ("what should I cook tonight", "recommend a film for this
# weekend", "这周末推荐去哪玩") names a time to come, not the time of what it needs: a range
# that holds ``now`` is then not read as a filter.
_PLAN_EN = re.compile(
    r"\b(?:should|shall|recommend|suggest|plan|planning|going to|gonna|will|want to|to try|"
    r"ideas?|can you|could you)\b"
)
_PLAN_ZH = re.compile(r"推荐|建议|应该|打算|准备|计划|想要|要不要")
# NOTE: and in a Chinese request (not one about what was recommended, "你推荐的") a season or
# month named bare, with no year ("春天想去哪玩，推荐一下"), is the one to come, not the last.
_BARE_ZH = re.compile(
    r"(?:春|夏|秋|冬)(?:天|季|初|末)|(?:十[一二]|[一二三四五六七八九十]|1[0-2]|[1-9])月份?"
)
_SAID_ZH = re.compile(r"你[^，。？！,?!]{0,4}(?:推荐|建议)")


def when_in_query(q: str, now: dt.datetime) -> tuple[Range | None, str]:
    """The dates the first time named in ``q`` covers against ``now`` (``MARGIN`` wider each side,
    never past ``now``) and ``q`` without it; ``(None, q)`` for none. In a request or a plan, a
    range that holds ``now`` or a bare Chinese season or month is a time to come, not read."""
    lower = q.lower()
    plans = _PLAN_EN.search(lower) is not None or _PLAN_ZH.search(lower) is not None
    requests = _PLAN_ZH.search(lower) is not None and _SAID_ZH.search(lower) is None
    for pattern, build in (*_EN, *_ZH):
        match = re.search(pattern, lower)
        if match is None or (requests and _BARE_ZH.fullmatch(match.group()) is not None):
            continue
        try:
            start, end = build(match, now.astimezone(dt.UTC))
            if start >= now or (plans and end > now):
                continue
            found = (start - MARGIN, min(end + MARGIN, now + dt.timedelta(seconds=1)))
        except (OverflowError, ValueError):
            # NOTE: a ``now`` at the calendar's ends (year 1 or 9999) names no time around it.
            continue
        rest = (q[: match.start()] + " " + q[match.end() :]).strip()
        return found, rest or q
    return None, q


# --- a time relative to an event ------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """A time a question names relative to an event: ``phrase`` (the event, in the question's
    words), ``relation`` (``before``, ``after`` or ``during``) and ``span`` (how far from the
    event; ``None``: any time before or after it)."""

    phrase: str
    relation: str
    span: dt.timedelta | None

    def window(self, at: dt.datetime, now: dt.datetime) -> tuple[dt.datetime | None, dt.datetime]:
        """The dates this names for an event told of at ``at``: ``span`` before or after it, or
        ``DURING`` around it, ``MARGIN`` wider each side, never past ``now`` (start ``None``:
        any time before)."""
        day = dt.datetime(at.year, at.month, at.day, tzinfo=dt.UTC)
        start: dt.datetime | None
        if self.relation == "during":
            start, end = day - DURING, day + DURING + dt.timedelta(days=1)
        elif self.relation == "before":
            start = None if self.span is None else day - self.span - MARGIN
            end = day + dt.timedelta(days=1) + MARGIN
        else:
            start = day - MARGIN
            end = now if self.span is None else day + dt.timedelta(days=1) + self.span + MARGIN
        return start, min(end, now + dt.timedelta(seconds=1))


# How far around an event a time "during" it reaches (a stay, a trip).
DURING = dt.timedelta(days=7)
# An event named in more words than this is kept to its first (English) or last (Chinese) ones.
EVENT_WORDS = 8
EVENT_CHARS = 10

_EVENT_UNITS = {
    "day": 1, "night": 1, "morning": 1, "evening": 1, "afternoon": 1, "week": 7, "weekend": 7,
    "month": 31, "天": 1, "晚": 1, "晚上": 1, "周": 7, "周末": 7, "星期": 7, "礼拜": 7, "月": 31,
}  # fmt: skip
_EVENT_EN = re.compile(
    r"\b(?:(?:in |during |on |over |at )?the (?P<unit>day|night|morning|evening|afternoon|week"
    r"|weekend|month) |(?P<count>\d+|an?|one|two|three|four|five|six|seven|eight|nine|ten"
    r"|couple of|few) (?P<units>day|night|week|month)s? |(?P<near>right|just|shortly|soon"
    r"|straight) )?(?P<rel>before|after|since|during|while) (?P<event>[^,.;:!?()\"]+)"
)
# Words before "after" that make it no time ("looked after", "named after").
_NOT_EN_TEXT = "look looks looked looking take takes took named ask asks asked run ran chase chased"
_NOT_EN = frozenset(_NOT_EN_TEXT.split())
# The words that name no event of their own, and where an English event's words stop.
_EVENT_EMPTY_TEXT = """i me my we us our you your he him his she her they them their it its this
    that these those the a an to of in on at for with from then now all was were is are be been
    am did do does had has have got get went go going came come just last first next time times
    day days week weeks weekend month months year years night morning evening afternoon
    yesterday today tonight tomorrow ago before after once again ever said told talked asked
    mentioned spring summer autumn fall winter monday tuesday wednesday thursday friday saturday
    sunday"""
_EVENT_EMPTY_EN = frozenset(_EVENT_EMPTY_TEXT.split())
_EVENT_END_EN = re.compile(r"\b(?:and|but|or|so|what|which|where|who|whom|why|how)\b")
_EVENT_ZH = re.compile(
    r"(?P<event>[\u4e00-\u9fff0-9A-Za-z]{2,})"
    r"(?:(?P<rel>之前|以前|之后|以后)|(?P<bare>[前后])(?=的?[那这]?[一两二三四五六七八九十\d]*个?"
    r"(?:天|晚|周|星期|礼拜|月)))"
    r"(?:的?[那这]?(?P<n>[一两二三四五六七八九十\d]+)?个?(?P<unit>天|晚上?|周末?|星期|礼拜|月))?"
    r"|(?P<during_event>[\u4e00-\u9fff0-9A-Za-z]{2,})(?:的时候|期间|那段时间|那阵子|那几天)"
)
# What a Chinese event's run may begin with that is no part of it (who, and "when"/"from").
_EVENT_LEAD_ZH = re.compile(r"^(?:我们|我|咱们|你|他们|他|她|在|是|从|自从|自|当|就|刚|那|这)+")


def _event_en(q: str) -> Event | None:
    lower = q.lower()
    at = 0
    while (match := _EVENT_EN.search(lower, at)) is not None:
        # NOTE: the next one may begin inside this one's event ("after my cat while I was away").
        at = match.start("rel") + 1
        before = lower[: match.start()].split()
        if match.group("rel") == "after" and before and before[-1] in _NOT_EN:
            continue
        phrase = _EVENT_END_EN.split(match.group("event"))[0]
        words = phrase.split()[:EVENT_WORDS]
        if not [w for w in words if re.sub(r"['’]s$", "", w) not in _EVENT_EMPTY_EN]:
            continue
        rel = {"since": "after", "while": "during"}.get(match.group("rel"), match.group("rel"))
        span: dt.timedelta | None = None
        if match.group("unit"):
            span = dt.timedelta(days=_EVENT_UNITS[match.group("unit")])
        elif match.group("units"):
            count = match.group("count")
            n = int(count) if count.isdigit() else _NUMBERS[count]
            span = dt.timedelta(days=n * _EVENT_UNITS[match.group("units")])
        return Event(" ".join(words), rel, span)
    return None


def _event_zh(q: str) -> Event | None:
    for match in _EVENT_ZH.finditer(q):
        during = match.group("during_event")
        run = during or match.group("event")
        run = _EVENT_LEAD_ZH.sub("", run.rstrip("以之"))[-EVENT_CHARS:]
        if len(run) < 2:
            continue
        if during:
            return Event(run, "during", None)
        rel = "before" if "前" in (match.group("rel") or match.group("bare")) else "after"
        span: dt.timedelta | None = None
        if match.group("unit"):
            days = _EVENT_UNITS[match.group("unit")]
            span = dt.timedelta(
                days=days * (_zh_count(match.group("n")) if match.group("n") else 1)
            )
        return Event(run, rel, span)
    return None


# NOTE: a question about what the assistant said ("how long did you tell me to wait before
# moving the furniture", "你说炖牛肉的时候要加什么") orders steps of its advice, and a question
# about a time to come ("where are we going after the wedding") was answered before the event:
# neither names a time of the user's own.
_ADVICE_OR_PLAN_EN = re.compile(r"\byou\b|\bwill\b|'ll\b|\b(?:are|am|is) (?:we|i|you|they) going\b")
_ADVICE_OR_PLAN_ZH = re.compile(r"你|要去|会去")


def _names_a_time(phrase: str) -> bool:
    return any(re.search(pattern, phrase) for pattern, _ in (*_EN, *_ZH))


def event_in_query(q: str) -> Event | None:
    """The event a time in ``q`` is relative to ("the week before my trip", "搬家以后"), or
    ``None``: no word of its own ("before that"), a calendar time ("年初的时候"), or a question
    about the assistant's words or a plan."""
    lower = q.lower()
    if any(p.search(lower) for p in (_PLAN_EN, _PLAN_ZH, _ADVICE_OR_PLAN_EN, _ADVICE_OR_PLAN_ZH)):
        return None
    event = _event_en(q) or _event_zh(q)
    if event is None or _names_a_time(event.phrase):
        return None
    return event
