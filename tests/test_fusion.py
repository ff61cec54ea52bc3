"""memory.fusion and memory.asked: the side a question asks about, the words of a change, the
value asked, the candidates' crowding and the order results are chosen in; on the real
PostgreSQL with pgvector and the built-in embedder where a search runs (the fixtures of
tests/test_recall.py)."""

from __future__ import annotations

import pytest
from django.db import connection
from hypothesis import given, settings
from hypothesis import strategies as st

from memory import asked, fusion, ranking, selectors
from memory.models import Owner, Turn
from memory.recall import embedders, vectors
from memory.services import embeddings
from tests.test_recall import e5, pgvector, say  # noqa: F401  (fixtures)


@pytest.mark.parametrize(
    ("q", "side"),
    [
        ("What did you suggest I listen to on the train?", "assistant"),
        ("Which book did you recommend for sleep?", "assistant"),
        ("Remind me what you told me about the oven temperature", "assistant"),
        ("你上次说哪本书能帮我入睡？", "assistant"),
        ("你给我介绍的那个动作叫什么？", "assistant"),
        ("What breed did we end up adopting?", "user"),
        ("Can you recommend a curry recipe for me?", "user"),
        # A request to the assistant asks for something new, not for what it said.
        ("Can you suggest something for me to read on my next flight?", "user"),
        ("Could you tell me a film I would like?", "user"),
        ("Can you remind me what you recommended?", "assistant"),
        ("我平时怎么去公司？", "user"),
        ("What is the capital of France?", None),
    ],
)
def test_the_side_a_question_asks_about(q, side):
    assert asked.role_asked(q) == side


@pytest.mark.parametrize(
    ("content", "change"),
    [
        ("Sold the Pixel and bought an iPhone 15.", True),
        ("We moved to Bristol last month.", True),
        ("I no longer eat meat.", True),
        ("我换了一部iPhone 15。", True),
        ("上个月搬到了苏州。", True),
        ("My Pixel 6 battery is dead by 3pm.", False),
        ("在杭州住了三年。", False),
    ],
)
def test_the_words_of_a_change(content, change):
    assert asked.says_change(content) is change


def test_a_question_about_the_past_is_not_about_the_present():
    assert asked.asks_present("What car do I drive these days?")
    assert asked.asks_present("我现在住在哪个城市？")
    assert not asked.asks_present("What did I weigh at the start of the year?")
    assert not asked.asks_present("年初的时候我有多重？")


def _candidate(seq: int, session: str, role: str, content: str, cosine: float, crowding=0.85):
    return fusion.Candidate(seq, (seq, session, role, content), cosine, 0.0, crowding)


# NOTE: the candidates below have cosines on the plain cosine's scale: they are ranked by the
# rows of an owner compared uncentred.


def test_the_score_shown_reads_the_plain_cosine_where_the_ranking_is_centred():
    near = _candidate(5, "s1", "user", "I adopted a corgi named Mochi.", 0.30, 0.05)
    near.plain = 0.90
    far = _candidate(9, "s2", "user", "How do I fix a flat tyre?", 0.40, 0.05)
    far.plain = 0.80
    q = "What is my dog called?"
    # Ranked by the centred cosine; each shows the score of its plain one.
    assert fusion.ranked([near, far], "semantic", 2, q) == [far, near]
    assert near.score_logit > far.score_logit
    shown = fusion.candidate_score_logit("semantic", near, asked="user", cjk=False)
    assert near.score_logit == pytest.approx(shown)
    bias, by_meaning, _, _, by_role, _, _ = fusion.SCORE["semantic"]
    assert shown == pytest.approx(bias + by_meaning * 0.90 + by_role)
    # An owner compared uncentred is ranked and scored alike.
    plain = fusion.candidate_score_logit("semantic plain", near, asked="user", cjk=False)
    assert plain == fusion.candidate_logit("semantic plain", near, asked="user", cjk=False)


def test_the_score_rises_with_how_much_of_the_history_is_near_the_question():
    q = "What breed did we end up adopting?"

    def searched(others: float) -> fusion.Candidate:
        best = _candidate(50, "s5", "user", "We brought home a rescue whippet.", 0.40, 0.05)
        best.plain = 0.88
        rest = []
        for i in range(1, 10):
            c = _candidate(i, f"s{i}", "user", f"Another question, number {i}.", 0.10, 0.05)
            c.plain = others
            rest.append(c)
        chosen = fusion.ranked([*rest, best], "semantic", 5, q)
        assert chosen[0] is best
        return best

    # A history that talked about the subject (many turns near the question) makes its best
    # turn's score higher than the same turn among unrelated ones: the order is the same.
    talked, never = searched(0.86), searched(0.78)
    assert talked.score_logit > never.score_logit
    _, _, _, _, _, _, by_density = fusion.SCORE["semantic"]
    dense = (0.88 + 9 * 0.86) / 10
    sparse = (0.88 + 9 * 0.78) / 10
    assert talked.score_logit - never.score_logit == pytest.approx(by_density * (dense - sparse))


def test_the_score_holds_the_question_s_words_against_a_result_the_ranking_for_it():
    q = "What breed is my neighbour's cat?"
    echo = fusion.Candidate(1, (1, "s1", "user", "My neighbour's cat sleeps on our car."), 0.3, 0.6)
    other = fusion.Candidate(2, (2, "s2", "user", "We brought home a little beagle."), 0.3, 0.0)
    echo.plain = other.plain = 0.88
    # Ranked higher for the words it shares; scored lower for them, as near misses share
    # the question's words and answers say theirs in their own.
    assert fusion.candidate_logit("hybrid", echo, asked="user", cjk=False) > (
        fusion.candidate_logit("hybrid", other, asked="user", cjk=False)
    )
    shown = fusion.candidate_score_logit("hybrid", echo, asked="user", cjk=False)
    assert shown < fusion.candidate_score_logit("hybrid", other, asked="user", cjk=False)
    # The plain cosine weighs less in the score than in the uncentred ranking.
    assert fusion.SCORE["hybrid"][1] < fusion.CALIBRATION["hybrid plain"][1]
    assert fusion.ranked([echo, other], "hybrid", 2, q)[0] is echo


def test_the_density_is_the_mean_plain_cosine_of_the_nearest_candidates():
    candidates = []
    for i, plain in enumerate([0.9, 0.5, *[0.8] * 12, None]):
        c = _candidate(i + 1, "s1", "user", "text", 0.1)
        c.plain = plain
        candidates.append(c)
    assert fusion.search_density(candidates) == pytest.approx((0.9 + 9 * 0.8) / 10)
    assert fusion.search_density([_candidate(1, "s1", "user", "text", 0.1)]) == (
        fusion.DENSITY_USUAL
    )


def test_a_repeated_turn_takes_one_place_and_a_crowded_one_yields():
    asked = "How do I take better notes in lectures?"
    candidates = [
        _candidate(10 * i, f"s{i}", "user", f"Quick question: {asked}", 0.83, 0.95)
        for i in range(1, 5)
    ]
    answer = _candidate(
        95, "s9", "user", "Tom and Aisha from the book club want a film night.", 0.82
    )
    other = _candidate(60, "s6", "user", "Can you check this text for typos?", 0.80)
    chosen = fusion.ranked(
        [*candidates, answer, other], "semantic plain", 3, "Who is in my reading group?"
    )
    # The answer is less like the query than the repeated question, but that question is like
    # every other candidate (crowded) and said four times: it takes one place, not three.
    assert chosen[0] is answer
    assert sum(c.content.endswith(asked) for c in chosen) == 1
    assert other in chosen


def test_the_newer_statement_of_a_change_ranks_above_the_old():
    old = _candidate(3, "s1", "user", "My 2011 Golf needs new brake pads.", 0.863)
    new = _candidate(90, "s7", "user", "I let the old Golf go and picked up a used Kia.", 0.861)
    q = "What car do I drive these days?"
    assert fusion.ranked([old, new], "semantic plain", 2, q) == [new, old]
    # A question about a past time asks for what was true then: the change counts for nothing.
    past = "What car did I drive at the start of the year?"
    assert fusion.ranked([old, new], "semantic plain", 2, past) == [old, new]
    assert fusion.ranked([old, new], "semantic plain", 2, q, dated=True) == [old, new]


def test_a_later_turn_that_replaces_a_result_ranks_directly_above_it():
    old = _candidate(3, "s1", "user", "Visiting my brother in Manchester this weekend.", 0.95)
    other = _candidate(40, "s4", "user", "My brother's birthday is coming up.", 0.90)
    new = _candidate(90, "s7", "user", "My brother moved to Vancouver last month.", 0.80)
    q = "Where does my brother live?"
    # Far less near the question, the new statement ranks below both on its own ...
    assert fusion.ranked([old, other, new], "semantic plain", 3, q) == [old, other, new]
    # ... and directly above the one it replaces once the two are about the same subject.
    old.alike, new.alike = frozenset({new.pk}), frozenset({old.pk})
    assert fusion.ranked([old, other, new], "semantic plain", 3, q) == [new, old, other]
    # Brought in from past the results, the last result gives way.
    assert fusion.ranked([old, other, new], "semantic plain", 2, q) == [new, old]
    # Not in a question about a past time, nor in one narrowed to dates.
    past = "Where did my brother live at the start of the year?"
    assert fusion.ranked([old, other, new], "semantic plain", 3, past)[0] is old
    assert fusion.ranked([old, other, new], "semantic plain", 3, q, dated=True)[0] is old


def test_only_a_later_turn_saying_a_change_replaces_a_result():
    old = _candidate(3, "s1", "user", "Visiting my brother in Manchester this weekend.", 0.95)
    same = _candidate(90, "s7", "user", "My brother loves Manchester in the rain.", 0.80)
    earlier = _candidate(1, "s0", "user", "My brother moved to Manchester.", 0.80)
    told = _candidate(91, "s7", "assistant", "Your brother moved, you said.", 0.80)
    for c in (same, earlier, told):
        old.alike, c.alike = frozenset({c.pk}), frozenset({old.pk})
        chosen = fusion.ranked([old, c], "semantic plain", 2, "Where does my brother live?")
        assert chosen == [old, c]


def test_a_later_turn_saying_a_change_about_as_likely_replaces_a_result_alike_or_not():
    old = _candidate(3, "s1", "user", "Our old flat in Leeds is freezing all winter.", 0.95)
    new = _candidate(90, "s7", "user", "Since we moved to Harrogate the kids walk to school.", 0.94)
    far = _candidate(91, "s8", "user", "We moved the sofa to the other wall.", 0.80)
    q = "Which town is home for us these days?"
    assert fusion.ranked([old, new], "semantic plain", 2, q) == [new, old]
    # Far less likely evidence, a change replaces nothing it is not alike to.
    assert fusion.ranked([old, far], "semantic plain", 2, q) == [old, far]


@pytest.mark.usefixtures("e5")
def test_the_features_bring_the_session_neighbours_of_the_heads():
    say("wang", "Back from Berlin since last weekend.", "Welcome back!")
    say("wang", "I just ordered a standing desk.", "Nice.", session_id="tab-2")
    owner = Owner.objects.get(external_id="wang")
    pks = list(Turn.objects.filter(owner=owner).order_by("seq").values_list("pk", flat=True))

    def seqs(heads):
        rows = ranking.turns_features(
            using="default", owner_pk=owner.pk, pks=pks[:1], terms=[], model=None, vector=None,
            heads=heads,
        )  # fmt: skip
        return sorted(row[1] for row in rows)

    assert seqs(None) == [1]
    # The turn after it in its session, not the next session's.
    assert seqs(pks[:1]) == [1, 2]
    assert seqs(pks[1:2]) == [1]


@pytest.mark.parametrize(
    ("q", "kinds"),
    [
        ("What shoe size does my son wear?", {"number"}),
        ("How much did I pay for my bike?", {"number"}),
        ("What's my cat called?", {"name"}),
        ("What colour did we paint the living room?", {"colour"}),
        ("When is our wedding anniversary?", {"date"}),
        ("我儿子穿多大码的鞋？", {"number"}),
        ("我领导叫什么名字？", {"name"}),
        ("我们的结婚纪念日是哪一天？", {"date"}),
        ("Which gym am I a member of?", {"entity"}),
        ("Which appliances have broken down this year?", set()),
        ("Where does my brother live?", {"place"}),
        ("我同事小刘是哪里人？", {"place"}),
        ("我去东京坐的是哪家航空公司？", {"entity"}),
        ("我的房东姓什么？", {"name"}),
        ("Why did I stop singing with the choir?", {"reason"}),
        ("我为什么辞掉了上一份工作？", {"reason"}),
        ("How did I feel after finishing my first half marathon?", {"feeling"}),
        ("我第一次上台讲话是什么感受？", {"feeling"}),
        ("我儿子转学以后心情怎么样？", {"feeling"}),
        ("How did I find my flat?", set()),
        # "did I get" asks for a thing, not a number; a count of occasions is told one by one.
        ("What gadget did I get before my trip?", set()),
        ("How many times did I see the dentist this year?", set()),
        ("这几个月我去看了几次牙？", set()),
        ("What did the kids call the sourdough starter?", {"name"}),
        # A request asks for a suggestion, not for a value said.
        ("Where should we go for our anniversary dinner?", set()),
        ("周末带孩子去哪玩比较好？给点建议。", set()),
        ("给我推荐几本书吧。", set()),
    ],
)
def test_the_value_a_question_asks_for(q, kinds):
    assert asked.slot_asked(q) == kinds


@pytest.mark.parametrize(
    ("kind", "content", "held"),
    [
        ("number", "He's a size 4 now.", True),
        ("number", "It cost me nine hundred pounds.", True),
        ("number", "My son needs new football boots.", False),
        ("number", "儿子的鞋穿三十五码。", True),
        ("number", "儿子要买新球鞋了。", False),
        ("name", "We called the kitten Pepper.", True),
        ("name", "The neighbour's cat keeps digging. Thursday again!", False),
        ("name", "Landing in Lisbon on Thursday.", False),
        ("name", "我家猫叫年糕。", True),
        ("name", "邻居家的猫老跑到我们院子里。", False),
        ("colour", "We went with a sage green.", True),
        ("colour", "客厅刷成了浅灰色。", True),
        ("colour", "How many coats will we need?", False),
        ("colour", "Came out of the salon a copper redhead!", True),
        ("colour", "周五去理发店染了个亚麻棕，能保持多久？", True),
        ("colour", "明白，我先说说可以怎么做。", False),
        ("reason", "I left because the rehearsals clashed with my shifts.", True),
        ("reason", "通勤要三个小时，实在撑不住就辞了。", True),
        ("reason", "My sister called off her wedding last month.", False),
        ("reason", "妹妹上个月取消了婚礼。", False),
        ("feeling", "Honestly I was more relieved than proud.", True),
        ("feeling", "手一直在抖，紧张得差点忘词。", True),
        ("feeling", "My son started at his new school this week.", False),
        ("feeling", "儿子这周转到新学校了。", False),
        ("date", "We married on 12 June.", True),
        ("date", "It was a lovely day.", False),
        ("date", "外婆下个月过九十大寿。", True),
        ("date", "周日去爬山了。", True),
        ("date", "姐姐明年三月底生头胎。", True),
        ("date", "外公的生日宴很热闹。", False),
        ("date", "刚从日本回来，累坏了。", False),
        ("entity", "PureGym is packed at 6pm.", True),
        ("entity", "Blue Lantern was full again.", True),
        ("entity", "Thanks, that helps a lot.", False),
        ("name", "My daughter's piano lessons moved to Thursdays.", False),
        ("name", "和阿凯在一起快半年了。", True),
        ("name", "男朋友小陈周末要带我去见他爸妈。", True),
        ("name", "我闺女小雨今年上二年级了。", True),
        ("name", "Grandma's ninetieth is next month.", False),
        ("place", "刚从大理回来，全晒黑了。", True),
        ("place", "杭州的梅雨季太难熬了。", True),
        ("place", "外婆下个月九十大寿，说什么好？", False),
        ("name", "Kemal, the barber near the station, gave me a skin fade.", True),
        ("name", "Marco and I have been together three months now.", True),
        ("place", "My parents are back and Dad was badly seasick.", False),
        ("colour", "How do I get a red wine stain out of the cushions?", False),
        ("number", "今天补了两颗蛀牙，麻药还没退。", True),
        ("place", "爸妈坐邮轮旅游回来了，我爸晕船了。", False),
        ("place", "周二拔了智齿，到现在脸还肿着。", False),
        ("place", "周末带一家老小去了婺源。", True),
        ("place", "老公的妈妈是潮汕人。", True),
        ("place", "我哥下周要来我这边住几天。", False),
        ("entity", "表妹刚收到大学录取通知书。", False),
        ("entity", "表妹考上了复旦大学。", True),
    ],
)
def test_a_turn_holding_a_value_of_the_kind_asked(kind, content, held):
    assert asked.slot_held(kind, content, "Which hotel did I stay at in Lisbon?") is held


def test_a_value_the_question_names_itself_is_not_held():
    q = "我同事小刘是哪里人？"
    assert not asked.slot_held("place", "同事小刘下个月结婚，份子钱给多少合适？", q)
    assert asked.slot_held("place", "小刘是从成都来的。", q)
    assert not asked.slot_held(
        "place", "My colleague Ravi is getting married.", "Where is Ravi from?"
    )


def test_who_is_answered_by_a_person_the_question_does_not_name():
    q = "Who came to stay with us over Easter?"
    assert asked.slot_held("name", "My brother and his two boys are with us.", q)
    assert not asked.slot_held("name", "The spare room needs new curtains.", q)
    q = "Who is my daughter's new piano teacher?"
    assert not asked.slot_held("name", "My daughter switched piano teachers in May.", q)
    assert asked.slot_held("name", "堂哥下个月摆酒娶媳妇。", "我家亲戚今年都有谁结婚？")
    # A person word answers "who", not "what is it called".
    assert not asked.slot_held("name", "My brother loves the cat.", "What's my cat called?")


def test_what_a_turn_states_is_its_text_without_its_questions():
    assert asked.stated("Why is my Wi-Fi slow in one room?") == ""
    said = asked.stated("Can you find a vet near Clifton? We've only been in Bristol a week.")
    assert "Bristol" in said
    assert "Clifton" not in said
    # A Chinese question's first clauses say something; its last one asks.
    said = asked.stated("杭州的梅雨季太难熬了，衣服怎么晾都不干，有什么办法？")
    assert "杭州" in said
    assert "办法" not in said


def test_a_question_whose_value_no_result_holds_scores_lower_in_the_same_order(monkeypatch):
    # NOTE: the value asked alone: the subject a turn repeats is the test below.
    monkeypatch.setattr(fusion, "ECHO_WEIGHT", 0.0)
    q = "What shoe size does my son wear?"
    boots = _candidate(5, "s1", "user", "My son needs new football boots.", 0.90)
    other = _candidate(9, "s2", "user", "My son starts school in September.", 0.85)
    chosen = fusion.ranked([boots, other], "semantic plain", 2, q)
    assert chosen == [boots, other]
    own = fusion.candidate_score_logit("semantic plain", boots, asked="user", cjk=False)
    assert boots.score_logit == pytest.approx(own - fusion.SLOT_PENALTY)
    size = _candidate(7, "s3", "user", "My son is a size 4 now.", 0.80)
    chosen = fusion.ranked([boots, other, size], "semantic plain", 3, q)
    assert chosen[0] is boots
    # Each result by what it holds: the size keeps its score, the near miss loses its own.
    assert boots.score_logit == pytest.approx(own - fusion.SLOT_PENALTY)
    held = fusion.candidate_score_logit("semantic plain", size, asked="user", cjk=False)
    assert size.score_logit == pytest.approx(held)


def test_a_near_miss_repeating_the_questions_subject_scores_lower_in_the_same_order():
    q = "What breed is my neighbour's cat?"
    near = _candidate(5, "s1", "user", "My neighbour's cat keeps sleeping on our car.", 0.90)
    answer = _candidate(9, "s2", "user", "We adopted a little beagle last spring.", 0.85)
    assert asked.subject_terms(q) == {"breed", "neighbour", "cat"}
    assert fusion.ranked([near, answer], "semantic plain", 2, q) == [near, answer]
    own = {
        c.seq: fusion.candidate_score_logit("semantic plain", c, asked="user", cjk=False)
        for c in (near, answer)
    }
    # Two of the subject's three terms repeated, none of what it asks answered.
    lost = fusion.ECHO_WEIGHT * (2 / 3 - fusion.ECHO_FREE)
    assert near.score_logit == pytest.approx(own[5] - lost)
    assert answer.score_logit == pytest.approx(own[9])


def test_a_chinese_questions_subject_is_its_pairs_without_the_words_that_ask():
    assert asked.subject_terms("我邻居家的猫是什么品种？") == {"邻居", "居家", "品种"}
    assert asked.subject_terms("我为什么辞职了？") == {"辞职"}


def test_a_result_holding_the_kind_asked_keeps_its_score_whatever_it_repeats():
    q = "Why did I stop singing with the choir?"
    said = _candidate(5, "s1", "user", "I stopped singing with the choir because of shifts.", 0.9)
    near = _candidate(9, "s2", "user", "Singing with the choir is fun.", 0.8)
    fusion.ranked([said, near], "semantic plain", 2, q)
    past = {"asked": "user", "cjk": False, "present": False}
    own = fusion.candidate_score_logit("semantic plain", said, **past)
    assert said.score_logit == pytest.approx(own)
    other = fusion.candidate_score_logit("semantic plain", near, **past)
    assert near.score_logit < other - fusion.SLOT_PENALTY


def test_a_later_reason_or_feeling_replaces_no_result():
    q = "Why do I want to leave my job?"
    first = _candidate(5, "s1", "user", "The commute is too long, so I want out.", 0.9)
    later = _candidate(30, "s3", "user", "My manager is rude, because he shouts a lot.", 0.85)
    first.logit, later.logit = 1.0, 0.5
    assert asked.slot_asked(q) == {"reason"}
    assert fusion.superseded([first, later], [first, later], 2, q) == [first, later]


def test_a_question_to_the_assistant_reads_the_value_in_the_reply_beside_a_result():
    q = "How long did you say to bake my sourdough?"
    question = _candidate(20, "s2", "user", "My sourdough keeps coming out pale.", 0.90)
    reply = _candidate(21, "s2", "assistant", "Bake it covered for forty minutes.", 0.60)
    elsewhere = _candidate(40, "s4", "user", "My sourdough starter smells odd.", 0.85)
    chosen = fusion.ranked([question, reply, elsewhere], "semantic plain", 3, q)
    own = {c.seq: c.score_logit for c in chosen}
    fusion.SLOT_PENALTY, penalty = 0.0, fusion.SLOT_PENALTY
    try:
        fusion.ranked([question, reply, elsewhere], "semantic plain", 3, q)
    finally:
        fusion.SLOT_PENALTY = penalty
    # The question whose reply holds the time keeps its score; the other loses it.
    assert asked.slot_asked(q) == {"number"}
    assert own[20] == pytest.approx(question.score_logit)
    assert own[40] == pytest.approx(elsewhere.score_logit - penalty)


def test_a_later_answer_to_the_same_question_replaces_a_result_without_a_word_of_change():
    q = "Where do I work now?"
    old = _candidate(3, "s1", "user", "Six years as an accountant at Harlow & Sons. Bored!", 0.95)
    new = _candidate(90, "s7", "user", "First week at Deloitte done; the hours are brutal.", 0.90)
    other = _candidate(40, "s4", "user", "Do I need to tell my insurer if I work from home?", 0.93)
    # No word of a change and not alike, but both say where the user works: the later first.
    assert fusion.ranked([old, other, new], "semantic plain", 3, q) == [new, old, other]
    # A later turn that only asks holds no answer ...
    asks = _candidate(90, "s7", "user", "Is Deloitte a good place to work?", 0.90)
    assert fusion.ranked([old, other, asks], "semantic plain", 3, q)[0] is old
    # ... nor does one far less likely evidence (NEWER_MARGIN), nor a question about the past.
    far = _candidate(90, "s7", "user", "First week at Deloitte done; the hours are brutal.", 0.80)
    assert fusion.ranked([old, other, far], "semantic plain", 3, q)[0] is old
    past = "Where did I work at the start of the year?"
    assert fusion.ranked([old, other, new], "semantic plain", 3, past)[0] is old


def test_a_later_turn_about_the_same_subject_and_about_as_likely_replaces_a_result():
    q = "What does my dog eat now?"
    said = (
        (3, "s1", "Our corgi has always eaten Royal Canin.", 0.90),
        (40, "s4", "We walk him twice a day.", 0.895),
        (90, "s7", "The vet put our boy on Acana.", 0.89),
    )
    old, other, new = (_candidate(seq, s, "user", text, cos) for seq, s, text, cos in said)
    assert fusion.ranked([old, other, new], "semantic plain", 3, q) == [old, other, new]
    old.alike, new.alike = frozenset({new.pk}), frozenset({old.pk})
    assert fusion.ranked([old, other, new], "semantic plain", 3, q) == [new, old, other]
    # Not one far less likely evidence (SAME_SUBJECT_MARGIN), nor in a question about the past.
    far = _candidate(90, "s7", "user", "The vet put our boy on Acana.", 0.80)
    old.alike, far.alike = frozenset({far.pk}), frozenset({old.pk})
    assert fusion.ranked([old, other, far], "semantic plain", 3, q)[0] is old
    assert (
        fusion.ranked([old, other, new], "semantic plain", 3, "What did my dog eat at first?")[0]
        is old
    )


def test_what_a_user_said_of_themselves_ranks_above_what_they_asked():
    assert asked.says_of_self("Since that documentary I haven't touched meat. Any tips?")
    assert asked.says_of_self("我恐高，上次腿都软了。")
    assert not asked.says_of_self("Quick question: How do I find out who is on my network?")
    assert not asked.says_of_self("怎么查看有谁在蹭我家的网？")
    q = "Can you suggest something for me to read?"
    asks = _candidate(3, "s1", "user", "What makes a sonnet a sonnet?", 0.872)
    said = _candidate(9, "s2", "user", "I love guessing the murderer before Poirot does.", 0.87)
    assert fusion.ranked([asks, said], "semantic plain", 2, q) == [said, asks]
    # Not for a question about what the assistant said.
    told = "What did you suggest I read?"
    assert fusion.ranked([asks, said], "semantic plain", 2, told) == [asks, said]


def test_a_search_narrowed_to_dates_scores_without_the_density():
    q = "What did I plant in the garden?"
    best = _candidate(50, "s5", "user", "Got the tomato seedlings into the raised bed.", 0.40)
    best.plain = 0.88
    rest = []
    for i in range(1, 4):
        c = _candidate(i, f"s{i}", "user", f"Another question, number {i}.", 0.10)
        c.plain = 0.70
        rest.append(c)
    # A range of dates keeps few turns: their sparseness says nothing of the question.
    fusion.ranked([*rest, best], "semantic", 4, q, dated=True)
    usual = fusion.candidate_score_logit(
        "semantic", best, asked="user", cjk=False, present=False, density=fusion.DENSITY_USUAL
    )
    assert best.score_logit == pytest.approx(usual)
    fusion.ranked([*rest, best], "semantic", 4, q)
    assert best.score_logit < usual


def test_the_side_asked_about_ranks_first():
    question = _candidate(20, "s2", "user", "Any podcast to learn Spanish on the train?", 0.86)
    reply = _candidate(21, "s2", "assistant", "Try Coffee Break Spanish, 20 minutes each.", 0.84)
    q = "What did you suggest I listen to on the train to learn Spanish?"
    assert fusion.ranked([question, reply], "semantic plain", 2, q)[0] is reply
    assert fusion.ranked([question, reply], "semantic plain", 2, "Spanish podcast")[0] is question


@pytest.mark.usefixtures("e5")
def test_crowding_is_read_for_the_candidates_with_vectors():
    say(
        "wang",
        "I adopted a corgi named Mochi.",
        "Lovely!",
        "How do I fix a flat tyre?",
        "Patch it.",
    )
    embeddings.turns_embed(owner_id="wang")
    owner = Owner.objects.get(external_id="wang")
    pks = list(Turn.objects.filter(owner=owner).order_by("seq").values_list("pk", flat=True))
    embedder = embedders.embedder_get()
    assert embedder is not None
    vector = vectors.vector_text(embedders.query_embed(embedder, "what is my dog called?"))
    rows = ranking.turns_features(
        using="default",
        owner_pk=owner.pk,
        pks=pks,
        terms=[],
        model=embedders.embedder_name(embedder),
        vector=vector,
        crowd=2,
    )
    by_seq = {row[1]: row for row in rows}
    embedded = {seq for seq, row in by_seq.items() if row[-3] is not None}
    # An ack is worth no vector (embedders.passage_worth_embedding): no cosine, no crowding.
    assert embedded and embedded < set(by_seq)
    for seq, row in by_seq.items():
        crowding = row[-2]
        assert (crowding is None) is (seq not in embedded)
        if crowding is not None:
            assert -1.0 <= crowding <= 1.0
    # Only the ``crowded`` nearest to the query have one.
    fewer = ranking.turns_features(
        using="default",
        owner_pk=owner.pk,
        pks=pks,
        terms=[],
        model=embedders.embedder_name(embedder),
        vector=vector,
        crowd=2,
        crowded=2,
    )
    assert sum(row[-2] is not None for row in fewer) == 2


@pytest.mark.usefixtures("e5")
def test_the_newest_of_a_change_ranks_first_in_a_search():
    say("wang", "My 2011 Golf needs new brake pads. Can I do it myself?", "Yes, with care.")
    say("wang", "How do I make a sourdough starter?", "Flour and water.", session_id="tab-2")
    say(
        "wang",
        "I sold the old Golf and bought a used Kia e-Niro last week.",
        "Congratulations!",
        session_id="tab-3",
    )
    embeddings.turns_embed(owner_id="wang")
    found = selectors.turn_search(owner_id="wang", q="What car do I drive these days?", limit=3)
    assert "Kia" in found[0]["content"]
    assert any("brake pads" in turn["content"] for turn in found[1:])
    assert all(0 <= turn["score"] <= 1 for turn in found)


@pytest.mark.usefixtures("e5")
def test_crowding_is_measured_as_the_search_measured_centred():
    say(
        "wang",
        "I adopted a corgi named Mochi.",
        "How do I fix a flat tyre?",
        "What should I cook tonight?",
        "We moved to Bristol last month.",
    )
    embeddings.turns_embed(owner_id="wang")
    owner = Owner.objects.get(external_id="wang")
    embedder = embedders.embedder_get()
    assert embedder is not None
    model = embedders.embedder_name(embedder)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT turn_id, vector::text FROM memory_turnvector WHERE owner_id = %s", [owner.pk]
        )
        stored = {pk: [float(x) for x in text.strip("[]").split(",")] for pk, text in cursor}
    centre = [sum(column) / len(stored) for column in zip(*stored.values(), strict=True)]
    query = embedders.query_embed(embedder, "what is my dog called?")
    rows = ranking.turns_features(
        using="default",
        owner_pk=owner.pk,
        pks=list(stored),
        terms=[],
        model=model,
        vector=vectors.vector_text(query),
        measure=vectors.Centred(query, centre),
        crowd=1,
    )

    def cosine(a: list[float], b: list[float]) -> float:
        dot = sum(x * y for x, y in zip(a, b, strict=True))
        return dot / (sum(x * x for x in a) ** 0.5 * sum(y * y for y in b) ** 0.5)

    moved = {pk: [p - c for p, c in zip(v, centre, strict=True)] for pk, v in stored.items()}
    off = [q - c for q, c in zip(query, centre, strict=True)]
    assert len(rows) == len(stored) == 4
    for pk, *_, distance, plain, crowding, alike in rows:
        assert 1 - distance == pytest.approx(cosine(moved[pk], off), abs=5e-3)
        assert 1 - plain == pytest.approx(cosine(stored[pk], query), abs=5e-3)
        nearest = max(cosine(moved[pk], other) for o, other in moved.items() if o != pk)
        assert crowding == pytest.approx(nearest, abs=5e-3)
        alikeness = {o: cosine(moved[pk], other) for o, other in moved.items() if o != pk}
        clear = {o for o, value in alikeness.items() if abs(value - 0.2) > 0.01}
        assert set(alike) & clear == {o for o in clear if alikeness[o] > 0.2}
    # Centred, the four say apart what they share: their nearest fellow is far less alike.
    plain = ranking.turns_features(
        using="default",
        owner_pk=owner.pk,
        pks=list(stored),
        terms=[],
        model=model,
        vector=vectors.vector_text(query),
        crowd=1,
    )
    assert max(row[-2] for row in rows) < min(row[-2] for row in plain)


def test_the_ranking_reads_a_long_turn_by_its_opening_and_returns_it_whole():
    # The text rules of a search over long turns cost what their openings cost: a turn of 200 KB
    # is ranked by its first RANK_CHARS characters and comes back as it was stored.
    long = "I adopted a corgi named Mochi. " + "tea1 note2 " * 20_000
    found = _candidate(5, "s1", "user", long, 0.30, 0.05)
    assert found.content == long[: fusion.RANK_CHARS]
    assert found.row[3] == long
    assert fusion.ranked([found], "semantic plain", 1, "What is my dog called?") == [found]


def _chosen_by_spec(candidates: list[fusion.Candidate], limit: int) -> list[fusion.Candidate]:
    """The choosing of ``fusion.ranked`` as it is specified: from the best of the pool, each pick
    the best by (logit less its session's picks and a repeat's penalty, seq), in turn."""
    pool = sorted(candidates, key=lambda c: (-c.logit, -c.seq))
    pool = pool[: max(limit * fusion.POOL_PER_RESULT, 30)]
    chosen: list[fusion.Candidate] = []
    while pool and len(chosen) < limit:

        def held_back(c: fusion.Candidate) -> tuple[float, int]:
            logit = c.logit - fusion.SESSION_PENALTY * sum(
                b.session_id == c.session_id for b in chosen
            )
            held = asked.repeat_terms(c.content)
            for b in chosen:
                said = asked.repeat_terms(b.content)
                if (
                    held
                    and said
                    and len(held & said) >= fusion.REPEAT_SHARE * min(len(held), len(said))
                ):
                    logit -= fusion.REPEAT_PENALTY
                    break
            return logit, c.seq

        best = max(pool, key=held_back)
        pool.remove(best)
        chosen.append(best)
    return chosen


_SAID = (
    "Can you help me rewrite this email to my manager?",
    "Please rewrite this email to my manager today.",
    "Sure, here is a cleaner version with shorter sentences.",
    "Here is a cleaner version, with shorter sentences.",
    "ok",
    "我想去成都看熊猫",
    "我想去成都吃火锅",
    "The quarterly sales spreadsheet is attached.",
)


@given(
    st.lists(
        st.tuples(
            st.sampled_from(("s1", "s2", "s3")),
            st.sampled_from(_SAID),
            st.sampled_from((0.70, 0.75, 0.80, 0.85)),
        ),
        min_size=1,
        max_size=70,
    ),
    st.integers(min_value=1, max_value=25),
)
@settings(max_examples=150, deadline=None)
def test_the_results_are_chosen_as_specified(turns, limit):
    candidates = [
        _candidate(seq, session, "user", content, cosine)
        for seq, (session, content, cosine) in enumerate(turns, start=1)
    ]
    # A question about no one's present: nothing replaces a result after the choosing.
    chosen = fusion.ranked(candidates, "semantic", limit, "What is the capital of France?")
    assert chosen == _chosen_by_spec(candidates, limit)
