"""The README's commands, pasted as written into a fresh copy of the project, as a newcomer
does: ``make run`` in one terminal, then the README's conversation in another, against that
demo, and its Python block pasted into the demo's ``manage.py shell`` (with the settings the
demo wrote to ``.tmp/demo.env``); then the Quickstart's walkthrough ("A conversation over
HTTP", "The admin and the commands"), every shell block in one shell; then every Python block
of docs/llm.md, docs/tools.md, docs/agents.md and docs/python-api.md, in that order, as those
pages say to run them, ``manage.py shell < example.py`` in that terminal (the tools page's
model clients scripted stand-ins, tests/model_apis.py); then Ctrl-C.
``make run-asgi`` is run the same way, and must start what ``make run`` starts.

What is changed, and only that: the demo's address (``127.0.0.1:8000`` becomes a free port,
given to ``make run`` as ``ADDR=``), and the copy's ``.venv`` is this suite's environment seen
through a ``.pth`` file, so that nothing is downloaded. The environment has no
``DATABASE_URL`` or ``REDIS_URL``: the demo runs on SQLite in the copy, with the throwaway Redis
that ``make run`` starts. ``make superuser`` gets ``DJANGO_SUPERUSER_PASSWORD`` instead of a
terminal to ask on. Other blocks are run elsewhere: the install steps by tests/test_package.py,
the production environment by tests/test_demo_settings.py, ``make test`` and the development
targets by CI itself.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import model_apis, newcomer
from tests.servers import free_port
from tests.test_docs_agents import AGENTS
from tests.test_docs_llm import LLM
from tests.test_docs_python_api import PAGE as PYTHON_API
from tests.test_docs_tools import PAGE as TOOLS

pytestmark = pytest.mark.slow

DEMO_ADDR = "127.0.0.1:8000"
QUICKSTART = newcomer.ROOT / "docs" / "quickstart.md"
SECTIONS = ("A conversation over HTTP", "The admin and the commands")
KEEP_ENV = ("HOME", "LANG", "LC_ALL", "TMPDIR", "PIP_CONFIG_FILE")


def newcomer_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A shell's environment on a machine with nothing configured for this project."""
    env = {k: os.environ[k] for k in KEEP_ENV if k in os.environ}
    env.update(PATH=os.environ.get("PATH", "/usr/bin:/bin"), LANG="C.UTF-8", **extra)
    env.setdefault("HOME", str(tmp_path))
    return env


def clone(tmp_path: Path) -> Path:
    return newcomer.clone(tmp_path / "memory")


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def health(base: str) -> dict[str, Any]:
    status, body = get(f"{base}/api/memory/health/")
    assert status == 200, body
    return {k: v for k, v in json.loads(body).items() if k in {"database", "cache"}}


def wait_until_serving(url: str, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    while True:
        try:
            get(url)
            return
        except OSError:
            assert server.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"the demo did not start:\n{log.read_text()}"
            time.sleep(0.3)


def json_stream(text: str) -> list[Any]:
    """The JSON values printed one after another (curl adds no newline), other lines skipped."""
    decoder, values, i = json.JSONDecoder(), [], 0
    while i < len(text):
        if text[i] in "{[":
            value, i = decoder.raw_decode(text, i)
            values.append(value)
        else:
            i += 1
    return values


def chat_page_sources(base: str, times: int = 2) -> list[str]:
    """Where the chat page read its context from, for one visitor (an anonymous one, whose
    owner is bound to their session cookie): their first message's reply page, then the page
    loaded ``times - 1`` times. (A visit alone reads nothing: the memory starts with a message.)
    """
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())

    def source(page: str) -> str:
        match = re.search(r'id="source"[^>]*>(\w+)<', page)
        assert match, page[:2000]
        return match[1]

    with opener.open(f"{base}/chat/?session_id=tab", timeout=10) as response:
        page = response.read().decode()
    form = {
        name: re.search(rf'name="{name}" value="([^"]+)"', page)[1]  # type: ignore[index]
        for name in ("csrfmiddlewaretoken", "exchange_id")
    }
    body = urllib.parse.urlencode({**form, "session_id": "tab", "message": "hello"}).encode()
    request = urllib.request.Request(f"{base}/chat/", data=body, headers={"Referer": base})
    with opener.open(request, timeout=10) as response:
        assert response.status == 200
        sources = [source(response.read().decode())]
    for _ in range(times - 1):
        with opener.open(f"{base}/chat/?session_id=tab", timeout=10) as response:
            assert response.status == 200
            sources.append(source(response.read().decode()))
    return sources


def start_demo(
    tmp_path: Path, target: str
) -> Iterator[tuple[Path, str, subprocess.Popen[bytes], Path]]:
    """``make <target>`` in a fresh copy, on a free port, until the test is done."""
    tree = clone(tmp_path)
    addr = f"127.0.0.1:{free_port()}"
    log = tmp_path / f"make-{target}.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            ["make", target, f"ADDR={addr}"],
            cwd=tree,
            env=newcomer_env(tmp_path),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_until_serving(f"http://{addr}/api/memory/health/", server, log)
        yield tree, addr, server, log
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[tuple[Path, str, subprocess.Popen[bytes], Path]]:
    """``make run`` of the README's first block, in a fresh copy, on a free port."""
    (top,) = [b.code for b in newcomer.blocks() if b.section == "" and b.lang == "sh"]
    commands = [line.split("#")[0].strip() for line in top.splitlines()]
    assert commands == ["make run", "make test"]
    yield from start_demo(tmp_path, "run")


def second_terminal(tree: Path, tmp_path: Path, script: str, **extra: str) -> str:
    """``script`` run by bash in the copy, as a newcomer's second terminal; its stdout."""
    shell = subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + script],
        cwd=tree,
        env=newcomer_env(tmp_path, **extra),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert shell.returncode == 0, f"{shell.stdout[-3000:]}\n{shell.stderr[-3000:]}"
    # NOTE: the demo's SQLite default warns once, in make run's own output, not here.
    assert "memory.W005" not in shell.stdout + shell.stderr
    return shell.stdout


def stop_demo(server: subprocess.Popen[bytes], log: Path, tree: Path, base: str) -> None:
    """Ctrl-C: the demo stops with its redis-server, and takes its env file with it."""
    started = re.search(r"throwaway redis-server on (\S+) \(pid (\d+)\)", log.read_text())
    assert started, log.read_text()
    os.killpg(server.pid, signal.SIGINT)
    server.wait(timeout=30)
    assert not Path(f"/proc/{started[2]}").exists()
    assert "stopped the demo's redis-server" in log.read_text()
    assert not (tree / ".tmp" / "demo.env").exists()
    with pytest.raises(OSError):
        get(f"{base}/api/memory/health/")


def demo_env(tree: Path) -> dict[str, str]:
    """The ``export`` lines make run wrote for a second terminal."""
    text = (tree / ".tmp" / "demo.env").read_text()
    return dict(re.findall(r"^export (\w+)=(\S+)$", text, re.M))


@pytest.mark.skipif(
    shutil.which("redis-server") is None or shutil.which("curl") is None,
    reason="the README's conversation needs curl, and make run's cache a local redis-server",
)
def test_the_readme_commands_work_pasted_into_a_fresh_copy(demo: Any, tmp_path: Path) -> None:
    tree, addr, server, log = demo
    base = f"http://{addr}"
    assert health(base) == {"database": "ok", "cache": "ok"}
    started = re.search(r"throwaway redis-server on (\S+) \(pid (\d+)\)", log.read_text())
    assert started, log.read_text()
    # The second terminal's settings: the demo's own, its Redis included.
    assert demo_env(tree) == {
        "DJANGO_DEBUG": "1",
        "DJANGO_SILENCED_SYSTEM_CHECKS": "memory.W005",
        "REDIS_URL": started[1].rstrip(","),
    }
    # NOTE: the SQLite default's warning, said once by make run rather than by every command.
    assert log.read_text().count("memory.W005") == 1

    # The README's conversation: wang's turn, then his context from the database.
    (conversation,) = newcomer.section_blocks("One conversation", "sh")
    turn, context = json_stream(
        second_terminal(tree, tmp_path, conversation.replace(DEMO_ADDR, addr))
    )
    assert (turn["seq"], turn["session_id"]) == (1, "laptop")
    assert context["facts"] == {"likes": ["basketball"], "name": "Wang Jianguo"}
    assert context["source"] == "database"
    # Its Python block, pasted into the demo's shell.
    (python_block,) = newcomer.readme_python_blocks()
    printed = newcomer.shell_pasted(
        tree,
        ". .tmp/demo.env\n.venv/bin/python manage.py shell",
        python_block,
        newcomer_env(tmp_path),
        what="README.md's python block",
    )
    assert "{'location': '上海'}" in printed

    blocks = [
        code for section in SECTIONS for code in newcomer.section_blocks(section, "sh", QUICKSTART)
    ]
    stdout = second_terminal(
        tree,
        tmp_path,
        "\n".join(
            f"echo '::block {i}::'\n{code.replace(DEMO_ADDR, addr)}"
            for i, code in enumerate(blocks)
        ),
        DJANGO_SUPERUSER_PASSWORD="admin-pass-123",
    )
    out = dict(re.findall(r"::block (\d+)::\n(.*?)(?=::block \d+::|\Z)", stdout, re.S))
    assert len(out) == len(blocks)

    # A conversation over HTTP: the token, the turn, two context reads, facts, sessions.
    assert out["0"] == ""
    (turn,) = json_stream(out["1"])
    assert (turn["seq"], turn["session_id"]) == (1, "laptop")
    first, second, phone_turn, facts, sessions = json_stream(out["2"])
    assert first["facts"] == {"likes": ["tennis"], "name": "Li Mei"}
    assert (first["source"], second["source"]) == ("database", "cache")
    assert second["turns"] == first["turns"]
    assert phone_turn["seq"] == 2
    assert {f["key"]: f["value"] for f in facts["facts"]} == {
        "likes": ["tennis"],
        "location": "上海",
        "name": "Li Mei",
    }
    assert [s["session_id"] for s in sessions["results"]] == ["phone", "laptop"]
    # The admin account, and the commands.
    assert "Superuser created successfully." in out["3"]
    assert re.search(r"owners\s+3\n", out["4"]) and "Dry run" in out["4"]
    # NOTE: the commands run against the demo's Redis, not "cache disabled".
    assert re.search(r"^cache\s+ok$", out["4"], re.M), out["4"]
    assert "Warmed 1 owner(s)." in out["4"]

    # The pages of Python blocks: every block, as its page says, after this walkthrough (the
    # tools page's model clients the stand-ins), each page's users its own: limei's facts stay.
    terminal = newcomer_env(tmp_path)
    model_clients = str(model_apis.stand_ins(tmp_path / "model-apis"))
    for page in (LLM, TOOLS, AGENTS, PYTHON_API):
        env = {**terminal, "PYTHONPATH": model_clients} if page == TOOLS else terminal
        newcomer.run_page_blocks(tree, page, env)
    (facts_after,) = json_stream(
        second_terminal(
            tree,
            tmp_path,
            "TOKEN=$(make -s token USER=chatbackend)\n"
            f'curl -s http://{addr}/api/memory/users/limei/facts/ -H "Authorization: Token $TOKEN"',
        )
    )
    assert facts_after == facts

    # The chat page: a user's first read from the database, the next from the cache.
    assert chat_page_sources(base) == ["database", "cache"]
    status, page = get(f"{base}/admin/login/")
    assert status == 200 and "Django administration" in page

    stop_demo(server, log, tree, base)


@pytest.mark.skipif(
    shutil.which("redis-server") is None, reason="make run-asgi's cache needs a redis-server"
)
def test_make_run_asgi_starts_what_make_run_starts(tmp_path: Path) -> None:
    for tree, addr, server, log in start_demo(tmp_path, "run-asgi"):
        base = f"http://{addr}"
        assert health(base) == {"database": "ok", "cache": "ok"}
        text = log.read_text()
        assert "throwaway redis-server on" in text and "django-tasks worker (pid" in text
        assert "Uvicorn running on" in text or "Application startup complete" in text
        assert demo_env(tree)["REDIS_URL"].startswith("redis://127.0.0.1:")
        assert chat_page_sources(base) == ["database", "cache"]
        stdout = second_terminal(
            tree, tmp_path, ". .tmp/demo.env\n.venv/bin/python manage.py memory_stats"
        )
        assert re.search(r"^cache\s+ok$", stdout, re.M), stdout
        stop_demo(server, log, tree, base)


def test_make_run_without_any_redis_says_no_cache_is_configured(tmp_path: Path) -> None:
    tree = clone(tmp_path)
    # NOTE: a PATH with the few tools run-demo needs and no redis-server.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "env", "mkdir", "grep", "rm"):
        found = shutil.which(tool)
        assert found
        (bin_dir / tool).symlink_to(found)
    addr = f"127.0.0.1:{free_port()}"
    log = tmp_path / "run-demo.log"
    env = {**newcomer_env(tmp_path), "PATH": str(bin_dir), "ADDR": addr}
    with log.open("wb") as out:
        server = subprocess.Popen(
            [tree / "scripts" / "run-demo"],
            cwd=tree,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_until_serving(f"http://{addr}/api/memory/health/", server, log)
        assert "run-demo: no cache configured" in log.read_text()
        assert health(f"http://{addr}") == {"database": "ok", "cache": "disabled"}
        sources = chat_page_sources(f"http://{addr}")
        assert sources == ["database", "database"]
    finally:
        os.killpg(server.pid, signal.SIGINT)
        server.wait(timeout=30)
