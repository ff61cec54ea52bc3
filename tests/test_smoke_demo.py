"""Smoke test of the zero-setup demo: SQLite and no cache, as `make run` starts it when
nothing is configured (DEBUG on, no secret key set). The only place the suite runs on SQLite;
storage tests use Postgres."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
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


def test_demo_runs_on_sqlite_without_cache(demo_env):
    _manage(demo_env, "migrate", "--noinput")
    assert "no issues" in _manage(demo_env, "check")
    _manage(
        demo_env, "createsuperuser", "--noinput", "--username", "wang", "--email", "w@example.com"
    )
    token = _manage(demo_env, "drf_create_token", "wang").split()[2]
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=demo_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}/api/memory"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                status, health = _request(f"{base}/health/")
                break
            except OSError:
                assert time.monotonic() < deadline, "the demo server did not start"
                time.sleep(0.2)
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
    finally:
        server.terminate()
        server.wait(timeout=10)


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
