"""The English rules of the rule-based extractor: clause breaks, fillers, questions, requests
and the rules themselves (the checks of their values are in ``values``)."""

from __future__ import annotations

import re

from memory.extraction.text import _I, _items, _one, _r, _Rule, _rules, _words
from memory.extraction.values import (
    _NAME,
    _NAME_STRICT,
    _items_en,
    _job_en,
    _language_en,
    _name_call,
    _place_en,
)

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


_EN_RUN_ON = re.compile(
    r"(?<=[a-z])\s+(?<!\bif\s)(?<!\bwhen\s)(?<!\bwhether\s)"
    r"(?=(?:I|I'm|Im|[Mm]y name)\s+(?:(?:really|also|do)\s+)*"
    r"(?:like|love|enjoy|hate|dislike|live|work|speak|is|am|a|an)\b)",
)


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


_EN_QUESTION_START = re.compile(
    r"^(?:what|what's|whats|who|who's|whose|whom|where|where's|when|why|how|how's|which|"
    r"whether|do|does|did|am|is|are|was|were|can|could|would|will|should|shall|have|has|had|"
    r"may|might|don't|doesn't|isn't|aren't|won't|can't|wouldn't|shouldn't|didn't|haven't|"
    r"hasn't|right|guess|tell\s+me|remind\s+me)\b",
    _I,
)


# "Can you call me Jim?" is a request, not a question about a fact.
_EN_CALL_ME_REQUEST = re.compile(
    r"^(?:can|could|would|will)\s+(?:you|u)\s+(?:please\s+)?(?:just\s+)?(call\s+me\s+.+)$", _I
)


# Adverbs that may stand between "I" and a rule's verb; the second set also lets a negation
# stand there, for the rules that read one.
_ADVERBS = (
    "really|truly|also|just|actually|honestly|definitely|absolutely|totally|"
    "seriously|genuinely|kind of|kinda|sort of|still|now|currently|recently|do|"
    "especially|particularly|so|certainly|can|usually|generally|mostly|mainly|"
    "personally|always|already|quite|very much|literally|simply|even|too|both|all|"
    "officially|finally|"
)
_EN_ADV = (
    r"(?:(?:"
    + _words(_ADVERBS + "happily|sincerely|deeply|madly|secretly|absolutely do")
    + r")\s+)*"
)
_EN_ADVN = (
    r"(?:(?:"
    + _words(
        _ADVERBS + "not|never|no longer|don't|dont|do not|doesn't|does not|"
        "didn't|did not|can't|cant|cannot|can not|won't|will not|ain't|hardly|barely|"
        "rarely|not really|not even"
    )
    + r")\s+)*"
)
_IM = r"i(?:'m|m|\s+am)"

_EN_FAN_ADJ = r"(?:(?:big|huge|great|massive|real|true|die-?hard|avid|crazy|total|long-?time)\s+)*"
# ``_job_en`` as a rule reads it: among other words, or only when the value is exactly a job.
_JOB = _one(lambda v: _job_en(v, strict=False))
_JOB_STRICT = _one(lambda v: _job_en(v, strict=True))
_EN_RULES: tuple[_Rule, ...] = (
    # preferred_name
    *_rules(
        "preferred_name",
        _one(_name_call),
        (
            r"^(?:(?:you|u)\s+(?:can|could|may|should)\s+(?:just\s+|also\s+|always\s+)?"
            r"|please\s+|pls\s+|just\s+|simply\s+|everyone\s+|everybody\s+|people\s+"
            r"|most\s+people\s+)?calls?\s+me\s+(?P<v>.+)$"
        ),
        rf"^i\s+{_EN_ADVN}go\s+by\s+(?:the\s+name\s+(?:of\s+)?)?(?P<v>.+)$",
        rf"^my\s+nick\s*name(?:'s|\s+is)\s+{_EN_ADVN}(?P<v>.+)$",
        (
            rf"^i(?:'d|\s+would)?\s+{_EN_ADVN}(?:prefer|like|want)\s+(?:to\s+be|being)"
            rf"\s+called\s+(?P<v>.+)$"
        ),
    ),
    # name
    *_rules(
        "name",
        _NAME,
        (
            rf"^(?:(?:my|the)\s+(?:full\s+|real\s+|actual\s+|legal\s+)?name(?:'s|\s+is)|name's)"
            rf"\s+{_EN_ADVN}(?P<v>.+)$"
        ),
        rf"^{_IM}\s+{_EN_ADVN}(?:called|named)\s+(?P<v>.+)$",
    ),
    # dislikes stated by a negation
    *_rules(
        "dislikes",
        _items(_items_en),
        rf"^i\s+{_EN_ADV}(?:don't|dont|do\s+not)\s+{_EN_ADV}(?:like|enjoy|care\s+for)\s+(?P<v>.+)$",
        rf"^i\s+{_EN_ADV}(?:can't|cant|cannot|can\s+not)\s+stand\s+(?P<v>.+)$",
        (
            rf"^{_IM}\s+{_EN_ADV}not\s+{_EN_ADV}"
            rf"(?:(?:an?\s+)?{_EN_FAN_ADJ}fan\s+of|into|fond\s+of|keen\s+on)\s+(?P<v>.+)$"
        ),
        negative=True,
    ),
    # dislikes
    _r(
        "dislikes",
        rf"^i\s+{_EN_ADVN}(?:hate|dislike|detest|loathe|despise|abhor)\s+(?P<v>.+)$",
        _items(_items_en),
    ),
    # likes
    *_rules(
        "likes",
        _items(_items_en),
        rf"^i\s+{_EN_ADVN}(?:like|love|enjoy|adore|dig|prefer)\s+(?P<v>.+)$",
        (
            rf"^{_IM}\s+{_EN_ADVN}(?:into|fond\s+of|keen\s+on|passionate\s+about|interested\s+in|"
            r"crazy\s+about|obsessed\s+with|addicted\s+to|a\s+lover\s+of)\s+(?P<v>.+)$"
        ),
        rf"^{_IM}\s+{_EN_ADVN}an?\s+{_EN_FAN_ADJ}fan\s+of\s+(?P<v>.+)$",
        (
            rf"^{_IM}\s+{_EN_ADVN}an?\s+{_EN_FAN_ADJ}"
            r"(?P<v>.+?)\s+(?:fan|lover|enthusiast|nerd|geek|buff)$"
        ),
        (
            r"^my\s+(?:all[- ]time\s+|absolute\s+)?fav(?:ou?rite)?s?\s+(?:[\w-]+\s+){0,2}?"
            rf"(?:is|are|would\s+be)\s+{_EN_ADVN}(?P<v>.+)$"
        ),
        (
            rf"^my\s+(?:main\s+|favou?rite\s+)?(?:hobby|hobbies|interests?|passions?|pastimes?)"
            rf"\s+(?:is|are|include|includes)\s+{_EN_ADVN}(?P<v>.+)$"
        ),
    ),
    # language
    *_rules(
        "language",
        _one(_language_en),
        rf"^i\s+{_EN_ADVN}(?:can\s+)?(?:speak|talk\s+in)\s+(?P<v>.+)$",
        rf"^{_IM}\s+{_EN_ADVN}(?:fluent|native|bilingual)\s+in\s+(?P<v>.+)$",
        (
            rf"^my\s+(?:native|first|mother|home|main|primary)\s+(?:language|tongue)"
            rf"\s+is\s+{_EN_ADVN}(?P<v>.+)$"
        ),
        rf"^{_IM}\s+{_EN_ADVN}an?\s+native\s+(?P<v>.+?)\s+speaker$",
    ),
    # location
    *_rules(
        "location",
        _one(_place_en),
        rf"^i\s+{_EN_ADVN}(?:live|reside)\s+in\s+(?P<v>.+)$",
        (
            rf"^{_IM}\s+{_EN_ADVN}(?:living|based|located|residing|settled)\s+(?:in|out\s+of)"
            rf"\s+(?P<v>.+)$"
        ),
        rf"^i(?:'ve|\s+have)\s+been\s+{_EN_ADVN}(?:living|based)\s+in\s+(?P<v>.+)$",
        rf"^i(?:'ve|\s+have)?\s+{_EN_ADVN}(?:moved|relocated)\s+(?:back\s+)?to\s+(?P<v>.+)$",
        rf"^my\s+home\s+is\s+{_EN_ADVN}in\s+(?P<v>.+)$",
    ),
    # occupation
    *_rules(
        "occupation",
        _JOB,
        rf"^(?:i|{_IM})\s+{_EN_ADVN}(?:work|working)\s+as\s+(?P<v>.+)$",
        (
            rf"^my\s+(?:current\s+|day\s+)?(?:occupation|profession|job\s+title|position|role)"
            rf"\s+is\s+{_EN_ADVN}(?P<v>.+)$"
        ),
    ),
    _r(
        "occupation",
        rf"^my\s+(?:current\s+|day\s+)?job\s+is\s+{_EN_ADVN}(?:being\s+)?(?P<v>.+)$",
        _JOB_STRICT,
    ),
    _r(
        "occupation",
        rf"^{_IM}\s+{_EN_ADVN}(?:an?\s+)?(?P<v>.+?)\s+by\s+(?:profession|trade)$",
        _JOB,
    ),
    _r(
        "occupation",
        rf"^{_IM}\s+{_EN_ADVN}(?P<v>an?\s+.+)$",
        _JOB_STRICT,
    ),
    # name, last: "I'm Bob" (a capitalised name after every other "I'm ..." rule)
    _r("name", rf"^{_IM}\s+{_EN_ADVN}(?P<v>.+)$", _NAME_STRICT),
)


_EN_IT_IS = re.compile(r"^(?:it's|it\s+is|its)\s+(?:actually\s+|really\s+)?(?P<v>.+)$", _I)
_EN_FIRST_PERSON = re.compile(
    r"^(?:i\b|i'm\b|im\b|i've\b|i'd\b|i'll\b|my\s+name\b|call\s+me\b)", _I
)


_EN_CARRY = re.compile(rf"^{_EN_CARRY_VERB}|^(?:am|'m)\s", _I)


_EN_APPOSITIVE = re.compile(r"^an?\s+\S", _I)
_EN_LIST_CLOSE = re.compile(r"\b(?:and|or|plus|as\s+well\s+as)\s+\S", _I)
