"""The Chinese rules of the rule-based extractor: clause breaks, fillers, questions, negation,
the 叫我 check and the rules themselves (the checks of their values are in ``values``)."""

from __future__ import annotations

import re

from memory.extraction.text import (
    _HAN,
    _HAN_RE,
    _fold,
    _is_han,
    _items,
    _one,
    _r,
    _Rule,
    _rules,
    _set,
)
from memory.extraction.values import (
    _NAME,
    _NAME_STRICT,
    _items_zh,
    _job_zh,
    _language_zh,
    _name_call,
    _name_zh,
    _place_zh,
    _zh_clean,
    _zh_ok,
)

_ZH_CARRY_VERB = (
    r"(?:也|还|都|很|非常|特别|最|超|挺|就|又|却|平时|平常|一直|比较|更)*"
    r"(?:不太|不怎么|不是很|不|并不)?"
    r"(?:喜欢|爱|热爱|讨厌|受不了|住在|住|生活在|搬到|搬去|是|会说|会讲|说|讲|叫|在|当|做|从事)"
)
_ZH_CLAUSE_BREAK = re.compile(
    r"[，,：:（）()、]?(?:但是|不过|可是|而且|并且|同时|但|却)(?=我|" + _ZH_CARRY_VERB + ")"
    r"|[，,：:（）()]"
)
# A run-on "我叫王建国我喜欢打篮球": a new first-person statement begins mid-clause.
_ZH_RUN_ON = re.compile(
    r"(?<=[" + _HAN + r"A-Za-z])(?<![和跟与叫让给对把被替帮说想觉得认为以为希望知道听说记得猜])"
    r"(?=我(?:也|还|很|最|特别|非常|平时|现在)*(?:的名字|叫|喜欢|爱|讨厌|不喜欢|住在|是一名|会说)"
    r")"
)


_ZH_FILLER = re.compile(
    r"^(?:嗯+|恩+|哦+|噢+|喔+|啊+|呃+|额+|唔+|嗨|哈喽|哈啰|你好|您好|大家好|对了|其实|另外|"
    r"顺便说一下|顺便说一句|顺便提一下|顺便|那个|然后|话说|就是说|而且|并且|所以|不过|但是|"
    r"可是|还有|好的|好吧|是的|没错|更正一下|纠正一下|更正|纠正|重新说一下|我是说|我的意思是|"
    r"记住|请记住|记一下|你记一下|告诉你|跟你说|说一下|补充一下|自我介绍一下)[，,、\s!！~～]*"
)


_ZH_QUESTION = re.compile(
    r"吗|呢$|什么|啥|谁|哪|怎么|怎样|为什么|为何|是否|是不是|有没有|会不会|能不能|可不可以|"
    r"对不对|好不好|要不要|喜不喜欢|叫不叫|住不住|多少|几岁|对吧|是吧|记得我"
)


_ZH_CALL_ME_REQUEST = re.compile(
    r"^((?:你|您)?(?:能|可以|以后能|以后可以)?叫我.+?)(?:吗|好吗|可以吗|行吗|好不好|行不行)$"
)


_ZH_ADV = (
    r"(?:也|还|都|很|非常|特别|超级|超|挺|蛮|最|真的|确实|一直|平时|平常|一般|通常|经常|比较|"
    r"尤其|更|现在|目前|如今|已经|其实|倒是|真|好|总是|从小就|从小|一向|向来|还是|本身|主要|最近|刚刚|刚|"
    r"就|同时|又|却|也很|也是|还是很|实际上|本人)*"
)
_ZH_CALL_FILLER = re.compile(r"(?:就行了?|就好了?|就可以了?|即可|好了|吧)\s*$")
_ZH_CALL_NOT_NAMES = _set(
    "起床 吃饭 一声 过去 回来 出去 帮忙 干活 做饭 上班 下楼 起来 回家 过来 睡觉 开门 名字 名字吧"
)


def _call_zh(value: str, m: re.Match[str]) -> list[str]:
    """叫我X: a surname or 小/老/阿 form, Latin letters, or any short name the user marks as
    the form of address ("叫我建国就行", "你可以叫我建国")."""
    explicit = bool(_ZH_CALL_FILLER.search(_fold(value))) or bool(m.groupdict().get("polite"))
    value = _zh_clean(value)
    if not value or value in _ZH_CALL_NOT_NAMES:
        return []
    if not _is_han(value[0]):
        name = _name_call(value)
        return [name] if name else []
    name = _name_zh(value, strict=False)
    if name:
        return [name]
    # NOTE: a given name alone ("建国") or a mixed one ("阿May") only when clearly offered.
    mixed = re.fullmatch(f"[{_HAN}A-Za-z]{{1,12}}", value) and len(_HAN_RE.findall(value)) <= 4
    if explicit and mixed and _zh_ok(value):
        return [value]
    return []


_ZH_NEG = (
    r"(?:不|没|没有|别|并不|并没有|从不|从没|从来不|从来没有|不再|再也不|不是很|不太|一点也不|"
    r"一点都不|根本不)"
)
# ``_job_zh`` as a rule reads it: among other words, or only when the value is exactly a job.
_JOB = _one(lambda v: _job_zh(v, strict=False))
_JOB_STRICT = _one(lambda v: _job_zh(v, strict=True))
_ZH_RULES: tuple[_Rule, ...] = (
    # preferred_name
    *_rules(
        "preferred_name",
        _call_zh,
        (
            r"^(?P<polite>(?:请|麻烦)?(?:你|您|你们|大家)?(?:以后|之后|今后)?(?:就|都|也)?"
            r"(?:可以|直接|就|能)?(?:都|就)?)叫我(?:做)?(?P<v>.+)$"
        ),
        r"^我的?(?:小名|昵称|外号|绰号|网名|英文名字?|英文名)(?:是|叫)(?P<v>.+)$",
    ),
    # name
    *_rules(
        "name",
        _NAME,
        r"^我的?(?:全名|名字|姓名|真名|真实姓名|大名)(?:是|叫)(?P<v>.+)$",
        rf"^我{_ZH_ADV}(?:{_ZH_NEG})?(?:叫做|叫)(?P<v>.+)$",
    ),
    # likes and dislikes
    _r(
        "likes",
        rf"^我{_ZH_ADV}(?:{_ZH_NEG})?(?:最)?(?:喜欢|爱)的[^，,]{{1,8}}?(?:是|就是)(?P<v>.+)$",
        _items(_items_zh),
    ),
    _r(
        "dislikes",
        rf"^我{_ZH_ADV}(?:并|真的|实在|根本|从来|向来|一向)?"
        r"(?:不太|不怎么|不是很|不是特别|不大|没那么|不再|不|一点也不|一点都不)(?:喜欢|爱)(?P<v>.+)$",
        _items(_items_zh),
        negative=True,
    ),
    _r(
        "dislikes",
        rf"^我{_ZH_ADV}(?:{_ZH_NEG})?(?:讨厌|厌恶|受不了|反感|嫌弃|不能忍受|忍受不了|恨|烦透了)(?P<v>.+)$",
        _items(_items_zh),
    ),
    *_rules(
        "likes",
        _items(_items_zh),
        rf"^我{_ZH_ADV}(?:{_ZH_NEG})?(?:喜欢|热爱|喜爱|钟爱|偏爱|爱好|享受|爱)(?P<v>.+)$",
        r"^我(?:的)?(?:爱好|兴趣|兴趣爱好|业余爱好|爱好们)(?:是|有|包括|就是)(?P<v>.+)$",
        rf"^我{_ZH_ADV}对(?P<v>[^不没]+?){_ZH_ADV}(?:感兴趣|有兴趣|着迷)$",
    ),
    # location
    *_rules(
        "location",
        _one(_place_zh),
        rf"^我{_ZH_ADV}(?:{_ZH_NEG})?(?:住在|居住在|生活在|定居在|定居于|住于|待在|呆在)(?P<v>.+)$",
        (
            rf"^我{_ZH_ADV}(?:{_ZH_NEG})?(?:搬到了|搬到|搬去了|搬去|搬来了|搬来|移居到|移居|迁居到)"
            r"(?P<v>.+?)(?:来了|去了|住了|生活了|了)?$"
        ),
        rf"^我{_ZH_ADV}(?:{_ZH_NEG})?在(?P<v>.+?)(?:生活|居住|定居|安家)(?:了)?$",
        r"^我(?:的)?家(?:现在|目前)?(?:住)?在(?P<v>.+)$",
    ),
    _r(
        "location",
        rf"^我{_ZH_ADV}(?:{_ZH_NEG})?住(?P<v>.+)$",
        _one(lambda v: _place_zh(v, bare=True)),
    ),
    # language
    *_rules(
        "language",
        _one(_language_zh),
        r"^我(?:的)?(?:母语|第一语言)(?:是)?(?P<v>.+)$",
        rf"^我{_ZH_ADV}(?:{_ZH_NEG})?(?:会|能|可以)?(?:说|讲|用)(?P<v>.+)$",
        rf"^我{_ZH_ADV}(?:{_ZH_NEG})?会(?P<v>.+)$",
    ),
    # occupation
    *_rules(
        "occupation",
        _JOB,
        r"^我(?:的)?(?:工作|职业|本职工作|本职|岗位|职位)(?:是)(?P<v>.+)$",
        rf"^我{_ZH_ADV}(?:{_ZH_NEG})?是(?:一名|一位|名)(?P<v>.+)$",
        rf"^我{_ZH_ADV}(?:{_ZH_NEG})?是做(?P<v>.+?)的$",
        rf"^我{_ZH_ADV}(?:{_ZH_NEG})?从事(?P<v>.+?)(?:方面的工作|相关工作|相关的工作|工作|行业)?$",
    ),
    *_rules(
        "occupation",
        _JOB_STRICT,
        rf"^我{_ZH_ADV}(?:在[^，,]{{1,15}}?)?(?:{_ZH_NEG})?(?:当|担任|做)(?:了)?(?:一名|一个|名|个)?(?P<v>.+)$",
        rf"^我{_ZH_ADV}(?:{_ZH_NEG})?是(?:一个|个)(?P<v>.+)$",
    ),
    # "我是X": a name when X is exactly a name, else an occupation when X is a job
    _r(
        "name",
        rf"^我{_ZH_ADV}(?:{_ZH_NEG})?是(?P<v>.+?)(?<!的)$",
        _NAME_STRICT,
    ),
    _r(
        "occupation",
        rf"^我{_ZH_ADV}(?:{_ZH_NEG})?是(?P<v>.+)$",
        _JOB_STRICT,
    ),
)
# NOTE: the Chinese negation is matched inside the rules above, then refused by this check.
_ZH_NEGATED = re.compile(rf"^我{_ZH_ADV}(?:在[^，,]{{1,15}}?)?{_ZH_NEG}")


_ZH_FIRST_PERSON = re.compile(
    r"^我(?![们的家哥姐弟妹爸妈儿女老朋同丈妻爷奶外舅姨叔伯姑孩闺亲室邻领上司表堂])"
)


_ZH_CARRY = re.compile(rf"^{_ZH_CARRY_VERB}")


_ZH_LIST_CLOSE = re.compile(r"和|还有|以及|及|或者|跟")
