"""The bench's websocket rows (``Bench`` inherits ``row_websocket``): the demo under uvicorn, its
chat over ``ws/chat/`` against its chat over HTTP (``chat/stream/``) on the same instance in the
same run.

- ``websocket_first``: a message's round trip to the first piece of its reply, over the socket,
  against the HTTP chat's (its POST to the first ``delta`` line); median of alternating rounds.
- ``websocket_catchup``: a reconnect's catch-up, ``resume`` to the last of 50 turns missed,
  against reading the same 50 turns from the REST API (``turns/?after=``) on a warm connection.
- ``websocket_sockets``: how many sockets the instance holds at once (all of them open and
  answered), and its resident memory per socket; shown, not judged.

Row objects are made by the caller's ``row`` factory (``Bench.row_websocket`` passes
``bench.run.Row``), so that this module imports nothing of ``bench.run``.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Rounds of each round trip, after WARMUP rounds not counted.
ROUNDS = 15
WARMUP = 3
CATCHUP_TURNS = 50
SOCKETS = 400
HOST = "127.0.0.1"


def _session_cookie(username: str) -> str:
    """A session of ``username`` (made if need be) in the bench's database: its cookie header."""
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


def _rss_kib(port: int) -> int:
    """The resident memory of the process listening on ``port`` (the uvicorn), in KiB."""
    inode = None
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1].endswith(f":{port:04X}") and fields[3] == "0A":
            inode = fields[9]
            break
    assert inode is not None, "no listener"
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            for fd in fds:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{inode}]":
                    status = Path(f"/proc/{pid}/status").read_text()
                    return int(
                        next(x for x in status.splitlines() if x.startswith("VmRSS:")).split()[1]
                    )
        except OSError:
            continue
    raise AssertionError("no process holds the listener")


async def _ws(port: int, cookie: str) -> Any:
    import websockets

    return await websockets.connect(
        f"ws://{HOST}:{port}/ws/chat/",
        origin=f"http://{HOST}",
        additional_headers={"Cookie": cookie},
        max_size=None,
        # NOTE: the held sockets read one frame each of a reply's many; with the client's
        # default queue of 16 frames it stops reading, never sees the server's close frame, and
        # each close waited out its 10 s timeout (400 sockets: over an hour, the row's "hang").
        max_queue=None,
        ping_interval=None,
    )


async def _socket_first_piece(ws: Any, n: int) -> float:
    """Send a message and wait for its reply's turn; the seconds to its first delta."""
    started = time.perf_counter()
    message_id = f"b{uuid.uuid4().hex}"
    await ws.send(json.dumps({"type": "message", "id": message_id, "content": f"hi {n}"}))
    first = None
    while True:
        frame = json.loads(await ws.recv())
        if frame["type"] == "delta" and first is None:
            first = time.perf_counter() - started
        elif frame["type"] == "turn" and frame["turn"]["role"] == "assistant":
            # NOTE: the HTTP chat's turns (the same owner) come too, from the database.
            if frame["turn"]["metadata"].get("message_id") == message_id:
                assert first is not None
                return first
        elif frame["type"] == "error":
            raise RuntimeError(frame)


async def _http_first_piece(client: Any, url: str, csrf: str, n: int) -> float:
    """POST a message to the HTTP chat's stream and read it to its end; the seconds to its
    first ``delta`` line."""
    started = time.perf_counter()
    first = None
    data = {"session_id": "http", "message": f"hi {n}", "exchange_id": uuid.uuid4().hex}
    async with client.stream(
        "POST", f"{url}/chat/stream/", data=data, headers={"X-CSRFToken": csrf}
    ) as response:
        assert response.status_code == 200, response.status_code
        async for line in response.aiter_lines():
            if first is None and '"event": "delta"' in line:
                first = time.perf_counter() - started
    assert first is not None
    return first


class WebsocketRows:
    """``row_websocket`` of ``Bench``."""

    def websocket_rows(self, row: Callable[..., Any]) -> list[Any]:
        from tests.servers import uvicorn_demo

        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "bench.settings", "DJANGO_DEBUG": "0"}
        with uvicorn_demo(env, name="bench-ws") as port:
            return asyncio.run(self._websocket_measure(port, row))

    async def _websocket_measure(self, port: int, row: Callable[..., Any]) -> list[Any]:
        import httpx
        from asgiref.sync import sync_to_async

        from memory import services
        from memory.selectors.turns import owner_last_seq

        username = f"bench-ws-{uuid.uuid4().hex[:8]}"
        cookie = await sync_to_async(_session_cookie)(username)
        url = f"http://{HOST}:{port}"
        name, _, key = cookie.partition("=")
        # -- the first piece of a reply: the socket against the HTTP chat --------------------------
        ws = await _ws(port, cookie)
        await ws.send(json.dumps({"type": "resume", "after_seq": 0}))
        async with httpx.AsyncClient(cookies={name: key}, timeout=30) as client:
            page = await client.get(f"{url}/chat/?session_id=http")
            assert page.status_code == 200
            csrf = client.cookies["csrftoken"]
            sock: list[float] = []
            http: list[float] = []
            for n in range(WARMUP + ROUNDS):
                s = await _socket_first_piece(ws, n)
                h = await _http_first_piece(client, url, csrf, n)
                if n >= WARMUP:
                    sock.append(s)
                    http.append(h)
            # -- the catch-up after a reconnect: 50 turns missed --------------------------------
            owner = f"bench-cu-{uuid.uuid4().hex[:8]}"
            cu_cookie = await sync_to_async(_session_cookie)(owner)
            for i in range(CATCHUP_TURNS):
                await sync_to_async(services.turn_append)(
                    owner_id=owner, session_id="s", role="user", content=f"turn {i} " + "x" * 150
                )
            token = getattr(self, "token", "")
            catchup: list[float] = []
            rest: list[float] = []
            for n in range(WARMUP + ROUNDS):
                started = time.perf_counter()
                other = await _ws(port, cu_cookie)
                await other.send(json.dumps({"type": "resume", "after_seq": 0}))
                got = 0
                while got < CATCHUP_TURNS:
                    frame = json.loads(await other.recv())
                    got += frame["type"] == "turn"
                took = time.perf_counter() - started
                await other.close()
                started = time.perf_counter()
                answer = await client.get(
                    f"{url}/api/memory/users/{owner}/turns/?after=0&limit={CATCHUP_TURNS}",
                    headers={"Authorization": f"Token {token}"},
                )
                assert answer.status_code == 200 and len(answer.json()["results"]) == CATCHUP_TURNS
                if n >= WARMUP:
                    catchup.append(took)
                    rest.append(time.perf_counter() - started)
        await ws.close()
        # -- sockets held at once, and memory per socket --------------------------------------
        before = _rss_kib(port)
        sockets = []
        for _ in range(SOCKETS):
            sockets.append(await _ws(port, cookie))
        last = await sync_to_async(owner_last_seq)(owner_id=username)
        for s in sockets:
            await s.send(json.dumps({"type": "resume", "after_seq": last}))
        # NOTE: all of them answered: a message on one reaches every socket of the owner.
        await sockets[0].send(
            json.dumps({"type": "message", "id": "b-all", "content": "hello all"})
        )
        answered = 0
        for s in sockets:
            while True:
                frame = json.loads(await asyncio.wait_for(s.recv(), 30))
                if frame["type"] == "turn":
                    answered += 1
                    break
        await asyncio.sleep(0.5)
        after = _rss_kib(port)
        await asyncio.gather(*(s.close() for s in sockets))
        sock_med, http_med = statistics.median(sock), statistics.median(http)
        cu_med, rest_med = statistics.median(catchup), statistics.median(rest)
        # NOTE: the spread is of each round's ratio, as the table prints every row's.
        round_ratios = [s / h for s, h in zip(sock, http, strict=True)]
        catchup_ratios = [c / r for c, r in zip(catchup, rest, strict=True)]
        rows = [
            row(
                id="websocket_first",
                title="chat: message to first piece, websocket (ws/chat/)",
                baseline_title="the same over HTTP (chat/stream/), same instance",
                target="<= 1.1x",
                project=sock_med,
                baseline=http_med,
                ratio=sock_med / http_med,
                spread=(min(round_ratios), max(round_ratios)),
                note=f"uvicorn, 1 worker; median of {ROUNDS} alternating rounds",
            ),
            row(
                id="websocket_catchup",
                title=f"chat: reconnect and catch up {CATCHUP_TURNS} turns (connect + resume)",
                baseline_title=f"GET turns/ of the same {CATCHUP_TURNS}, warm connection",
                target="",
                project=cu_med,
                baseline=rest_med,
                ratio=cu_med / rest_med,
                spread=(min(catchup_ratios), max(catchup_ratios)),
                note="the socket's figure includes its handshake and session lookup",
            ),
            row(
                id="websocket_sockets",
                title=f"chat: sockets one instance holds ({answered} of {SOCKETS} answered)",
                baseline_title="",
                target="",
                project=(after - before) / SOCKETS,
                unit="KiB",
                note=f"resident memory per open socket, {before} KiB before, {after} KiB after",
            ),
        ]
        for r in rows:
            r.judge()
        return rows
