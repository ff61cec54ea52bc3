"""Value checks of the rule-based extractor, shared by its English and Chinese rules: the word
lists, and the cleaning of a name, place, job, language or list item in either script."""

from __future__ import annotations

import re

from memory.extraction.text import (
    _HAN,
    _I,
    _cut,
    _edges,
    _fits,
    _fold,
    _is_han,
    _one,
    _strip_lead,
)
from memory.extraction.words import (
    _DEMONYMS,
    _EN_COMMON,
    _EN_JOBS,
    _EN_LANGUAGES,
    _EN_NON_JOBS,
    _EN_NOT_ITEMS,
    _EN_PRONOUN_ANY,
    _EN_PRONOUN_START,
    _EN_VAGUE,
    _NAME_PARTICLES,
    _ZH_COMPOUND_SURNAMES,
    _ZH_JOBS,
    _ZH_LANGUAGES,
    _ZH_NON_JOBS,
    _ZH_NOT_LANGUAGES,
    _ZH_SURNAMES,
)

# NOTE: a value need not be in its rule's script ("我叫Jim"): both languages' checks live here, so
# neither rule module imports the other.

# English
_EN_NEG = re.compile(
    r"\b(?:not|never|no\s+longer|nobody|neither|nor|hardly|barely|rarely|dont|cant|cannot|"
    r"wont|aint|isnt|didnt|doesnt|wasnt)\b|n't\b",
    _I,
)

_NAME_BOUNDARY = re.compile(
    r"^(?:(?:from|here|and|by|btw|nice|lol|haha+|hehe+|speaking|again|too|ok|okay|though)\b"
    r"|:\)|:D|[!.]+)",
    _I,
)
_EN_JOB_SUFFIX = re.compile(
    r"(?:er|or|ist|yst|ician|eer|ant|ent|ier|ary|grapher|smith|wright"
    r"|(?<=\w{3})(?:man|woman|person))$"
)


_EN_VALUE_STOP = re.compile(
    r"\s(?:because|cause|cuz|since|but|though|although|while|whereas|when|whenever|if|unless|"
    r"until|so|which|who|whom|whose|where|that|lol|haha+|lmao|btw|by\s+the\s+way|as\s+long\s+as|"
    r"right|anyway|:\)|:D)\b.*$",
    _I,
)
_EN_ITEM_TRAIL = re.compile(
    r"\s(?:a\s+lot|a\s+ton|lots|very\s+much|so\s+much|too|as\s+well|the\s+most|the\s+best|"
    r"more\s+than|better\s+than|over|instead\s+of|especially|in\s+general|these\s+days|"
    r"nowadays|sometimes|often|a\s+bit|a\s+little|now|anymore|any\s+more|lately|actually|"
    r"really|on\s+weekends|at\s+weekends|in\s+my\s+(?:free|spare)\s+time|every\s+day|"
    r"every\s+weekend|generally|though|honestly)\b.*$",
    _I,
)
_EN_PLACE_STOP = re.compile(
    r"\s(?:with|for|near|now|currently|these\s+days|nowadays|at\s+the\s+moment|right\s+now|"
    r"for\s+now|anymore|at|on|since|too|as\s+well|and\s+(?:i|my|work|have)|after|before|"
    r"to|from|ever|again|full[- ]time|permanently|last|next|this|ago|yesterday|recently|"
    r"earlier|in\s+\d{4}|back\s+in|years?|months?|weeks?)\b.*$",
    _I,
)
_EN_JOB_STOP = re.compile(
    r"\s(?:at|for|in|with|from|since|and|but|on|as|here|there|now|currently|these\s+days|"
    r"nowadays|full[- ]time|part[- ]time|for\s+a\s+living|by\s+(?:profession|trade))\b.*$",
    _I,
)
_EN_LANG_STOP = re.compile(
    r"\s(?:fluently|well|natively|at|with|to|in|on|every|a\s+lot|too|as\s+well|now|"
    r"pretty|very|quite|perfectly|fine|really|since|because)\b.*$",
    _I,
)
_EN_LANG_LEAD = re.compile(
    r"^(?:(?:a\s+little|a\s+bit\s+of|a\s+bit|some|basic|fluent|good|decent|conversational|"
    r"broken|native|perfect|excellent|very\s+little|mostly|mainly|only|both|also)\s+)+",
    _I,
)
_EN_LIST_SPLIT = re.compile(r"\s*(?:,|&|/|\band\b|\bor\b|\bas\s+well\s+as\b|\bplus\b)\s*", _I)
_EN_ITEM_LEAD = re.compile(r"^(?:(?:both|either|also|and|or|plus|especially|to)\s+)+", _I)
_NAME_TOKEN = re.compile(r"[^\W\d_](?:[^\W\d_]|['\-.](?=[^\W\d_]))*\.?")


def _en_plain(value: str, *, max_words: int) -> str | None:
    """A noun phrase ``value`` with no pronoun, negation, or vague head; else ``None``."""
    value = _edges(value)
    words = [w.lower().strip(".,!?'\"") for w in value.split()]
    if not words or len(words) > max_words or not _fits(value):
        return None
    if words[0] in _EN_PRONOUN_START or any(w in _EN_PRONOUN_ANY for w in words):
        return None
    if words[-1] in _EN_VAGUE or _EN_NEG.search(value) or not re.search(r"[^\W\d_]", value):
        return None
    return value


def _name(value: str, *, strict: bool) -> str | None:
    """The person's name at the start of ``value``; ``strict`` asks for capitalised words.

    Keeps the user's casing; rejects ordinary words, nationalities, possessives, numbers.
    """
    value = _edges(_ZH_TAIL.sub("", value))
    if not value:
        return None
    if _is_han(value[0]):
        return _name_zh(value, strict=strict)
    tokens = value.split()
    name: list[str] = []
    for i, token in enumerate(tokens):
        bare = token.rstrip(",!?;:")
        if not _NAME_TOKEN.fullmatch(bare) or _is_han(bare):
            break
        low = bare.lower().rstrip(".")
        following = tokens[i + 1] if i + 1 < len(tokens) else ""
        if name and low in _NAME_PARTICLES and following[:1].isupper():
            name.append(bare)
            continue
        if low in _EN_COMMON or low in _EN_PRONOUN_START or bare.endswith(("'s", "s'")):
            break
        if (strict or (name[:1] and name[0][0].isupper())) and not bare[0].isupper():
            break
        name.append(bare)
        if bare != token:
            break
    if not name or len(name) > 5:
        return None
    rest = " ".join(tokens[len(name) :])
    if rest and strict and not _NAME_BOUNDARY.match(rest):
        return None
    if any(t.lower() in _DEMONYMS for t in name) or (strict and value.isupper()):
        return None
    if strict and name[0].lower().rstrip(".") in _NAME_PARTICLES:
        return None
    result = " ".join(name)
    return result if _fits(result) and len(result) <= 64 else None


# ``_name`` as a rule reads it: among other words, or only when the value is exactly a name.
_NAME = _one(lambda v: _name(v, strict=False))
_NAME_STRICT = _one(lambda v: _name(v, strict=True))


def _name_call(value: str) -> str | None:
    """What the user asks to be called ("call me Jim"): a name, lower case allowed."""
    return _name(value, strict=False)


def _place_en(value: str) -> str | None:
    value = _edges(_cut(_cut(value, _EN_VALUE_STOP), _EN_PLACE_STOP))
    if not value or len(value.split()) > 6 or not _fits(value):
        return None
    if _is_han(value[0]):
        return value if not _ZH_BLOCK_ANY.search(_fold(value)) else None
    words = value.split()
    first = words[1] if words[0].lower() == "the" and len(words) > 1 else words[0]
    if not first[0].isupper():
        return None
    return _en_plain(value, max_words=6)


def _job_en(value: str, *, strict: bool) -> str | None:
    value = _edges(_cut(_cut(value, _EN_VALUE_STOP), _EN_JOB_STOP))
    value = re.sub(r"^(?:an?|the)\s+", "", value, flags=_I)
    value = _en_plain(value, max_words=5) or ""
    if not value:
        return None
    words = [w.lower() for w in value.split()]
    head = words[-1]
    if head in _EN_COMMON or head in _EN_NON_JOBS or words[0] in ("former", "ex", "future"):
        return None
    if strict and head not in _EN_JOBS and not _EN_JOB_SUFFIX.search(head):
        return None
    if any(w in _DEMONYMS for w in words) and head not in _EN_JOBS:
        return None
    return value


def _language_en(value: str) -> str | None:
    value = _edges(_strip_lead(_cut(_cut(value, _EN_VALUE_STOP), _EN_LANG_STOP), _EN_LANG_LEAD))
    if not value or len(value.split()) > 5 or not _fits(value):
        return None
    if _is_han(value[0]):
        return _language_zh(value)
    for part in _EN_LIST_SPLIT.split(value):
        if not part:
            continue
        words = part.split()
        if words[-1].lower() == "language" and len(words) > 1:
            words = words[:-1]
        if not all(w[0].isupper() or w.lower() in _EN_LANGUAGES for w in words):
            return None
        if any(w.lower() in _EN_COMMON for w in words):
            return None
    return value


def _items_en(value: str) -> list[str]:
    value = _cut(_cut(value, _EN_VALUE_STOP), _EN_ITEM_TRAIL)
    items = []
    for part in _EN_LIST_SPLIT.split(value):
        item = _en_plain(_strip_lead(_edges(part), _EN_ITEM_LEAD), max_words=6)
        if item and item.lower() not in _EN_NOT_ITEMS:
            items.append(item)
    return items


_ZH_NAME_PREFIX = re.compile(f"^(?:小|老|阿)[{_HAN}]{{1,2}}$")
_ZH_NAME_BOUNDARY = re.compile(
    r"^(?:今年|现在|目前|是|在|住|来自|喜欢|爱|就|吧|啊|哦|呀|啦|了|我|的|一名|从事|做|"
    r"今|也|还|平时|，|,|\s|!|！)"
)
_ZH_BLOCK_ANY = re.compile(
    r"你|您|他|她|它|们|谁|什么|哪|吗|怎么|别人|人家|大家|自己|[这那][个首部本家些种样里边儿位]"
)


def _name_zh(value: str, *, strict: bool) -> str | None:
    """A Chinese name at the start of ``value`` followed by nothing or a clause boundary."""
    folded = _fold(value)
    if "·" in value or "•" in value:
        m = re.match(f"[{_HAN}]{{1,8}}(?:[·•][{_HAN}]{{1,8}})+", value)
        return m.group() if m and (not strict or m.end() == len(value)) else None
    for length in (4, 3, 2):
        head, rest = value[:length], folded[length:]
        if len(head) < length or not re.fullmatch(f"[{_HAN}]+", head):
            continue
        if rest and (strict or not _ZH_NAME_BOUNDARY.match(rest)):
            continue
        surname = head[:2] in _ZH_COMPOUND_SURNAMES or head[0] in _ZH_SURNAMES
        if _ZH_BLOCK_ANY.search(_fold(head)) or _zh_job_word(head) or head.endswith("人"):
            continue
        if surname or (not strict and _ZH_NAME_PREFIX.match(head)):
            return head
    return None


_ZH_TAIL = re.compile(
    r"(?:就行了?|就好了?|就可以了?|就是了|即可|好了|而已|吧|啊|呀|哦|噢|喔|啦|哈+|嘛|呢|了|的|"
    r"[~～。.!！]|\s)+$"
)


def _zh_clean(value: str) -> str:
    value = _edges(value)
    while True:
        stripped = _ZH_TAIL.sub("", value)
        if stripped == value:
            return value
        value = stripped


_ZH_BLOCK_START = re.compile(r"^(?:这|一个|个|了|过|着|得|的|上了|死|不|没|去|来|把|被|给|让)")


def _zh_ok(value: str, *, max_chars: int = 20) -> bool:
    folded = _fold(value)
    return (
        0 < len(value) <= max_chars
        and not _ZH_BLOCK_ANY.search(folded)
        and not _ZH_BLOCK_START.match(folded)
    )


_ZH_LIST_SPLIT = re.compile(
    r"、|，|,|以及|还有|或者|跟|(?<![温暖平缓柔随祥谦总饱附调讲共])和(?![平服谐气蔼善睦煦的])"
)


def _items_zh(value: str) -> list[str]:
    value = _zh_clean(
        _cut(value, re.compile(r"因为|所以|但是|但|不过|可是|因此|虽然|而且|并且|的时候|了$"))
    )
    folded = _fold(value)
    if folded[:1] in ("和", "跟", "与"):
        parts = [value]
    else:
        parts, start = [], 0
        for m in _ZH_LIST_SPLIT.finditer(folded):
            parts.append(value[start : m.start()])
            start = m.end()
        parts.append(value[start:])
    items = []
    for part in parts:
        item = _zh_clean(re.sub(r"^(?:也|都|还|还有|以及)", "", _edges(part)))
        if _is_han(item[:1]) and _zh_ok(item):
            items.append(item)
        elif item and not _is_han(item[:1]):
            items.extend(_items_en(item))
    return items


def _place_zh(value: str, *, bare: bool = False) -> str | None:
    value = _cut(
        value,
        re.compile(
            r"已经|有|快|差不多|大概|将近|好多年|很多年|多年|很久|挺久|[一二三四五六七八九十两几半\d]+"
            r"(?:多)?(?:年|个月|月|天|周|星期)|了$|的时候|这边|那边|这里|那里|一带|里面"
        ),
    )
    value = _zh_clean(value)
    if not _zh_ok(value) or re.match(r"^(?:我|在|一|院|校)", _fold(value)):
        return None
    if bare and (
        len(value) < 2 or value in ("酒店", "宾馆", "宿舍", "医院", "学校", "家里", "楼上", "楼下")
    ):
        return None
    if not _is_han(value[0]):
        return _place_en(value)
    return value


_ZH_JOB_SUFFIX = re.compile(
    r"(?:师|员|工|官|医|匠|(?:学|医|研究|实习|留学|博士|硕士|本科|大学|中学|高中|初中|小学)生|"
    r"(?:记|学|作|创业|工作|从业)者|(?:歌|选|水|骑|助|舵|鼓|吉他)手|(?<!大|国|人|老|专|东|自|管)家|"
    r"经理|总监|主管|老板|主任|职员|教授|律师|护士|警察|司机|会计|秘书|助理|编辑|演员|模特|"
    r"主播|博主|农民|工人|军人|商人|(?:校|院|店|厂|村|局|处|科|部|市|县|馆|站|社|董事|行)长)$"
)


def _zh_job_word(value: str) -> bool:
    folded = _fold(value)
    return folded in _ZH_JOBS or folded in _ZH_NON_JOBS or bool(_ZH_JOB_SUFFIX.search(folded))


def _job_zh(value: str, *, strict: bool) -> str | None:
    value = _cut(
        value,
        re.compile(r"已经|有|快|[一二三四五六七八九十两几\d]+(?:多)?(?:年|个月)|了$|，"),
    )
    value = _zh_clean(value)
    if not value:
        return None
    if not _is_han(value[0]):
        return value if value in _ZH_JOBS else _job_en(value, strict=strict)
    if not _zh_ok(value, max_chars=12) or value in _ZH_NON_JOBS:
        return None
    if value.endswith("人") and value not in _ZH_JOBS:
        return None
    if strict and value not in _ZH_JOBS and not _ZH_JOB_SUFFIX.search(_fold(value)):
        return None
    return value


def _language_zh(value: str) -> str | None:
    value = _strip_lead(
        value,
        re.compile(
            r"^(?:一点点|一点儿|一点|一些|几句|一口流利的|一口|流利的|标准的|地道的|很好的|很流利的|还算流利的)"
        ),
    )
    value = _zh_clean(_cut(value, re.compile(r"还|也|而且|，|,|说得|讲得|很|非常|比较")))
    if not value or len(value) > 20:
        return None
    parts = re.split(r"和|、|跟|以及|还有|或者|与", _fold(value))
    for part in parts:
        if not part:
            return None
        if not _is_han(part[0]):
            if not _language_en(part):
                return None
            continue
        if part in _ZH_NOT_LANGUAGES or not (2 <= len(part) <= 6):
            return None
        if part not in _ZH_LANGUAGES and not re.search(r"[语话文]$", part):
            return None
        if _ZH_BLOCK_ANY.search(part) or _ZH_BLOCK_START.match(part):
            return None
    return value
