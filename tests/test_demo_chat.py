"""The demo chat page (memoryproj/chat.py) through Django's test clients, and its responders.

Who talks: an anonymous visitor as an ``anon-...`` owner bound to their browser session, a
logged-in user as themselves (their anonymous memory linked in at login), and only service
callers as anyone else. The page's requests commit as in production (``transaction=True``):
one exchange is three commits, and the context between them must see the first one's cache
update.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Permission, User
from django.core.exceptions import ImproperlyConfigured
from django.test import AsyncClient, Client

from memory import ops, selectors, services
from memory.integrations.channels import reply_chunks
from memory.payloads import ContextPayload
from memoryproj.chat import ANON_SESSION_KEY
from memoryproj.responders import DeterministicResponder, responder_get

# NOTE: only the tests that store turns commit; the others touch no database.
commits = pytest.mark.django_db(transaction=True)

INTRO = "My name is Wang Jianguo, I like basketball"
EXCHANGE_ID_RE = re.compile(r'name="exchange_id" value="([^"]+)"')
ANON_ID_RE = re.compile(r"^anon-[0-9a-f]{32}$")


class ShoutingResponder:
    """A stand-in for a site's LLM call: proves the page uses the configured responder."""

    def respond(self, *, context: ContextPayload, message: str) -> str:
        return f"{message.upper()} ({len(context['facts'])} facts)"


class FailingResponder(DeterministicResponder):
    """Streams two words, then fails, as an LLM call cut off midway."""

    delay = 0.0

    async def astream(self, *, context: ContextPayload, message: str) -> AsyncIterator[str]:
        yield "Hello "
        yield "there"
        raise ConnectionError("the model went away")


class InstantResponder(DeterministicResponder):
    """The default responder's words, streamed without a pause between them."""

    delay = 0.0


def exchange_id_of(client: Client, **query: str) -> str:
    page = client.get("/chat/", query)
    return EXCHANGE_ID_RE.search(page.content.decode()).group(1)


def say(
    client: Client,
    session_id: str,
    message: str,
    *,
    user_id: str | None = None,
    exchange_id: str | None = None,
) -> Any:
    picked = {"user_id": user_id} if user_id is not None else {}
    if exchange_id is None:
        exchange_id = exchange_id_of(client, session_id=session_id)
    return client.post(
        "/chat/",
        {"session_id": session_id, "message": message, "exchange_id": exchange_id, **picked},
    )


def anon_id(client: Client) -> str:
    owner_id = client.session[ANON_SESSION_KEY]
    assert ANON_ID_RE.match(owner_id)
    return owner_id


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


def service_login(client: Client) -> User:
    user = User.objects.create_user("svc", password="pw")
    user.user_permissions.add(Permission.objects.get(codename="access_all_memories"))
    client.force_login(user)
    return user


def test_home_leads_to_the_chat_page(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"] == "/chat/"


@commits
def test_an_anonymous_visitor_talks_as_an_owner_of_their_session(client):
    response = client.get("/chat/")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="send"' in html and 'id="login"' in html
    # NOTE: no user id to pick: only service callers get that field.
    assert 'name="user_id"' not in html
    assert response.context["session_id"] == "web"

    first = say(client, "laptop", INTRO)
    assert first.status_code == 200
    owner_id = anon_id(client)
    assert f'<code id="anon-id">{owner_id}</code>' in first.content.decode()
    assert first.context["reply"]["content"] == (
        "Nice to meet you, Wang Jianguo! I'll remember that you like basketball."
    )
    second = say(client, "phone", "hi")
    assert second.context["reply"]["content"] == (
        "Hello again, Wang Jianguo! Any news on basketball?"
    )
    assert anon_id(client) == owner_id
    stored = selectors.turn_list(owner_id=owner_id)[0]
    assert [(t["session_id"], t["role"]) for t in stored] == [
        ("laptop", "user"),
        ("laptop", "assistant"),
        ("phone", "user"),
        ("phone", "assistant"),
    ]
    assert stored[3]["metadata"] == {"demo": "chat", "context_source": "cache"}
    html = second.content.decode()
    assert '<dd data-key="name">Wang Jianguo</dd>' in html
    # NOTE: a list of words as a reader writes it, and each fact with the session it came from.
    assert '<dd data-key="likes">basketball</dd>' in html
    assert re.search(r'<dd class="from" data-from="name"[^>]*>laptop</dd>', html)


@commits
def test_another_browser_has_its_own_anonymous_memory(client):
    say(client, "laptop", INTRO)
    stranger = Client()
    response = say(stranger, "laptop", "What's my name?")
    assert response.context["reply"]["content"] == (
        'I don\'t know your name yet. Tell me: "My name is ...".'
    )
    assert response.context["context"]["facts"] == {}
    assert anon_id(stranger) != anon_id(client)


@commits
def test_an_anonymous_visitor_cannot_pick_a_user_id(client):
    services.fact_put(owner_id="wang", key="name", value="Wang Jianguo")
    assert client.get("/chat/", {"user_id": "wang", "session_id": "x"}).status_code == 404
    assert say(client, "x", "My name is Bob", user_id="wang").status_code == 404
    # NOTE: a refused message makes no anonymous memory either.
    assert ANON_SESSION_KEY not in client.session
    # NOTE: nor another visitor's anonymous id, which only that visitor's session holds.
    other = Client()
    say(other, "x", INTRO)
    assert say(client, "x", "hi", user_id=anon_id(other)).status_code == 404
    say(client, "x", "hi")
    assert say(client, "x", "hi", user_id=anon_id(other)).status_code == 404
    assert selectors.context_get(owner_id="wang")["facts"] == {"name": "Wang Jianguo"}
    assert len(selectors.turn_list(owner_id=anon_id(other))[0]) == 2
    assert len(selectors.turn_list(owner_id=anon_id(client))[0]) == 2


@commits
def test_logging_in_links_the_anonymous_memory_into_the_users(client):
    User.objects.create_user("wang", password="wang-pw-123")
    services.turn_append(owner_id="wang", session_id="old", role="user", content="hello")
    say(client, "laptop", INTRO)
    owner_id = anon_id(client)

    login_page = client.get("/accounts/login/", {"next": "/chat/?session_id=laptop"})
    assert login_page.status_code == 200
    response = client.post(
        "/accounts/login/",
        {"username": "wang", "password": "wang-pw-123", "next": "/chat/?session_id=laptop"},
    )
    assert response.status_code == 302
    assert response["Location"] == "/chat/?session_id=laptop"
    assert ANON_SESSION_KEY not in client.session
    assert selectors.turn_list(owner_id=owner_id)[0] == []
    assert [t["seq"] for t in selectors.turn_list(owner_id="wang")[0]] == [1, 2, 3]

    page = client.get("/chat/", {"session_id": "laptop"})
    html = page.content.decode()
    assert 'Signed in as <strong id="username">wang</strong>' in html
    assert page.context["context"]["facts"] == {"name": "Wang Jianguo", "likes": ["basketball"]}
    reply = say(client, "laptop", "What's my name?")
    assert reply.context["reply"]["content"] == "Your name is Wang Jianguo."


@commits
def test_a_login_elsewhere_links_on_the_next_page(client):
    User.objects.create_user("wang", password="pw")
    say(client, "laptop", INTRO)
    owner_id = anon_id(client)
    # NOTE: Django's login keeps the session's data (here through the admin's login page).
    assert client.login(username="wang", password="pw")
    assert client.session[ANON_SESSION_KEY] == owner_id
    page = client.get("/chat/")
    assert page.context["context"]["facts"]["name"] == "Wang Jianguo"
    assert ANON_SESSION_KEY not in client.session
    assert selectors.turn_list(owner_id=owner_id)[0] == []


@commits
def test_a_link_refused_past_max_facts_lets_the_user_go_on_as_themselves(client, settings):
    User.objects.create_user("wang", password="pw")
    services.facts_merge(owner_id="wang", facts={"pet": "cat", "job": "teacher"})
    say(client, "laptop", INTRO)
    owner_id = anon_id(client)
    settings.MEMORY = {**settings.MEMORY, "MAX_FACTS": 2}
    assert client.login(username="wang", password="pw")
    page = client.get("/chat/")
    assert page.status_code == 200
    assert page.context["context"]["facts"] == {"job": "teacher", "pet": "cat"}
    assert ANON_SESSION_KEY not in client.session
    # The anonymous memory is left as it was, not half linked.
    assert len(selectors.turn_list(owner_id=owner_id)[0]) == 2


SPEAKER_RE = re.compile(r'<h2 id="speaker">([^<]*) <small>')


@commits
def test_the_conversation_heading_names_the_visitor_the_same_way_before_and_after_a_reload(
    client,
):
    """An anonymous visitor is "You" before their first message, after it and after a reload
    (their anonymous id is shown beside "chatting anonymously"); a user is their id."""
    headings = [SPEAKER_RE.search(client.get("/chat/").content.decode()).group(1)]
    headings.append(SPEAKER_RE.search(say(client, "web", INTRO).content.decode()).group(1))
    page = client.get("/chat/").content.decode()
    headings.append(SPEAKER_RE.search(page).group(1))
    assert headings == ["You", "You", "You"]
    assert re.search(r'id="anon-id">anon-[0-9a-f]{32}<', page)
    User.objects.create_user("wang", password="pw")
    client.login(username="wang", password="pw")
    assert SPEAKER_RE.search(client.get("/chat/").content.decode()).group(1) == "wang"


@commits
def test_logging_out_starts_a_new_anonymous_memory(client):
    User.objects.create_user("wang", password="pw")
    client.login(username="wang", password="pw")
    say(client, "laptop", INTRO)
    assert client.post("/accounts/logout/").status_code == 302
    response = say(client, "laptop", "What's my name?")
    assert response.context["reply"]["content"].startswith("I don't know your name yet.")
    assert ANON_ID_RE.match(response.context["speaker"].owner_id)


@commits
def test_a_user_reaches_only_their_own_memory(client):
    User.objects.create_user("wang", password="pw")
    client.login(username="wang", password="pw")
    assert say(client, "laptop", INTRO).status_code == 200
    assert 'name="user_id"' not in client.get("/chat/").content.decode()
    assert client.get("/chat/", {"user_id": "li", "session_id": "x"}).status_code == 404
    assert say(client, "laptop", "hi", user_id="li").status_code == 404
    # NOTE: naming oneself is allowed: it is who they talk as anyway.
    assert say(client, "laptop", "hi", user_id="wang").status_code == 200
    assert selectors.turn_list(owner_id="li")[0] == []


@commits
def test_staff_without_the_permission_is_an_ordinary_user(client):
    User.objects.create_user("ops", password="pw", is_staff=True)
    client.login(username="ops", password="pw")
    assert say(client, "laptop", "hi", user_id="li").status_code == 404
    assert selectors.turn_list(owner_id="li")[0] == []


@commits
def test_a_service_caller_may_pick_any_user_id(client):
    service_login(client)
    page = client.get("/chat/", {"user_id": "li", "session_id": "x"})
    assert page.status_code == 200
    assert 'name="user_id" value="li"' in page.content.decode()
    assert say(client, "x", INTRO, user_id="li").status_code == 200
    assert selectors.context_get(owner_id="li")["facts"]["name"] == "Wang Jianguo"
    # NOTE: without a pick, a service caller talks as themselves.
    assert say(client, "x", "hi").context["speaker"].owner_id == "svc"


@commits
def test_context_comes_from_the_database_after_the_cache_is_dropped(client):
    say(client, "laptop", INTRO)
    owner_id = anon_id(client)
    assert client.get("/chat/", {"session_id": "x"}).context["context"]["source"] == "cache"
    ops.cache_drop(owner_id=owner_id)

    page = client.get("/chat/", {"session_id": "phone"})
    assert page.context["context"]["source"] == "database"
    assert page.context["context"]["facts"]["name"] == "Wang Jianguo"
    assert 'class="source database"' in page.content.decode()
    reply = say(client, "phone", "hi")
    assert reply.context["context"]["source"] == "cache"
    assert reply.context["reply"]["content"] == "Hello again, Wang Jianguo! Any news on basketball?"


@commits
def test_chat_works_with_redis_down(client, dead_cache):
    say(client, "laptop", INTRO)
    response = say(client, "phone", "What's my name?")
    assert response.status_code == 200
    assert response.context["reply"]["content"] == "Your name is Wang Jianguo."
    assert response.context["context"]["source"] == "database"


@commits
def test_a_resubmitted_message_is_stored_once(client):
    first = say(client, "laptop", INTRO, exchange_id="resubmit-0001")
    again = say(client, "laptop", INTRO, exchange_id="resubmit-0001")
    assert again.status_code == 200
    assert again.context["reply"] == first.context["reply"]
    assert len(selectors.turn_list(owner_id=anon_id(client))[0]) == 2


@commits
def test_bad_input_is_a_400_and_stores_nothing(client):
    say(client, "laptop", "hi")
    owner_id = anon_id(client)
    assert _stored(owner_id) == 2
    bad_session = say(client, "s" * 129, "hi", exchange_id="bad-input-00")
    assert bad_session.status_code == 400
    assert "session_id:" in bad_session.content.decode()
    assert 'id="send"' not in bad_session.content.decode()
    bad_user = say(client, "laptop", "hi", user_id="wang jianguo", exchange_id="bad-input-01")
    assert bad_user.status_code == 400
    assert "user_id: Enter 1-128 characters" in bad_user.content.decode()
    # NOTE: the page still says who is talking, and keeps the conversation for a bad message.
    empty = say(client, "laptop", "", exchange_id="bad-input-02")
    assert empty.context["speaker"].owner_id == owner_id
    assert 'id="send"' in empty.content.decode()
    assert say(client, "laptop", "", exchange_id="bad-input-02").status_code == 400
    assert say(client, "laptop", "hi", exchange_id="x").status_code == 400
    assert say(client, "laptop", "a\x00b", exchange_id="bad-input-03").status_code == 400
    assert _stored(owner_id) == 2


@commits
def test_the_responder_is_the_configured_one(client, settings):
    settings.MEMORYPROJ_RESPONDER = "tests.test_demo_chat.ShoutingResponder"
    response = say(client, "laptop", INTRO)
    assert response.context["reply"]["content"] == f"{INTRO.upper()} (2 facts)"


def test_an_unimportable_responder_names_the_setting(settings):
    settings.MEMORYPROJ_RESPONDER = "tests.nowhere.Responder"
    with pytest.raises(ImproperlyConfigured, match="MEMORYPROJ_RESPONDER"):
        responder_get()


def _stream(client: Client, session_id: str, message: str, **extra: str) -> tuple[int, list[Any]]:
    """POST to the stream view through Django's async client; the status and the events."""
    fields = {
        "session_id": session_id,
        "message": message,
        "exchange_id": exchange_id_of(client, session_id=session_id),
        **extra,
    }
    cookies = client.cookies

    async def post() -> tuple[int, list[Any]]:
        async_client = AsyncClient()
        async_client.cookies = cookies
        response = await async_client.post("/chat/stream/", fields)
        if not response.streaming:
            is_json = response["Content-Type"] == "application/json"
            return response.status_code, [json.loads(response.content)] if is_json else []
        assert response["Content-Type"] == "application/x-ndjson; charset=utf-8"
        body = b"".join([chunk async for chunk in response.streaming_content])
        return response.status_code, [json.loads(line) for line in body.splitlines()]

    return async_to_sync(post)()


@commits
def test_the_stream_view_sends_the_reply_as_it_is_produced(client, settings):
    settings.MEMORYPROJ_RESPONDER = "tests.test_demo_chat.InstantResponder"
    status, events = _stream(client, "laptop", INTRO)
    assert status == 200
    kinds = [event["event"] for event in events]
    reply = "Nice to meet you, Wang Jianguo! I'll remember that you like basketball."
    assert kinds == ["context", *["delta"] * len(reply.split()), "done"]
    assert events[0]["facts"] == [
        {"key": "likes", "value": "basketball", "session_id": "laptop"},
        {"key": "name", "value": "Wang Jianguo", "session_id": "laptop"},
    ]
    # NOTE: the user's turn is stored before the reply: the page shows its seq at once.
    assert (events[0]["sent"]["seq"], events[0]["sent"]["content"]) == (1, INTRO)
    assert "".join(event["text"] for event in events[1:-1]) == reply
    done = events[-1]
    assert (done["turn"]["seq"], done["turn"]["content"]) == (2, reply)
    assert re.match(r"^[A-Za-z0-9_-]{8,64}$", done["exchange_id"])
    stored = selectors.turn_list(owner_id=anon_id(client))[0]
    assert [(t["role"], t["content"]) for t in stored] == [("user", INTRO), ("assistant", reply)]

    # NOTE: another tab of the same browser (another session id) is the same owner.
    status, events = _stream(client, "phone", "What's my name?")
    assert "".join(e["text"] for e in events if e["event"] == "delta") == (
        "Your name is Wang Jianguo."
    )


@commits
def test_the_stream_view_refuses_what_the_page_refuses(client, settings):
    settings.MEMORYPROJ_RESPONDER = "tests.test_demo_chat.InstantResponder"
    status, events = _stream(client, "laptop", "")
    assert status == 400 and "message" in events[0]["detail"]
    status, _ = _stream(client, "laptop", "hi", user_id="wang")
    assert status == 404
    # NOTE: nothing stored, not even an anonymous memory (nor its session).
    assert ANON_SESSION_KEY not in client.session
    assert selectors.turn_list(owner_id="wang")[0] == []
    assert client.get("/chat/stream/").status_code == 405


@commits
def test_under_wsgi_the_stream_view_sends_the_same_lines_in_one_body(client, settings):
    settings.MEMORYPROJ_RESPONDER = "tests.test_demo_chat.InstantResponder"
    fields = {
        "session_id": "laptop",
        "message": "What's my name?",
        "exchange_id": exchange_id_of(client, session_id="laptop"),
    }
    response = client.post("/chat/stream/", fields)
    assert response.status_code == 200
    assert not response.streaming
    assert response["Content-Type"] == "application/x-ndjson; charset=utf-8"
    events = [json.loads(line) for line in response.content.splitlines()]
    reply = 'I don\'t know your name yet. Tell me: "My name is ...".'
    assert [e["event"] for e in events] == ["context", *["delta"] * len(reply.split()), "done"]
    assert events[-1]["turn"]["content"] == reply


@commits
def test_a_responder_failing_midway_ends_the_stream_with_an_error(
    client, settings, caplog, monkeypatch
):
    settings.MEMORYPROJ_RESPONDER = "tests.test_demo_chat.FailingResponder"
    # NOTE: the demo's LOGGING keeps "memoryproj" to its console handler; caplog listens at root.
    monkeypatch.setattr(logging.getLogger("memoryproj"), "propagate", True)
    status, events = _stream(client, "laptop", "hi")
    assert status == 200
    assert [e["event"] for e in events] == ["context", "delta", "delta", "error"]
    assert events[-1]["detail"] == "The assistant failed to answer; try again."
    assert "ConnectionError: the model went away" in caplog.text
    # NOTE: the user's turn is stored; no half reply is.
    stored = selectors.turn_list(owner_id=anon_id(client))[0]
    assert [t["role"] for t in stored] == ["user"]


def test_a_responder_without_astream_is_one_chunk():
    async def chunks() -> list[str]:
        responder = ShoutingResponder()
        return [c async for c in reply_chunks(responder, context=context("w"), message="hi")]

    assert async_to_sync(chunks)() == ["HI (0 facts)"]


def test_the_deterministic_responder_streams_its_reply_word_by_word():
    responder = InstantResponder()
    ctx = context("wang", facts={"name": "Wang Jianguo", "likes": ["golf"]}, turns=3)

    async def chunks() -> list[str]:
        return [c async for c in reply_chunks(responder, context=ctx, message="hello")]

    words = async_to_sync(chunks)()
    assert words == ["Hello ", "again, ", "Wang ", "Jianguo! ", "Any ", "news ", "on ", "golf?"]
    assert "".join(words) == responder.respond(context=ctx, message="hello")


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


# The login page's throttle (issue 23): failed logins counted per client address and username.


def _login(client: Client, username: str, password: str, addr: str = "198.51.100.7") -> Any:
    return client.post(
        "/accounts/login/", {"username": username, "password": password}, REMOTE_ADDR=addr
    )


@pytest.mark.django_db
def test_failed_logins_past_the_limit_are_429_even_with_the_right_password(client, settings):
    User.objects.create_user("wang", password="wang-pw-123")
    for _ in range(10):
        assert _login(client, "wang", "guess").status_code == 200
    refused = _login(client, "wang", "wang-pw-123")
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) > 0
    assert "Too many failed logins" in refused.content.decode()
    assert "_auth_user_id" not in client.session
    # Another username from that address, and that username from another address, go on.
    User.objects.create_user("li", password="li-pw-123")
    assert _login(client, "li", "li-pw-123").status_code == 302
    client.logout()
    assert _login(Client(), "wang", "wang-pw-123", addr="203.0.113.1").status_code == 302


@pytest.mark.django_db
def test_a_login_clears_the_failures_and_the_limit_ends_with_its_window(client):
    from django.utils import timezone

    from memoryproj.models import LoginFailure

    User.objects.create_user("wang", password="wang-pw-123")
    for _ in range(9):
        _login(client, "wang", "guess")
    assert _login(client, "wang", "wang-pw-123").status_code == 302
    client.logout()
    for _ in range(10):
        assert _login(client, "wang", "guess").status_code == 200
    assert _login(client, "wang", "wang-pw-123").status_code == 429
    # NOTE: an hour later (the default MEMORY_THROTTLE_LOGIN is 10/hour).
    LoginFailure.objects.update(at=timezone.now() - timezone.timedelta(hours=1, seconds=1))
    assert _login(client, "wang", "wang-pw-123").status_code == 302
    # Neither the address nor the username is stored as it is.
    assert not LoginFailure.objects.filter(key__contains="wang").exists()


# A lost database on the demo's pages (issue 23): a 503 on every page, never a 500, whether the
# session, the user, the page's own reads or the session's save meet it.


@commits
def test_with_the_database_down_every_page_is_a_503(request):
    User.objects.create_user("wang", password="wang-pw-123")
    admin = User.objects.create_superuser("root", password="root-pw-123")
    signed_in, staff, anonymous = Client(), Client(), Client()
    assert signed_in.login(username="wang", password="wang-pw-123")
    staff.force_login(admin)
    say(anonymous, "laptop", INTRO)
    request.getfixturevalue("dead_database")
    fields = {"session_id": "laptop", "message": "hi", "exchange_id": "x" * 16}
    login = {"username": "wang", "password": "wang-pw-123"}
    for client, method, path, data, status in [
        (Client(), "get", "/chat/", None, 200),  # a first visit reads and stores nothing
        (anonymous, "get", "/chat/", None, 503),  # the session is looked up
        (anonymous, "post", "/chat/", fields, 503),
        (signed_in, "get", "/chat/", None, 503),  # the session, then its user
        (signed_in, "post", "/chat/", fields, 503),
        (Client(), "post", "/accounts/login/", login, 503),
        (signed_in, "get", "/accounts/login/", None, 200),  # the form needs no database
        (staff, "get", "/admin/", None, 503),
        (staff, "get", "/admin/memory/turn/", None, 503),
    ]:
        client.raise_request_exception = False
        response = getattr(client, method)(path, data)
        assert response.status_code == status, (method, path, response.status_code)
        assert b"Traceback" not in response.content

    async def stream(cookies: Any) -> Any:
        async_client = AsyncClient(raise_request_exception=False)
        async_client.cookies = cookies
        return await async_client.post("/chat/stream/", fields)

    for client in (signed_in, anonymous, Client()):
        response = async_to_sync(stream)(client.cookies)
        assert response.status_code == 503
        assert response.json() == {"detail": "The memory database is unavailable; try again."}


# Anonymous memory is bounded and expires ----------------------------------------------------


@pytest.fixture
def rates(monkeypatch, fresh_window):
    """``rates(chat_session="3/minute")`` sets the demo's chat throttle rates for one test (the
    suite runs without any), begun in a fresh window (``fresh_window``)."""
    from rest_framework.throttling import SimpleRateThrottle

    def set_rates(**scopes: str) -> None:
        for scope, rate in scopes.items():
            monkeypatch.setitem(SimpleRateThrottle.THROTTLE_RATES, scope, rate)

    return set_rates


def _stored(owner_id: str) -> int:
    return len(selectors.turn_list(owner_id=owner_id)[0])


@commits
def test_a_bare_get_stores_no_session_and_no_owner(client):
    from django.contrib.sessions.models import Session as BrowserSession

    from memory.models import Owner

    page = client.get("/chat/")
    assert page.status_code == 200
    assert "sessionid" not in page.cookies
    assert BrowserSession.objects.count() == 0
    assert not Owner.objects.exists()
    html = page.content.decode()
    assert 'id="send"' in html and "You are chatting anonymously" in html
    assert page.context["speaker"].owner_id is None
    # The first message makes the visitor's session and anonymous owner.
    first = say(client, "laptop", INTRO)
    assert first.status_code == 200
    owner_id = anon_id(client)
    assert BrowserSession.objects.count() == 1
    assert f'<code id="anon-id">{owner_id}</code>' in first.content.decode()
    assert _stored(owner_id) == 2


@commits
def test_anonymous_messages_are_throttled_per_session(client, rates):
    rates(chat_session="3/minute")
    # NOTE: the first message of a session makes its anonymous memory, counted by address
    # (chat_address, chat_new); the session's own count starts with the second.
    statuses = [say(client, "laptop", f"message {i}").status_code for i in range(5)]
    assert statuses == [200, 200, 200, 200, 429]
    refused = say(client, "laptop", "one more")
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) > 0
    assert "Too many messages" in refused.content.decode()
    assert _stored(anon_id(client)) == 8
    # Another visitor (another session) from the same address is not held up.
    assert say(Client(), "laptop", "hello").status_code == 200


@commits
def test_anonymous_messages_are_throttled_per_client_address(client, rates):
    rates(chat_address="3/minute")
    visitors = [Client() for _ in range(3)]
    assert [say(v, "laptop", "hi").status_code for v in visitors] == [200, 200, 200]
    assert say(visitors[0], "laptop", "again").status_code == 429
    # NOTE: X-Forwarded-For is a client's word unless DJANGO_NUM_PROXIES says proxies set it.
    forged = Client(HTTP_X_FORWARDED_FOR="203.0.113.7")
    assert say(forged, "laptop", "hi").status_code == 429
    # From another address, and once logged in, messages go on.
    assert say(Client(REMOTE_ADDR="198.51.100.2"), "laptop", "hi").status_code == 200
    User.objects.create_user("wang", password="pw")
    assert client.login(username="wang", password="pw")
    assert say(client, "laptop", "hi").status_code == 200


@commits
def test_new_anonymous_memories_per_client_address_are_throttled(rates):
    from memory.models import Owner

    rates(chat_new="2/minute")
    first, second, third = Client(), Client(), Client()
    assert say(first, "laptop", "hi").status_code == 200
    assert say(second, "laptop", "hi").status_code == 200
    assert say(third, "laptop", "hi").status_code == 429
    assert Owner.objects.count() == 2
    # A visitor who has one goes on with it.
    assert say(first, "laptop", "again").status_code == 200


@commits
def test_the_stream_view_is_throttled_as_the_page(client, settings, rates):
    settings.MEMORYPROJ_RESPONDER = "tests.test_demo_chat.InstantResponder"
    rates(chat_session="1/minute")
    assert _stream(client, "laptop", "hi")[0] == 200
    assert _stream(client, "laptop", "again")[0] == 200
    status, events = _stream(client, "laptop", "and again")
    assert status == 429
    assert "Too many messages" in events[0]["detail"]
    assert _stored(anon_id(client)) == 4


@commits
def test_an_anonymous_memory_holds_at_most_its_caps(client, settings):
    settings.MEMORYPROJ_ANON_MAX_TURNS = 4
    assert say(client, "laptop", "hi").status_code == 200
    assert say(client, "laptop", "hello").status_code == 200
    full = say(client, "laptop", "and more")
    assert full.status_code == 403
    assert "Log in to keep" in full.content.decode()
    assert _stored(anon_id(client)) == 4
    # Characters too: the message that would pass the cap is refused whole.
    settings.MEMORYPROJ_ANON_MAX_TURNS = 100
    settings.MEMORYPROJ_ANON_MAX_CHARS = 1000
    other = Client()
    assert say(other, "laptop", "x" * 400).status_code == 200
    assert say(other, "laptop", "y" * 600).status_code == 403
    assert _stored(anon_id(other)) == 2
    # Logged in, the user's own memory has no such cap.
    User.objects.create_user("wang", password="pw")
    assert client.login(username="wang", password="pw")
    settings.MEMORYPROJ_ANON_MAX_TURNS = 1
    assert say(client, "laptop", "now as wang").status_code == 200


@commits
def test_idle_anonymous_owners_are_forgotten_by_the_demos_task(client, settings):
    import datetime as dt

    from django.utils import timezone

    from memory.models import Owner
    from memoryproj import tasks

    say(client, "laptop", INTRO)
    idle = anon_id(client)
    fresh = Client()
    say(fresh, "laptop", "hi")
    services.turn_append(owner_id="anonymous-fan", session_id="s", role="user", content="hi")
    assert selectors.context_get(owner_id=idle)["facts"]["name"] == "Wang Jianguo"
    Owner.objects.filter(external_id__in=[idle, "anonymous-fan"]).update(
        updated_at=timezone.now() - dt.timedelta(days=31)
    )
    settings.MEMORYPROJ_ANON_RETENTION_DAYS = 30
    assert tasks.anon_sweep.call() == 1
    assert not Owner.objects.filter(external_id=idle).exists()
    # Through the forget: no cached copy outlives it.
    assert selectors.context_get(owner_id=idle)["facts"] == {}
    assert _stored(anon_id(fresh)) == 2
    assert _stored("anonymous-fan") == 1
