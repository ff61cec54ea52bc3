"""End to end in a real headless Chromium: the demo chat page remembers its visitor.

1. Without a login: a visitor chats anonymously and says their name; another browser (a
   context sharing no cookie) knows nothing of it; the visitor logs in and the assistant still
   knows their name, now in their own memory.
2. Under uvicorn (ASGI), the reply streamed as it is produced: tab A says its name, the
   cache's own redis-server is flushed (FLUSHALL), and tab B, another session id, is told it.

Screenshots go to ``artifacts/``.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.contrib.auth.models import User

from memory import selectors
from tests.instance import environment
from tests.servers import RedisServer, free_port

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_MS = 15_000
INTRO = "My name is Wang Jianguo, I like basketball"
MET = "Nice to meet you, Wang Jianguo! I'll remember that you like basketball."

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def new_page(browser: Any, **viewport: int) -> Any:
    page = browser.new_context(viewport=viewport or {"width": 1100, "height": 800}).new_page()
    page.set_default_timeout(TIMEOUT_MS)
    return page


def open_chat(page: Any, base_url: str, session_id: str) -> None:
    """Open the chat page and pick a session id in the page's own form."""
    page.goto(f"{base_url}/chat/")
    page.fill("#pick input[name=session_id]", session_id)
    page.click("#pick button")
    page.wait_for_url(f"**/chat/?session_id={session_id}")
    page.wait_for_selector("#send input[name=message]")


def say(page: Any, message: str) -> str:
    """Send a message; return the assistant's reply once the page has all of it."""
    page.fill("#send input[name=message]", message)
    # NOTE: the page's submit handler takes the id off the previous reply before it returns.
    page.press("#send input[name=message]", "Enter")
    reply = page.locator("#reply.done")
    reply.wait_for()
    return reply.locator("p").inner_text()  # type: ignore[no-any-return]


def test_an_anonymous_chat_joins_the_users_memory_at_login(
    live_server: Any, sync_playwright: Any, chromium_options: Any, artifacts: Path
) -> None:
    User.objects.create_user("wang", password="wang-pw-123")

    # NOTE: no ORM call inside this block: Playwright's sync API runs an event loop, where
    # Django refuses synchronous database access. The server runs in its own thread.
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(**chromium_options)
        try:
            visitor = new_page(browser)
            open_chat(visitor, live_server.url, "laptop")
            # NOTE: a visit alone stores nothing: the anonymous memory starts with a message.
            assert visitor.locator("#anon-id").inner_text() == ""
            assert visitor.locator("#facts").inner_text() == "No facts yet."
            assert say(visitor, INTRO) == MET
            anon_id = visitor.locator("#anon-id").inner_text()
            assert visitor.locator('#facts dd[data-key="name"]').inner_text() == "Wang Jianguo"
            visitor.screenshot(path=str(artifacts / "chat_1_anonymous.png"), full_page=True)

            # NOTE: another browser context shares no cookie: another visitor.
            stranger = new_page(browser, width=480, height=900)
            open_chat(stranger, live_server.url, "laptop")
            assert say(stranger, "What's my name?").startswith("I don't know your name yet.")
            stranger_id = stranger.locator("#anon-id").inner_text()
            assert stranger.locator("#facts").inner_text() == "No facts yet."
            stranger.screenshot(path=str(artifacts / "chat_2_stranger.png"), full_page=True)

            visitor.click("#login")
            visitor.fill("#id_username", "wang")
            visitor.fill("#id_password", "wang-pw-123")
            visitor.screenshot(path=str(artifacts / "chat_3_login.png"), full_page=True)
            visitor.click("#login-form button")
            visitor.wait_for_url("**/chat/?session_id=laptop")
            assert visitor.locator("#username").inner_text() == "wang"
            assert visitor.locator('#facts dd[data-key="name"]').inner_text() == "Wang Jianguo"
            assert visitor.locator("#turns li.turn").count() == 2
            assert say(visitor, "What's my name?") == "Your name is Wang Jianguo."
            visitor.screenshot(path=str(artifacts / "chat_4_logged_in.png"), full_page=True)

            stranger.reload()
            assert stranger.locator("#facts").inner_text() == "No facts yet."
            assert stranger.locator("#anon-id").inner_text() == stranger_id
        finally:
            browser.close()

    assert anon_id != stranger_id
    assert selectors.turn_list(owner_id=anon_id)[0] == []
    turns = selectors.turn_list(owner_id="wang")[0]
    assert [(t["role"], t["content"]) for t in turns] == [
        ("user", INTRO),
        ("assistant", MET),
        ("user", "What's my name?"),
        ("assistant", "Your name is Wang Jianguo."),
    ]
    assert selectors.context_get(owner_id=stranger_id)["facts"] == {}


@pytest.fixture
def uvicorn_server(own_redis: RedisServer) -> Iterator[str]:
    """The demo project under uvicorn, on this test's database and its own redis-server."""
    port = free_port()
    env = {**environment(), "REDIS_URL": own_redis.url, "MEMORY_LOG_LEVEL": "WARNING"}
    log_path = Path(f"/tmp/memory-uvicorn-{port}.log")
    log = log_path.open("wb")
    command = [
        sys.executable, "-m", "uvicorn", "memoryproj.asgi:application",
        "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
    ]  # fmt: skip
    server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/memory/health/", timeout=2) as response:
                    assert response.status == 200
                break
            except OSError:
                assert server.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, "uvicorn did not start"
                time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)
        log.close()
        log_path.unlink(missing_ok=True)


def test_two_tabs_under_uvicorn_share_memory_across_a_flushall(
    uvicorn_server: str,
    own_redis: RedisServer,
    sync_playwright: Any,
    chromium_options: Any,
    artifacts: Path,
) -> None:
    cache = redis.Redis(host="127.0.0.1", port=own_redis.port)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(**chromium_options)
        try:
            context = browser.new_context(viewport={"width": 1100, "height": 800})
            context.set_default_timeout(TIMEOUT_MS)
            tab_a = context.new_page()
            open_chat(tab_a, uvicorn_server, "laptop")
            assert say(tab_a, INTRO) == MET
            anon_id = tab_a.locator("#anon-id").inner_text()
            # NOTE: the reply came in pieces, as it was produced, not as one buffered body.
            assert int(tab_a.locator("#reply").get_attribute("data-reads")) > 1
            assert tab_a.locator('#facts dd[data-key="name"]').inner_text() == "Wang Jianguo"
            tab_a.screenshot(path=str(artifacts / "chat_asgi_1_tab_a.png"), full_page=True)

            assert cache.dbsize() > 0
            cache.flushall()
            assert cache.dbsize() == 0

            # NOTE: another tab of the same browser, with another session id: the same visitor.
            # The first read after the flush rehydrates from the database.
            tab_b = context.new_page()
            tab_b.goto(f"{uvicorn_server}/chat/?session_id=phone")
            assert tab_b.locator("#anon-id").inner_text() == anon_id
            assert tab_b.locator("#source").inner_text() == "database"
            assert tab_b.locator('#facts dd[data-key="likes"]').inner_text() == "basketball"
            assert tab_b.locator('#facts dd[data-from="likes"]').inner_text() == "laptop"
            assert say(tab_b, "What's my name?") == "Your name is Wang Jianguo."
            # NOTE: the turn just sent shows its seq without a reload, as the reply does.
            sent = tab_b.locator("#turns li.turn.user").last
            assert sent.locator(".meta").inner_text() == "#3 · user · phone"
            assert tab_b.locator("#turns li.turn.elsewhere").count() == 2
            tab_b.screenshot(path=str(artifacts / "chat_asgi_2_tab_b.png"), full_page=True)
        finally:
            browser.close()

    turns = selectors.turn_list(owner_id=anon_id)[0]
    assert [(t["session_id"], t["role"]) for t in turns] == [
        ("laptop", "user"),
        ("laptop", "assistant"),
        ("phone", "user"),
        ("phone", "assistant"),
    ]
    assert selectors.context_get(owner_id=anon_id)["facts"] == {
        "name": "Wang Jianguo",
        "likes": ["basketball"],
    }


def test_the_page_reconnects_after_a_server_restart_and_shows_the_reply_it_waited_for(
    own_redis: RedisServer, sync_playwright: Any, chromium_options: Any, artifacts: Path
) -> None:
    """Under uvicorn the page talks over the websocket: the server is killed while the page waits
    for a reply, and started again; the page reconnects by itself, sends its message again, and
    shows the reply, stored once."""
    from tests.chat_sockets import Instance, instance_env, login_cookie

    # NOTE: a slow responder: the reply takes seconds, long enough to kill the server inside it.
    env = instance_env(redis_url=own_redis.url, prefix=f"{own_redis.port}-chat", delay=0.4)
    server = Instance(env, name="browser-ws").start()
    cookie = login_cookie("wang").partition("=")[2]
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(**chromium_options)
            try:
                context = browser.new_context(viewport={"width": 1100, "height": 800})
                context.add_cookies([{"name": "sessionid", "value": cookie, "url": server.http}])
                page = context.new_page()
                page.set_default_timeout(TIMEOUT_MS)
                page.goto(f"{server.http}/chat/?session_id=laptop")
                page.wait_for_selector("#send[data-socket-ready]")
                page.fill("#send input[name=message]", INTRO)
                page.press("#send input[name=message]", "Enter")
                # NOTE: the first words are there: the reply is being produced, not stored yet.
                page.wait_for_function("document.querySelector('#reply p')?.textContent.length > 0")
                assert page.locator("#reply.done").count() == 0
                server.kill()
                page.wait_for_selector("#socket-status:not([hidden])")
                server.start()
                reply = page.locator("#reply.done")
                reply.wait_for(timeout=30_000)
                assert reply.locator("p").inner_text() == MET
                assert page.locator("#socket-status").is_hidden()
                page.screenshot(path=str(artifacts / "chat_ws_reconnected.png"), full_page=True)
            finally:
                browser.close()
    finally:
        server.cleanup()
    turns = selectors.turn_list(owner_id="wang")[0]
    assert [(t["role"], t["content"]) for t in turns] == [("user", INTRO), ("assistant", MET)]
