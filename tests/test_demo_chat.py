"""The demo chat page (memoryproj/chat.py) through Django's test client, and its responders.

The page's requests commit as in production (``transaction=True``): one exchange is three
commits, and the context between them must see the first one's cache update.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from memory import selectors, services
from memory.payloads import ContextPayload
from memoryproj.responders import DeterministicResponder, responder_get

# NOTE: only the tests that store turns commit; the others touch no database.
commits = pytest.mark.django_db(transaction=True)

INTRO = "My name is Wang Jianguo, I like basketball"
EXCHANGE_ID_RE = re.compile(r'name="exchange_id" value="([^"]+)"')


class ShoutingResponder:
    """A stand-in for a site's LLM call: proves the page uses the configured responder."""

    def respond(self, *, context: ContextPayload, message: str) -> str:
        return f"{message.upper()} ({len(context['facts'])} facts)"


@pytest.fixture
def demo(settings: Any) -> None:
    """The page as on a developer's machine: DEBUG on, open to anyone."""
    settings.DEBUG = True


def say(
    client: Client, user_id: str, session_id: str, message: str, *, exchange_id: str | None = None
) -> Any:
    if exchange_id is None:
        page = client.get("/chat/", {"user_id": user_id, "session_id": session_id})
        exchange_id = EXCHANGE_ID_RE.search(page.content.decode()).group(1)
    return client.post(
        "/chat/",
        {
            "user_id": user_id,
            "session_id": session_id,
            "message": message,
            "exchange_id": exchange_id,
        },
    )


def context(user_id: str, *, facts: dict[str, Any] | None = None, turns: int = 1) -> ContextPayload:
    return {
        "user_id": user_id,
        "facts": facts or {},
        "turns": [
            {
                "seq": i + 1,
                "session_id": "s",
                "role": "user",
                "content": "x",
                "metadata": {},
                "created_at": "2025-01-01T00:00:00Z",
            }
            for i in range(turns)
        ],
        "source": "database",
    }


def test_home_leads_to_the_chat_page(client, demo):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"] == "/chat/"


def test_chat_page_asks_for_a_user_and_a_session(client, demo):
    response = client.get("/chat/")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="pick"' in html
    assert 'name="user_id"' in html and 'name="session_id"' in html
    assert 'id="send"' not in html


@commits
def test_memory_carries_over_to_another_session(client, demo):
    first = say(client, "wang", "laptop", INTRO)
    assert first.status_code == 200
    assert first.context["reply"]["content"] == (
        "Nice to meet you, Wang Jianguo! I'll remember that you like basketball."
    )
    assert first.context["context"]["facts"] == {"name": "Wang Jianguo", "likes": ["basketball"]}

    second = say(client, "wang", "phone", "hi")
    assert second.status_code == 200
    reply = second.context["reply"]
    assert reply["content"] == "Hello again, Wang Jianguo! Any news on basketball?"
    assert reply["session_id"] == "phone"
    used = second.context["context"]
    assert used["facts"] == {"name": "Wang Jianguo", "likes": ["basketball"]}
    assert [(t["session_id"], t["role"]) for t in used["turns"]] == [
        ("laptop", "user"),
        ("laptop", "assistant"),
        ("phone", "user"),
    ]
    html = second.content.decode()
    assert 'id="reply"' in html
    assert "Hello again, Wang Jianguo! Any news on basketball?" in html
    assert '<dd data-key="name">Wang Jianguo</dd>' in html
    assert '<dd data-key="likes">[&quot;basketball&quot;]</dd>' in html
    stored = selectors.turn_list(owner_id="wang")[0]
    assert [(t["seq"], t["session_id"], t["role"]) for t in stored] == [
        (1, "laptop", "user"),
        (2, "laptop", "assistant"),
        (3, "phone", "user"),
        (4, "phone", "assistant"),
    ]
    assert stored[3]["metadata"] == {"demo": "chat", "context_source": used["source"]}


@commits
def test_context_comes_from_the_database_after_the_cache_is_dropped(client, demo):
    say(client, "wang", "laptop", INTRO)
    assert client.get("/chat/", {"user_id": "wang", "session_id": "x"}).context["context"][
        "source"
    ] == ("cache")
    services.cache_drop(owner_id="wang")

    page = client.get("/chat/", {"user_id": "wang", "session_id": "phone"})
    assert page.context["context"]["source"] == "database"
    assert page.context["context"]["facts"]["name"] == "Wang Jianguo"
    assert 'class="source database"' in page.content.decode()
    reply = say(client, "wang", "phone", "hi")
    assert reply.context["context"]["source"] == "cache"
    assert reply.context["reply"]["content"] == "Hello again, Wang Jianguo! Any news on basketball?"


@commits
def test_chat_works_with_redis_down(client, demo, dead_cache):
    say(client, "wang", "laptop", INTRO)
    response = say(client, "wang", "phone", "What's my name?")
    assert response.status_code == 200
    assert response.context["reply"]["content"] == "Your name is Wang Jianguo."
    assert response.context["context"]["source"] == "database"


@commits
def test_a_resubmitted_message_is_stored_once(client, demo):
    first = say(client, "wang", "laptop", INTRO, exchange_id="resubmit-0001")
    again = say(client, "wang", "laptop", INTRO, exchange_id="resubmit-0001")
    assert again.status_code == 200
    assert again.context["reply"] == first.context["reply"]
    assert len(selectors.turn_list(owner_id="wang")[0]) == 2


@commits
def test_a_stranger_hears_that_they_are_not_known(client, demo):
    response = say(client, "li", "tab", "hello")
    assert response.context["reply"]["content"].startswith("Hello! I don't know your name yet.")
    assert response.context["context"]["facts"] == {}


@commits
def test_bad_input_is_a_400_and_stores_nothing(client, demo):
    bad_user = say(client, "wang jianguo", "laptop", "hi", exchange_id="bad-input-01")
    assert bad_user.status_code == 400
    assert "user_id: Enter 1-128 characters" in bad_user.content.decode()
    empty = say(client, "wang", "laptop", "", exchange_id="bad-input-02")
    assert empty.status_code == 400
    no_exchange = say(client, "wang", "laptop", "hi", exchange_id="x")
    assert no_exchange.status_code == 400
    assert selectors.turn_list(owner_id="wang")[0] == []


@commits
def test_the_responder_is_the_configured_one(client, demo, settings):
    settings.MEMORYPROJ_RESPONDER = "tests.test_demo_chat.ShoutingResponder"
    response = say(client, "wang", "laptop", INTRO)
    assert response.context["reply"]["content"] == f"{INTRO.upper()} (2 facts)"


def test_an_unimportable_responder_names_the_setting(settings):
    settings.MEMORYPROJ_RESPONDER = "tests.nowhere.Responder"
    with pytest.raises(ImproperlyConfigured, match="MEMORYPROJ_RESPONDER"):
        responder_get()


@commits
def test_without_debug_the_page_needs_a_login(client):
    response = client.get("/chat/", {"user_id": "wang", "session_id": "laptop"})
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/?next=/chat/")
    assert say(client, "wang", "laptop", "hi", exchange_id="anonymous-1").status_code == 302
    assert selectors.turn_list(owner_id="wang")[0] == []


@commits
def test_without_debug_a_user_reaches_only_their_own_memory(client):
    User.objects.create_user("wang", password="pw")
    client.login(username="wang", password="pw")
    assert say(client, "wang", "laptop", INTRO).status_code == 200
    assert client.get("/chat/", {"user_id": "li", "session_id": "x"}).status_code == 404
    assert say(client, "li", "laptop", "hi", exchange_id="foreign-01").status_code == 404
    assert selectors.turn_list(owner_id="li")[0] == []


@commits
def test_without_debug_service_callers_reach_every_memory(client):
    staff = User.objects.create_user("ops", password="pw", is_staff=True)
    client.login(username="ops", password="pw")
    # NOTE: staff alone is an ordinary user; the service permission reaches every memory.
    assert say(client, "li", "laptop", "hi", exchange_id="staff-only-1").status_code == 404
    staff.user_permissions.add(Permission.objects.get(codename="access_all_memories"))
    assert say(client, "li", "laptop", "hi").status_code == 200


@pytest.mark.parametrize(
    ("facts", "turns", "message", "reply"),
    [
        ({}, 1, "What's my name?", 'I don\'t know your name yet. Tell me: "My name is ...".'),
        ({"name": "王建国"}, 3, "我叫什么名字？", "Your name is 王建国."),
        (
            {"name": "Wang Jianguo", "preferred_name": "Jim", "likes": ["golf", "basketball"]},
            3,
            "hello",
            "Hello again, Jim! Any news on basketball?",
        ),
        ({"name": "Wang Jianguo"}, 1, "My name is Wang Jianguo", "Nice to meet you, Wang Jianguo! "
         "What do you like to do?"),
    ],
)  # fmt: skip
def test_deterministic_responder_answers_from_the_facts(facts, turns, message, reply):
    responder = DeterministicResponder()
    assert responder.respond(
        context=context("wang", facts=facts, turns=turns), message=message
    ) == (reply)
