"""End to end in a real headless Chromium: the demo chat page remembers a user across sessions.

Tab A (session "laptop") introduces Wang Jianguo; the cache's own redis-server is flushed;
tab B, a separate browser context (session "phone"), says "hi" and is greeted by name, with
the like. Screenshots go to ``artifacts/``.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from memory import selectors
from tests.servers import RedisServer

TIMEOUT_MS = 15_000
INTRO = "My name is Wang Jianguo, I like basketball"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def open_chat(page: Any, base_url: str, user_id: str, session_id: str) -> None:
    """Pick a user and a session in the page's own form."""
    page.goto(f"{base_url}/chat/")
    page.fill("#pick input[name=user_id]", user_id)
    page.fill("#pick input[name=session_id]", session_id)
    page.click("#pick button")
    page.wait_for_selector("#send input[name=message]")


def say(page: Any, message: str) -> str:
    """Send a message; return the assistant's reply as the page shows it."""
    page.fill("#send input[name=message]", message)
    page.press("#send input[name=message]", "Enter")
    reply = page.locator("#reply p")
    reply.wait_for()
    return reply.inner_text()  # type: ignore[no-any-return]


def test_memory_carries_over_to_another_session_after_a_cache_flush(
    live_server: Any,
    own_redis: RedisServer,
    settings: Any,
    sync_playwright: Any,
    chromium_options,
    artifacts,
) -> None:
    # NOTE: the page is open to anyone only with DEBUG on, as on a developer's machine; the
    # live server thread reads these settings, and the cache is this test's own redis-server.
    settings.DEBUG = True
    cache = redis.Redis(host="127.0.0.1", port=own_redis.port)

    # NOTE: no ORM call inside this block: Playwright's sync API runs an event loop, where
    # Django refuses synchronous database access. The server runs in its own thread.
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(**chromium_options)
        try:
            laptop = browser.new_context(viewport={"width": 1100, "height": 800}).new_page()
            laptop.set_default_timeout(TIMEOUT_MS)
            open_chat(laptop, live_server.url, "wang", "laptop")
            assert laptop.locator("#facts").inner_text() == "No facts yet."
            reply = say(laptop, INTRO)
            assert (
                reply == "Nice to meet you, Wang Jianguo! I'll remember that you like basketball."
            )
            assert laptop.locator('#facts dd[data-key="name"]').inner_text() == "Wang Jianguo"
            laptop.screenshot(path=str(artifacts / "chat_1_laptop.png"), full_page=True)

            assert cache.dbsize() > 0
            cache.flushall()
            assert cache.dbsize() == 0

            # NOTE: another browser context shares no cookie with the first: another device.
            phone = browser.new_context(viewport={"width": 480, "height": 900}).new_page()
            phone.set_default_timeout(TIMEOUT_MS)
            open_chat(phone, live_server.url, "wang", "phone")
            assert phone.locator("#source").inner_text() == "database"
            assert phone.locator('#facts dd[data-key="likes"]').inner_text() == '["basketball"]'
            phone.screenshot(path=str(artifacts / "chat_2_phone_opened.png"), full_page=True)
            reply = say(phone, "hi")
            assert reply == "Hello again, Wang Jianguo! Any news on basketball?"
            assert phone.locator("#source").inner_text() == "cache"
            phone.screenshot(path=str(artifacts / "chat_3_phone_reply.png"), full_page=True)

            reply = say(laptop, "What's my name?")
            assert reply == "Your name is Wang Jianguo."
            assert laptop.locator("#turns li.turn.elsewhere").count() == 2
            laptop.screenshot(path=str(artifacts / "chat_4_laptop_again.png"), full_page=True)
        finally:
            browser.close()

    turns, _ = selectors.turn_list(owner_id="wang")
    assert [(t["session_id"], t["role"]) for t in turns] == [
        ("laptop", "user"),
        ("laptop", "assistant"),
        ("phone", "user"),
        ("phone", "assistant"),
        ("laptop", "user"),
        ("laptop", "assistant"),
    ]
    assert selectors.context_get(owner_id="wang")["facts"] == {
        "name": "Wang Jianguo",
        "likes": ["basketball"],
    }
