"""memory.asked's Chinese things asked and held, and the score fusion gives a result holding
none; pure functions and candidates built in memory, no search run."""

from __future__ import annotations

import pytest

from memory import asked, fusion
from tests.test_fusion import _candidate


@pytest.mark.parametrize(
    ("q", "thing"),
    [
        ("医生给我开了什么药？", True),
        ("我阳台上种的是哪种花？", True),
        ("同事送了我什么？", True),
        # A kind a rule reads, a time, a reason or a request asks for no thing.
        ("我的车是什么颜色？", False),
        ("我什么时候去的体检？", False),
        ("我为什么换了工作？", False),
        ("帮我推荐一本什么书？", False),
        # What the assistant advised is named in more ways than the rule reads.
        ("你上次说我该吃什么药？", False),
        ("What medicine did the doctor give me?", False),
    ],
)
def test_a_chinese_question_asking_for_a_thing(q, thing):
    assert asked.thing_asked(q) is thing


@pytest.mark.parametrize(
    ("content", "held"),
    [
        # An object after 了, or counted, in words the question does not say.
        ("医生开了阿莫西林，一天三次，饭后吃吗？", True),
        ("上周领回来一只萨摩耶，掉毛好厉害。", True),
        ("抢到的那台扫拖一体机老是卡住。", True),
        # A name: quoted or in Latin letters.
        ("朋友推荐了《百年孤独》。", True),
        ("换成iPad了，看书方便多了。", True),
        # After the question's own verb, without 了.
        ("这学期开始学大提琴，手指好疼。", True),
        # The subject again, or nothing introduced: a near miss.
        ("扭了脚踝，到现在还肿着，什么时候能跑步？", False),
        ("脚踝还是很疼，怎么办？", False),
        # A time or an amount is no thing.
        ("过了好久才消肿。", False),
    ],
)
def test_a_chinese_result_holding_a_thing(content, held):
    q = "我扭了脚踝以后学什么、用了什么药？"
    assert asked.thing_held(content, q) is held


def test_a_chinese_near_miss_introducing_nothing_scores_lower_in_the_same_order():
    q = "我扭了脚踝以后贴的什么膏药？"
    near = _candidate(5, "s1", "user", "前天扭了脚踝，到现在还肿着，能洗澡吗？", 0.90)
    answer = _candidate(9, "s2", "user", "药店推荐了一盒云南白药，贴了两天好多了。", 0.85)
    assert fusion.ranked([near, answer], "semantic plain", 2, q) == [near, answer]
    own = {
        c.seq: fusion.candidate_score_logit("semantic plain", c, asked="user", cjk=True)
        for c in (near, answer)
    }
    assert answer.score_logit == pytest.approx(own[9])
    # No thing introduced; one of the subject's five pairs repeated, within ``ECHO_FREE``.
    assert asked.subject_terms(q) == {"脚踝", "踝以", "以后", "后贴", "膏药"}
    assert near.score_logit == pytest.approx(own[5] - fusion.THING_PENALTY)
