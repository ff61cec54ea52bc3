"""The Chinese rules of the rule-based extractor: clause breaks, fillers, questions, negation,
word lists, value checks and the rules themselves."""

from __future__ import annotations

import re

# NOTE: a value in the other script is checked by the other module ("我叫Jim", "I speak
# 粤语"); the two import each other and use each other's names only when a rule runs.
from memory.extraction import english
from memory.extraction.text import (
    _HAN,
    _HAN_RE,
    _cut,
    _edges,
    _fold,
    _is_han,
    _items,
    _one,
    _r,
    _Rule,
    _set,
    _strip_lead,
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


_ZH_SURNAMES = frozenset(
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖萧田董袁潘于蒋蔡余杜叶程"
    "苏魏吕丁任沈姚卢姜崔钟谭陆汪范金石廖贾夏韦付傅方白邹孟熊秦邱江尹薛闫阎段雷侯龙史陶黎贺顾"
    "毛郝龚邵万钱严覃武戴莫孔汤常温康施牛樊葛邢齐易乔伍庞颜倪庄聂章鲁岳翟殷詹申欧耿焦俞左柳"
    "甘祝包宁尚符舒阮柯纪梅童凌毕单季裴霍涂苗谷盛曲翁冉骆蓝辛靳管柴蒙鲍喻祁蒲房滕屈饶牟艾尤"
    "穆农卓吉缪简项麦褚娄窦戚岑景党宫费卜冷晏席卫米柏宗瞿桂佟臧闵苟邬卞姬仇栾隋商刁沙荣巫寇"
    "桑郎甄丛仲虞敖巩佘池查麻苑迟邝封匡鞠惠荆冀郁胥班储栗燕楚鄢劳谌奚皮粟冼蔺闻厉伊仝阚帅"
    "屠朴廉禹祖漆卿狄晋扈晁芮阙浦戈鹿邸雍辜羊乌裘亓邰赫杭逯隆茹诸慕嵇湛戎茅揭尉檀昝"
)
_ZH_COMPOUND_SURNAMES = (
    "欧阳",
    "司马",
    "诸葛",
    "上官",
    "东方",
    "皇甫",
    "令狐",
    "慕容",
    "尉迟",
    "公孙",
    "长孙",
    "夏侯",
    "轩辕",
    "端木",
    "独孤",
    "南宫",
    "西门",
    "司徒",
    "宇文",
    "呼延",
    "澹台",
    "完颜",
)
_ZH_NAME_PREFIX = re.compile(f"^(?:小|老|阿)[{_HAN}]{{1,2}}$")
_ZH_NAME_BOUNDARY = re.compile(
    r"^(?:今年|现在|目前|是|在|住|来自|喜欢|爱|就|吧|啊|哦|呀|啦|了|我|的|一名|从事|做|"
    r"今|也|还|平时|，|,|\s|!|！)"
)
_ZH_BLOCK_ANY = re.compile(
    r"你|您|他|她|它|们|谁|什么|哪|吗|怎么|别人|人家|大家|自己|[这那][个首部本家些种样里边儿位]"
)
_ZH_BLOCK_START = re.compile(r"^(?:这|一个|个|了|过|着|得|的|上了|死|不|没|去|来|把|被|给|让)")
_ZH_TAIL = re.compile(
    r"(?:就行了?|就好了?|就可以了?|就是了|即可|好了|而已|吧|啊|呀|哦|噢|喔|啦|哈+|嘛|呢|了|的|"
    r"[~～。.!！]|\s)+$"
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
_ZH_JOBS = _set(
    """老师 教师 医生 护士 律师 工程师 程序员 设计师 会计 会计师 厨师 司机 警察 军人 士兵 农民 工人
    学生 大学生 研究生 博士生 教授 讲师 记者 编辑 作家 翻译 演员 歌手 模特 画家 摄影师 导演 主播
    主持人 博主 销售 客服 秘书 助理 经理 总监 主管 老板 店主 创业者 自由职业者 公务员 保安 保姆
    快递员 外卖员 骑手 服务员 收银员 理发师 建筑师 科学家 研究员 分析师 产品经理 运营 电工 木匠
    飞行员 空姐 空乘 船员 渔民 牧民 商人 个体户 家庭主妇 全职妈妈 全职太太 实习生 留学生 码农
    法官 检察官 外交官 消防员 兽医 药剂师 咨询师 教练 运动员 导游 学者 作者 开发 前端 后端 测试
    财务 人事 投资人 职员 员工 店员 售货员 快递小哥 外卖小哥 律师助理 合伙人 创始人 负责人 经纪人
    主任 医师 院长 校长 店长 厂长 站长 馆长 up主 UP主 HR CEO CTO IT"""
)
_ZH_JOB_SUFFIX = re.compile(
    r"(?:师|员|工|官|医|匠|(?:学|医|研究|实习|留学|博士|硕士|本科|大学|中学|高中|初中|小学)生|"
    r"(?:记|学|作|创业|工作|从业)者|(?:歌|选|水|骑|助|舵|鼓|吉他)手|(?<!大|国|人|老|专|东|自|管)家|"
    r"经理|总监|主管|老板|主任|职员|教授|律师|护士|警察|司机|会计|秘书|助理|编辑|演员|模特|"
    r"主播|博主|农民|工人|军人|商人|(?:校|院|店|厂|村|局|处|科|部|市|县|馆|站|社|董事|行)长)$"
)
_ZH_NON_JOBS = _set(
    """会员 成员 党员 团员 队员 男生 女生 新生 先生 病人 患者 新手 高手 老手 粉丝 球迷 歌迷 影迷
    书迷 游客 用户 顾客 客人 大家 国家 人家 老家 好人 坏人 男人 女人 母亲 父亲 妈妈 爸爸 家长
    吃货 宅男 宅女 单身狗 社恐 素食者 初学者 爱好者 消费者 使用者 读者 观众 受害者 幸存者
    打工人 普通人 外地人 本地人 学渣 学霸 家里蹲"""
)
_ZH_LANGUAGES = _set(
    "普通话 国语 中文 汉语 华语 英文 英语 粤语 广东话 白话 闽南语 闽南话 台语 客家话 日语 日文 韩语"
    " 韩文 法语 德语 俄语 手语"
)
_ZH_NOT_LANGUAGES = _set(
    """的话 实话 真话 假话 废话 大话 坏话 好话 笑话 电话 说话 这话 那话 一句话 鬼话 情话 悄悄话
    心里话 脏话 粗话 空话 闲话 谎话 作文 论文 课文 原文 全文 正文 短文 散文 语文 成语 俗语 咒语
    标语 评语 术语 外语 母语 对话 童话 神话 梦话 傻话 气话 胡话 客气话 场面话 这句话 那句话 人话
    中国话 英文歌"""
)
_ZH_LIST_SPLIT = re.compile(
    r"、|，|,|以及|还有|或者|跟|(?<![温暖平缓柔随祥谦总饱附调讲共])和(?![平服谐气蔼善睦煦的])"
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


def _zh_clean(value: str) -> str:
    value = _edges(value)
    while True:
        stripped = _ZH_TAIL.sub("", value)
        if stripped == value:
            return value
        value = stripped


def _zh_ok(value: str, *, max_chars: int = 20) -> bool:
    folded = _fold(value)
    return (
        0 < len(value) <= max_chars
        and not _ZH_BLOCK_ANY.search(folded)
        and not _ZH_BLOCK_START.match(folded)
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
            items.extend(english._items_en(item))
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
        return english._place_en(value)
    return value


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
        return value if value in _ZH_JOBS else english._job_en(value, strict=strict)
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
            if not english._language_en(part):
                return None
            continue
        if part in _ZH_NOT_LANGUAGES or not (2 <= len(part) <= 6):
            return None
        if part not in _ZH_LANGUAGES and not re.search(r"[语话文]$", part):
            return None
        if _ZH_BLOCK_ANY.search(part) or _ZH_BLOCK_START.match(part):
            return None
    return value


def _call_zh(value: str, m: re.Match[str]) -> list[str]:
    """叫我X: a surname or 小/老/阿 form, Latin letters, or any short name the user marks as
    the form of address ("叫我建国就行", "你可以叫我建国")."""
    explicit = bool(_ZH_CALL_FILLER.search(_fold(value))) or bool(m.groupdict().get("polite"))
    value = _zh_clean(value)
    if not value or value in _ZH_CALL_NOT_NAMES:
        return []
    if not _is_han(value[0]):
        name = english._name_call(value)
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
_ZH_RULES: tuple[_Rule, ...] = (
    # preferred_name
    _r(
        "preferred_name",
        r"^(?P<polite>(?:请|麻烦)?(?:你|您|你们|大家)?(?:以后|之后|今后)?(?:就|都|也)?"
        r"(?:可以|直接|就|能)?(?:都|就)?)叫我(?:做)?(?P<v>.+)$",
        _call_zh,
    ),
    _r(
        "preferred_name",
        r"^我的?(?:小名|昵称|外号|绰号|网名|英文名字?|英文名)(?:是|叫)(?P<v>.+)$",
        _call_zh,
    ),
    # name
    _r(
        "name",
        r"^我的?(?:全名|名字|姓名|真名|真实姓名|大名)(?:是|叫)(?P<v>.+)$",
        _one(lambda v: english._name(v, strict=False)),
    ),
    _r(
        "name",
        rf"^我{_ZH_ADV}(?:{_ZH_NEG})?(?:叫做|叫)(?P<v>.+)$",
        _one(lambda v: english._name(v, strict=False)),
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
    _r(
        "likes",
        rf"^我{_ZH_ADV}(?:{_ZH_NEG})?(?:喜欢|热爱|喜爱|钟爱|偏爱|爱好|享受|爱)(?P<v>.+)$",
        _items(_items_zh),
    ),
    _r(
        "likes",
        r"^我(?:的)?(?:爱好|兴趣|兴趣爱好|业余爱好|爱好们)(?:是|有|包括|就是)(?P<v>.+)$",
        _items(_items_zh),
    ),
    _r(
        "likes",
        rf"^我{_ZH_ADV}对(?P<v>[^不没]+?){_ZH_ADV}(?:感兴趣|有兴趣|着迷)$",
        _items(_items_zh),
    ),
    # location
    _r(
        "location",
        rf"^我{_ZH_ADV}(?:{_ZH_NEG})?(?:住在|居住在|生活在|定居在|定居于|住于|待在|呆在)(?P<v>.+)$",
        _one(_place_zh),
    ),
    _r(
        "location",
        rf"^我{_ZH_ADV}(?:{_ZH_NEG})?(?:搬到了|搬到|搬去了|搬去|搬来了|搬来|移居到|移居|迁居到)"
        r"(?P<v>.+?)(?:来了|去了|住了|生活了|了)?$",
        _one(_place_zh),
    ),
    _r(
        "location",
        rf"^我{_ZH_ADV}(?:{_ZH_NEG})?在(?P<v>.+?)(?:生活|居住|定居|安家)(?:了)?$",
        _one(_place_zh),
    ),
    _r("location", r"^我(?:的)?家(?:现在|目前)?(?:住)?在(?P<v>.+)$", _one(_place_zh)),
    _r(
        "location",
        rf"^我{_ZH_ADV}(?:{_ZH_NEG})?住(?P<v>.+)$",
        _one(lambda v: _place_zh(v, bare=True)),
    ),
    # language
    _r("language", r"^我(?:的)?(?:母语|第一语言)(?:是)?(?P<v>.+)$", _one(_language_zh)),
    _r(
        "language",
        rf"^我{_ZH_ADV}(?:{_ZH_NEG})?(?:会|能|可以)?(?:说|讲|用)(?P<v>.+)$",
        _one(_language_zh),
    ),
    _r("language", rf"^我{_ZH_ADV}(?:{_ZH_NEG})?会(?P<v>.+)$", _one(_language_zh)),
    # occupation
    _r(
        "occupation",
        r"^我(?:的)?(?:工作|职业|本职工作|本职|岗位|职位)(?:是)(?P<v>.+)$",
        _one(lambda v: _job_zh(v, strict=False)),
    ),
    _r(
        "occupation",
        rf"^我{_ZH_ADV}(?:{_ZH_NEG})?是(?:一名|一位|名)(?P<v>.+)$",
        _one(lambda v: _job_zh(v, strict=False)),
    ),
    _r(
        "occupation",
        rf"^我{_ZH_ADV}(?:{_ZH_NEG})?是做(?P<v>.+?)的$",
        _one(lambda v: _job_zh(v, strict=False)),
    ),
    _r(
        "occupation",
        rf"^我{_ZH_ADV}(?:{_ZH_NEG})?从事(?P<v>.+?)(?:方面的工作|相关工作|相关的工作|工作|行业)?$",
        _one(lambda v: _job_zh(v, strict=False)),
    ),
    _r(
        "occupation",
        rf"^我{_ZH_ADV}(?:在[^，,]{{1,15}}?)?(?:{_ZH_NEG})?(?:当|担任|做)(?:了)?(?:一名|一个|名|个)?(?P<v>.+)$",
        _one(lambda v: _job_zh(v, strict=True)),
    ),
    _r(
        "occupation",
        rf"^我{_ZH_ADV}(?:{_ZH_NEG})?是(?:一个|个)(?P<v>.+)$",
        _one(lambda v: _job_zh(v, strict=True)),
    ),
    # "我是X": a name when X is exactly a name, else an occupation when X is a job
    _r(
        "name",
        rf"^我{_ZH_ADV}(?:{_ZH_NEG})?是(?P<v>.+?)(?<!的)$",
        _one(lambda v: english._name(v, strict=True)),
    ),
    _r(
        "occupation",
        rf"^我{_ZH_ADV}(?:{_ZH_NEG})?是(?P<v>.+)$",
        _one(lambda v: _job_zh(v, strict=True)),
    ),
)
# NOTE: the Chinese negation is matched inside the rules above, then refused by this check.
_ZH_NEGATED = re.compile(rf"^我{_ZH_ADV}(?:在[^，,]{{1,15}}?)?{_ZH_NEG}")


_ZH_FIRST_PERSON = re.compile(
    r"^我(?![们的家哥姐弟妹爸妈儿女老朋同丈妻爷奶外舅姨叔伯姑孩闺亲室邻领上司表堂])"
)


_ZH_CARRY = re.compile(rf"^{_ZH_CARRY_VERB}")


_ZH_LIST_CLOSE = re.compile(r"和|还有|以及|及|或者|跟")
