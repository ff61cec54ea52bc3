"""`memory` as a package others install: build the wheel, install it with its dependencies from
PyPI into a fresh virtual environment, and add it to a site made by `django-admin startproject`,
as the README's "Install into an existing site in five steps" says; then call the API.

Nothing of this repository is importable in that environment: every command there runs with
its own interpreter, a temp dir as working directory and no PYTHONPATH. Deselect with
``-m "not package"``; it needs PyPI (or the index pip is configured with).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import dj_database_url
import psycopg
import pytest
import redis

from tests.servers import free_port

ROOT = Path(__file__).resolve().parent.parent
INTRO = "My name is Wang Jianguo, I like basketball"

pytestmark = pytest.mark.package


def run(args: list[str | Path], *, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run a command to completion; its stdout, or a failure that shows its stderr."""
    result = subprocess.run(
        [str(arg) for arg in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"{' '.join(map(str, args))}:\n{result.stderr[-3000:]}"
    return result.stdout


def source_tree(dest: Path) -> Path:
    """A copy of the files a checkout has (tracked, or new and not ignored), so that the build
    writes its ``build/`` and ``*.egg-info`` there and not into the working tree."""
    listed = run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT
    ).split("\0")
    for name in filter(None, listed):
        path = ROOT / name
        if path.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).write_bytes(path.read_bytes())
    return dest


def request(base: str, path: str, *, token: str | None = None, body: Any = None) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Token {token}"
    data = json.dumps(body).encode() if body is not None else None
    try:
        with urllib.request.urlopen(
            urllib.request.Request(base + path, data=data, headers=headers), timeout=10
        ) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


@pytest.fixture
def database() -> Iterator[dict[str, Any]]:
    """A fresh, empty Postgres database on the suite's server, dropped afterwards."""
    server_url = os.environ["DATABASE_URL"]
    name = f"memory_pkg_{uuid.uuid4().hex[:10]}"
    admin_url = urlsplit(server_url)._replace(path="/postgres").geturl()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield {**dj_database_url.parse(server_url), "NAME": name}
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def key_prefix() -> Iterator[str]:
    """A Redis key prefix of the site's own; its keys are deleted afterwards."""
    prefix = f"memory-pkg-{uuid.uuid4().hex[:10]}"
    yield prefix
    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


SITE_SETTINGS = """

# --- The memory app, as README.md "Install into an existing site in five steps" says. ---
INSTALLED_APPS += ["rest_framework", "rest_framework.authtoken", "memory"]
REST_FRAMEWORK = {{
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
}}
CACHES = {{
    "default": {{"BACKEND": "django.core.cache.backends.dummy.DummyCache"}},
    "memory": {{
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": {redis_url!r},
        "OPTIONS": {{
            "SOCKET_CONNECT_TIMEOUT": 0.25,
            "SOCKET_TIMEOUT": 0.25,
            "SERIALIZER": "memory.codec.OrjsonSerializer",
        }},
    }},
}}
MEMORY = {{"CACHE_TTL": 3600, "KEY_PREFIX": {key_prefix!r}}}
DATABASES = {{"default": {database!r}}}
"""


def test_wheel_installs_into_a_new_site_and_serves_the_api(
    tmp_path: Path, database: dict[str, Any], key_prefix: str
) -> None:
    # 1. Build the wheel from a copy of the sources, with pip's isolated build (setuptools
    #    from the index, as any user's build gets it).
    source = source_tree(tmp_path / "source")
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, source], cwd=tmp_path)
    (wheel,) = dist.glob("django_memory-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    app_files = {
        path.relative_to(source).as_posix()
        for path in (source / "memory").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert {"memory/py.typed", "memory/migrations/0001_initial.py"} <= app_files
    assert any(name.startswith("memory/templates/") for name in app_files)
    assert {name for name in names if not name.startswith("django_memory-")} == app_files

    # 2. A fresh environment with the wheel and its dependencies from the index.
    # NOTE: created without pip (ensurepip alone takes many seconds) and filled by this
    # suite's pip through ``--python``; nothing of the repository is installed there.
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=tmp_path)
    pip_env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"PYTHONPATH", "VIRTUAL_ENV", "DJANGO_SETTINGS_MODULE"}
    }
    install = [sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install"]
    # NOTE: psycopg's binary build is the site's choice of driver; the app asks for psycopg.
    run([*install, "--no-compile", "-q", wheel, "psycopg[binary]"], cwd=tmp_path, env=pip_env)

    # 3. A Django site that has never seen this repository.
    site = tmp_path / "site"
    site.mkdir()
    env = {
        "PATH": f"{venv / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "DJANGO_SUPERUSER_PASSWORD": "svc-pass-123",
    }
    python = venv / "bin" / "python"
    run([venv / "bin" / "django-admin", "startproject", "hostsite", site], cwd=tmp_path, env=env)
    settings_py = site / "hostsite" / "settings.py"
    settings_py.write_text(
        settings_py.read_text()
        + SITE_SETTINGS.format(
            redis_url=os.environ["REDIS_URL"], key_prefix=key_prefix, database=database
        )
    )
    urls_py = site / "hostsite" / "urls.py"
    urls = urls_py.read_text()
    assert "from django.urls import path" in urls and "urlpatterns = [" in urls
    mount = 'urlpatterns = [\n    path("api/memory/", include("memory.urls")),'
    urls_py.write_text(
        urls.replace(
            "from django.urls import path", "from django.urls import include, path"
        ).replace("urlpatterns = [", mount)
    )

    def manage(*args: str) -> str:
        return run([python, "manage.py", *args], cwd=site, env=env)

    manage("migrate", "--noinput", "-v", "0")
    assert "no issues" in manage("check")
    manage("makemigrations", "--check", "--dry-run", "memory")
    # NOTE: the app's code and its templates come from the venv, not from this repository.
    where = manage(
        "shell",
        "-c",
        "import memory; from django.template.loader import get_template;"
        "print(memory.__file__);"
        "print(get_template('admin/memory/owner/forget_confirmation.html').origin.name)",
    ).splitlines()[-2:]
    assert all(Path(path).is_relative_to(venv / "lib") for path in where), where
    manage("createsuperuser", "--noinput", "--username", "svc", "--email", "svc@example.com")
    token = manage("drf_create_token", "svc").split()[2]

    # 4. Its development server, called as a chat backend would.
    port = free_port()
    log = (tmp_path / "runserver.log").open("wb")
    server = subprocess.Popen(
        [python, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"],
        cwd=site,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}/api/memory"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                health = request(base, "/health/")
                break
            except OSError:
                assert server.poll() is None, (tmp_path / "runserver.log").read_text()
                assert time.monotonic() < deadline, "the site's server did not start"
                time.sleep(0.2)
        assert (health[0], health[1]["database"], health[1]["cache"]) == (200, "ok", "ok")
        assert request(base, "/users/wang/context/")[0] == 401

        status, turn = request(
            base,
            "/users/wang/turns/",
            token=token,
            body={"session_id": "laptop", "role": "user", "content": INTRO},
        )
        assert (status, turn["seq"], turn["content"]) == (201, 1, INTRO)
        status, context = request(base, "/users/wang/context/", token=token)
        assert status == 200
        assert context["facts"] == {"name": "Wang Jianguo", "likes": ["basketball"]}
        assert [t["content"] for t in context["turns"]] == [INTRO]
        status, again = request(base, "/users/wang/context/", token=token)
        assert (status, again["source"]) == (200, "cache")
        assert again["facts"] == context["facts"]
    finally:
        server.terminate()
        server.wait(timeout=10)
        log.close()
