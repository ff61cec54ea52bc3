"""The English rules of the rule-based extractor: clause breaks, fillers, questions, negation,
word lists, value checks and the rules themselves."""

from __future__ import annotations

import re

# NOTE: a value in the other script is checked by the other module ("我叫Jim", "I speak
# 粤语"); the two import each other and use each other's names only when a rule runs.
from memory.extraction import chinese
from memory.extraction.text import (
    _I,
    _cut,
    _edges,
    _fits,
    _fold,
    _is_han,
    _items,
    _one,
    _r,
    _Rule,
    _set,
    _strip_lead,
    _words,
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


_EN_NEG = re.compile(
    r"\b(?:not|never|no\s+longer|nobody|neither|nor|hardly|barely|rarely|dont|cant|cannot|"
    r"wont|aint|isnt|didnt|doesnt|wasnt)\b|n't\b",
    _I,
)
# "Can you call me Jim?" is a request, not a question about a fact.
_EN_CALL_ME_REQUEST = re.compile(
    r"^(?:can|could|would|will)\s+(?:you|u)\s+(?:please\s+)?(?:just\s+)?(call\s+me\s+.+)$", _I
)


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
    value = _edges(chinese._ZH_TAIL.sub("", value))
    if not value:
        return None
    if _is_han(value[0]):
        return chinese._name_zh(value, strict=strict)
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
        return value if not chinese._ZH_BLOCK_ANY.search(_fold(value)) else None
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
        return chinese._language_zh(value)
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


_EN_IT_IS = re.compile(r"^(?:it's|it\s+is|its)\s+(?:actually\s+|really\s+)?(?P<v>.+)$", _I)
_EN_FIRST_PERSON = re.compile(
    r"^(?:i\b|i'm\b|im\b|i've\b|i'd\b|i'll\b|my\s+name\b|call\s+me\b)", _I
)


_EN_CARRY = re.compile(rf"^{_EN_CARRY_VERB}|^(?:am|'m)\s", _I)


_EN_APPOSITIVE = re.compile(r"^an?\s+\S", _I)
_EN_LIST_CLOSE = re.compile(r"\b(?:and|or|plus|as\s+well\s+as)\s+\S", _I)
