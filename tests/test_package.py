"""`memory` as a package others install: build the sdist and the wheel as `make dist` does
(`python -m build`, an isolated build with setuptools from the index), install the wheel with
its dependencies into a fresh virtual environment, and add it to a site made by `django-admin
startproject`, as the README's "Install into an existing site" says; then call the API. The
sdist holds the whole project: unpacked, with no git, it runs part of the test suite.

Nothing of this repository is importable in the new environment: every command there runs
with its own interpreter, a temp dir as working directory and no PYTHONPATH. No git either:
this file runs from an unpacked sdist as well as from a checkout. Deselect with
``-m "not package"``; it needs PyPI (or the index pip is configured with).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import dj_database_url
import psycopg
import pytest
import redis

import memory
from tests import newcomer
from tests.servers import free_port

INTRO = "My name is Wang Jianguo, I like basketball"

pytestmark = pytest.mark.package
# What the langchain extra brought: its distribution, and the adapter's module imports.
IMPORT_EXTRA = (
    "import importlib.metadata, importlib.util;"
    "print(importlib.metadata.distribution('langchain-core').metadata['Name']);"
    "assert importlib.util.find_spec('langchain_core.chat_history')"
)


def run(args: list[str | Path], *, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run a command to completion; its stdout, or a failure that shows its stderr."""
    result = subprocess.run(
        [str(arg) for arg in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, (
        f"{' '.join(map(str, args))}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    return result.stdout


@dataclass(frozen=True)
class Build:
    source: Path
    sdist: Path
    wheel: Path


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Build:
    """The sdist and the wheel that ``make dist`` builds (the wheel from the sdist) in a copy
    of the project, and checks with twine."""
    source = newcomer.project_copy(tmp_path_factory.mktemp("build") / "source")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"PYTHONPATH", "VIRTUAL_ENV", "DJANGO_SETTINGS_MODULE", "MAKEFLAGS"}
    }
    output = run(["make", "dist"], cwd=source, env=env)
    assert re.findall(r"Checking dist/(\S+): \S*PASSED", output) == [
        f"django_memory-{memory.__version__}-py3-none-any.whl",
        f"django_memory-{memory.__version__}.tar.gz",
    ], output
    dist = source / "dist"
    (sdist,) = dist.glob("django_memory-*.tar.gz")
    (wheel,) = dist.glob("django_memory-*.whl")
    return Build(source=source, sdist=sdist, wheel=wheel)


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


def site_settings(*, database: dict[str, Any], redis_url: str, key_prefix: str) -> str:
    """README step 2's settings block as it is, but for this run's database, Redis and key
    prefix, put in its place by replacing the README's own values."""
    (block,) = newcomer.section_blocks("Install into an existing site", "python")
    replacements = {
        '"NAME": "mysite"': f'"NAME": {database["NAME"]!r}',
        '"USER": "postgres"': f'"USER": {database["USER"]!r}',
        '"PASSWORD": ""': f'"PASSWORD": {database["PASSWORD"] or ""!r}',
        '"HOST": "127.0.0.1"': f'"HOST": {database["HOST"]!r}',
        '"PORT": "5432"': f'"PORT": {str(database["PORT"])!r}',
        '"redis://127.0.0.1:6379/0"': repr(redis_url),
        '"KEY_PREFIX": "memory"': f'"KEY_PREFIX": {key_prefix!r}',
        '"KEY_PREFIX": "mysite"': f'"KEY_PREFIX": {key_prefix + "-site"!r}',
    }
    for old, new in replacements.items():
        assert old in block, f"README step 2 no longer says {old}"
        block = block.replace(old, new)
    return "\n\n# --- README.md, step 2 ---\n" + block


def readme_commands(step: str) -> list[list[str]]:
    """The ``python manage.py ...`` commands of README step ``step``'s shell block, split as
    the shell would."""
    for code in newcomer.section_blocks("Install into an existing site", "sh"):
        commands = [shlex.split(line) for line in code.splitlines() if line.strip()]
        if any(command[:3] == ["python", "manage.py", step] for command in commands):
            return commands
    raise AssertionError(f"README.md's install steps have no `python manage.py {step}`")


def test_wheel_installs_into_a_new_site_and_serves_the_api(
    tmp_path: Path, build: Build, database: dict[str, Any], key_prefix: str
) -> None:
    # 1. The wheel holds the app alone, every file of it, and its version is the package's.
    source, wheel = build.source, build.wheel
    assert wheel.name == f"django_memory-{memory.__version__}-py3-none-any.whl"
    names = set(zipfile.ZipFile(wheel).namelist())
    app_files = {
        path.relative_to(source).as_posix()
        for path in (source / "memory").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert {
        "memory/py.typed",
        "memory/migrations/0001_squashed_0_1_0.py",
        "memory/postgres/sql/turn_append.sql",
    } <= app_files
    assert any(name.startswith("memory/templates/") for name in app_files)
    assert {name for name in names if not name.startswith("django_memory-")} == app_files
    assert f"django_memory-{memory.__version__}.dist-info/licenses/LICENSE" in names

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
    }
    python = venv / "bin" / "python"
    run([venv / "bin" / "django-admin", "startproject", "hostsite", site], cwd=tmp_path, env=env)
    settings_py = site / "hostsite" / "settings.py"
    settings_py.write_text(
        settings_py.read_text()
        + site_settings(database=database, redis_url=os.environ["REDIS_URL"], key_prefix=key_prefix)
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

    # NOTE: docs/llm.md's install line of an extra as written, where `make dist` put the wheel,
    # with `pip` this suite's pip aimed at the new environment.
    (extra_line,) = [
        line.split("#")[0].strip()
        for line in (source / "docs" / "llm.md").read_text().splitlines()
        if line.startswith("pip install") and "[langchain]" in line
    ]
    assert extra_line == 'pip install "$(echo dist/django_memory-*.whl)[langchain]"'
    pip = f'pip() {{ {shlex.join(map(str, install))} --no-compile -q "$@"; }}'
    run(["bash", "-c", f"set -euo pipefail\n{pip}\n{extra_line}"], cwd=source, env=pip_env)
    assert "langchain-core" in run([python, "-c", IMPORT_EXTRA], cwd=tmp_path, env=env)

    # NOTE: README step 4's commands as written, with the venv's python as `python`.
    migrate, check = readme_commands("migrate")
    assert migrate == ["python", "manage.py", "migrate"]
    manage(*migrate[2:], "--noinput", "-v", "0")
    assert "no issues" in manage(*check[2:])
    manage("makemigrations", "--check", "--dry-run", "memory")
    # NOTE: the app's code and its templates come from the venv, not from this repository.
    where = manage(
        "shell",
        "-c",
        "import memory; from django.template.loader import get_template;"
        "print(memory.__version__); print(memory.__file__);"
        "print(get_template('admin/memory/owner/forget_confirmation.html').origin.name)",
    ).splitlines()[-3:]
    assert where[0] == memory.__version__
    assert all(Path(path).is_relative_to(venv / "lib") for path in where[1:]), where
    # NOTE: the service user of README step 5: no superuser, only the permission.
    grant, create_token = readme_commands("shell")
    manage(*grant[2:])
    token = manage(*create_token[2:]).split()[2]

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


def _sdist_names(sdist: Path) -> set[str]:
    with tarfile.open(sdist) as archive:
        top = sdist.name.removesuffix(".tar.gz")
        return {
            name.removeprefix(f"{top}/")
            for name in archive.getnames()
            if name.startswith(f"{top}/") and archive.getmember(name).isfile()
        }


@pytest.mark.slow
def test_sdist_holds_the_project_and_runs_its_tests_unpacked(tmp_path: Path, build: Build) -> None:
    names = _sdist_names(build.sdist)
    project = newcomer.project_files(build.source)
    # NOTE: everything of the project but the build's own output, tests and docs included.
    assert project - names == set()
    assert {"tests/test_package.py", "tests/conftest.py", "mkdocs.yml", "LICENSE"} <= names
    assert {"CHANGELOG.md", "SECURITY.md", "CONTRIBUTING.md", "Makefile", "manage.py"} <= names
    assert not any(part in newcomer.LEFT_BEHIND for name in names for part in name.split("/"))

    with tarfile.open(build.sdist) as archive:
        archive.extractall(tmp_path, filter="data")
    unpacked = tmp_path / build.sdist.name.removesuffix(".tar.gz")
    assert not (unpacked / ".git").exists()
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in {"PYTHONPATH", "DJANGO_SETTINGS_MODULE", "MEMORY_TEST_DB", "MEMORY_TEST_KEY_PREFIX"}
    }
    where = run(
        [sys.executable, "-c", "import memory; print(memory.__version__, memory.__file__)"],
        cwd=unpacked,
        env=env,
    ).split()
    assert where[0] == memory.__version__
    assert Path(where[1]).is_relative_to(unpacked)
    output = run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_conf.py"],
        cwd=unpacked,
        env=env,
    )
    assert " passed" in output and "failed" not in output and "error" not in output
