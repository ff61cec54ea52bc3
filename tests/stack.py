"""Real app instances for fault and load tests: the demo project under gunicorn on loopback,
several server processes sharing one Postgres database and one Redis, driven over HTTP, and
reaching Postgres directly or through a PgBouncer of their own in transaction mode."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from tests.servers import PGBOUNCER_MISSING, PgBouncerServer, free_port, pgbouncer_binary

ROOT = Path(__file__).resolve().parent.parent


class Response:
    """An HTTP answer: status, the body, and the body decoded as JSON (None when empty or the
    body is not JSON, such as the metrics' text)."""

    def __init__(
        self,
        status: int,
        body: bytes,
        content_type: str = "application/json",
        retry_after: str | None = None,
    ) -> None:
        self.status = status
        self.body = body
        self.headers_retry_after = retry_after
        self.data = (
            json.loads(body) if body and content_type.startswith("application/json") else None
        )

    def __repr__(self) -> str:
        return f"<{self.status} {self.data!r}>"


def _swap_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return parts._replace(path=f"/{name}").geturl()


# The ways a stack's instances reach Postgres, as stack fixtures are parametrised:
# directly, or through a PgBouncer in transaction mode.
POOLERS = (None, "pgbouncer")


class AppStack:
    """A database of its own on ``server_url``'s Postgres, migrated, and ``instances`` gunicorn
    processes of the demo project sharing it and ``redis_url``.

    ``pooler="pgbouncer"``: the instances (and the migration) reach that database through a
    PgBouncer of the stack's own in transaction mode (``self.pooler``), as a site behind one
    is configured (``DATABASE_POOLER=transaction``); the database is created and dropped
    directly on ``server_url``.
    """

    def __init__(
        self,
        *,
        server_url: str,
        redis_url: str = "",
        instances: int = 2,
        memory: dict[str, Any] | None = None,
        workers: int = 2,
        env: dict[str, str] | None = None,
        pooler: str | None = None,
    ) -> None:
        assert pooler in POOLERS, pooler
        self.server_url = server_url
        self.redis_url = redis_url
        self.database = f"memory_stack_{uuid.uuid4().hex[:10]}"
        self.database_url = _swap_database(server_url, self.database)
        self.pooler_kind = pooler
        self.pooler: PgBouncerServer | None = None
        self.instances = instances
        self.workers = workers
        self.memory = memory or {}
        # More environment of the instances, e.g. REDIS_CLUSTER_URL instead of redis_url.
        self.extra_env = env or {}
        self.ports: list[int] = []
        self.procs: list[subprocess.Popen[bytes]] = []
        self.token = ""
        self.logs: list[Path] = []

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
        env.update(
            DJANGO_SETTINGS_MODULE="tests.instance_settings",
            DATABASE_URL=self.database_url,
            REDIS_URL=self.redis_url,
            REDIS_SOCKET_TIMEOUT="0.2",
            MEMORY_OVERRIDES=json.dumps(self.memory),
            MEMORY_THROTTLE_USER="",
            MEMORY_THROTTLE_ANON="",
            DJANGO_DEBUG="0",
            DJANGO_SECRET_KEY="stack-only-secret-key-" + "x" * 40,
            MEMORY_LOG_LEVEL="WARNING",
        )
        if self.pooler is not None:
            env["DATABASE_POOLER"] = "transaction"
        env.update(self.extra_env)
        return env

    def _run(self, *args: str) -> str:
        result = subprocess.run(
            [sys.executable, *args],
            cwd=ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=180,
        )
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed: {result.stderr[-2000:]}")
        return result.stdout

    def start(self) -> AppStack:
        with psycopg.connect(_swap_database(self.server_url, "postgres"), autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{self.database}"')
        if self.pooler_kind == "pgbouncer":
            self.pooler = PgBouncerServer(self.server_url).start()
            self.database_url = self.pooler.url_for(self.database)
        self._run("manage.py", "migrate", "--noinput", "-v", "0")
        self.token = json.loads(self._run("-m", "tests.instance", "token", "svc"))
        for i in range(self.instances):
            self.ports.append(free_port())
            self.logs.append(Path(f"/tmp/{self.database}-{i}.log"))
            self._spawn(i)
        for i in range(self.instances):
            self._wait(i)
        return self

    def _spawn(self, i: int) -> None:
        log = self.logs[i].open("ab")
        command = [
            sys.executable, "-m", "gunicorn", "memoryproj.wsgi:application",
            "--bind", f"127.0.0.1:{self.ports[i]}", "--workers", str(self.workers),
            "--worker-class", "gthread", "--threads", "4", "--timeout", "60",
            "--graceful-timeout", "2", "--log-level", "warning",
        ]  # fmt: skip
        proc = subprocess.Popen(command, cwd=ROOT, env=self.env(), stdout=log, stderr=log)
        if i < len(self.procs):
            self.procs[i] = proc
        else:
            self.procs.append(proc)

    def _wait(self, i: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.procs[i].poll() is not None:
                raise RuntimeError(f"instance {i} exited: {self.logs[i].read_text()[-2000:]}")
            try:
                self.request(i, "GET", "/api/memory/health/", timeout=2)
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"instance {i} did not answer: {self.logs[i].read_text()[-2000:]}")

    def request(
        self,
        i: int,
        method: str,
        path: str,
        body: Any = None,
        *,
        headers: dict[str, str] | None = None,
        timeout: float = 10,
    ) -> Response:
        """One request to instance ``i`` as the service user."""
        conn = http.client.HTTPConnection("127.0.0.1", self.ports[i], timeout=timeout)
        try:
            all_headers = {"Authorization": f"Token {self.token}", **(headers or {})}
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                all_headers["Content-Type"] = "application/json"
            conn.request(method, path, body=data, headers=all_headers)
            response = conn.getresponse()
            return Response(
                response.status,
                response.read(),
                response.getheader("Content-Type") or "",
                response.getheader("Retry-After"),
            )
        finally:
            conn.close()

    def log_tail(self, i: int, chars: int = 3000) -> str:
        """The end of instance ``i``'s log (its warnings and errors), for a failure's message."""
        return self.logs[i].read_text(errors="replace")[-chars:]

    def post_turn(self, i: int, owner: str, content: str) -> Response:
        """Instance ``i``'s answer to ``owner``'s user turn ``content`` in session ``tab``."""
        return self.request(
            i,
            "POST",
            f"/api/memory/users/{owner}/turns/",
            {"session_id": "tab", "role": "user", "content": content},
        )

    def assert_pooled(self) -> None:
        """Behind a PgBouncer: its pool of the stack's database is in transaction mode, and
        the instances' transactions went through it."""
        assert self.pooler is not None
        [pool] = [row for row in self.pooler.show("POOLS") if row["database"] == self.database]
        assert pool["pool_mode"] == "transaction"
        [stats] = [row for row in self.pooler.show("STATS") if row["database"] == self.database]
        assert stats["total_xact_count"] > 0

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self.pooler is not None:
            self.pooler.cleanup()
        try:
            with psycopg.connect(_swap_database(self.server_url, "postgres"), autocommit=True) as c:
                c.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
        except psycopg.OperationalError:
            pass
        for log in self.logs:
            log.unlink(missing_ok=True)


class Conversation:
    """What the clients were told was stored, per owner, to compare every read against."""

    def __init__(self, stack: AppStack) -> None:
        self.stack = stack
        self.turns: dict[str, list[str]] = {}
        self.facts: dict[str, dict[str, object]] = {}

    def tell(self, i: int, owner: str, content: str) -> None:
        response = self.stack.request(
            i,
            "POST",
            f"/api/memory/users/{owner}/turns/",
            {"session_id": f"tab-{i}", "role": "assistant", "content": content},
        )
        assert response.status == 201, response
        self.turns.setdefault(owner, []).append(content)

    def put(self, i: int, owner: str, key: str, value: object) -> None:
        path = f"/api/memory/users/{owner}/facts/{key}/"
        response = self.stack.request(i, "PUT", path, {"value": value})
        assert response.status in (200, 201), response
        self.facts.setdefault(owner, {})[key] = value

    def context(self, i: int, owner: str) -> dict:
        response = self.stack.request(i, "GET", f"/api/memory/users/{owner}/context/?turns=50")
        assert response.status == 200, response
        return response.data

    def fact_values(self, i: int, owner: str) -> dict[str, object]:
        response = self.stack.request(i, "GET", f"/api/memory/users/{owner}/facts/")
        assert response.status == 200, response
        return {fact["key"]: fact["value"] for fact in response.data["facts"]}

    def served(self, i: int, owner: str) -> bool:
        """Whether instance ``i`` serves everything acknowledged, through context/ and facts/."""
        context = self.context(i, owner)
        facts = self.fact_values(i, owner)
        expected = self.facts.get(owner, {})
        # NOTE: the context holds the last 50 turns (``context()``), the newest of them all.
        return (
            [turn["content"] for turn in context["turns"]] == self.turns.get(owner, [])[-50:]
            and all(context["facts"].get(k) == v for k, v in expected.items())
            and all(facts.get(k) == v for k, v in expected.items())
        )

    def assert_stored_once(self, owner: str) -> None:
        """The turn listing (the database) holds every acknowledged turn once, seq 1..N."""
        turns = turns_listed(self.stack, owner)
        assert [t["content"] for t in turns] == self.turns.get(owner, [])
        assert [t["seq"] for t in turns] == list(range(1, len(turns) + 1))

    def wait_served(self, owner: str, bound: float = 10.0) -> None:
        """Wait until every instance serves ``owner`` as acknowledged, at most ``bound`` s (wide
        enough for a failover's reconnects and a repair sweep on a machine that also runs the
        suite's other process)."""
        deadline = time.monotonic() + bound
        for i in range(self.stack.instances):
            while not (self.served(i, owner) and self.served(i, owner)):
                if time.monotonic() >= deadline:
                    context = self.context(i, owner)
                    served = [turn["content"] for turn in context["turns"]]
                    raise AssertionError(
                        f"instance {i} serves a stale {owner} after {bound:g}s: {served} from"
                        f" {context.get('source')}, acknowledged {self.turns.get(owner, [])}"
                        f"\n{self.stack.log_tail(i)}"
                    )
                time.sleep(0.05)


def turns_listed(stack: AppStack, owner: str) -> list[dict[str, Any]]:
    """Every turn of ``owner`` that instance 0 lists (the database), oldest first, page after
    page of 500 (the API's largest page)."""
    listed: list[dict[str, Any]] = []
    while True:
        after = f"&after={listed[-1]['seq']}" if listed else ""
        page = stack.request(0, "GET", f"/api/memory/users/{owner}/turns/?limit=500{after}")
        assert page.status == 200, page
        listed += page.data["results"]
        if page.data["next"] is None:
            return listed


@contextmanager
def app_stack(**kwargs: Any) -> Iterator[AppStack]:
    """A started ``AppStack(**kwargs)``, stopped on exit; skips, saying how to get it, where
    ``pooler="pgbouncer"`` and PgBouncer is not installed."""
    if kwargs.get("pooler") == "pgbouncer" and pgbouncer_binary() is None:
        pytest.skip(PGBOUNCER_MISSING)
    before_start = kwargs.pop("before_start", None)
    stack = AppStack(**kwargs)
    if before_start is not None:
        # NOTE: what needs the stack's database name before it starts (a multi-host URL).
        before_start(stack)
    try:
        yield stack.start()
    finally:
        stack.stop()
