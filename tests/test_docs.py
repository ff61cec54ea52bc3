"""The docs site: it builds in strict mode (a broken link, anchor, image or docstring reference
fails), its generated pages match the code, and its screenshots come from a real browser.

The screenshots test writes ``chat.png`` and ``admin.png`` into ``artifacts/docs-images/``, or
into the folder ``MEMORY_SCREENSHOTS_DIR`` names: ``make screenshots`` points it at
``docs/images/`` to retake the committed pictures.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from memory import services
from memory.conf import DEFAULTS
from memory.extras import extra_install
from scripts import mkdocs_hooks

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
# The wheel `make dist` builds, as an install line names it until there is a release.
WHEEL = "$(echo dist/django_memory-*.whl)"
TIMEOUT_MS = 15_000
INTRO = "My name is Wang Jianguo, I like basketball"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The docs site, built strictly as ``make docs`` builds it."""
    out = tmp_path_factory.mktemp("docs") / "site"
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", out],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    return out


@pytest.fixture(scope="module")
def served_site(site: Path) -> Iterator[str]:
    """The built site over HTTP on a free loopback port, as ``make docs-serve`` serves it."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.slow
def test_the_site_builds_strictly(site: Path) -> None:
    rest = (site / "rest.html").read_text()
    assert "/api/memory/users/{user_id}/turns/" in rest and "Idempotency-Key" in rest
    api = (site / "python-api.html").read_text()
    assert "turn_append" in api and "context_get" in api
    assert (site / "images" / "chat.png").is_file() and (site / "images" / "admin.png").is_file()
    # NOTE: nothing on a page loads from another host (the theme's web fonts are off); plain
    # links to other sites (the repository, the theme's credit) load nothing.
    loads = re.compile(r"""(\ssrc=|<link[^>]*\shref=)["']?(https?:)?//""")
    assert [page for page in site.rglob("*.html") if loads.search(page.read_text())] == []
    # NOTE: no repository widget: with repo_url the theme asks api.github.com on every page.
    assert [page for page in site.rglob("*.html") if "md-source" in page.read_text()] == []
    # CSS that would load from another host (a font, an image), in the theme's or ours.
    imports = re.compile(r"""(url\(\s*["']?|@import\s+["']?)(https?:)?//""")
    assert [css for css in site.rglob("*.css") if imports.search(css.read_text())] == []


@pytest.mark.slow
def test_the_python_reference_has_the_async_twins_langchain_tokens_and_metrics(
    site: Path,
) -> None:
    api = (site / "python-api.html").read_text()
    twins = mkdocs_hooks.async_twins()
    assert {"aturn_append", "afact_put", "acontext_get", "acontext_messages"} <= {
        twin for _, twin, _ in twins
    }
    for module, twin, sync in twins:
        assert f"{module}.{twin}" in api
        # NOTE: each twin links to its sync function's entry, which the page has.
        assert f'href="#memory.{module}.{sync}"' in api and f'id="memory.{module}.{sync}"' in api
    for name in (
        "memory.integrations.langchain.MemoryChatMessageHistory",
        "memory.tokens.estimate_counter",
        "memory.tokens.tiktoken_counter",
        "memory.tokens.counter_get",
        "memory.views.metrics.MetricsView",
    ):
        assert f'id="{name}"' in api, name


@pytest.mark.slow
@pytest.mark.browser
def test_no_page_of_the_served_site_asks_another_host_and_its_search_works(
    site: Path, served_site: str, sync_playwright: Any, chromium_options: Any
) -> None:
    """Every page, loaded over HTTP in Chromium with every request seen: none leaves the
    site's host (a request elsewhere is refused, and listed); and the search finds a word."""
    host = urllib.parse.urlsplit(served_site).netloc
    pages = sorted(page.relative_to(site).as_posix() for page in site.rglob("*.html"))
    assert "index.html" in pages and "python-api.html" in pages
    elsewhere: list[str] = []
    failed: list[str] = []

    def route(route: Any) -> None:
        url = route.request.url
        if urllib.parse.urlsplit(url).netloc == host or url.startswith(("data:", "blob:")):
            route.continue_()
        else:
            elsewhere.append(url)
            route.abort()

    # NOTE: no ORM call inside this block: Playwright's sync API runs an event loop.
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(**chromium_options)
        try:
            context = browser.new_context()
            context.route("**/*", route)
            page = context.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            # NOTE: a request the next page's navigation cut short (the search worker, its
            # index, on a loaded machine) is aborted, not failed.
            page.on(
                "requestfailed",
                lambda request: (
                    failed.append(request.url)
                    if urllib.parse.urlsplit(request.url).netloc == host
                    and request.failure != "net::ERR_ABORTED"
                    else None
                ),
            )
            for name in pages:
                page.goto(f"{served_site}/{name}", wait_until="networkidle")
            page.goto(f"{served_site}/index.html", wait_until="networkidle")
            page.locator("input.md-search__input").focus()
            page.keyboard.type("idempotency")
            page.locator(".md-search-result__item").first.wait_for()
            meta = page.locator(".md-search-result__meta").inner_text()
        finally:
            browser.close()
    assert elsewhere == []
    assert failed == []
    assert "Initializing search" not in meta and "matching" in meta, meta


def test_the_rest_reference_has_every_operation_of_the_schema() -> None:
    schema = mkdocs_hooks.openapi_schema()
    page = mkdocs_hooks.operations_markdown(schema)
    for path, item in schema["paths"].items():
        for method, op in item.items():
            if method in mkdocs_hooks.METHODS:
                assert f"## {method.upper()} `{path}`" in page
                assert all(f"| {status} |" in page for status in op["responses"])
    for name in schema["components"]["schemas"]:
        assert f"### {name} {{#{name.lower()}}}" in page


def test_the_settings_table_has_every_key_with_its_default() -> None:
    rows = mkdocs_hooks.settings_rows()
    assert [key for key, _, _ in rows] == list(DEFAULTS)
    assert all(meaning for _, _, meaning in rows)
    assert dict((key, eval(default)) for key, default, _ in rows) == DEFAULTS


def test_every_install_line_installs_what_exists_the_built_wheel() -> None:
    # NOTE: there is no release on an index yet: "django-memory[extra]" finds nothing there.
    pages = [ROOT / "README.md", *DOCS.glob("*.md")]
    lines = [
        (page.name, line.strip())
        for page in pages
        if page.name != "changelog.md"
        for line in page.read_text().splitlines()
        if "pip install" in line and "django-memory" in line
    ]
    assert lines == []
    extras = {
        extra
        for page in pages
        for extra in re.findall(
            r'pip install "\$\(echo dist/django_memory-\*\.whl\)\[([\w-]+)\]"', page.read_text()
        )
    }
    assert extras == {
        "langchain",
        "tiktoken",
        "openai-agents",
        "langgraph",
        "mcp",
        "deferred",
        "channels",
    }
    # The errors and hints that name an extra say it as these lines do.
    for extra in extras:
        assert extra_install(extra).startswith(f'pip install "{WHEEL}[{extra}]"')
    assert f'"{WHEEL}[langchain]"' in (ROOT / "README.md").read_text()


def test_every_page_and_image_of_the_docs_is_in_the_nav_or_used() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = {p.name for p in DOCS.glob("*.md")}
    assert {name for name in pages if f": {name}" not in nav} == set()
    used = "".join(p.read_text() for p in DOCS.glob("*.md"))
    assert {p.name for p in (DOCS / "images").glob("*.png") if p.name not in used} == set()


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_screenshots_of_the_chat_page_and_the_admin(
    live_server: Any, own_redis: Any, settings: Any, sync_playwright: Any, chromium_options: Any
) -> None:
    out = Path(os.environ.get("MEMORY_SCREENSHOTS_DIR") or ROOT / "artifacts" / "docs-images")
    out.mkdir(parents=True, exist_ok=True)
    settings.DEBUG = True
    User.objects.create_superuser("admin", password="admin-pw-123")
    services.turn_append(owner_id="li", session_id="web", role="user", content="我住在上海")

    # NOTE: no ORM call inside this block: Playwright's sync API runs an event loop.
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(**chromium_options)
        try:
            page = browser.new_context(viewport={"width": 1100, "height": 760}).new_page()
            page.set_default_timeout(TIMEOUT_MS)
            # NOTE: a service caller (the superuser) may pick the user the page talks as.
            page.goto(f"{live_server.url}/admin/login/?next=/chat/")
            page.fill("#id_username", "admin")
            page.fill("#id_password", "admin-pw-123")
            page.click("input[type=submit]")
            page.wait_for_url("**/chat/")
            page.fill("#pick input[name=user_id]", "wang")
            page.fill("#pick input[name=session_id]", "laptop")
            page.click("#pick button")
            for message in (INTRO, "What's my name?"):
                page.fill("#send input[name=message]", message)
                page.press("#send input[name=message]", "Enter")
                # NOTE: the reply streams in; the page marks it done once it has all of it.
                page.locator("#reply.done").wait_for()
            chat_source = page.locator("#source").inner_text()
            chat_reply = page.locator("#reply.done p").inner_text()
            page.screenshot(path=str(out / "chat.png"))

            page.goto(f"{live_server.url}/admin/memory/owner/")
            page.click("#result_list a:text-is('wang')")
            page.locator("#facts-group").wait_for()
            admin_facts = page.locator("#facts-group").inner_text()
            page.screenshot(path=str(out / "admin.png"), full_page=True)
        finally:
            browser.close()

    assert chat_reply == "Your name is Wang Jianguo."
    assert chat_source == "cache"
    assert "Wang Jianguo" in admin_facts and "basketball" in admin_facts
    for name in ("chat.png", "admin.png"):
        assert (out / name).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
