"""The websocket chat's test kit: the demo under uvicorn as an instance that a test can kill and
start again on the same port, a logged-in session's cookie, and ``ChatClient``, our own client of
the protocol (docs/websocket.md) that drops, reconnects (to any instance), resends its outbox
and records every breach of "each turn once, in order" it sees."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import websockets

from tests.instance import environment
from tests.servers import free_port

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
ORIGIN = f"http://{HOST}"


def instance_env(*, redis_url: str, prefix: str, delay: float = 0.05) -> dict[str, str]:
    """The environment of a demo instance on the running test's database, with ``redis_url`` as
    its cache and channel layer, and a responder that waits ``delay`` s between words."""
    from django.conf import settings

    return {
        **environment(),
        "DJANGO_SETTINGS_MODULE": "tests.instance_settings",
        "MEMORY_OVERRIDES": json.dumps({"KEY_PREFIX": settings.TEST_KEY_PREFIX}),
        "MEMORYPROJ_CHANNELS_PREFIX": prefix,
        "DJANGO_DEBUG": "0",
        "DJANGO_ALLOWED_HOSTS": HOST,
        "REDIS_URL": redis_url,
        "REDIS_SOCKET_TIMEOUT": "0.25",
        "MEMORY_LOG_LEVEL": "WARNING",
        "MEMORY_TEST_RESPONDER": "tests.chat_sockets.SlowResponder",
        "MEMORY_TEST_RESPONDER_DELAY": str(delay),
    }


class SlowResponder:
    """The demo's deterministic responder, ``MEMORY_TEST_RESPONDER_DELAY`` s between words: a
    reply long enough in time to drop a socket, or kill an instance, in the middle of it."""

    def __init__(self) -> None:
        from memoryproj.responders import DeterministicResponder

        self.inner = DeterministicResponder()
        self.inner.delay = float(os.environ.get("MEMORY_TEST_RESPONDER_DELAY", "0.05"))

    def respond(self, *, context: Any, message: str) -> str:
        return self.inner.respond(context=context, message=message)

    def astream(self, *, context: Any, message: str) -> Any:
        return self.inner.astream(context=context, message=message)


class Instance:
    """The demo project under uvicorn on a fixed port of 127.0.0.1: ``start``, ``kill``
    (SIGKILL: a crash) and ``start`` again on the same port."""

    def __init__(self, env: Mapping[str, str], *, name: str, port: int | None = None) -> None:
        self.env = dict(env)
        self.name = name
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = Path(f"/tmp/memory-{name}-{self.port}.log")

    @property
    def url(self) -> str:
        return f"ws://{HOST}:{self.port}/ws/chat/"

    @property
    def http(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> Instance:
        command = [
            sys.executable, "-m", "uvicorn", "memoryproj.asgi:application",
            "--host", HOST, "--port", str(self.port), "--log-level", "warning",
        ]  # fmt: skip
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(command, cwd=ROOT, env=self.env, stdout=log, stderr=log)
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection((HOST, self.port), timeout=1):
                    return self
            except OSError:
                assert self.proc.poll() is None, self.log_path.read_text()[-3000:]
                assert time.monotonic() < deadline, "uvicorn did not start"
                time.sleep(0.1)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def rss_kib(self) -> int:
        """The process's resident memory (VmRSS), in KiB."""
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def log(self) -> str:
        return self.log_path.read_text()[-30000:] if self.log_path.exists() else ""

    def cleanup(self) -> None:
        """Stop it; its log's tail goes to stderr (shown with a failure), then the log away."""
        self.stop()
        tail = self.log()
        if tail:
            print(f"--- {self.name} log ---\n{tail}", file=sys.stderr)
        self.log_path.unlink(missing_ok=True)


def login_cookie(username: str) -> str:
    """The ``Cookie`` header of a browser session logged in as ``username`` (made if need be)."""
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.auth.models import User
    from django.contrib.sessions.backends.db import SessionStore

    user, _ = User.objects.get_or_create(username=username)
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    return f"sessionid={session.session_key}"


class ChatClient:
    """One user's client: ``connect`` (resume from the last seq it holds, then its outbox sent
    again), ``drop`` (the TCP connection cut, no closing handshake), ``say``. Every frame goes
    through the checks; ``problems`` lists what broke the protocol's promises."""

    def __init__(self, cookie: str, *, session_id: str = "ws") -> None:
        self.cookie = cookie
        self.session_id = session_id
        self.turns: list[dict[str, Any]] = []
        self.last_seq = 0
        self.outbox: dict[str, str] = {}
        self.replies: dict[str, dict[str, Any]] = {}
        self.partial: dict[int, str] = {}
        self.errors: list[dict[str, Any]] = []
        self.problems: list[str] = []
        self.deltas = 0
        self.ws: Any = None
        self.reader: asyncio.Task[None] | None = None
        self.first_delta: dict[str, float] = {}
        self.sent_at: dict[str, float] = {}

    async def connect(self, url: str, *, timeout: float = 10, silent_for: float = 0.0) -> None:
        """Open a socket to ``url`` and resume; ``silent_for`` s of reading before the resume is
        sent (a slow client, or a server that reads its frame late)."""
        self.ws = await websockets.connect(
            url,
            origin=ORIGIN,
            additional_headers={"Cookie": self.cookie},
            open_timeout=timeout,
            max_size=None,
            ping_interval=None,
        )
        self.reader = asyncio.get_running_loop().create_task(self._read(self.ws))
        if silent_for:
            await asyncio.sleep(silent_for)
        resume: dict[str, Any] = {"type": "resume", "after_seq": self.last_seq}
        streaming = [seq for seq in self.partial if seq > self.last_seq]
        if streaming:
            seq = max(streaming)
            resume["partial"] = {"seq": seq, "chars": len(self.partial[seq])}
        await self.ws.send(json.dumps(resume))
        for message_id, content in list(self.outbox.items()):
            await self._send_message(message_id, content)

    async def drop(self) -> None:
        """Cut the connection as a lost network does: no close frame."""
        if self.ws is not None:
            self.ws.transport.abort()
        if self.reader is not None:
            with_reader = self.reader
            self.reader = None
            await asyncio.gather(with_reader, return_exceptions=True)
        self.ws = None

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self.reader is not None:
            await asyncio.gather(self.reader, return_exceptions=True)
        self.ws = None
        self.reader = None

    async def say(self, content: str, message_id: str | None = None) -> str:
        message_id = message_id or uuid.uuid4().hex
        self.outbox[message_id] = content
        self.sent_at[message_id] = time.monotonic()
        if self.ws is not None:
            await self._send_message(message_id, content)
        return message_id

    async def _send_message(self, message_id: str, content: str) -> None:
        frame = {"type": "message", "id": message_id, "content": content}
        frame["session_id"] = self.session_id
        with contextlib.suppress(websockets.ConnectionClosed):
            await self.ws.send(json.dumps(frame))

    async def _read(self, ws: Any) -> None:
        try:
            async for raw in ws:
                self._frame(json.loads(raw))
        except websockets.ConnectionClosed:
            pass
        if ws.close_code not in (None, 1000, 1006):
            self.problems.append(f"closed with {ws.close_code}")

    def _frame(self, frame: dict[str, Any]) -> None:
        kind = frame.get("type")
        if kind == "turn":
            turn = frame["turn"]
            if turn["seq"] != self.last_seq + 1:
                self.problems.append(f"turn {turn['seq']} after {self.last_seq}")
            if turn["seq"] > self.last_seq:
                self.last_seq = turn["seq"]
            self.turns.append(turn)
            self.partial.pop(turn["seq"], None)
            message_id = (turn.get("metadata") or {}).get("message_id")
            if turn["role"] == "assistant" and message_id is not None:
                if message_id in self.replies:
                    self.problems.append(f"a second reply to {message_id}")
                self.replies[message_id] = turn
                self.outbox.pop(message_id, None)
        elif kind == "delta":
            self.deltas += 1
            seq, offset, text = frame["seq"], frame.get("offset", 0), frame["text"]
            if seq <= self.last_seq:
                self.problems.append(f"a delta of turn {seq}, already had")
            have = self.partial.get(seq, "")
            if offset != len(have):
                self.problems.append(f"a delta of {seq} at {offset}, holding {len(have)}")
            self.partial[seq] = have[:offset] + text
            for message_id, at in self.sent_at.items():
                self.first_delta.setdefault(message_id, time.monotonic() - at)
        elif kind == "error":
            self.errors.append(frame)
            if frame.get("id") in self.outbox and frame.get("code") != "unavailable":
                self.outbox.pop(frame["id"], None)
        else:
            self.problems.append(f"an unknown frame {frame!r}")

    async def wait_replied(self, timeout: float = 20) -> None:
        """Until every message sent has its reply (or ``timeout`` s, then ``AssertionError``)."""
        deadline = time.monotonic() + timeout
        while self.outbox:
            assert time.monotonic() < deadline, (self.outbox, self.errors, self.problems)
            await asyncio.sleep(0.02)

    def check_reply(self, streamed_for: int) -> None:
        """A streamed reply's text equals the turn stored for it."""
        for turn in self.turns:
            if turn["seq"] == streamed_for:
                return
        self.problems.append(f"no turn {streamed_for}")


def stored_turns(owner_id: str) -> list[dict[str, Any]]:
    """Every turn of ``owner_id`` in the database, oldest first."""
    from memory import selectors

    turns: list[dict[str, Any]] = []
    after = 0
    while True:
        page, more = selectors.turn_list(owner_id=owner_id, after=after, limit=500)
        turns.extend(page)
        if not more:
            return turns
        after = page[-1]["seq"]


def check_stored(owner_id: str, client: ChatClient, message_ids: list[str]) -> None:
    """Each message stored once and answered once (but those refused as too many in flight, which
    store nothing), the client holding exactly the owner's turns, in order, and no other error;
    ``AssertionError`` says what is wrong."""
    refused = {e["id"] for e in client.errors if e.get("code") == "too_many_in_flight"}
    assert [e for e in client.errors if e.get("id") not in refused] == []
    turns = stored_turns(owner_id)
    assert [t["seq"] for t in turns] == list(range(1, len(turns) + 1))
    users = [t["metadata"].get("message_id") for t in turns if t["role"] == "user"]
    replies = [t["metadata"].get("message_id") for t in turns if t["role"] == "assistant"]
    # NOTE: a refused resend may have been stored by its first sending; then once, answered once.
    required = {m for m in message_ids if m not in refused}
    assert len(users) == len(set(users)) and required <= set(users) <= set(message_ids)
    assert sorted(replies) == sorted(users), (replies, users)
    assert [t["seq"] for t in client.turns] == [t["seq"] for t in turns], (
        [t["seq"] for t in client.turns],
        len(turns),
        client.problems,
        client.errors,
    )
    assert [t["content"] for t in client.turns] == [t["content"] for t in turns]
    assert client.problems == []
