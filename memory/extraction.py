"""Fact extraction: what a user turn states about its author, as facts (``name``, ``likes``...).

The extractor interface, the built-in rule-based extractor for English and Chinese, an
LLM-backed extractor for any ``complete(prompt) -> str``, and how extracted facts merge into an
owner's current facts. ``memory.services.turn_append`` runs ``MEMORY["FACT_EXTRACTOR"]``.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from memory.conf import conf

logger = logging.getLogger("memory.extraction")

Op = Literal["set", "add", "remove"]
OPS: frozenset[str] = frozenset({"set", "add", "remove"})
# The keys the built-in extractors write (the contract's table); list keys take "add"/"remove".
LIST_KEYS: frozenset[str] = frozenset({"likes", "dislikes"})
STRING_KEYS: frozenset[str] = frozenset(
    {"name", "preferred_name", "location", "occupation", "language"}
)
# A list fact keeps its newest items, at most this many.
MAX_LIST_ITEMS = 50
# Longest value (or list item) the built-in extractors write, in characters.
MAX_VALUE_CHARS = 80


@dataclass(frozen=True)
class ExtractedFact:
    """One fact a turn states about its author.

    ``op`` "set" replaces the value of ``key``; "add" and "remove" add one item to, or remove
    one from, a list fact (``value`` is the item; items compare case-insensitively).
    """

    key: str
    value: Any
    op: Op = "set"


class FactExtractor(Protocol):
    """What ``MEMORY["FACT_EXTRACTOR"]`` names: such a class, a factory of one, or an instance.

    One instance is made per dotted path and shared by every thread, so it must hold no
    per-turn state. It runs inside the turn's transaction, under the owner's row lock.
    """

    def extract(self, text: str, *, facts: Mapping[str, Any]) -> Iterable[ExtractedFact]:
        """The facts ``text``, a user turn, states about its author.

        ``facts`` are the owner's current facts ({key: value}); they are read from the
        database only if the extractor looks at them. Any exception is logged and the turn is
        stored without facts.
        """
        ...


def extractor_get() -> FactExtractor | None:
    """The configured extractor, or ``None`` when ``MEMORY["FACT_EXTRACTOR"]`` is ``None``.

    Raises ``ImproperlyConfigured``, naming the setting, when the path cannot be imported.
    """
    path = conf.FACT_EXTRACTOR
    if path is None:
        return None
    if not isinstance(path, str):
        raise ImproperlyConfigured(f"MEMORY['FACT_EXTRACTOR'] must be a dotted path, not {path!r}.")
    return _extractor_load(path)


@functools.lru_cache(maxsize=16)
def _extractor_load(path: str) -> FactExtractor:
    try:
        target = import_string(path)
    except ImportError as e:
        raise ImproperlyConfigured(
            f"MEMORY['FACT_EXTRACTOR'] {path!r} cannot be imported: {e}"
        ) from e
    if isinstance(target, type) or not hasattr(target, "extract"):
        target = target()
    return target  # type: ignore[no-any-return]


class LazyFacts(Mapping[str, Any]):
    """An owner's current facts ({key: value}), loaded on first access."""

    def __init__(self, load: Callable[[], Mapping[str, Any]]) -> None:
        self._load = load
        self._facts: Mapping[str, Any] | None = None

    def _get(self) -> Mapping[str, Any]:
        if self._facts is None:
            self._facts = dict(self._load())
        return self._facts

    def __getitem__(self, key: str) -> Any:
        return self._get()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())


def _same_item(item: Any) -> Any:
    return item.casefold() if isinstance(item, str) else json.dumps(item, sort_keys=True)


def facts_apply(current: Mapping[str, Any], found: Iterable[ExtractedFact]) -> dict[str, Any]:
    """The new value of each key that ``found`` changes, given the owner's ``current`` facts.

    Applied in order: "set" replaces; "add" appends an item the list lacks (a non-list value
    becomes the list's first item); "remove" drops it. A list keeps its order and its newest
    ``MAX_LIST_ITEMS`` items. Keys left as they were, and removals from a fact the owner does
    not have, are not in the result. An unknown ``op`` is logged and skipped.
    """
    values: dict[str, Any] = {}
    for fact in found:
        if fact.op not in OPS:
            logger.warning("Extracted fact %r has unknown op %r; skipped.", fact.key, fact.op)
            continue
        if fact.op == "set":
            values[fact.key] = fact.value
            continue
        base = values[fact.key] if fact.key in values else current.get(fact.key)
        if base is None and fact.op == "remove":
            continue
        items = list(base) if isinstance(base, list) else ([] if base is None else [base])
        for item in fact.value if isinstance(fact.value, list) else [fact.value]:
            same = _same_item(item)
            if fact.op == "add" and all(_same_item(old) != same for old in items):
                items.append(item)
            elif fact.op == "remove":
                items = [old for old in items if _same_item(old) != same]
        values[fact.key] = items[-MAX_LIST_ITEMS:]
    return {k: v for k, v in values.items() if k not in current or current[k] != v}


# ---------------------------------------------------------------------------------------------
# The rule-based extractor
# ---------------------------------------------------------------------------------------------

# NOTE: matching runs on a folded copy of the text (full-width ASCII to ASCII, curly quotes to
# straight, common traditional characters to simplified). Every fold maps one character to one
# character, so offsets found in the copy cut the original: values keep what the user typed.
_FOLD = {cp: cp - 0xFEE0 for cp in range(0xFF01, 0xFF5F)}
_FOLD.update({0x2019: ord("'"), 0x2018: ord("'"), 0x201C: ord('"'), 0x201D: ord('"')})
_FOLD[0x3000] = ord(" ")
_FOLD.update(
    str.maketrans(
        "歡討厭說語會講師員醫職業這們麼嗎從對喜愛為種個國話車還沒辦搬書網誰裡過後來實際們樂",
        "欢讨厌说语会讲师员医职业这们么吗从对喜爱为种个国话车还没办搬书网谁里过后来实际们乐",
    )
)


def _fold(text: str) -> str:
    return text.translate(_FOLD)


_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_HAN_RE = re.compile(f"[{_HAN}]")
_I = re.IGNORECASE


def _set(words: str) -> frozenset[str]:
    """The whitespace-separated ``words``."""
    return frozenset(words.split())


def _words(words: str) -> str:
    """A regex alternation of the ``|``-separated ``words`` (a space matches any whitespace),
    longest first."""
    ordered = sorted(set(words.split("|")), key=len, reverse=True)
    return "(?:" + "|".join(re.escape(w).replace(r"\ ", r"\s+") for w in ordered) + ")"


# --- sentences and clauses ---------------------------------------------------------------

_SENTENCE_END = re.compile(r"[。！？!?；;\n…]+|\.+(?=\s|$|[\"')\]])")
_ABBREVIATION = re.compile(
    r"(?:\b(?:Mr|Mrs|Ms|Dr|Drs|St|Mt|Jr|Sr|Prof|Rev|Capt|Lt|Col|Gen|Sgt|vs|etc|approx|No)|\b[A-Z])$"
)
_AFTER_ABBREVIATION_NEW = re.compile(r"\s*(?:I|I'm|My|Call|You|Please|And|But|Also)\b")
_QUOTED = re.compile(r"\"[^\"\n]{4,}\"|“[^”\n]{4,}”|「[^」]*」|『[^』]*』|```.*?```", re.S)
_QUOTE_LINE = re.compile(r"^\s*>.*$", re.M)

_EN_CARRY_VERB = (
    r"(?:(?:also|really|totally|absolutely|just|still|now|currently|even|do|actually)\s+)*"
    r"(?:like|love|enjoy|adore|hate|dislike|detest|loathe|despise|live|work|speak|moved|"
    r"don't\s+like|do\s+not\s+like|can't\s+stand|cannot\s+stand)\b"
)
_EN_CLAUSE_BREAK = re.compile(
    r"\s*[,:()\[\]]\s*|\s+[-–—]+\s+"
    r"|\s+(?:and|but|so|because|although|though|while|whereas|plus)\s+"
    r"(?=(?:i|i'm|im|i've|my\s+name|call\s+me|you\s+can\s+call\s+me|please\s+call\s+me)\b"
    f"|{_EN_CARRY_VERB})",
    _I,
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
_EN_RUN_ON = re.compile(
    r"(?<=[a-z])\s+(?<!\bif\s)(?<!\bwhen\s)(?<!\bwhether\s)"
    r"(?=(?:I|I'm|Im|[Mm]y name)\s+(?:(?:really|also|do)\s+)*"
    r"(?:like|love|enjoy|hate|dislike|live|work|speak|is|am|a|an)\b)",
)

# --- fillers, questions, negation ----------------------------------------------------------

_EN_FILLER = re.compile(
    r"^(?:"
    + _words(
        "hi|hello|hey|heya|yo|well|so|oh|ok|okay|also|and|but|yes|yeah|yep|yup|no|nope|"
        "nah|actually|sorry|oops|wait|btw|by the way|honestly|basically|anyway|anyways|"
        "um|umm|uh|hmm|er|erm|lol|haha|fyi|just so you know|for the record|to be honest|"
        "tbh|in fact|correction|i mean|i meant|then|now|plus|besides|ah|remember|"
        "please remember|remember that|please remember that|note that|please note that|"
        "keep in mind|keep in mind that|don't forget|don't forget that|for context|ps|"
        "p.s.|as i said|like i said|as i mentioned|again|from now on|these days|nowadays|"
        "please|dear|fun fact|let me tell you|to clarify|no wait|my bad|whoops|alright|"
        "all right|good morning|good evening|nice to meet you|just to let you know|"
        "for your information|you know|you should know|you should know that|about me"
    )
    + r")\b[\s,:;!.\-]*",
    _I,
)
_ZH_FILLER = re.compile(
    r"^(?:嗯+|恩+|哦+|噢+|喔+|啊+|呃+|额+|唔+|嗨|哈喽|哈啰|你好|您好|大家好|对了|其实|另外|"
    r"顺便说一下|顺便说一句|顺便提一下|顺便|那个|然后|话说|就是说|而且|并且|所以|不过|但是|"
    r"可是|还有|好的|好吧|是的|没错|更正一下|纠正一下|更正|纠正|重新说一下|我是说|我的意思是|"
    r"记住|请记住|记一下|你记一下|告诉你|跟你说|说一下|补充一下|自我介绍一下)[，,、\s!！~～]*"
)
_EN_QUESTION_START = re.compile(
    r"^(?:what|what's|whats|who|who's|whose|whom|where|where's|when|why|how|how's|which|"
    r"whether|do|does|did|am|is|are|was|were|can|could|would|will|should|shall|have|has|had|"
    r"may|might|don't|doesn't|isn't|aren't|won't|can't|wouldn't|shouldn't|didn't|haven't|"
    r"hasn't|right|guess|tell\s+me|remind\s+me)\b",
    _I,
)
_ZH_QUESTION = re.compile(
    r"吗|呢$|什么|啥|谁|哪|怎么|怎样|为什么|为何|是否|是不是|有没有|会不会|能不能|可不可以|"
    r"对不对|好不好|要不要|喜不喜欢|叫不叫|住不住|多少|几岁|对吧|是吧|记得我"
)
_EN_NEG = re.compile(
    r"\b(?:not|never|no\s+longer|nobody|neither|nor|hardly|barely|rarely|dont|cant|cannot|"
    r"wont|aint|isnt|didnt|doesnt|wasnt)\b|n't\b",
    _I,
)
# "Can you call me Jim?" is a request, not a question about a fact.
_EN_CALL_ME_REQUEST = re.compile(
    r"^(?:can|could|would|will)\s+(?:you|u)\s+(?:please\s+)?(?:just\s+)?(call\s+me\s+.+)$", _I
)
_ZH_CALL_ME_REQUEST = re.compile(
    r"^((?:你|您)?(?:能|可以|以后能|以后可以)?叫我.+?)(?:吗|好吗|可以吗|行吗|好不好|行不行)$"
)

# --- word lists ----------------------------------------------------------------------------

_EN_ADV = (
    r"(?:(?:"
    + _words(
        "really|truly|also|just|actually|honestly|definitely|absolutely|totally|"
        "seriously|genuinely|kind of|kinda|sort of|still|now|currently|recently|do|"
        "especially|particularly|so|certainly|can|usually|generally|mostly|mainly|"
        "personally|always|already|quite|very much|literally|simply|even|too|both|all|"
        "officially|finally|happily|sincerely|deeply|madly|secretly|absolutely do"
    )
    + r")\s+)*"
)
_EN_ADVN = (
    r"(?:(?:"
    + _words(
        "really|truly|also|just|actually|honestly|definitely|absolutely|totally|"
        "seriously|genuinely|kind of|kinda|sort of|still|now|currently|recently|do|"
        "especially|particularly|so|certainly|can|usually|generally|mostly|mainly|"
        "personally|always|already|quite|very much|literally|simply|even|too|both|all|"
        "officially|finally|not|never|no longer|don't|dont|do not|doesn't|does not|"
        "didn't|did not|can't|cant|cannot|can not|won't|will not|ain't|hardly|barely|"
        "rarely|not really|not even"
    )
    + r")\s+)*"
)
_IM = r"i(?:'m|m|\s+am)"

_EN_COMMON = _set(
    """a an the not so very really just also still here there home back fine good great ok okay
    well sorry sure ready done tired happy sad glad busy free bored hungry thirsty sleepy sick ill
    hurt lost confused curious excited nervous worried afraid scared angry upset mad lonely alone
    single married engaged divorced pregnant retired new old young late early right wrong serious
    kidding joking going trying looking doing feeling working living thinking wondering planning
    learning studying moving leaving coming getting having being using waiting talking asking
    telling writing reading playing watching interested allergic able unable about almost always
    never currently now today tomorrow tonight later soon in on at from with into out off up down
    over to for of by as like than that this it what who whatever anything nothing something
    everything someone somebody nobody everyone everybody anyone anybody anytime maybe crazy names
    whenever again actually only probably definitely kind sort more less too much many all both
    either neither each every some any no yes yeah hard easy long short weird strange unusual
    common difficult simple spelled pronounced boring cool nice funny stupid smart male female gay
    straight vegan vegetarian human fat thin tall rich poor broke safe bad better best worse worst
    dead alive awake asleep online offline available unemployed employed self myself yours mine
    secret private unknown irrelevant important unique same different rather quite pretty totally
    completely absolutely literally honestly basically mostly already finally recently even though
    thanks thank you he she they we me him her them us and or but if when because since is are was
    were be been am do does did have has had can could would should get got go went know think see
    want need mean say said tell call name called named used supposed lucky proud sure certain
    fine sorry okay alright ok thrilled delighted blessed grateful thankful stressed exhausted
    overwhelmed fine ready starving dying struggling cold hot warm fine calm my your his our their
    its"""
)
_DEMONYMS = _set(
    """american british english scottish welsh irish canadian australian chinese japanese korean
    vietnamese thai filipino filipina indonesian malaysian singaporean indian pakistani bangladeshi
    nepali nepalese iranian persian iraqi syrian lebanese israeli jewish palestinian turkish
    egyptian moroccan algerian tunisian nigerian kenyan ethiopian ghanaian african european asian
    latino latina hispanic mexican brazilian argentinian argentine chilean colombian peruvian
    venezuelan cuban spanish portuguese french german italian dutch belgian swiss austrian swedish
    norwegian danish finnish icelandic polish czech slovak hungarian romanian bulgarian greek
    serbian croatian ukrainian russian belarusian taiwanese cantonese hongkonger mongolian tibetan
    uyghur arab arabic kurdish armenian georgian kazakh uzbek afghan saudi emirati qatari kiwi
    aussie brit christian catholic protestant muslim buddhist hindu sikh atheist agnostic mormon
    orthodox jain taoist republican democrat liberal conservative libertarian"""
)
_NAME_PARTICLES = _set(
    "de da di du del della der den van von la le bin binti ibn al el ter ten y st"
)
_NAME_BOUNDARY = re.compile(
    r"^(?:(?:from|here|and|by|btw|nice|lol|haha+|hehe+|speaking|again|too|ok|okay|though)\b"
    r"|:\)|:D|[!.]+)",
    _I,
)
_EN_PRONOUN_START = _set(
    """it its it's this that these those you your yours u ur him his her hers them their theirs
    they us our me myself everything anything nothing something everyone everybody anyone anybody
    someone somebody nobody none all what how when where why who which whether if there here such
    being having one ones people i"""
)
_EN_PRONOUN_ANY = _set("you your yours u ur him her them it this that he she they")
_EN_NOT_ITEMS = _set(
    """thanks thank ok okay yes yeah yep no nope lol haha too also very much so well fine sure
    please more less most least a an the to and or but lots alot best better than though anyway
    really tbh btw honestly seriously things stuff big huge great massive real true avid crazy
    total diehard die-hard i me"""
)
_EN_VAGUE = _set(
    """idea way thing things stuff one ones fact sound look feeling answer response suggestion
    plan point part question reply job lot kind sort type bit"""
)
_EN_JOBS = _set(
    """nurse chef cook pilot architect surgeon barista clerk judge cashier vet veterinarian
    paramedic mechanic ceo cto cfo coo founder cofounder co-founder intern nanny maid tailor
    butcher chemist nun monk priest pastor rabbi imam soldier sailor marine cop detective sheriff
    firefighter analyst economist attorney solicitor barrister magistrate diplomat politician
    mayor senator dj model artist poet novelist author actor actress dancer singer comedian host
    presenter anchor reporter editor producer director animator illustrator designer developer
    programmer coder engineer technician scientist researcher professor lecturer teacher tutor
    instructor coach trainer therapist psychologist psychiatrist counselor counsellor pharmacist
    dentist doctor physician midwife caregiver carer receptionist secretary assistant manager
    executive consultant accountant auditor banker trader broker investor entrepreneur freelancer
    contractor plumber electrician carpenter builder welder mason painter gardener farmer
    fisherman miner driver courier chauffeur waiter waitress bartender baker housekeeper janitor
    cleaner guard officer student postdoc phd librarian archivist curator translator interpreter
    photographer videographer journalist blogger youtuber streamer influencer writer copywriter
    marketer salesperson recruiter administrator admin paralegal lawyer surveyor astronaut
    optometrist physiotherapist chiropractor homemaker housewife househusband dietitian
    nutritionist paramedic scholar undergrad undergraduate graduate fellow resident-physician
    surgeon sommelier florist jeweler jeweller locksmith tiler roofer glazier upholsterer
    veterinary vet-tech nursing teaching accounting engineering consulting marketing banking
    farming programming tutoring sales finance law medicine research journalism"""
)
_EN_JOB_SUFFIX = re.compile(
    r"(?:er|or|ist|yst|ician|eer|ant|ent|ier|ary|grapher|smith|wright"
    r"|(?<=\w{3})(?:man|woman|person))$"
)
_EN_NON_JOBS = _set(
    """mother father brother sister daughter grandmother grandfather partner lover member user
    customer beginner learner newcomer foreigner stranger believer dreamer winner loser smoker
    drinker sleeper eater thinker listener fighter survivor visitor neighbor neighbour senior
    junior minor major gamer runner swimmer player reader watcher follower supporter speaker
    rider owner holder fan nerd geek person people human man woman guy girl boy kid child adult
    teenager mom mum dad wife husband widow widower bachelor traveler traveller hiker climber
    cyclist optimist pessimist perfectionist realist idealist introvert extrovert vegetarian
    vegan christian muslim atheist buddhist catholic civilian guardian tenant participant
    applicant immigrant migrant patient resident parent citizen native local expat newbie noob
    rookie pro expert fanatic addict enthusiast hobbyist collector gentleman german shopper
    killer monster leader server answer number order corner river summer winter water paper
    letter matter power center centre computer monster sucker joker talker walker worker
    lover hater sinner team group unit pair whole one"""
)
_EN_LANGUAGES = _set(
    """english mandarin cantonese chinese japanese korean french german spanish italian
    portuguese russian arabic hindi urdu bengali punjabi tamil telugu marathi gujarati thai
    vietnamese indonesian malay tagalog filipino dutch swedish norwegian danish finnish polish
    czech greek turkish hebrew persian farsi swahili ukrainian hungarian romanian latin esperanto
    asl shanghainese hokkien hakka teochew taiwanese catalan basque irish welsh gaelic afrikaans
    zulu amharic yoruba igbo hausa nepali sinhala khmer lao burmese mongolian tibetan uyghur
    kazakh serbian croatian bulgarian slovak slovenian lithuanian latvian estonian icelandic"""
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


# --- value cleaning and checks -------------------------------------------------------------

_EDGE_LEAD = re.compile(r"^[\s\"'“‘「『(\[*_~,，:：\-]+")
_EDGE_TRAIL = re.compile(r"[^\w)\]]+$")
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


def _edges(value: str) -> str:
    """``value`` without surrounding quotes, punctuation, emoji and space ("U.S." keeps its dot)."""
    value = _EDGE_LEAD.sub("", value)
    trimmed = _EDGE_TRAIL.sub("", value).strip()
    if re.search(r"\b(?:[A-Z]\.)+[A-Z]$", trimmed) and value[len(trimmed) :].startswith("."):
        trimmed += "."
    return trimmed


def _cut(value: str, pattern: re.Pattern[str]) -> str:
    """``value`` up to the first match of ``pattern`` (found in its folded copy)."""
    m = pattern.search(_fold(value))
    return value[: m.start()] if m else value


def _strip_lead(value: str, pattern: re.Pattern[str]) -> str:
    m = pattern.match(_fold(value))
    return value[m.end() :] if m else value


def _fits(value: str) -> bool:
    return 0 < len(value) <= MAX_VALUE_CHARS and "\n" not in value


def _is_han(value: str) -> bool:
    return bool(_HAN_RE.search(value))


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


# --- the rules -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Rule:
    """A pattern anchored at the start of a clause; group ``v`` holds the value.

    ``check`` cleans ``v`` and returns the values it yields (empty: the rule does not apply).
    A ``negative`` rule states a negation itself ("I don't like X" → dislikes); any other rule
    whose clause holds a negation before ``v`` yields no fact ("My name is not Bob").
    """

    key: str
    pattern: re.Pattern[str]
    check: Callable[[str, re.Match[str]], list[str]]
    negative: bool = False


def _one(fn: Callable[[str], str | None]) -> Callable[[str, re.Match[str]], list[str]]:
    def check(value: str, m: re.Match[str]) -> list[str]:
        result = fn(value)
        return [result] if result else []

    return check


def _items(fn: Callable[[str], list[str]]) -> Callable[[str, re.Match[str]], list[str]]:
    return lambda value, m: fn(value)


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


def _r(
    key: str,
    pattern: str,
    check: Callable[[str, re.Match[str]], list[str]],
    *,
    negative: bool = False,
) -> _Rule:
    return _Rule(key, re.compile(pattern, _I), check, negative)


_EN_FAN_ADJ = r"(?:(?:big|huge|great|massive|real|true|die-?hard|avid|crazy|total|long-?time)\s+)*"
_EN_RULES: tuple[_Rule, ...] = (
    # preferred_name
    _r(
        "preferred_name",
        r"^(?:(?:you|u)\s+(?:can|could|may|should)\s+(?:just\s+|also\s+|always\s+)?"
        r"|please\s+|pls\s+|just\s+|simply\s+|everyone\s+|everybody\s+|people\s+"
        r"|most\s+people\s+)?calls?\s+me\s+(?P<v>.+)$",
        _one(_name_call),
    ),
    _r(
        r"preferred_name",
        rf"^i\s+{_EN_ADVN}go\s+by\s+(?:the\s+name\s+(?:of\s+)?)?(?P<v>.+)$",
        _one(_name_call),
    ),
    _r(
        "preferred_name", rf"^my\s+nick\s*name(?:'s|\s+is)\s+{_EN_ADVN}(?P<v>.+)$", _one(_name_call)
    ),
    _r(
        "preferred_name",
        rf"^i(?:'d|\s+would)?\s+{_EN_ADVN}(?:prefer|like|want)\s+(?:to\s+be|being)"
        rf"\s+called\s+(?P<v>.+)$",
        _one(_name_call),
    ),
    # name
    _r(
        "name",
        rf"^(?:(?:my|the)\s+(?:full\s+|real\s+|actual\s+|legal\s+)?name(?:'s|\s+is)|name's)"
        rf"\s+{_EN_ADVN}(?P<v>.+)$",
        _one(lambda v: _name(v, strict=False)),
    ),
    _r(
        "name",
        rf"^{_IM}\s+{_EN_ADVN}(?:called|named)\s+(?P<v>.+)$",
        _one(lambda v: _name(v, strict=False)),
    ),
    # dislikes stated by a negation
    _r(
        "dislikes",
        rf"^i\s+{_EN_ADV}(?:don't|dont|do\s+not)\s+{_EN_ADV}(?:like|enjoy|care\s+for)\s+(?P<v>.+)$",
        _items(_items_en),
        negative=True,
    ),
    _r(
        "dislikes",
        rf"^i\s+{_EN_ADV}(?:can't|cant|cannot|can\s+not)\s+stand\s+(?P<v>.+)$",
        _items(_items_en),
        negative=True,
    ),
    _r(
        "dislikes",
        rf"^{_IM}\s+{_EN_ADV}not\s+{_EN_ADV}"
        rf"(?:(?:an?\s+)?{_EN_FAN_ADJ}fan\s+of|into|fond\s+of|keen\s+on)\s+(?P<v>.+)$",
        _items(_items_en),
        negative=True,
    ),
    # dislikes
    _r(
        "dislikes",
        rf"^i\s+{_EN_ADVN}(?:hate|dislike|detest|loathe|despise|abhor)\s+(?P<v>.+)$",
        _items(_items_en),
    ),
    # likes
    _r(
        "likes",
        rf"^i\s+{_EN_ADVN}(?:like|love|enjoy|adore|dig|prefer)\s+(?P<v>.+)$",
        _items(_items_en),
    ),
    _r(
        "likes",
        rf"^{_IM}\s+{_EN_ADVN}(?:into|fond\s+of|keen\s+on|passionate\s+about|interested\s+in|"
        r"crazy\s+about|obsessed\s+with|addicted\s+to|a\s+lover\s+of)\s+(?P<v>.+)$",
        _items(_items_en),
    ),
    _r("likes", rf"^{_IM}\s+{_EN_ADVN}an?\s+{_EN_FAN_ADJ}fan\s+of\s+(?P<v>.+)$", _items(_items_en)),
    _r(
        "likes",
        rf"^{_IM}\s+{_EN_ADVN}an?\s+{_EN_FAN_ADJ}"
        r"(?P<v>.+?)\s+(?:fan|lover|enthusiast|nerd|geek|buff)$",
        _items(_items_en),
    ),
    _r(
        "likes",
        r"^my\s+(?:all[- ]time\s+|absolute\s+)?fav(?:ou?rite)?s?\s+(?:[\w-]+\s+){0,2}?"
        rf"(?:is|are|would\s+be)\s+{_EN_ADVN}(?P<v>.+)$",
        _items(_items_en),
    ),
    _r(
        "likes",
        rf"^my\s+(?:main\s+|favou?rite\s+)?(?:hobby|hobbies|interests?|passions?|pastimes?)"
        rf"\s+(?:is|are|include|includes)\s+{_EN_ADVN}(?P<v>.+)$",
        _items(_items_en),
    ),
    # language
    _r(
        "language",
        rf"^i\s+{_EN_ADVN}(?:can\s+)?(?:speak|talk\s+in)\s+(?P<v>.+)$",
        _one(_language_en),
    ),
    _r(
        "language",
        rf"^{_IM}\s+{_EN_ADVN}(?:fluent|native|bilingual)\s+in\s+(?P<v>.+)$",
        _one(_language_en),
    ),
    _r(
        "language",
        rf"^my\s+(?:native|first|mother|home|main|primary)\s+(?:language|tongue)"
        rf"\s+is\s+{_EN_ADVN}(?P<v>.+)$",
        _one(_language_en),
    ),
    _r("language", rf"^{_IM}\s+{_EN_ADVN}an?\s+native\s+(?P<v>.+?)\s+speaker$", _one(_language_en)),
    # location
    _r("location", rf"^i\s+{_EN_ADVN}(?:live|reside)\s+in\s+(?P<v>.+)$", _one(_place_en)),
    _r(
        "location",
        rf"^{_IM}\s+{_EN_ADVN}(?:living|based|located|residing|settled)\s+(?:in|out\s+of)"
        rf"\s+(?P<v>.+)$",
        _one(_place_en),
    ),
    _r(
        "location",
        rf"^i(?:'ve|\s+have)\s+been\s+{_EN_ADVN}(?:living|based)\s+in\s+(?P<v>.+)$",
        _one(_place_en),
    ),
    _r(
        "location",
        rf"^i(?:'ve|\s+have)?\s+{_EN_ADVN}(?:moved|relocated)\s+(?:back\s+)?to\s+(?P<v>.+)$",
        _one(_place_en),
    ),
    _r("location", rf"^my\s+home\s+is\s+{_EN_ADVN}in\s+(?P<v>.+)$", _one(_place_en)),
    # occupation
    _r(
        "occupation",
        rf"^(?:i|{_IM})\s+{_EN_ADVN}(?:work|working)\s+as\s+(?P<v>.+)$",
        _one(lambda v: _job_en(v, strict=False)),
    ),
    _r(
        "occupation",
        rf"^my\s+(?:current\s+|day\s+)?(?:occupation|profession|job\s+title|position|role)"
        rf"\s+is\s+{_EN_ADVN}(?P<v>.+)$",
        _one(lambda v: _job_en(v, strict=False)),
    ),
    _r(
        "occupation",
        rf"^my\s+(?:current\s+|day\s+)?job\s+is\s+{_EN_ADVN}(?:being\s+)?(?P<v>.+)$",
        _one(lambda v: _job_en(v, strict=True)),
    ),
    _r(
        "occupation",
        rf"^{_IM}\s+{_EN_ADVN}(?:an?\s+)?(?P<v>.+?)\s+by\s+(?:profession|trade)$",
        _one(lambda v: _job_en(v, strict=False)),
    ),
    _r(
        "occupation",
        rf"^{_IM}\s+{_EN_ADVN}(?P<v>an?\s+.+)$",
        _one(lambda v: _job_en(v, strict=True)),
    ),
    # name, last: "I'm Bob" (a capitalised name after every other "I'm ..." rule)
    _r("name", rf"^{_IM}\s+{_EN_ADVN}(?P<v>.+)$", _one(lambda v: _name(v, strict=True))),
)

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
        _one(lambda v: _name(v, strict=False)),
    ),
    _r(
        "name",
        rf"^我{_ZH_ADV}(?:{_ZH_NEG})?(?:叫做|叫)(?P<v>.+)$",
        _one(lambda v: _name(v, strict=False)),
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
        _one(lambda v: _name(v, strict=True)),
    ),
    _r(
        "occupation",
        rf"^我{_ZH_ADV}(?:{_ZH_NEG})?是(?P<v>.+)$",
        _one(lambda v: _job_zh(v, strict=True)),
    ),
)
# NOTE: the Chinese negation is matched inside the rules above, then refused by this check.
_ZH_NEGATED = re.compile(rf"^我{_ZH_ADV}(?:在[^，,]{{1,15}}?)?{_ZH_NEG}")

_EN_IT_IS = re.compile(r"^(?:it's|it\s+is|its)\s+(?:actually\s+|really\s+)?(?P<v>.+)$", _I)
_EN_FIRST_PERSON = re.compile(
    r"^(?:i\b|i'm\b|im\b|i've\b|i'd\b|i'll\b|my\s+name\b|call\s+me\b)", _I
)
_ZH_FIRST_PERSON = re.compile(
    r"^我(?![们的家哥姐弟妹爸妈儿女老朋同丈妻爷奶外舅姨叔伯姑孩闺亲室邻领上司表堂])"
)
_EN_CARRY = re.compile(rf"^{_EN_CARRY_VERB}|^(?:am|'m)\s", _I)
_ZH_CARRY = re.compile(rf"^{_ZH_CARRY_VERB}")
_EN_APPOSITIVE = re.compile(r"^an?\s+\S", _I)
_EN_LIST_CLOSE = re.compile(r"\b(?:and|or|plus|as\s+well\s+as)\s+\S", _I)
_ZH_LIST_CLOSE = re.compile(r"和|还有|以及|及|或者|跟")


@dataclass
class _Found:
    key: str
    values: list[str]
    negated: bool


class RuleBasedExtractor:
    """The built-in extractor: regular rules for English and Chinese (see docs/extraction.md).

    Writes the contract's keys; reads only statements the user makes about themselves, clause
    by clause, and writes nothing from questions, negations, hypotheticals, reported speech or
    statements about someone else. Turns longer than ``max_chars`` (pasted text) are skipped.
    """

    max_chars = 2000

    def extract(self, text: str, *, facts: Mapping[str, Any] | None = None) -> list[ExtractedFact]:
        if not text or len(text) > self.max_chars:
            return []
        text = _QUOTE_LINE.sub(" ", _QUOTED.sub(lambda m: " " * len(m.group()), text))
        found: list[ExtractedFact] = []
        state = _State()
        for sentence, asked in self._sentences(text):
            state.sentence_start()
            clauses = self._clauses(sentence)
            for i, (orig, norm) in enumerate(clauses):
                question = asked and i == len(clauses) - 1
                for fact in state.clause(orig, norm, question=question):
                    if fact not in found:
                        found.append(fact)
        return found

    @staticmethod
    def _sentences(text: str) -> Iterator[tuple[str, bool]]:
        """``text`` cut into sentences, each with whether it ended with a question mark."""
        folded = _fold(text)
        start = 0
        for m in _SENTENCE_END.finditer(folded):
            end = m.group()
            # NOTE: "Dr. Smith" goes on; "the U.S. I like golf" ends after "U.S." and keeps its dot.
            abbreviation = end == "." and _ABBREVIATION.search(folded, start, m.start())
            if abbreviation and not _AFTER_ABBREVIATION_NEW.match(folded, m.end()):
                continue
            yield text[start : m.end() if abbreviation else m.start()], "?" in end or "？" in end
            start = m.end()
        yield text[start:], False

    @staticmethod
    def _clauses(sentence: str) -> list[tuple[str, str]]:
        """A sentence cut into clauses, each as (original, folded) text of the same length."""
        folded = _fold(sentence)
        cuts: list[tuple[int, int]] = []
        for pattern in (_EN_CLAUSE_BREAK, _ZH_CLAUSE_BREAK):
            cuts.extend(
                (m.start(), m.end()) for m in pattern.finditer(folded) if m.end() > m.start()
            )
        for pattern in (_ZH_RUN_ON, _EN_RUN_ON):
            for m in pattern.finditer(folded):
                left = folded[: m.start()]
                last = max([0, *(e for s, e in cuts if e <= m.start())])
                left = left[last:].lstrip()
                first_person = _ZH_FIRST_PERSON.match(left) or _EN_FIRST_PERSON.match(left)
                # NOTE: "I don't think I like golf" states no like.
                if first_person and not _EN_NEG.search(left) and not re.search("不|没", left):
                    cuts.append((m.start(), m.end()))
        clauses, start = [], 0
        for s, e in sorted(cuts):
            if s < start:
                continue
            clauses.append((sentence[start:s], folded[start:s]))
            start = e
        clauses.append((sentence[start:], folded[start:]))
        return [(o.strip(), n.strip()) for o, n in clauses if n.strip()]


class _State:
    """What one turn's earlier clauses tell the next: who spoke, what was negated, an open list."""

    def __init__(self) -> None:
        self.first_person = False
        self.last_name = False
        self.negated_key: str | None = None
        self.open_list: tuple[str, list[str]] | None = None
        self.pending: list[str] = []

    def sentence_start(self) -> None:
        self._close_list()
        self.negated_key = None

    def _close_list(self) -> list[ExtractedFact]:
        self.open_list, self.pending = None, []
        return []

    def clause(self, orig: str, norm: str, *, question: bool) -> list[ExtractedFact]:
        closing = bool(_EN_LIST_CLOSE.search(norm) or _ZH_LIST_CLOSE.search(norm))
        orig, norm = _strip_fillers(orig, norm)
        if not norm:
            return []
        request = _EN_CALL_ME_REQUEST.match(norm) or _ZH_CALL_ME_REQUEST.match(norm)
        if request:
            orig, norm = orig[request.start(1) : request.end(1)], request.group(1)
            question = False
        elif question or _is_question(norm):
            self.first_person = False
            self._close_list()
            return []
        listed = self._continue_list(orig, norm, closing=closing)
        if listed is not None:
            return listed
        hit = self._match(orig, norm)
        if hit is None and self.first_person:
            hit = self._carry(orig, norm)
        if hit is None and self.negated_key and _EN_IT_IS.match(norm):
            hit = self._it_is(orig, norm)
        if hit is None:
            self.first_person = bool(_EN_FIRST_PERSON.match(norm) or _ZH_FIRST_PERSON.match(norm))
            self.last_name = False
            self.negated_key = None
            return self._close_list()
        self.first_person = True
        self.last_name = hit.key == "name" and not hit.negated
        self.negated_key = hit.key if hit.negated else None
        self._close_list()
        if hit.negated:
            return []
        if hit.key in LIST_KEYS:
            self.open_list = (hit.key, list(hit.values))
            return _list_facts(hit.key, hit.values)
        return [ExtractedFact(hit.key, hit.values[0], "set")]

    def _match(self, orig: str, norm: str) -> _Found | None:
        han = _is_han(norm[:1])
        for rule in _ZH_RULES if han else _EN_RULES:
            m = rule.pattern.match(norm)
            if m is None:
                continue
            raw = orig[m.start("v") : m.end("v")]
            values = rule.check(raw, m)
            if not values:
                continue
            if rule.negative:
                negated = False
            elif han:
                negated = bool(_ZH_NEGATED.match(norm))
            else:
                negated = bool(_EN_NEG.search(norm[: m.start("v")]))
            if not negated and not han and _EN_NEG.search(_fold(raw)):
                continue
            return _Found(rule.key, values, negated)
        return None

    def _carry(self, orig: str, norm: str) -> _Found | None:
        """A clause that leaves out its subject after a first-person one ("我叫王建国，喜欢打篮球",
        "I like tea but hate coffee", "I'm Ana, a nurse")."""
        if _ZH_CARRY.match(norm) and not norm.startswith("我"):
            return self._match("我" + orig, "我" + norm)
        if _EN_CARRY.match(norm):
            prefix = "I " if not norm.startswith(("am ", "'m ")) else "I"
            return self._match(prefix + orig, prefix + norm)
        if self.last_name and _EN_APPOSITIVE.match(norm):
            return self._match("I'm " + orig, "I'm " + norm)
        return None

    def _it_is(self, orig: str, norm: str) -> _Found | None:
        """ "My name is not Bob, it's Rob": the value of the key the last clause negated."""
        m = _EN_IT_IS.match(norm)
        assert m is not None and self.negated_key is not None
        raw = orig[m.start("v") : m.end("v")]
        key = self.negated_key
        for rule in _EN_RULES:
            if rule.key == key and key in STRING_KEYS:
                values = rule.check(raw, m)
                if values:
                    return _Found(key, values, False)
        return None

    def _continue_list(self, orig: str, norm: str, *, closing: bool) -> list[ExtractedFact] | None:
        """ "I like tennis, golf and chess": bare items after a list clause, closed by "and"."""
        if self.open_list is None:
            return None
        key, _ = self.open_list
        han = _is_han(norm[:1])
        if _EN_FIRST_PERSON.match(norm) or _ZH_FIRST_PERSON.match(norm):
            self._close_list()
            return None
        if han:
            ok = len(norm) <= 16 and not _ZH_CARRY.match(norm)
            items = _items_zh(orig) if ok else []
        else:
            ok = len(norm.split()) <= 6 and not _EN_CARRY.match(norm)
            items = _items_en(orig) if ok else []
        if not items:
            self._close_list()
            return None
        self.pending.extend(items)
        if not closing:
            return []
        found = _list_facts(key, self.pending)
        self._close_list()
        return found


def _list_facts(key: str, items: list[str]) -> list[ExtractedFact]:
    other = "dislikes" if key == "likes" else "likes"
    facts = []
    for item in items:
        facts.append(ExtractedFact(key, item, "add"))
        # NOTE: a like now is no longer a dislike, and the other way round.
        facts.append(ExtractedFact(other, item, "remove"))
    return facts


def _strip_fillers(orig: str, norm: str) -> tuple[str, str]:
    """The clause without its leading fillers ("well, actually", "对了，其实")."""
    while True:
        m = _EN_FILLER.match(norm) or _ZH_FILLER.match(norm)
        if m is None or m.end() == 0:
            return orig.strip(), norm.strip()
        orig, norm = orig[m.end() :], norm[m.end() :]


def _is_question(norm: str) -> bool:
    if _is_han(norm[:1]) or _HAN_RE.search(norm[:4]):
        return bool(_ZH_QUESTION.search(norm))
    return bool(_EN_QUESTION_START.match(norm)) or norm.rstrip().endswith("?")


# ---------------------------------------------------------------------------------------------
# An LLM-backed extractor
# ---------------------------------------------------------------------------------------------

LLM_PROMPT = """\
Extract the facts that the user states about themselves in their message.

Use only these keys:
- name (string): the user's name
- preferred_name (string): what the user asks to be called
- likes (one item per fact): something the user likes
- dislikes (one item per fact): something the user dislikes
- location (string): where the user lives now
- occupation (string): the user's job
- language (string): a language the user speaks

Write nothing for questions, negations ("my name is not Bob"), hypotheticals, reported
speech, or statements about other people. A correction ("actually, call me Jim") is a new
value. Keep the user's own words and casing.

Answer with JSON only, in this shape:
{{"facts": [{{"key": "likes", "value": "basketball", "op": "add"}}]}}
op is "add" or "remove" for likes and dislikes, and "set" for the other keys.
Answer {{"facts": []}} when the message states none.

The user's current facts: {facts}
The user's message: {text}
"""


class LLMExtractor:
    """Ask a language model for the facts in a turn: ``complete(prompt) -> str`` returns JSON.

    ``complete`` is any callable (an API client call with its own timeout). A reply that is
    not JSON raises ``ValueError`` (the turn is then stored without facts); entries with an
    unknown key, a bad op or a value that is not a short string are dropped.
    """

    prompt = LLM_PROMPT
    keys: frozenset[str] = LIST_KEYS | STRING_KEYS

    def __init__(self, complete: Callable[[str], str]) -> None:
        self.complete = complete

    def extract(self, text: str, *, facts: Mapping[str, Any]) -> list[ExtractedFact]:
        known = {k: v for k, v in facts.items() if k in self.keys}
        prompt = self.prompt.format(
            facts=json.dumps(known, ensure_ascii=False), text=json.dumps(text, ensure_ascii=False)
        )
        return self.parse(self.complete(prompt))

    def parse(self, reply: str) -> list[ExtractedFact]:
        """The facts in a model's JSON reply (code fences allowed)."""
        body = re.sub(r"^\s*```(?:json)?\s*|\s*```\s*$", "", reply.strip())
        try:
            data = json.loads(body)
        except ValueError as e:
            raise ValueError(f"The model's reply is not JSON: {reply[:200]!r}") from e
        entries = data.get("facts", []) if isinstance(data, dict) else data
        found: list[ExtractedFact] = []
        for entry in entries if isinstance(entries, list) else []:
            fact = self._fact(entry)
            if fact is None:
                logger.warning("Dropped an extracted fact the model got wrong: %r", entry)
            elif fact not in found:
                found.append(fact)
        return found

    def _fact(self, entry: Any) -> ExtractedFact | None:
        if not isinstance(entry, dict):
            return None
        key, value = entry.get("key"), entry.get("value")
        if key not in self.keys or not isinstance(value, str):
            return None
        value = value.strip()
        if not _fits(value):
            return None
        op = entry.get("op") or ("add" if key in LIST_KEYS else "set")
        if (key in LIST_KEYS) != (op in ("add", "remove")) or op not in OPS:
            return None
        return ExtractedFact(key, value, op)
