"""The rule-based extractor's rules for what changes in a user's life, English and Chinese: a thing
sold and another bought, a move, a new job or workplace. Each writes the fact as it is now; its
versions keep what it was.

A thing goes to ``car`` or ``phone`` when recognisably one (a word or a make), else to ``owns``.
"""

from __future__ import annotations

import re

from memory.extraction.text import _I, _cut, _edges, _fold, _is_han, _one, _r, _Rule, _rules, _words
from memory.extraction.values import (
    _EN_VALUE_STOP,
    _en_plain,
    _job_en,
    _place_en,
    _place_zh,
    _zh_clean,
    _zh_ok,
)

_EN_MAKES = {
    "car": _words(
        "car|cars|vehicle|suv|hatchback|saloon|sedan|estate|van|pickup|truck|ev|campervan|"
        "convertible|golf|polo|civic|corolla|prius|yaris|tesla|model 3|model y|kia|niro|e-niro|"
        "hyundai|toyota|honda|ford|fiesta|focus|vw|volkswagen|bmw|audi|mercedes|nissan|leaf|"
        "renault|peugeot|skoda|volvo|mazda|subaru|fiat|mini|jeep|porsche|lexus|byd|polestar"
    ),
    "phone": _words(
        "phone|smartphone|mobile|iphone|pixel|galaxy|android|oneplus|xiaomi|huawei|motorola|nokia"
    ),
}
_ZH_MAKES = {
    "car": re.compile(
        r"车|SUV|比亚迪|特斯拉|卡罗拉|宝马|奔驰|奥迪|大众|丰田|本田|蔚来|理想|小鹏|吉利|长安|"
        r"哈弗|思域|凯美瑞|雅阁|朗逸|速腾|极氪|问界|五菱",
        _I,
    ),
    "phone": re.compile(
        r"手机|iPhone|苹果1\d|华为|小米\d|红米|OPPO|vivo|荣耀|三星|Mate|Pixel|一加", _I
    ),
}
_EN_THING_LEAD = re.compile(
    r"^(?:(?:a|an|the|my|our|this|that|one|some)\s+)?"
    r"(?:(?:new|used|second-hand|secondhand|brand-new|brand\s+new|refurbished|old|shiny|little|"
    r"nice|cheap|fancy|electric)\s+)*",
    _I,
)
_EN_THING_STOP = re.compile(
    r"\s(?:and|but|so|for|from|at|on|in|with|last|yesterday|today|this|instead|now|recently|"
    r"because|which|that|to|off)\b.*$",
    _I,
)
_ZH_THING_LEAD = re.compile(
    r"^(?:了|又|新|一辆|一台|一部|一个|一款|辆|台|部|个|款|新的|二手的?|一辆新的?|一部新的?)+"
)
# What says only that there is a new one, not which: "I got a new phone", "我换了新手机".
_BARE = frozenset(
    {
        *("car", "cars", "phone", "mobile", "smartphone", "vehicle", "one"),
        *("车", "汽车", "新车", "手机", "新手机", "电车"),
    }
)
# A list fact of things the user has; the other keys here hold one value.
CHANGE_LIST_KEYS = frozenset({"owns"})
_ZH_THING_STOP = re.compile(r"[，,。！!？?；;]|之后|以后|后来|了$|，")


def _make(text: str, *, han: bool) -> str | None:
    """``car`` or ``phone`` where ``text`` names one, else ``None``."""
    for key, pattern in (_ZH_MAKES if han else _EN_MAKES).items():
        if isinstance(pattern, re.Pattern):
            if pattern.search(text):
                return key
        elif re.search(rf"(?<![\w-]){pattern}(?![\w-])", text, _I):
            return key
    return None


def _thing_en(value: str) -> str | None:
    value = _edges(_cut(_cut(value, _EN_VALUE_STOP), _EN_THING_STOP))
    value = _EN_THING_LEAD.sub("", value)
    return _en_plain(value, max_words=5) if value else None


def _thing_zh(value: str) -> str | None:
    value = _zh_clean(_cut(value, _ZH_THING_STOP))
    m = _ZH_THING_LEAD.match(_fold(value))
    value = _zh_clean(value[m.end() :] if m else value)
    if not value:
        return None
    if not _is_han(value[0]):
        return _thing_en(value)
    return value if _zh_ok(value) else None


def _swap(key: str | None, *, han: bool):  # type: ignore[no-untyped-def]
    """The check of a swap rule for ``key`` (``None``: ``owns``, what no make names): the new
    thing, where the old or the new one is of ``key``."""

    def check(value: str, m: re.Match[str]) -> list[str]:
        new = _thing_zh(value) if han else _thing_en(value)
        if not new:
            return []
        old = (m.groupdict().get("old") or "").strip()
        if new.casefold() in _BARE:
            return []
        made = _make(new, han=han) or (_make(old, han=han) if old else None)
        return [new] if made == key else []

    return check


# NOTE: between the subject and the verb, only adverbs ("I finally sold", "我刚换了").
_EN_ADV = r"(?:(?:just|finally|recently|also|eventually|actually|already|then)\s+)*"
_EN_SUBJECT = rf"(?:(?:i|we)\s+{_EN_ADV})?"
_EN_OLD = r"(?:my|our|the)\s+(?:old\s+)?(?P<old>.+?)"
_EN_SOLD = (
    rf"^{_EN_SUBJECT}(?:sold|got\s+rid\s+of|traded\s+in|scrapped|let)\s+{_EN_OLD}"
    r"(?:\s+go(?:\s+to\s+.+?)?)?\s+and\s+(?:then\s+)?(?:i\s+)?"
    r"(?:bought|got|picked\s+up|purchased|went\s+for|replaced\s+it\s+with)\s+(?P<v>.+)$"
)
_EN_TRADED = (
    rf"^(?:i|we)\s+{_EN_ADV}(?:traded|swapped|exchanged|switched)\s+(?:in\s+)?{_EN_OLD}"
    r"\s+(?:for|to)\s+(?P<v>.+)$"
)
_EN_REPLACED = rf"^(?:i|we)\s+{_EN_ADV}replaced\s+{_EN_OLD}\s+with\s+(?P<v>.+)$"
_EN_TO_REPLACE = rf"^(?:i|we)\s+{_EN_ADV}(?:bought|got)\s+(?P<v>.+?)\s+to\s+replace\s+{_EN_OLD}$"
_EN_SWAPS = (_EN_SOLD, _EN_TRADED, _EN_REPLACED, _EN_TO_REPLACE)
_EN_JOB_START = (
    r"(?:started|begun|began|landed|got|took)\s+(?:a\s+new\s+job|a\s+job|work|working|"
    r"my\s+new\s+job|a\s+new\s+position|a\s+new\s+role|a\s+position|a\s+role)"
)


_EN_WHEN = re.compile(
    r"\s+(?:in|on|during|over|since|by)\s+(?:the\s+)?(?:(?:early|late|mid)\s+)?"
    r"(?:january|february|march|april|may|june|july|august|september|october|november|"
    r"december|spring|summer|autumn|fall|winter|\d{4})\b.*$",
    _I,
)


def _moved_en(value: str) -> str | None:
    """Where the user moved: a place, without the time that follows it ("Lisbon in May")."""
    return _place_en(_cut(value, _EN_WHEN))


def _workplace_en(value: str) -> str | None:
    """A company or place of work: capitalised, as a place is."""
    return _place_en(re.split(r"\s+as\s+", value, maxsplit=1, flags=_I)[0])


_EN_CHANGE_RULES: tuple[_Rule, ...] = (
    *(_r(key, p, _swap(key, han=False)) for key in ("car", "phone") for p in _EN_SWAPS),
    *(_r("owns", p, _swap(None, han=False)) for p in _EN_SWAPS),
    *_rules(
        "location",
        _one(_moved_en),
        rf"^we(?:'ve|\s+have)?\s+{_EN_ADV}(?:moved|relocated)\s+(?:back\s+)?to\s+(?P<v>.+)$",
        rf"^(?:i|we)(?:'ve|\s+have)?\s+{_EN_ADV}(?:moved|relocated)\s+from\s+.+?\s+to\s+(?P<v>.+)$",
    ),
    *_rules(
        "location",
        _one(_place_en),
        rf"^we\s+{_EN_ADV}(?:now\s+)?(?:live|reside)\s+in\s+(?P<v>.+)$",
        r"^we(?:'re|\s+are)\s+(?:now\s+)?(?:living|based|settled)\s+in\s+(?P<v>.+)$",
    ),
    *_rules(
        "occupation",
        _one(lambda v: _job_en(v, strict=False)),
        rf"^i(?:'ve|\s+have)?\s+{_EN_ADV}{_EN_JOB_START}\s+as\s+(?P<v>.+)$",
        rf"^i(?:'m|\s+am)\s+{_EN_ADV}(?:now\s+)?(?:working|employed)\s+as\s+(?P<v>.+)$",
    ),
    *_rules(
        "workplace",
        _one(_workplace_en),
        rf"^i(?:'ve|\s+have)?\s+{_EN_ADV}(?:{_EN_JOB_START}\s+(?:at|with)|joined)\s+(?P<v>.+)$",
        (
            rf"^(?:i|i'm|i\s+am)\s+{_EN_ADV}(?:now\s+|currently\s+)?(?:work|working)\s+(?:at|for)"
            r"\s+(?P<v>.+)$"
        ),
    ),
)

_ZH_ADV = r"(?:也|还|都|就|又|刚|刚刚|最近|已经|终于|现在|目前|如今|上个月|上周|今年)*"
_ZH_NEW = r"(?:换了|换成了|换成|换|买了|入手了|提了|新买了)"


def _workplace_zh(value: str) -> str | None:
    value = _zh_clean(value)
    if not value or value in ("家", "家里", "这里", "那里", "这儿", "那儿"):
        return None
    return _place_zh(value)


_ZH_CHANGE_RULES: tuple[_Rule, ...] = (
    *(
        _r(key, rf"^我{_ZH_ADV}{_ZH_NEW}(?P<v>.+)$", _swap(key, han=True))
        for key in ("car", "phone")
    ),
    _r(
        "location",
        rf"^我们{_ZH_ADV}(?:全家)?(?:搬到了|搬到|搬去了|搬去|搬来了|搬来|搬家到|移居到)"
        r"(?P<v>.+?)(?:来了|去了|住了|生活了|了)?$",
        _one(_place_zh),
    ),
    *_rules(
        "workplace",
        _one(_workplace_zh),
        (
            rf"^我{_ZH_ADV}(?:跳槽到了|跳槽到|跳槽去了|入职了|入职|加入了)(?P<v>[^，,]+?)"
            r"(?:工作|上班)?(?:了)?$"
        ),
        rf"^我{_ZH_ADV}在(?P<v>[^，,]+?)(?:工作|上班)(?:了)?$",
    ),
)

# A clause that leaves out its subject after a first-person one: "我把旧车卖了，买了一辆比亚迪".
_ZH_CHANGE_CARRY = re.compile(rf"^{_ZH_ADV}{_ZH_NEW}")
