"""End to end in a real headless Chromium: an operator finds an owner in the admin, edits a
fact, and the chat backend's context endpoint serves the new value at once (never stale); an
operator forgets an owner, and "Recent actions" no longer lists what was done to it."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User

from memory import selectors, services

TIMEOUT_MS = 15_000

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_fact_edited_in_admin_is_served_by_the_context_endpoint(
    live_server, sync_playwright, chromium_options, artifacts
):
    User.objects.create_superuser("operator", password="operator-pw")
    services.fact_put(owner_id="wang", key="name", value="王建国", session_id="laptop")
    services.fact_put(owner_id="li", key="name", value="Li")
    services.turn_append(owner_id="wang", session_id="laptop", role="user", content="我叫王建国")
    selectors.context_get(owner_id="wang")
    assert selectors.context_get(owner_id="wang")["source"] == "cache"

    # NOTE: no ORM call inside this block: Playwright's sync API runs an event loop, where
    # Django refuses synchronous database access. The server runs in its own thread.
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(**chromium_options)
        try:
            page = browser.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(f"{live_server.url}/admin/login/?next=/admin/memory/owner/")
            page.fill("#id_username", "operator")
            page.fill("#id_password", "operator-pw")
            page.click("input[type=submit]")

            page.fill("#searchbar", "wang")
            page.press("#searchbar", "Enter")
            page.wait_for_url("**/admin/memory/owner/?q=wang")
            assert page.locator("#result_list tbody tr").count() == 1
            page.click("#result_list a:text-is('wang')")
            page.screenshot(path=str(artifacts / "admin_owner.png"), full_page=True)

            fact_row = page.locator("#facts-group tr.has_original", has_text="name")
            fact_row.locator("a.inlineviewlink, a.inlinechangelink").click()
            page.fill("#id_value", json.dumps("王小明", ensure_ascii=False))
            page.click("input[name=_save]")
            success = page.locator(".messagelist .success").inner_text()
            page.screenshot(path=str(artifacts / "admin_fact_edit.png"), full_page=True)

            context_url = f"{live_server.url}/api/memory/users/wang/context/"
            page.goto(context_url)
            page.screenshot(path=str(artifacts / "context_endpoint.png"), full_page=True)
            # NOTE: as a chat backend asks, with the operator's session cookie.
            response = page.request.get(context_url, headers={"Accept": "application/json"})
            assert response.status == 200
            served = response.json()
        finally:
            browser.close()

    assert "was changed successfully" in success
    assert served["facts"] == {"name": "王小明"}
    # NOTE: the warm copy took the edit as a delta after commit: still a hit, never stale.
    assert served["source"] == "cache"
    assert selectors.context_get(owner_id="wang")["facts"] == {"name": "王小明"}
    assert selectors.context_get(owner_id="li")["facts"] == {"name": "Li"}


def test_a_forgotten_owner_leaves_no_trace_in_recent_actions(
    live_server, sync_playwright, chromium_options, artifacts
):
    User.objects.create_superuser("operator", password="operator-pw")
    services.fact_put(owner_id="wang", key="name", value="王建国")
    services.fact_put(owner_id="li", key="name", value="Li")

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(**chromium_options)
        try:
            page = browser.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(f"{live_server.url}/admin/login/?next=/admin/memory/owner/")
            page.fill("#id_username", "operator")
            page.fill("#id_password", "operator-pw")
            page.click("input[type=submit]")
            # NOTE: an edit of one of wang's rows, which "Recent actions" then lists.
            page.click("#result_list a:text-is('wang')")
            page.locator("#facts-group tr.has_original", has_text="name").locator(
                "a.inlineviewlink, a.inlinechangelink"
            ).click()
            page.fill("#id_value", json.dumps("王小明", ensure_ascii=False))
            page.click("input[name=_save]")
            page.goto(f"{live_server.url}/admin/")
            before = page.locator("#recent-actions-module").inner_text()

            page.goto(f"{live_server.url}/admin/memory/owner/?q=wang")
            page.check("#result_list tbody input.action-select")
            page.select_option("select[name=action]", "forget_owners")
            page.click("button[name=index]")
            page.click("input[type=submit][value^='Yes, forget']")
            forgotten = page.locator(".messagelist .success").inner_text()
            page.goto(f"{live_server.url}/admin/")
            after = page.locator("#recent-actions-module").inner_text()
            page.screenshot(path=str(artifacts / "admin_recent_actions.png"), full_page=True)
        finally:
            browser.close()

    assert "name v2" in before
    assert forgotten == "Forgot 1 owner(s)."
    assert "1 memory owner (ids not kept)" in after
    assert "wang" not in after and "name v2" not in after
    assert selectors.context_get(owner_id="wang")["facts"] == {}
    assert selectors.context_get(owner_id="li")["facts"] == {"name": "Li"}
