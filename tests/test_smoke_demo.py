"""Smoke test of the zero-setup demo: SQLite and no cache, as `make run` starts it when
nothing is configured (DEBUG on, no secret key set). The only place the suite runs on SQLite;
storage tests use Postgres."""

from __future__ import annotations

import contextlib
import html
import http.cookiejar
import json
import os
import re
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import free_port

ROOT = Path(__file__).resolve().parent.parent


def _request(url: str, *, token: str | None = None, body: dict | None = None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Token {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


@pytest.fixture
def demo_env(tmp_path: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"REDIS_URL", "DATABASE_URL"} and not k.startswith("DJANGO_")
    }
    env.update(
        DJANGO_SETTINGS_MODULE="memoryproj.settings",
        DJANGO_DEBUG="1",
        DATABASE_URL=f"sqlite:///{tmp_path / 'demo.sqlite3'}",
        DJANGO_SUPERUSER_PASSWORD="demo-pass-123",
    )
    return env


def _manage(env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout + result.stderr


@contextlib.contextmanager
def _demo_server(env: dict[str, str]) -> Iterator[str]:
    """``runserver`` on the demo's settings, on a free port, until the block ends: its root URL."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    root = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{root}/api/memory/health/", timeout=10).close()
                break
            except urllib.error.HTTPError:
                break
            except OSError:
                assert time.monotonic() < deadline, "the demo server did not start"
                time.sleep(0.2)
        yield root
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_demo_runs_on_sqlite_without_cache(demo_env):
    migrated = _manage(demo_env, "migrate", "--noinput")
    # A new site's first migrate warns of nothing: no table yet is not a database down.
    assert "WARNING" not in migrated and "unavailable" not in migrated, migrated
    assert "no issues" in _manage(demo_env, "check")
    _manage(
        demo_env, "createsuperuser", "--noinput", "--username", "wang", "--email", "w@example.com"
    )
    token = _manage(demo_env, "drf_create_token", "wang").split()[2]
    with _demo_server(demo_env) as root:
        base = f"{root}/api/memory"
        status, health = _request(f"{base}/health/")
        assert (status, health["database"], health["cache"]) == (200, "ok", "disabled")
        assert health["latency_ms"]["cache"] is None
        status, turn = _request(
            f"{base}/users/wang/turns/",
            token=token,
            body={"session_id": "tab-a", "role": "user", "content": "我叫王建国"},
        )
        assert (status, turn["seq"]) == (201, 1)
        status, context = _request(f"{base}/users/wang/context/", token=token)
        assert status == 200
        assert context["source"] == "database"
        assert [t["content"] for t in context["turns"]] == ["我叫王建国"]
        # NOTE: SQLite takes the general path of an append: the extractor ran before it.
        assert context["facts"] == {"name": "王建国"}
        # NOTE: the icon every browser asks for, served from the repository.
        with urllib.request.urlopen(f"{root}/favicon.ico", timeout=10) as response:
            assert response.headers["Content-Type"] == "image/x-icon"
            assert (
                response.read() == (ROOT / "memoryproj/static/memoryproj/favicon.ico").read_bytes()
            )
        # NOTE: search by meaning needs PostgreSQL: the 400 says how to get it.
        status, refused = _request(f"{base}/users/wang/search/?q=name&mode=semantic", token=token)
        assert status == 400
        assert (
            "this database is SQLite; run on PostgreSQL (the demo: DATABASE_URL="
            in refused["mode"][0]
        )
        assert "with pgvector installed, then manage.py migrate" in refused["mode"][0]


class _Browser:
    """A browser of its own (cookies, the CSRF token of the last page) over urllib."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.cookies = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.cookies))

    def open(self, path: str, form: dict[str, str] | None = None) -> tuple[int, str]:
        data = None
        if form is not None:
            token = next(c.value for c in self.cookies if c.name == "csrftoken")
            data = urllib.parse.urlencode({"csrfmiddlewaretoken": token, **form}).encode()
        request = urllib.request.Request(
            f"{self.root}{path}", data=data, headers={"Referer": f"{self.root}{path}"}
        )
        try:
            with self.opener.open(request, timeout=20) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def say(self, message: str) -> tuple[int, str]:
        return self.open(
            "/chat/",
            {"session_id": "web", "message": message, "exchange_id": secrets.token_hex(8)},
        )

    def log_in(self, username: str, password: str) -> tuple[int, str]:
        self.open("/accounts/login/")
        return self.open(
            "/accounts/login/", {"username": username, "password": password, "next": "/chat/"}
        )


def _turn_texts(page: str) -> list[str]:
    return [html.unescape(t) for t in re.findall(r"<p>(.*?)</p>\s*</li>", page, re.S)]


def test_on_sqlite_a_visitor_chats_anonymously_logs_in_and_finds_it_in_another_browser(
    demo_env,
):
    """The demo's own flow on its default database: what a visitor said before logging in joins
    their memory, and another browser where they log in sees it."""
    _manage(demo_env, "migrate", "--noinput", "-v", "0")
    _manage(
        demo_env, "createsuperuser", "--noinput", "--username", "wang", "--email", "w@example.com"
    )
    password = demo_env["DJANGO_SUPERUSER_PASSWORD"]
    with _demo_server(demo_env) as root:
        laptop = _Browser(root)
        assert laptop.open("/chat/")[0] == 200
        status, page = laptop.say("My name is Wang Jianguo")
        assert status == 200
        anon_id = re.search(r'id="anon-id">(anon-[0-9a-f]{32})<', page).group(1)
        assert laptop.say("I like basketball")[0] == 200
        status, page = laptop.log_in("wang", password)
        assert status == 200, page
        assert 'id="username">wang<' in page
        said = ["My name is Wang Jianguo", "I like basketball"]
        assert [t for t in _turn_texts(page) if t in said] == said
        status, page = laptop.say("I live in Shanghai")
        assert status == 200

        phone = _Browser(root)
        assert phone.open("/chat/")[0] == 200
        status, page = phone.log_in("wang", password)
        assert status == 200, page
        said.append("I live in Shanghai")
        assert [t for t in _turn_texts(page) if t in said] == said
        assert 'data-key="name">Wang Jianguo<' in page
        assert 'data-key="likes">basketball<' in page
        assert 'data-key="location">Shanghai<' in page
        # NOTE: wang is a superuser, who may open any memory: the anonymous one is forgotten.
        status, page = phone.open(f"/chat/?user_id={anon_id}")
        assert status == 200
        assert _turn_texts(page) == []
        assert "No turns yet." in page


def test_demo_searches_on_sqlite_by_substring(demo_env):
    """Search ranks words in Python where there is no Postgres index, and falls back to a
    substring match."""
    _manage(demo_env, "migrate", "--noinput", "-v", "0")
    script = (
        "from memory import selectors, services\n"
        "for text in ['I like basketball', '我喜欢打篮球']:\n"
        "    services.turn_append(owner_id='wang', session_id='s', role='user', content=text)\n"
        "print([t['content'] for t in selectors.turn_search(owner_id='wang', q='BASKET')])\n"
        "print([t['content'] for t in selectors.turn_search(owner_id='wang', q='篮球')])\n"
    )
    out = _manage(demo_env, "shell", "-v", "0", "-c", script).splitlines()
    assert out[-2:] == ["['I like basketball']", "['我喜欢打篮球']"]


def test_the_sqlite_default_keeps_no_connection_and_no_pool(monkeypatch):
    """The zero-setup demo (SQLite, no cache), also as the ASGI entry point loads it: no pool
    (PostgreSQL's), no kept connection."""
    import runpy

    settings_file = Path(__file__).resolve().parent.parent / "memoryproj" / "settings.py"
    for name in list(os.environ):
        if name.startswith("DJANGO_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("DJANGO_SECRET_KEY", "smoke-only-secret-key-" + "x" * 40)
    monkeypatch.setenv("DATABASE_URL", "sqlite:///x.sqlite3")
    monkeypatch.setenv("MEMORYPROJ_ASGI", "1")
    database = runpy.run_path(str(settings_file))["DATABASES"]["default"]
    assert database["CONN_MAX_AGE"] == 0
    assert "pool" not in database.get("OPTIONS", {})


def test_on_sqlite_the_demo_takes_the_write_lock_as_a_transaction_begins(monkeypatch):
    """The zero-setup demo's transactions begin IMMEDIATE with a 20 s timeout: a deferred one that
    read first fails at once, "database is locked", when another process (make run's task
    worker) writes; an immediate one waits for the lock. PostgreSQL gets none of it."""
    import runpy

    settings_file = Path(__file__).resolve().parent.parent / "memoryproj" / "settings.py"
    for name in list(os.environ):
        if name.startswith("DJANGO_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("DJANGO_SECRET_KEY", "smoke-only-secret-key-" + "x" * 40)
    monkeypatch.setenv("DATABASE_URL", "sqlite:///x.sqlite3")
    database = runpy.run_path(str(settings_file))["DATABASES"]["default"]
    assert database["OPTIONS"] == {"transaction_mode": "IMMEDIATE", "timeout": 20}
    monkeypatch.setenv("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/memory")
    database = runpy.run_path(str(settings_file))["DATABASES"]["default"]
    assert "transaction_mode" not in database.get("OPTIONS", {})
