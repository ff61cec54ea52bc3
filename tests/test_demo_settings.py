"""The demo project's settings (memoryproj/settings.py) are safe by default: DEBUG off, no
built-in secret, nothing loaded from another host, static files and 500s handled with DEBUG off,
no trust in X-Forwarded-For, and a documented production environment that ``check --deploy``
finds clean. Subprocess tests start the project as an operator would."""

from __future__ import annotations

import http.cookiejar
import io
import logging
import os
import re
import runpy
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.urls import path
from rest_framework.test import APIRequestFactory

from memory.throttling import AnonRateThrottle
from tests.instance import database_url
from tests.servers import free_port

ROOT = Path(__file__).resolve().parent.parent
SETTINGS_FILE = ROOT / "memoryproj" / "settings.py"
KEY = "settings-test-secret-key-" + "k" * 40


def boom(request: HttpRequest, **kwargs: str) -> HttpResponse:
    raise RuntimeError("boom in a view")


def unavailable(request: HttpRequest, owner: str) -> HttpResponse:
    return HttpResponse("down", status=503)


def remember(request: HttpRequest) -> HttpResponse:
    request.session["seen"] = True
    return HttpResponse("ok")


# NOTE: the URLs of the logging tests (pytest.mark.urls names this module), and the demo's
# handler of errors outside views.
handler500 = "memoryproj.middleware.server_error"
urlpatterns = [
    path("boom/", boom),
    path("remember/", remember),
    path("api/memory/users/<str:owner>/boom/", boom),
    path("api/memory/users/<str:owner>/down/", unavailable),
]


def _env(**extra: str) -> dict[str, str]:
    """The environment of a fresh start of the demo project: none of the suite's Django vars."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "PYTEST")) and k not in {"MEMORY_TEST_KEY_PREFIX"}
    }
    return {**env, "DJANGO_SETTINGS_MODULE": "memoryproj.settings", **extra}


def _manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _settings(monkeypatch: pytest.MonkeyPatch, **env: str) -> dict[str, Any]:
    """The settings module's globals as it reads this environment."""
    for name in list(os.environ):
        if name.startswith("DJANGO_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(SETTINGS_FILE))


def test_debug_is_off_and_hosts_are_local_by_default(monkeypatch):
    settings = _settings(monkeypatch, DJANGO_SECRET_KEY=KEY)
    assert settings["DEBUG"] is False
    assert settings["ALLOWED_HOSTS"] == ["127.0.0.1", "localhost"]
    assert settings["SECRET_KEY"] == KEY
    assert settings["REST_FRAMEWORK"]["NUM_PROXIES"] == 0
    assert settings["SECURE_SSL_REDIRECT"] is False
    assert "SECURE_PROXY_SSL_HEADER" not in settings


def test_without_a_key_and_debug_the_settings_refuse(monkeypatch):
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match="DJANGO_SECRET_KEY is not set"):
        _settings(monkeypatch)


def test_debug_without_a_key_makes_one_once_and_keeps_it_in_a_file(monkeypatch, tmp_path):
    """Random, never built into the source, and the same for every process that reads the
    same file (gunicorn's workers, runserver's reloads), so that logins stick (issue 23)."""
    kept = tmp_path / "keys" / "dev-secret-key"
    first = _settings(monkeypatch, DJANGO_DEBUG="1", DJANGO_DEV_SECRET_KEY_FILE=str(kept))
    second = _settings(monkeypatch, DJANGO_DEBUG="1", DJANGO_DEV_SECRET_KEY_FILE=str(kept))
    assert first["DEBUG"] is True
    assert first["SECRET_KEY"] == second["SECRET_KEY"] == kept.read_text().strip()
    assert len(first["SECRET_KEY"]) > 50
    assert kept.stat().st_mode & 0o777 == 0o600
    assert first["SECRET_KEY"] not in SETTINGS_FILE.read_text()
    other = _settings(
        monkeypatch, DJANGO_DEBUG="1", DJANGO_DEV_SECRET_KEY_FILE=str(tmp_path / "another")
    )
    assert other["SECRET_KEY"] != first["SECRET_KEY"]


def test_the_dev_key_file_is_out_of_git_and_the_sdist():
    assert ".tmp/" in (ROOT / ".gitignore").read_text().splitlines()
    assert "graft .tmp" not in (ROOT / "MANIFEST.in").read_text()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_with_debug_and_no_key_a_login_sticks_on_every_gunicorn_worker(tmp_path, settings):
    """Each worker used to invent a key of its own: the session made by one worker's login
    failed the next worker's check, and the visitor was anonymous again."""
    from django.contrib.auth.models import User

    from tests.instance import environment

    # NOTE: the demo's hasher, not the suite's fast one, which the demo would not know.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    User.objects.create_user("wang", password="pw-for-the-test")
    port = free_port()
    env = {
        **_env(DJANGO_DEBUG="1", DJANGO_DEV_SECRET_KEY_FILE=str(tmp_path / "key")),
        "DATABASE_URL": environment()["DATABASE_URL"],
    }
    env.pop("REDIS_URL", None)
    log_path = tmp_path / "gunicorn.log"
    command = [
        sys.executable, "-m", "gunicorn", "memoryproj.wsgi:application", "--workers", "4",
        "--log-level", "warning", "--bind", f"127.0.0.1:{port}",
    ]  # fmt: skip
    with log_path.open("wb") as log:
        server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log)
    try:
        base = f"http://127.0.0.1:{port}"
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        deadline = time.monotonic() + 30
        while True:
            try:
                page = opener.open(f"{base}/accounts/login/", timeout=10).read().decode()
                break
            except OSError:
                assert server.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, "gunicorn did not start"
                time.sleep(0.2)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)[1]
        form = urllib.parse.urlencode(
            {"username": "wang", "password": "pw-for-the-test", "csrfmiddlewaretoken": token}
        ).encode()
        opener.open(f"{base}/accounts/login/", data=form, timeout=10).read()
        # NOTE: a new connection per request: gunicorn's workers take them in turn, at random.
        signed_in = [
            'id="username">wang<' in opener.open(f"{base}/chat/", timeout=10).read().decode()
            for _ in range(16)
        ]
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert all(signed_in), (signed_in, log_path.read_text()[-2000:])


def test_environment_chooses_hosts_proxies_and_https(monkeypatch):
    settings = _settings(
        monkeypatch,
        DJANGO_SECRET_KEY=KEY,
        DJANGO_ALLOWED_HOSTS="chat.example.com, api.example.com",
        DJANGO_NUM_PROXIES="2",
        DJANGO_SECURE_SSL_REDIRECT="1",
        DJANGO_SECURE_COOKIES="1",
        DJANGO_SECURE_HSTS_SECONDS="600",
        DJANGO_SECURE_PROXY_SSL_HEADER="1",
    )
    assert settings["ALLOWED_HOSTS"] == ["chat.example.com", "api.example.com"]
    assert settings["REST_FRAMEWORK"]["NUM_PROXIES"] == 2
    assert settings["SECURE_SSL_REDIRECT"] is True
    assert settings["SESSION_COOKIE_SECURE"] is settings["CSRF_COOKIE_SECURE"] is True
    assert settings["SECURE_HSTS_SECONDS"] == 600
    assert settings["SECURE_PROXY_SSL_HEADER"] == ("HTTP_X_FORWARDED_PROTO", "https")


def test_database_pooler_transaction_turns_off_what_outlives_a_transaction(monkeypatch):
    plain = _settings(monkeypatch, DJANGO_SECRET_KEY=KEY)
    assert plain["MEMORY"]["POOLER"] is None
    assert not plain["DATABASES"]["default"].get("DISABLE_SERVER_SIDE_CURSORS")
    pooled = _settings(monkeypatch, DJANGO_SECRET_KEY=KEY, DATABASE_POOLER="transaction")
    assert pooled["MEMORY"]["POOLER"] == "transaction"
    assert pooled["DATABASES"]["default"]["DISABLE_SERVER_SIDE_CURSORS"] is True


PG = "postgres://postgres@127.0.0.1:5432/memory"


def test_under_asgi_the_demo_pools_its_connections_and_under_wsgi_keeps_one_a_thread(
    monkeypatch,
):
    wsgi = _settings(monkeypatch, DJANGO_SECRET_KEY=KEY, DATABASE_URL=PG)
    assert "ASGI_APPLICATION" not in wsgi
    assert wsgi["DATABASES"]["default"]["CONN_MAX_AGE"] == 60
    assert "pool" not in wsgi["DATABASES"]["default"].get("OPTIONS", {})
    monkeypatch.setenv("MEMORYPROJ_ASGI", "1")
    asgi = _settings(monkeypatch, DJANGO_SECRET_KEY=KEY, DATABASE_URL=PG)
    assert asgi["ASGI_APPLICATION"] == "memoryproj.asgi.application"
    assert asgi["DATABASES"]["default"]["CONN_MAX_AGE"] == 0
    assert asgi["DATABASES"]["default"]["OPTIONS"]["pool"] == {
        "min_size": 2,
        "max_size": 8,
        "timeout": 5.0,
    }
    # NOTE: PgBouncer pools itself: one or the other (docs/scaling.md).
    bouncer = _settings(
        monkeypatch, DJANGO_SECRET_KEY=KEY, DATABASE_URL=PG, DATABASE_POOLER="transaction"
    )
    assert bouncer["DATABASES"]["default"]["CONN_MAX_AGE"] == 0
    assert "pool" not in bouncer["DATABASES"]["default"].get("OPTIONS", {})


def test_a_pool_and_kept_connections_together_are_refused(monkeypatch):
    from django.core.exceptions import ImproperlyConfigured

    monkeypatch.setenv("MEMORYPROJ_ASGI", "1")
    with pytest.raises(ImproperlyConfigured, match="DATABASE_POOL_SIZE=0"):
        _settings(monkeypatch, DJANGO_SECRET_KEY=KEY, DATABASE_URL=PG, DATABASE_CONN_MAX_AGE="60")
    kept = _settings(
        monkeypatch,
        DJANGO_SECRET_KEY=KEY,
        DATABASE_URL=PG,
        DATABASE_CONN_MAX_AGE="60",
        DATABASE_POOL_SIZE="0",
    )
    assert kept["DATABASES"]["default"]["CONN_MAX_AGE"] == 60


def test_check_is_clean_under_either_server():
    for env in ({}, {"MEMORYPROJ_ASGI": "1"}):
        result = _manage(_env(DJANGO_SECRET_KEY=KEY, **env), "check")
        assert result.returncode == 0, result.stderr
        assert "memory.W011" not in result.stdout + result.stderr
    kept = _manage(
        _env(
            DJANGO_SECRET_KEY=KEY,
            MEMORYPROJ_ASGI="1",
            DATABASE_POOL_SIZE="0",
            DATABASE_CONN_MAX_AGE="60",
        ),
        "check",
    )
    assert "memory.W011" in kept.stdout + kept.stderr


def test_the_project_refuses_to_start_without_a_key():
    result = _manage(_env(), "check")
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    error = "django.core.exceptions.ImproperlyConfigured: DJANGO_SECRET_KEY is not set"
    assert last.startswith(f"{error} and DEBUG is off")
    assert _manage(_env(DJANGO_DEBUG="1"), "check").returncode == 0


def _production_block() -> str:
    page = (ROOT / "docs" / "production.md").read_text()
    section = page.split("## The environment", 1)[1]
    return re.search(r"```sh\n(.*?)```", section, re.DOTALL).group(1)


@pytest.mark.slow
def test_check_deploy_is_clean_with_the_documented_production_environment():
    block = _production_block()
    assert "export DJANGO_SECRET_KEY=" in block and "DJANGO_DEBUG" not in block
    # NOTE: the page's block as it is, in bash, with this interpreter as its `python`.
    python = sys.executable
    script = (
        f'python() {{ {python} "$@"; }}\n{block}\n'
        f"exec {python} manage.py check --deploy --fail-level WARNING\n"
    )
    result = subprocess.run(
        ["bash", "-c", script],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "System check identified no issues (0 silenced)."
    assert "WARNING" not in result.stderr and "?: (" not in result.stderr


def test_check_deploy_without_that_environment_warns():
    result = _manage(_env(DJANGO_SECRET_KEY="x" * 60), "check", "--deploy")
    warned = set(re.findall(r"\(security\.(W\d+)\)", result.stdout + result.stderr))
    assert {"W004", "W008", "W012", "W016"} <= warned


@pytest.mark.parametrize("url", ["/api/docs/", "/api/redoc/"])
def test_the_api_docs_load_nothing_from_another_host(client: Client, url: str):
    response = client.get(url)
    assert response.status_code == 200
    html = response.content.decode()
    scripts = re.findall(r'<script src="([^"]+)"', html)
    assert scripts and all(src.startswith("/") and not src.startswith("//") for src in scripts)
    # NOTE: every address in the page, attribute or script, is on this host.
    assert re.findall(r"(?:https?:)?//[A-Za-z0-9.-]+\.[A-Za-z]{2,}", html) == []
    assert "cdn" not in html.lower()
    if url == "/api/docs/":
        assert "/static/drf_spectacular_sidecar/" in html
        # NOTE: Swagger UI's default validator badge would send the schema's address out.
        assert '"validatorUrl": null' in html


def test_redoc_s_bundle_asks_no_other_host_for_its_logo(client: Client):
    """Redoc draws an image from its CDN in its sidebar, whatever its options: the demo serves
    the sidecar's bundle with an empty image of the page's own in its place."""
    html = client.get("/api/redoc/").content.decode()
    (src,) = re.findall(r'<script src="([^"]+)"', html)
    response = client.get(src)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/javascript")
    bundle = response.content.decode()
    assert "Redoc" in bundle and "API docs by Redocly" in bundle
    assert "cdn.redoc.ly" not in bundle
    # NOTE: nor its source map, which a browser's developer tools would ask for.
    assert "sourceMappingURL" not in bundle.rstrip().rsplit("\n", 1)[-1]
    assert 'src:"data:image/gif;base64,' in bundle


@pytest.mark.urls("tests.test_demo_settings")
def test_a_500_is_logged_with_its_traceback():
    handler = logging.getLogger("django.request").handlers[0]
    stream = io.StringIO()
    previous = handler.setStream(stream)
    try:
        response = Client(raise_request_exception=False).get("/boom/")
    finally:
        handler.setStream(previous)
    assert response.status_code == 500
    logged = stream.getvalue()
    assert "ERROR django.request: Internal Server Error: /boom/" in logged
    assert "Traceback (most recent call last):" in logged
    assert "RuntimeError: boom in a view" in logged


@pytest.mark.urls("tests.test_demo_settings")
def test_a_5xx_log_line_names_no_owner_id_and_no_query_string():
    """Search text and owner ids stay out of ``django.request``'s lines (issue 23)."""
    handler = logging.getLogger("django.request").handlers[0]
    stream = io.StringIO()
    previous = handler.setStream(stream)
    try:
        client = Client(raise_request_exception=False)
        assert client.get("/api/memory/users/wang-secret/boom/?q=my+diagnosis").status_code == 500
        assert client.get("/api/memory/users/wang-secret/down/?q=my+diagnosis").status_code == 503
    finally:
        handler.setStream(previous)
    logged = stream.getvalue()
    assert "Internal Server Error: /api/memory/users/{user_id}/boom/" in logged
    assert "Service Unavailable: /api/memory/users/{user_id}/down/" in logged
    assert "RuntimeError: boom in a view" in logged
    assert "wang-secret" not in logged and "diagnosis" not in logged


ACCESS_SERVERS = {
    "gunicorn": ["-m", "gunicorn", "memoryproj.wsgi:application", "--workers", "1",
                 "--bind", "127.0.0.1:{port}", "--access-logfile", "-"],
    "gunicorn-conf": ["-m", "gunicorn", "-c", "python:memoryproj.gunicorn_conf",
                      "memoryproj.wsgi:application", "--bind", "127.0.0.1:{port}",
                      "--access-logfile", "-"],
    "uvicorn": ["-m", "uvicorn", "memoryproj.asgi:application", "--host", "127.0.0.1",
                "--port", "{port}"],
    "runserver": ["manage.py", "runserver", "--noreload", "127.0.0.1:{port}"],
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.django_db
@pytest.mark.parametrize("server_name", sorted(ACCESS_SERVERS))
def test_access_logs_name_no_owner_id_and_no_query_string(tmp_path, server_name):
    """The demo's access logs, as each server writes them by default (uvicorn and runserver
    always, gunicorn with an access log turned on), keep the path with ``{user_id}`` for the
    owner id, and no query string or referrer's (issue 23)."""
    # NOTE: nothing of this reads or writes the database; runserver only looks for migrations.
    env = _env(DJANGO_SECRET_KEY=KEY, DATABASE_URL=database_url())
    env.pop("REDIS_URL", None)
    port = free_port()
    log_path = tmp_path / "server.log"
    command = [sys.executable, *(a.format(port=port) for a in ACCESS_SERVERS[server_name])]
    with log_path.open("wb") as log:
        server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                request = urllib.request.Request(
                    f"{base}/api/memory/users/wang-secret/search/?q=my+diagnosis",
                    headers={"Referer": f"{base}/chat/?user_id=wang-secret&q=my+diagnosis"},
                )
                urllib.request.urlopen(request, timeout=10)
            except urllib.error.HTTPError as e:
                assert e.code in (401, 403)
                break
            except OSError:
                assert server.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, f"{server_name} did not start"
                time.sleep(0.2)
        time.sleep(0.5)
    finally:
        server.terminate()
        server.wait(timeout=10)
    logged = log_path.read_text()
    assert "/api/memory/users/{user_id}/search/" in logged, logged
    assert "wang-secret" not in logged and "diagnosis" not in logged, logged


@pytest.mark.urls("tests.test_demo_settings")
def test_a_database_lost_outside_any_view_is_a_503_and_other_errors_a_500(dead_database):
    """The session saved after a view that needed no database: the demo's handler500 answers
    a 503 for a lost database; any other error stays Django's 500 page."""
    client = Client(raise_request_exception=False)
    response = client.get("/remember/")
    assert response.status_code == 503
    assert b"The memory database is unavailable" in response.content
    assert client.get("/boom/").status_code == 500


def test_the_anonymous_throttle_ignores_x_forwarded_for(monkeypatch, fresh_window):
    monkeypatch.setitem(AnonRateThrottle.THROTTLE_RATES, "anon", "2/minute")
    factory = APIRequestFactory()
    request = factory.get("/", HTTP_X_FORWARDED_FOR="203.0.113.9", REMOTE_ADDR="198.51.100.7")
    assert AnonRateThrottle().get_ident(request) == "198.51.100.7"
    # NOTE: through the schema endpoint, open to anonymous callers and throttled: a new
    # forged address per request does not earn a new allowance.
    client = Client()
    statuses = [
        client.get("/api/schema/", HTTP_X_FORWARDED_FOR=f"203.0.113.{i}").status_code
        for i in range(3)
    ]
    assert statuses == [200, 200, 429]


def _get(url: str) -> tuple[int, str, bytes]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, response.headers["Content-Type"], response.read()


SERVERS = {
    "gunicorn": ["-m", "gunicorn", "memoryproj.wsgi:application", "--workers", "1",
                 "--log-level", "warning", "--bind", "127.0.0.1:{port}"],
    "uvicorn": ["-m", "uvicorn", "memoryproj.asgi:application", "--log-level", "warning",
                "--host", "127.0.0.1", "--port", "{port}"],
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("server_name", sorted(SERVERS))
def test_static_files_are_served_with_debug_off(tmp_path, server_name):
    env = _env(
        DJANGO_SECRET_KEY=KEY,
        DJANGO_STATIC_ROOT=str(tmp_path / "static"),
    )
    env.pop("REDIS_URL", None)
    collected = _manage(env, "collectstatic", "--noinput", "-v", "0")
    assert collected.returncode == 0, collected.stderr
    port = free_port()
    log_path = tmp_path / "server.log"
    log = log_path.open("wb")
    command = [sys.executable, *(a.format(port=port) for a in SERVERS[server_name])]
    server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                status, kind, css = _get(f"{base}/static/admin/css/base.css")
                break
            except OSError:
                assert server.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, f"{server_name} did not start"
                time.sleep(0.2)
        assert (status, kind.split(";")[0]) == (200, "text/css")
        assert b"body" in css
        status, kind, _ = _get(
            f"{base}/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js"
        )
        assert (status, kind.split(";")[0]) == (200, "text/javascript")
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert "Warning" not in log_path.read_text()


@pytest.mark.browser
@pytest.mark.parametrize("url", ["/api/docs/", "/api/redoc/"])
def test_the_api_docs_render_in_a_browser_from_this_host_alone(
    live_server, sync_playwright, chromium_options, artifacts, url
):
    requested: list[str] = []
    blocked: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(**chromium_options)
        try:
            page = browser.new_page()
            page.set_default_timeout(15_000)
            page.on("request", lambda request: requested.append(request.url))
            page.on(
                "requestfailed",
                lambda r: blocked.append(r.url) if "csp" in (r.failure or "").lower() else None,
            )
            page.goto(f"{live_server.url}{url}")
            # NOTE: the schema's operations drawn by the JavaScript bundle: it loaded and ran.
            page.get_by_text("/api/memory/users/{user_id}/turns/").first.wait_for()
            name = url.strip("/").replace("/", "_")
            page.screenshot(path=str(artifacts / f"{name}.png"))
        finally:
            browser.close()
    assert requested
    # NOTE: blob: URLs (Redoc's web worker) are made by the page itself, on its own origin.
    # Redoc's logo is asked for, and the page's own policy stops it in the browser.
    own = (live_server.url, f"blob:{live_server.url}", "data:")
    assert [u for u in requested if not u.startswith(own)] == blocked
