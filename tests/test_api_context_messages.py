"""Tests of ``users/{user_id}/context/messages/``: the context as an LLM chat API's messages,
within a token budget, validated, private to its owner."""

from __future__ import annotations

import pytest

from memory import selectors, services, tokens

pytestmark = pytest.mark.django_db

MESSAGES = "/api/memory/users/wang/context/messages/"


def test_messages_are_the_facts_then_the_last_turns(owner_client, wang_chat):
    response = owner_client.get(MESSAGES)
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {
        "user_id",
        "messages",
        "facts",
        "source",
        "tokens",
        "summary_through_seq",
        "recalled",
    }
    assert (body["summary_through_seq"], body["recalled"]) == (None, [])
    assert body["user_id"] == "wang"
    assert body["facts"] == {"name": "Wang Jianguo"}
    assert body["messages"][0] == {
        "role": "system",
        "content": "Known facts about the user:\n- name: Wang Jianguo",
    }
    assert [m["content"] for m in body["messages"][1:]] == [f"turn {i}" for i in range(11, 31)]
    assert body["messages"][-1] == {"role": "assistant", "content": "turn 30"}
    assert body["tokens"] == sum(tokens.estimate_counter(m["content"]) for m in body["messages"])
    assert response["Cache-Control"] == "no-store, private"


def test_messages_are_what_the_selector_answers(service_client, wang_chat):
    for query in ("", "?turns=3", "?max_tokens=30", "?max_tokens=30&turns=2"):
        body = service_client.get(MESSAGES + query).json()
        params = {k: int(v) for k, v in (p.split("=") for p in query[1:].split("&") if p)}
        expected = selectors.context_messages(owner_id="wang", **params)
        assert {**body, "source": None} == {**expected, "source": None}


def test_max_tokens_keeps_the_newest_turns_that_fit(owner_client, wang_chat):
    facts = tokens.estimate_counter("Known facts about the user:\n- name: Wang Jianguo")
    # NOTE: "turn N" is two tokens in the estimate (a word and a number).
    body = owner_client.get(f"{MESSAGES}?max_tokens={facts + 7}").json()
    assert [m["content"] for m in body["messages"][1:]] == ["turn 28", "turn 29", "turn 30"]
    assert body["tokens"] == facts + 6 <= facts + 7


def test_facts_over_max_tokens_are_a_400(owner_client, wang_chat):
    response = owner_client.get(f"{MESSAGES}?max_tokens=2")
    assert response.status_code == 400
    assert list(response.json()) == ["max_tokens"]


def test_chinese_text_is_sent_exactly(owner_client, write):
    said = "我叫王建国，我住在上海。「你好」🙂"
    with write():
        services.turn_append(owner_id="wang", session_id="s", role="user", content=said)
    response = owner_client.get(f"{MESSAGES}?max_tokens=100")
    assert said.encode() in response.content
    body = response.json()
    assert body["messages"][1:] == [{"role": "user", "content": said}]
    assert body["facts"] == {"location": "上海", "name": "王建国"}
    assert "- location: 上海" in body["messages"][0]["content"]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("max_tokens=0", "max_tokens"),
        ("max_tokens=-1", "max_tokens"),
        ("max_tokens=", "max_tokens"),
        ("max_tokens=ten", "max_tokens"),
        ("max_tokens=1.5", "max_tokens"),
        (f"max_tokens={tokens.MAX_TOKENS + 1}", "max_tokens"),
        ("max_tokens=99999999999999999999999999", "max_tokens"),
        ("turns=201", "turns"),
        ("turns=-1", "turns"),
        ("turns=", "turns"),
        ("max_tokens=100&turns=x", "turns"),
    ],
)
def test_bad_parameters_are_a_400(owner_client, wang_chat, query, field):
    response = owner_client.get(f"{MESSAGES}?{query}")
    assert response.status_code == 400
    assert field in response.json()


def test_another_users_messages_are_a_404(other_client, wang_chat):
    response = other_client.get(MESSAGES)
    assert response.status_code == 404
    assert b"Wang" not in response.content


def test_anonymous_is_refused(anon_client):
    assert anon_client.get(MESSAGES).status_code in (401, 403)


def test_a_malformed_user_id_is_a_404(service_client):
    assert service_client.get("/api/memory/users/no%20space/context/messages/").status_code == 404


def test_messages_with_redis_down_are_the_same(service_client, wang_chat, dead_cache):
    body = service_client.get(f"{MESSAGES}?max_tokens=40").json()
    assert body["source"] == "database"
    assert body["messages"][-1] == {"role": "assistant", "content": "turn 30"}
