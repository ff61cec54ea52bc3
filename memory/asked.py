"""What a question asks and what a turn says, read from their words: the side a question asks
about, whether it asks about the present, the kind of value it asks for; whether a turn says
that something changed, what it states and whether it holds a value of a kind. Pure functions
over text (English and Chinese), no I/O; ``memory.fusion`` ranks by them."""

from __future__ import annotations

import re
import unicodedata

from memory.search import CJK_RUN_RE, cjk_grams, query_split

# NOTE: a question about what the assistant said names it doing so ("what did you suggest",
# "you told me", "你上次说", "你推荐的"); any other question in the first person ("my", "we",
# "我") asks about the user: a request ("can you recommend ... for me") included, since what
# it needs is what the user said of themselves.
_ASSISTANT_EN = re.compile(
    r"\b(?:you|you've|you'd)\s+(?:\w+\s+)?(?:said|say|told|tell|suggested|suggest|recommended|"
    r"mentioned|pointed|showed|show|gave|quoted|explained|proposed|named|listed|shared|taught|"
    r"described|advised|warned|meant|called)\b|\bdid you\b|\bwas (?:the|that) \w+ you\b"
)
_ASSISTANT_ZH = re.compile(
    r"你(?:上次|之前|以前|那次|刚才|前几天|当时)?(?:跟我|给我|帮我|对我|向我)?"
    r"(?:说|讲|提|告诉|推荐|建议|教|介绍|给的|列|举)"
)


# NOTE: "can you suggest", "could you recommend": a request for something new, not a question
# about what the assistant said.
_ASKING_NOW = re.compile(r"\b(?:can|could|would|will|won't)\s+$")


def _about_said(text: str) -> bool:
    """Whether ``text`` (lower-cased) names the assistant saying something, but in a request."""
    for match in _ASSISTANT_EN.finditer(text):
        if not _ASKING_NOW.search(text[: match.start()]):
            return True
    return _ASSISTANT_ZH.search(text) is not None


_FIRST_PERSON = re.compile(r"\b(?:i|i'm|i've|i'd|my|me|mine|we|we're|we've|our|us)\b|我")


def role_asked(q: str) -> str | None:
    """The side whose turns answer ``q``: ``assistant`` for a question about what the
    assistant said ("what did you suggest", not "can you suggest"), ``user`` for another
    question in the first person, else ``None``."""
    text = unicodedata.normalize("NFKC", q).lower()
    if _about_said(text):
        return "assistant"
    if _FIRST_PERSON.search(text):
        return "user"
    return None


# NOTE: the words of a change: a state left for another ("sold the Golf and bought", "moved
# to", "no longer", "我换了", "搬到了", "不再"). A user's turn that holds one says what is
# true now, so it ranks above the statement it replaced when both match alike.
_CHANGE_EN = re.compile(
    r"\b(?:now|nowadays|these days|anymore|any more|no longer|instead|switched|switching to|"
    r"changed|moved|relocated|sold|traded|replaced|upgraded|quit|left|resigned|retired|"
    r"cancell?ed|gave up|stopped|dropped|took up|picked up|started|joined|became|"
    r"transferred|finally|just (?:got|bought|started|moved|left|switched))\b"
)
_CHANGE_ZH = re.compile(
    r"现在|如今|目前|不再|换了|换成|改成|改用|改为|搬到|搬去|搬家|卖了|卖掉|辞职|离职|跳槽|"
    r"转去|转到|调到|退了|戒了|又开始|入职|升职|新买"
)


# NOTE: a question about a past time ("what did I weigh at the start of the year", "年初的时候")
# asks for what was true then, not for what changed since: the words of a change count only
# in a question about the present.
_PAST_EN = re.compile(
    r"\b(?:did|was|were|had|used to|ago|back in|back then|at the time|at first|originally|"
    r"before|after|first|start of|beginning of)\b"
)
_PAST_ZH = re.compile(
    r"的时候|那时|当时|以前|之前|之后|后来|紧接着|原来|最早|最初|年初|年底|刚开始|那会"
)


def asks_present(q: str) -> bool:
    """Whether ``q`` asks about the present: no word of a past time in it."""
    text = unicodedata.normalize("NFKC", q).lower()
    return not (_PAST_EN.search(text) or _PAST_ZH.search(text))


def says_change(content: str) -> bool:
    """Whether ``content`` holds a word of a change (``_CHANGE_EN``, ``_CHANGE_ZH``)."""
    text = unicodedata.normalize("NFKC", content).lower()
    return bool(_CHANGE_EN.search(text) or _CHANGE_ZH.search(text))


_WORD_RE = re.compile(r"\w+")


# NOTE: what a question asking for a value asks for, and what a turn holding one says: a number
# ("how much", "what size", "多少", "几岁"), a name ("what's my cat called", "叫什么"), a colour,
# a date ("when", "哪一天"). A "which" question is not one: a thing answers it as well as a name.
_SLOTS: dict[str, re.Pattern[str]] = {
    "number": re.compile(
        r"\bhow (?:much|many|old|long|far|tall|heavy|big|often)\b|\bwhat (?:\w+ )?(?:size|"
        r"score|grade|mark|number|price|percentage|weight|height|age)\b|\bdid i (?:score|pay|"
        r"weigh)\b|多少|几[个岁号点条只辆位名]|多大|多重|多高|多长|多久|多远"
    ),
    "name": re.compile(r"\bname\b|\bcall(?:ed)?\b|\bwho\b|叫什么|名字|是谁|姓什么|有谁"),
    "colour": re.compile(r"\bcolou?r\b|颜色|什么色"),
    "date": re.compile(r"\bwhen\b|\bwhat (?:day|date)\b|哪天|哪一天|什么时候|几号|几月"),
    "place": re.compile(
        r"\bwhere\b|\b(?:which|what) (?:city|town|country|village|island|street|neighbourhood|"
        r"neighborhood|area|county|state)\b|哪里|哪儿|在哪|去哪|哪个(?:城市|国家|地方|省|区)|"
        r"什么地方|哪国|哪座"
    ),
    "entity": re.compile(
        r"\b(?:which|what) (?:\w+ )?(?:hotel|restaurant|caf[eé]|bar|pub|school|nursery|"
        r"university|college|hospital|clinic|airline|club|team|company|firm|employer|gym|bank|"
        r"shop|store|brand|app|band|museum|gallery|airport|agency|provider|insurer|church)s?\b|"
        r"(?:哪家|哪所|哪个)(?:酒店|宾馆|医院|餐厅|饭店|幼儿园|学校|大学|银行|健身房|航空公司|机场|"
        r"博物馆)"
    ),
    "reason": re.compile(r"\bwhy\b|\bwhat (?:made|caused)\b|为什么|为何|什么原因|怎么会"),
    "feeling": re.compile(
        r"\bhow did (?:\w+ ){0,3}feel\b|\bhow (?:do|does|was|were) (?:\w+ ){0,3}"
        r"(?:feel|feeling)\b|\bfeel(?:ings?)? about\b|感受|心情|感觉(?:怎么样|如何)|什么感觉|情绪"
    ),
}
# NOTE: a count of occasions ("how many times", "几次") is answered by the occasions told, one
# by one, not by a number said.
_OCCASIONS = re.compile(r"\bhow many (?:times|visits|trips)\b|几次|多少次|几回|几趟")
# NOTE: "who" is answered by a name or by a person named by their relation or role ("my
# brother", "the barber", "堂哥"): any person word the question does not say itself.
_WHO = re.compile(r"\bwho(?:m|se)?\b|谁")
_PERSON_EN = re.compile(
    r"\b(?:brother|sister|mum|mom|mother|dad|father|parent|wife|husband|son|daughter|kid|"
    r"child|children|boy|girl|aunt|uncle|cousin|nephew|niece|gran|granny|grandma|grandmother|"
    r"grandpa|grandad|grandfather|grandson|granddaughter|friend|colleague|boss|manager|"
    r"neighbour|neighbor|partner|boyfriend|girlfriend|fianc[eé]e?|flatmate|roommate|housemate|"
    r"in-laws?|teacher|tutor|coach|doctor|dentist|nurse|vet|barber|hairdresser|stylist|"
    r"landlord|landlady|plumber|builder|cleaner|nanny|babysitter|childminder|trainer|"
    r"therapist|mentor|classmate|team ?mate)s?\b"
)
_PERSON_ZH = re.compile(
    r"[哥姐弟妹爸妈叔姨舅姑婶爷]|(?<![牛酸])奶(?![茶油粉酪])|外公|外婆|公公|婆婆|老公|老婆|丈夫|妻子|媳妇|儿子|女儿|孩子|"
    r"朋友|同事|同学|室友|邻居|老板|领导|老师|医生|教练|师傅|保姆|阿姨|房东"
)
# NOTE: kinds whose value is an account (a reason, a feeling), not a value a later statement
# replaces: they lower a near miss's score but never move a result (``fusion.superseded``).
ACCOUNT_KINDS = frozenset({"reason", "feeling"})
# NOTE: a reason is said with a word of cause ("because", "so", "因为", "就", "才"); a feeling with
# a word of one ("relieved", "nervous", "紧张", "开心", "哭"). Either is a closed class of words, so
# a near miss on the subject ("my sister called off her wedding") holds neither.
_REASON = re.compile(
    r"\b(?:because|since|as|so|due|thanks to|owing to|reason|why|after|too|sick of|tired of|"
    r"fed up|couldn't|could not|wasn't|didn't)\b|因为|由于|所以|因此|为了|原因|导致|害得|结果|"
    r"才|就|太|受不了|撑不住|嫌|怕|不想|没法"
)
_FEELING = re.compile(
    r"\b(?:happy|glad|sad|upset|relieved|proud|nervous|anxious|worried|excited|thrilled|"
    r"scared|afraid|terrified|angry|annoyed|furious|frustrated|disappointed|embarrassed|"
    r"ashamed|lonely|homesick|overwhelmed|exhausted|drained|calm|relaxed|confident|shy|"
    r"grateful|guilty|jealous|miserable|elated|ecstatic|devastated|heartbroken|hopeful|"
    r"stressed|tense|shaking|shaky|cried|crying|tears|loved|loves|hated|hates|enjoyed|enjoys|"
    r"bored|fine|great|awful|terrible|amazing|wonderful|over the moon|on edge|butterflies|"
    r"panic\w*|thrill\w*|fear\w*|joy\w*|love\w*|feel\w*|felt)\b|"
    r"开心|高兴|快乐|难过|伤心|激动|兴奋|害怕|担心|焦虑|紧张|生气|失望|尴尬|丢脸|孤独|想家|累|轻松|骄傲|"
    r"自豪|感动|委屈|郁闷|沮丧|崩溃|哭|抖|慌|忐忑|不安|放松|满足|欣慰|后悔|舒服|难受|喜欢|讨厌|害羞|"
    r"烦|怕|爽|美滋滋|松了一口气|觉得|感觉"
)
# NOTE: a request ("where should we go", "can you recommend", "帮我推荐") asks for a suggestion,
# not for a value said: no kind of value is asked.
_REQUEST = re.compile(
    r"\b(?:should|recommend|suggest|could you|can you|any ideas|help me)\b|推荐|建议|帮我|应该|"
    r"给点|比较好"
)
_NUMBER_EN = re.compile(
    r"\d|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|"
    r"thirty|forty|fifty|hundred|thousand|dozen|half|grand)\b"
)
_NUMBER_ZH = re.compile(
    r"[一两二三四五六七八九十百千万半][个岁次号点年月天块元斤码分米周倍层条只本辆套间张台件位名"
    r"颗份杯瓶盒双对节场趟遍顿支片篇首部座棵朵匹封桌克毫]"
    r"|[一两二三四五六七八九十][十百千万][一二三四五六七八九]?"
)
# NOTE: in Chinese a month or day is said after a number (read as one) or a word naming
# which ("下个月", "月底", "周日", "星期三"); a bare 日 or 月 is part of other words ("生日",
# "日本", "月饼").
_DATE_WORDS = re.compile(
    r"\b(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|january|february|march|"
    r"april|may|june|july|august|september|october|november|december)\b|[上下这本]个?月|"
    r"月[初底中]|(?:周|星期|礼拜)[一二三四五六日天]"
)
_NOT_NAMES_TEXT = (
    "monday tuesday wednesday thursday friday saturday sunday january february march april may"
    " june july august september october november december i i'm i've i'd i'll ok"
    # A relation said as a name ("Dad was seasick") names no one new.
    " mum mom dad mummy daddy gran granny grandma grandpa grandad nan nana auntie"
)
_NOT_NAMES = frozenset(_NOT_NAMES_TEXT.split())
_COLOURS = re.compile(
    r"\b(?:red|blue|green|yellow|white|black|grey|gray|pink|purple|orange|brown|beige|cream|"
    r"teal|navy|sage|olive|turquoise|lilac|mint|ochre|terracotta)(?:ish|head|heads)?\b|"
    r"\b(?:reddish|blond|blonde|brunette|"
    r"auburn|ginger|copper|silver|gold|golden|bronze|platinum|ivory|charcoal|burgundy|maroon|"
    r"peach|coral|indigo|violet|magenta|khaki|tan)\b|[红蓝绿黄白黑灰粉紫橙棕褐青米金银]色"
    r"|[\u4e00-\u9fff][红蓝绿黄黑灰粉紫橙棕褐](?=[，。！？、的,.!? ]|$)"
)
# NOTE: a colour word naming a kind of food or drink ("red wine", "green tea", "红酒") says no
# colour of anything.
_NOT_COLOURS = re.compile(
    r"\b(?:red|white|green|black|brown|rose|ros[eé])\s+(?:wine|tea|coffee|bread|rice|pepper|"
    r"sugar|meat|beans?)\b|[红白绿黑]茶|[红白]酒|黑咖啡|白[米糖面]"
)
# NOTE: the common Chinese surnames: a person is often named by one with a title (王阿姨,
# 李老师) or a familiar prefix (小陈, 老王).
_SURNAMES = (
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘于蒋蔡余杜叶程苏魏吕丁任"
    "沈姚卢姜崔钟谭陆汪范金石廖贾夏韦付方白邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺顾毛郝龚邵万钱严覃武戴莫孔向汤"
)
_NAME_ZH = re.compile(
    r"叫[\u4e00-\u9fff]|[“「《\"'‘]|(?:(?![的了到在是我你他她们这那个上进])[\u4e00-\u9fff]){2,}"
    r"(?:酒店|宾馆|医院|公司|学校|大学|中学|小学|"
    r"幼儿园|餐厅|饭店|队|俱乐部|航空|银行|中心|集团|博物馆|健身房|机场)"
    rf"|[小老][{_SURNAMES}]|[{_SURNAMES}](?:先生|女士|老师|阿姨|叔叔|医生|师傅|总|老板|经理|教练)"
    r"|阿[^\s姨婆公爸妈嫂，。！？]"
    r"|(?:女儿|儿子|闺女|老公|老婆|男朋友|女朋友|对象|同事|朋友|室友|同学|妹妹|姐姐|哥哥|弟弟)[小阿老]"
    r"[\u4e00-\u9fff]"
)
# A place said in Chinese: a name with a place's ending (苏州, 浦东新区, 南京路), the place a
# verb of going, coming or living names (去成都, 在三亚, 去了婺源; not 回来, 现在, 到现在), or
# where someone is from (是潮汕人); not a count after the verb (住几天).
_PLACE_ZH = re.compile(
    r"[\u4e00-\u9fff](?:省|市|县|区|镇|村|州|路|街|岛|湾|港)"
    r"|(?<![现实正存好])(?:在|去|到|回|从|住|飞|搬|来自)了?"
    r"(?![来去家了过着的这那哪里我你他她它们一现几])[\u4e00-\u9fff]"
    r"|是(?![个一这那不我你他她])[\u4e00-\u9fff]{2,3}人"
)


_SENTENCE_END_RE = re.compile(r"(?<=[.!?。！？])\s*")
_CLAUSE_RE = re.compile(r"[，,；;]")


def stated(content: str) -> str:
    """What ``content`` states: its text without its questions (a sentence ending in a question
    mark; in Chinese, that sentence's last clause only, the ones before it being said)."""
    kept = []
    for sentence in _SENTENCE_END_RE.split(unicodedata.normalize("NFKC", content)):
        if not sentence.endswith("?"):
            kept.append(sentence)
        elif CJK_RUN_RE.search(sentence):
            kept.extend(_CLAUSE_RE.split(sentence)[:-1])
    return " ".join(kept)


# NOTE: a statement that says something: so many words outside a turn's questions (CJK
# characters count as words), more than a greeting or an opener ("Hi again!", "问一下，").
STATED_WORDS = 4


def says_of_self(content: str) -> bool:
    """Whether ``content``, said by a user, tells something rather than only asks: at least
    ``STATED_WORDS`` words outside its questions (``stated``), what they are, have, did or
    like."""
    words, runs = query_split(stated(content))
    count = len(_WORD_RE.findall(words)) + sum(len(run) for run in runs) // 2
    return count >= STATED_WORDS


def slot_asked(q: str) -> frozenset[str]:
    """The kinds of value ``q`` asks for (``number``, ``name``, ``colour``, ``date``,
    ``place``, ``entity``: a named place of business); empty for a question that asks for none
    or for a request ("where should we go", "帮我推荐")."""
    text = unicodedata.normalize("NFKC", q).lower()
    if role_asked(q) != "assistant" and _REQUEST.search(text):
        return frozenset()
    kinds = {kind for kind, pattern in _SLOTS.items() if pattern.search(text)}
    if _OCCASIONS.search(text):
        kinds.discard("number")
    return frozenset(kinds)


_SENTENCE_RE = re.compile(r"[.!?;:]\s+|\n")
_NAME_WORD_RE = re.compile(r"[\w&'-]+")
# NOTE: a sentence that opens with a word then says who it is ("Kemal, the barber near the
# station, ...") or with "and I" ("Marco and I have been together") opens with a name.
_APPOSITION = re.compile(r"\s*[\w'-]+(?:, (?:the|a|an|my|our|his|her|their) | and (?:I|me)\b)")


def _person_held(lower: str, q: str, asked: set[str]) -> bool:
    """Whether ``lower`` names a person by a relation or role that ``q`` does not say."""
    for match in _PERSON_EN.finditer(lower):
        word = match.group().removesuffix("s")
        if match.group() not in asked and word not in asked:
            return True
    return any(m.group() not in q for m in _PERSON_ZH.finditer(lower))


def slot_held(kind: str, content: str, q: str) -> bool:
    """Whether ``content`` holds a value of ``kind`` (``slot_asked``): a number in digits or
    words, a colour, a date (a number, a weekday, a month); a name, a place or an entity: a
    capitalised word not in ``q`` (a sentence's first only where it looks like a name on its
    own), in Chinese one in Latin letters, quoted, said with 叫, of an institution or a person
    (王阿姨, 小陈), or a place (苏州, 去成都), not named in ``q``; for "who", also a person by a
    relation or role ("my brother", 堂哥) that ``q`` does not say."""
    text = unicodedata.normalize("NFKC", content)
    lower = text.lower()
    if kind in ("number", "date"):
        if _NUMBER_EN.search(lower) or _NUMBER_ZH.search(text):
            return True
        return kind == "date" and _DATE_WORDS.search(lower) is not None
    if kind == "colour":
        return _COLOURS.search(_NOT_COLOURS.sub(" ", lower)) is not None
    if kind in ACCOUNT_KINDS:
        return (_REASON if kind == "reason" else _FEELING).search(lower) is not None
    asked = {word.lower() for word in _WORD_RE.findall(unicodedata.normalize("NFKC", q))}
    if kind == "name" and _WHO.search(q.lower()) and _person_held(lower, q, asked):
        return True
    for sentence in _SENTENCE_RE.split(text):
        words = _NAME_WORD_RE.findall(sentence)
        for i, word in enumerate(words):
            lower_word = word.lower()
            if lower_word in asked or lower_word.removesuffix("s") in _NOT_NAMES:
                continue
            capital = word[0].isascii() and word[0].isupper()
            # NOTE: a sentence's first word is a name only where it looks like one on its own
            # (PureGym, iPhone, X-T30) or the next word is capitalised too (Blue Planet).
            mixed = any(ch.isupper() or ch.isdigit() for ch in word[1:]) and word[0].isalpha()
            if i == 0:
                after = words[1] if len(words) > 1 else ""
                named = capital and _APPOSITION.match(sentence) is not None
                if not (mixed or named or (capital and after[:1].isupper())):
                    continue
            elif not (capital or mixed):
                continue
            return True
    if not CJK_RUN_RE.search(text):
        return False
    if re.search(r"[A-Za-z]{2,}", text):
        return True
    # NOTE: what the question names itself (小刘 in "小刘是哪里人") is not the value it asks for.
    found = [m.group() for m in _NAME_ZH.finditer(text)]
    if kind == "place":
        found += [m.group() for m in _PLACE_ZH.finditer(text)]
    return any(value not in q for value in found)


_COMMON_TEXT = (
    "a an and are as at be but by can could did do does for from had has have how i if in is"
    " it me my of on or our should so that the this to was we what when where which who will"
    " with would you your"
)
_COMMON = frozenset(_COMMON_TEXT.split())


def repeat_terms(content: str) -> frozenset[str]:
    """The terms two turns share when they say the same: lower-cased words but common ones,
    and CJK pairs."""
    words, runs = query_split(content.lower())
    terms = {word for word in _WORD_RE.findall(words) if word not in _COMMON}
    for run in runs:
        terms.update(cjk_grams(run).split())
    return frozenset(terms)


# NOTE: the characters of a Chinese question that say how it asks, not what about (我, 什么, 了,
# 哪, 吗): a pair holding one is no term of its subject.
_FUNCTION_ZH = frozenset("我你他她它们的了是在有什么哪吗呢吧啊给把被让和跟与也都就还又才这那个")


def subject_terms(q: str) -> frozenset[str]:
    """The terms of what ``q`` is about, as ``repeat_terms`` reads a turn: its words of two
    letters or more but common ones, and its CJK pairs without a character of how it asks."""
    return frozenset(
        term
        for term in repeat_terms(q)
        if (_FUNCTION_ZH.isdisjoint(term) if CJK_RUN_RE.match(term) else len(term) > 1)
    )


# NOTE: a Chinese question asking for a thing ("开了什么药", "哪种花", "送了我什么") names no kind a
# rule reads, but its answer introduces the thing: a verb's object after 了, 过, 成, 是, 用 or 叫,
# after the question's own verb ("学什么" over "学大提琴"), or a counted one ("一只萨摩耶", "那台"),
# in words the question does not say; or a name (quoted, in Latin letters). A near miss on its
# subject names the subject again ("扭了脚踝" for "扭了脚踝以后贴的什么膏药") or introduces nothing.
_THING_ASKED_ZH = re.compile(r"什么|啥|哪[种款道本部首个只件样类位]")
_ASKED_VERB_ZH = re.compile(r"([\u4e00-\u9fff])(?:了|的是|的)?(?:什么|啥|哪)")
_MEASURE_ZH = "个只辆套台条件双瓶盒本张把支块盆份束款种家顶副串枚颗杯碗道部首棵匹锅壶包袋罐箱桶"
_THING_ZH = re.compile(
    rf"(?:[了过成是用叫]|[一两几三四五六七八九十那这][{_MEASURE_ZH}])"
    rf"[一两几]?[{_MEASURE_ZH}]?([\u4e00-\u9fff]{{2}})"
)
_THING_NAMED_ZH = re.compile(r"[《“「\"]|[A-Za-z]{2,}")
# NOTE: a pair holding one of these says when, how much or how, not what.
_NOT_THING_ZH = frozenset("不很太没再多少点些下时后前候天年月久半刚才已经样么去来过得着")


def thing_asked(q: str) -> bool:
    """Whether ``q``, in Chinese, asks for a thing the user has, did or got ("什么", "哪种") and
    no kind ``slot_asked`` reads, nor a suggestion (an assistant's advice names things in more
    ways than the rule reads)."""
    text = unicodedata.normalize("NFKC", q)
    if not CJK_RUN_RE.search(text) or slot_asked(q) or role_asked(q) == "assistant":
        return False
    if _REQUEST.search(text):
        return False
    return _THING_ASKED_ZH.search(text.replace("什么时候", "")) is not None


def thing_held(content: str, q: str) -> bool:
    """Whether ``content`` states a thing ``q`` does not name: a name (quoted, in Latin
    letters), or an object after 了, 过, 成, 是, 用, 叫 or ``q``'s verb, or after a count ("一只
    萨摩耶"), its first two characters neither in ``q`` nor words of time, amount or manner."""
    text = unicodedata.normalize("NFKC", stated(content))
    if _THING_NAMED_ZH.search(text):
        return True
    pairs = [m.group(1) for m in _THING_ZH.finditer(text)]
    for verb in {m.group(1) for m in _ASKED_VERB_ZH.finditer(q)} - _FUNCTION_ZH:
        pairs += re.findall(rf"{re.escape(verb)}[了过着]?([\u4e00-\u9fff]{{2}})", text)
    return any(
        pair not in q and _FUNCTION_ZH.isdisjoint(pair) and _NOT_THING_ZH.isdisjoint(pair)
        for pair in pairs
    )
