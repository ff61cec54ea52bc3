"""The websocket chat on real servers: two uvicorn instances of the demo on one Postgres and one
redis-server (cache and channel layer), and our own client (tests/chat_sockets.py) that drops
mid-reply and reconnects to the other instance, resends, and changes its session id; an instance
killed mid-reply; Redis paused during a reconnect. After each: every reply stored once, every
turn delivered to the client once and in order. Then a soak of 50 such clients."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.chat_sockets import ChatClient, Instance, check_stored, instance_env, login_cookie
from tests.servers import RedisServer

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

INTRO = "My name is Wang Jianguo, I like basketball"
ASK = "What's my name?"


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture(scope="module")
def instances(
    django_db_setup: None, django_db_blocker: pytest.FixtureRequest, redis_server: RedisServer
) -> Iterator[list[Instance]]:
    """Two instances of the demo, sharing this run's database and one redis-server."""
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        env = instance_env(redis_url=redis_server.url, prefix=f"ws-{uuid.uuid4().hex[:8]}")
    pair = [Instance(env, name=f"ws-{n}") for n in "ab"]
    try:
        for instance in pair:
            instance.start()
        yield pair
    finally:
        for instance in pair:
            instance.cleanup()


@pytest.fixture
def running(instances: list[Instance], redis_server: RedisServer) -> list[Instance]:
    """Both instances up (a test before may have killed one) and Redis answering."""
    redis_server.resume()
    for instance in instances:
        if instance.proc is None or instance.proc.poll() is not None:
            instance.start()
    return instances


def _owner() -> tuple[str, str]:
    username = f"ws-{uuid.uuid4().hex[:10]}"
    return username, login_cookie(username)


async def _until(predicate: object, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_a_message_is_stored_streamed_and_answered_once(running: list[Instance]) -> None:
    owner, cookie = _owner()
    client = ChatClient(cookie)

    async def scenario() -> list[str]:
        await client.connect(running[0].url)
        first = await client.say(INTRO)
        await client.wait_replied()
        # NOTE: the same id again, on another socket that has seen nothing yet: the turns
        # first stored come, and no second reply is made.
        late = ChatClient(cookie)
        await late.connect(running[1].url)
        await late.say(INTRO, message_id=first)
        await late.wait_replied()
        assert [t["seq"] for t in late.turns] == [1, 2] and late.problems == []
        # NOTE: and on the first socket, which has the reply: nothing more comes.
        await client.say(INTRO, message_id=first)
        await asyncio.sleep(1.0)
        client.outbox.clear()
        await client.close()
        await late.close()
        return [first]

    ids = asyncio.run(scenario())
    check_stored(owner, client, ids)
    assert client.turns[1]["content"].startswith("Nice to meet you, Wang Jianguo!")
    assert client.deltas > 1


def test_a_client_that_drops_mid_reply_and_reconnects_to_the_other_instance_gets_the_rest(
    running: list[Instance],
) -> None:
    owner, cookie = _owner()
    client = ChatClient(cookie, session_id="laptop")

    async def scenario() -> list[str]:
        await client.connect(running[0].url)
        ids = [await client.say(INTRO)]
        await _until(lambda: client.deltas >= 2)
        await client.drop()
        # NOTE: the session id changes with the reconnect: the memory is the user's.
        client.session_id = "phone"
        await client.connect(running[1].url)
        await client.wait_replied()
        ids.append(await client.say(ASK))
        await _until(lambda: client.deltas >= 1 and client.partial)
        await client.drop()
        await client.connect(running[0].url)
        await client.wait_replied()
        await client.close()
        return ids

    ids = asyncio.run(scenario())
    check_stored(owner, client, ids)
    assert client.turns[-1]["content"] == "Your name is Wang Jianguo."


def test_an_instance_killed_mid_reply_leaves_it_to_the_other_once_the_client_resends(
    running: list[Instance],
) -> None:
    owner, cookie = _owner()
    client = ChatClient(cookie)

    async def scenario() -> list[str]:
        await client.connect(running[0].url)
        ids = [await client.say(INTRO)]
        await _until(lambda: client.deltas >= 2)
        running[0].kill()
        await client.drop()
        await client.connect(running[1].url)
        await client.wait_replied()
        await client.close()
        return ids

    ids = asyncio.run(scenario())
    check_stored(owner, client, ids)
    running[0].start()


def test_a_redis_pause_during_the_reconnect_delays_nothing_it_must_not(
    running: list[Instance], redis_server: RedisServer
) -> None:
    owner, cookie = _owner()
    client = ChatClient(cookie)

    async def scenario() -> list[str]:
        await client.connect(running[0].url)
        ids = [await client.say(INTRO)]
        await _until(lambda: client.deltas >= 2)
        await client.drop()
        redis_server.pause()
        try:
            await client.connect(running[1].url)
            await client.wait_replied(timeout=20)
            ids.append(await client.say(ASK))
            await client.wait_replied(timeout=20)
        finally:
            redis_server.resume()
        await client.close()
        return ids

    ids = asyncio.run(scenario())
    check_stored(owner, client, ids)


def test_two_sockets_of_one_owner_on_two_instances_each_get_every_turn_once(
    running: list[Instance],
) -> None:
    owner, cookie = _owner()
    laptop, phone = ChatClient(cookie, session_id="laptop"), ChatClient(cookie, session_id="phone")

    async def scenario() -> list[str]:
        await laptop.connect(running[0].url)
        await phone.connect(running[1].url)
        ids = [await laptop.say(INTRO), await phone.say(ASK), await laptop.say("I like tea")]
        await laptop.wait_replied()
        await phone.wait_replied()
        await _until(lambda: laptop.last_seq == 6 and phone.last_seq == 6)
        await laptop.close()
        await phone.close()
        return ids

    ids = asyncio.run(scenario())
    check_stored(owner, laptop, ids)
    check_stored(owner, phone, ids)


def test_a_resume_read_late_still_gets_every_turn_after_it_once_in_order(
    running: list[Instance],
) -> None:
    """A socket whose client says nothing for 3 s (a loaded client or server), while turns of its
    owner are stored and published meanwhile: nothing goes out before its resume, then every turn
    after it once, in order."""
    owner, cookie = _owner()
    talker, late = ChatClient(cookie, session_id="talker"), ChatClient(cookie, session_id="late")

    async def scenario() -> list[str]:
        await talker.connect(running[0].url)
        ids = [await talker.say(INTRO)]
        await talker.wait_replied()
        opening = asyncio.get_running_loop().create_task(late.connect(running[1].url, silent_for=3))
        await asyncio.sleep(0.5)
        ids.append(await talker.say(ASK))
        await talker.wait_replied()
        await opening
        await _until(lambda: late.last_seq == 4)
        await talker.close()
        await late.close()
        return ids

    ids = asyncio.run(scenario())
    check_stored(owner, talker, ids)
    check_stored(owner, late, ids)


@pytest.mark.slow
def test_a_soak_of_fifty_clients_reconnecting_at_random_loses_and_doubles_nothing(
    running: list[Instance],
) -> None:
    """50 clients for 30 s, each sending and dropping at random, reconnecting to a random
    instance; the instances' memory after is within a bound of what it was after a warm-up."""
    users = [_owner() for _ in range(50)]
    clients = [ChatClient(cookie, session_id=f"s{n}") for n, (_, cookie) in enumerate(users)]
    sent: list[list[str]] = [[] for _ in clients]
    rss: dict[str, list[int]] = {"before": [], "after": []}

    async def one(n: int, client: ChatClient, until: float) -> None:
        rng = random.Random(n)
        await client.connect(rng.choice(running).url)
        while time.monotonic() < until:
            # NOTE: as a client should, never more in flight than the server takes (4).
            if not client.outbox or (len(client.outbox) < 4 and rng.random() < 0.3):
                sent[n].append(await client.say(rng.choice([INTRO, ASK, "I like tea"])))
            await asyncio.sleep(rng.uniform(0.1, 1.0))
            if rng.random() < 0.3:
                await client.drop()
                await asyncio.sleep(rng.uniform(0.0, 0.3))
                await client.connect(rng.choice(running).url)
        await client.wait_replied(timeout=60)
        await client.close()

    async def soak(seconds: float) -> None:
        until = time.monotonic() + seconds
        await asyncio.gather(*(one(n, c, until) for n, c in enumerate(clients)))

    # NOTE: a warm-up (imports, pools, caches), then the memory the instances hold.
    asyncio.run(soak(3))
    rss["before"] = [instance.rss_kib() for instance in running]
    asyncio.run(soak(30))
    rss["after"] = [instance.rss_kib() for instance in running]
    for (owner, _), client, ids in zip(users, clients, sent, strict=True):
        check_stored(owner, client, ids)
    for before, after in zip(rss["before"], rss["after"], strict=True):
        # NOTE: flat: what a leak of the 50 clients' hundreds of sockets and replies would pass.
        assert after - before < 20_000, rss


def test_bad_frames_are_refused_and_store_nothing(running: list[Instance]) -> None:
    """Bad input gets an error frame (or, past the size cap, the socket closed with 1009);
    nothing is stored, and a message's fields never choose its owner."""
    import json

    import websockets

    from tests.chat_sockets import ORIGIN, stored_turns

    owner, cookie = _owner()
    other, _ = _owner()

    async def frames(ws: object, count: int) -> list[dict[str, object]]:
        return [json.loads(await asyncio.wait_for(ws.recv(), 10)) for _ in range(count)]  # type: ignore[attr-defined]

    async def scenario() -> tuple[list[dict[str, object]], int | None, list[int | None]]:
        headers = {"Cookie": cookie}
        async with websockets.connect(
            running[0].url, origin=ORIGIN, additional_headers=headers
        ) as ws:
            await ws.send("not json")
            await ws.send(json.dumps({"type": "shout"}))
            await ws.send(json.dumps({"type": "message", "id": "", "content": "hi"}))
            await ws.send(json.dumps({"type": "message", "id": "a", "content": "x\x00y"}))
            await ws.send(json.dumps({"type": "resume", "after_seq": -1}))
            got = await frames(ws, 5)
            # NOTE: more messages in flight than a socket may hold: the fifth is refused.
            for n in range(5):
                await ws.send(json.dumps({"type": "message", "id": f"m{n}", "content": "hi",
                                          "user_id": other, "owner_id": other}))  # fmt: skip
            while not any(f.get("code") == "too_many_in_flight" for f in got):
                got += await frames(ws, 1)
            # NOTE: one frame over the cap closes the socket, and nothing of it is stored.
            await ws.send(json.dumps({"type": "message", "id": "big", "content": "x" * 300_000}))
            with contextlib.suppress(websockets.ConnectionClosed):
                while True:
                    await asyncio.wait_for(ws.recv(), 10)
            big_close = ws.close_code
        closes = []
        # NOTE: no user (no session) and a page of another site: refused before any frame.
        for origin, extra in ((ORIGIN, {}), ("http://evil.example", headers)):
            try:
                async with websockets.connect(
                    running[0].url, origin=origin, additional_headers=extra
                ) as ws:
                    await asyncio.wait_for(ws.recv(), 10)
            except websockets.ConnectionClosed as e:
                closes.append(e.rcvd.code if e.rcvd else None)
            except websockets.InvalidStatus as e:
                closes.append(e.response.status_code)
        return got, big_close, closes

    import contextlib

    got, big_close, closes = asyncio.run(scenario())
    codes = [f.get("code") for f in got if f.get("type") == "error"]
    assert codes[:5] == ["bad_json", "bad_type", "invalid", "invalid", "invalid"]
    assert "too_many_in_flight" in codes
    assert big_close == 1009
    assert closes == [4401, 403]
    deadline = time.monotonic() + 15
    while len(stored_turns(owner)) < 8 and time.monotonic() < deadline:
        time.sleep(0.1)  # the four messages taken are answered, one after the other
    turns = stored_turns(owner)
    assert sorted(t["metadata"]["message_id"] for t in turns if t["role"] == "user") == [
        "m0", "m1", "m2", "m3",
    ]  # fmt: skip
    assert stored_turns(other) == []
