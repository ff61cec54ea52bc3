"""Many clients at once, for a bounded time: across two real app instances (gunicorn) every
owner's turns are exactly 1..N, every acknowledged write is there, and every context equals
Postgres; on one uvicorn instance, one user sending the heaviest reads it may stalls nothing
(no 5xx, ``health/`` p99 under 100 ms, Postgres connections bounded)."""

from __future__ import annotations

import http.client
import json
import os
import random
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from rest_framework.authtoken.models import Token

from memory import services
from tests.instance import database_url, environment
from tests.servers import RedisServer, uvicorn_demo
from tests.stack import AppStack, app_stack, turns_listed

pytestmark = pytest.mark.faults

DURATION = 4.0


@pytest.fixture(scope="module")
def stack() -> Iterator[AppStack]:
    with (
        RedisServer() as cache,
        app_stack(server_url=os.environ["DATABASE_URL"], redis_url=cache.url) as stack,
    ):
        yield stack


def test_many_clients_many_owners_across_instances(stack: AppStack):
    run = uuid.uuid4().hex[:6]
    hot = f"hot-{run}"
    acknowledged: dict[str, dict[int, str]] = {}
    lock = threading.Lock()
    errors: list[str] = []
    deadline = time.monotonic() + DURATION

    def client(n: int) -> None:
        own = f"owner-{run}-{n}"
        k = 0
        while time.monotonic() < deadline:
            owner = hot if k % 2 == 0 else own
            content = f"client {n} turn {k}"
            response = stack.request(
                k % stack.instances,
                "POST",
                f"/api/memory/users/{owner}/turns/",
                {"session_id": f"device-{n}", "role": "user", "content": content},
            )
            if response.status != 201:
                errors.append(f"{response}")
            else:
                with lock:
                    acknowledged.setdefault(owner, {})[response.data["seq"]] = content
            read = stack.request(
                (k + 1) % stack.instances, "GET", f"/api/memory/users/{owner}/context/?turns=5"
            )
            if read.status != 200:
                errors.append(f"{read}")
            k += 1

    threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    # NOTE: how many depends on the machine; the point is that several clients overlapped.
    assert len(acknowledged[hot]) >= 8
    for owner, turns in acknowledged.items():
        listed = turns_listed(stack, owner)
        seqs = [t["seq"] for t in listed]
        assert seqs == list(range(1, len(seqs) + 1))
        assert {t["seq"]: t["content"] for t in listed} == turns
        for i in range(stack.instances):
            for _ in range(2):
                context = stack.request(i, "GET", f"/api/memory/users/{owner}/context/?turns=50")
                assert context.data["turns"] == listed[-50:]


# One user at full weight under uvicorn -------------------------------------------------------

CLIENTS = 32
# The heavy user's threads: each sends the heaviest reads the API has, back to back, and waits
# as Retry-After says when refused; so one heavy read of theirs is always in flight.
HEAVY_THREADS = 6
LOAD_SECONDS = 10.0
HEAVY_TURNS = 220
TURN_CHARS = 32_000
# A chat client's pause between two exchanges (an append and a context read), drawn from this
# range in seconds: people chatting (quicker than people type), not a benchmark loop.
CHAT_PAUSE = (1.0, 3.0)
# Backends of requests that ended may still be exiting when the sampler looks.
EXITING_BACKENDS = 4

# A separate process measures health/, so that the load's threads here cannot delay its clock.
PROBE = """
import http.client, json, sys, time
port, seconds = int(sys.argv[1]), float(sys.argv[2])
latencies, statuses = [], []
deadline = time.monotonic() + seconds
while time.monotonic() < deadline:
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/api/memory/health/")
    response = conn.getresponse()
    response.read()
    conn.close()
    latencies.append(time.perf_counter() - started)
    statuses.append(response.status)
    time.sleep(0.02)
print(json.dumps({"latencies": latencies, "statuses": statuses}))
"""


@pytest.fixture
def uvicorn_instance(own_redis: RedisServer) -> Iterator[int]:
    """The demo project under uvicorn, one process, on this test's database and its own
    redis-server, with no rate throttle (the limit under test is the one on work in flight)."""
    env = {
        **environment(),
        "DJANGO_SETTINGS_MODULE": "tests.instance_settings",
        "MEMORY_OVERRIDES": json.dumps({"KEY_PREFIX": settings.TEST_KEY_PREFIX}),
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": "asgi-load-only-secret-key-" + "x" * 40,
        "REDIS_URL": own_redis.url,
        "MEMORY_LOG_LEVEL": "WARNING",
        "MEMORY_THROTTLE_USER": "",
        "MEMORY_THROTTLE_ANON": "",
        # NOTE: under ASGI each sync request runs in a thread of its own: a connection kept for
        # 60 s (the demo's default) outlives its thread, and they pile up to max_connections
        # (98 of 100 in 10 s here, then 503s). Closed at each request's end, there is one per
        # request in flight (and Django's pool, where the project has one, needs 0 too).
        "DATABASE_CONN_MAX_AGE": "0",
        # NOTE: Django's pool under ASGI, as large as the clients: a request never waits for a
        # connection, and the bound below is the pool's size.
        "DATABASE_POOL_SIZE": str(CLIENTS + 1),
    }
    with uvicorn_demo(env, name="asgi-load") as port:
        yield port


def _call(port: int, path: str, token: str, body: object = None) -> int:
    """One request (a POST of ``body`` if given, else a GET); its status."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        headers = {"Authorization": f"Token {token}"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        conn.request("GET" if body is None else "POST", path, body=data, headers=headers)
        response = conn.getresponse()
        # NOTE: read whole, never decoded: a client's JSON parsing is not the server's work.
        response.read()
        return response.status
    finally:
        conn.close()


def _connection_bound() -> int:
    """The most Postgres connections the instance's settings allow: its pool's size where the
    project pools connections, else one per request in flight (under ASGI each sync request
    runs in a thread of its own, with its own connection) and the repairer thread's."""
    pool = settings.DATABASES["default"].get("OPTIONS", {}).get("pool")
    if isinstance(pool, dict):
        return int(pool.get("max_size") or pool.get("min_size") or 4)
    if pool:
        # NOTE: psycopg_pool's default size.
        return 4
    return CLIENTS + 1


def _words(rng: random.Random, chars: int) -> str:
    # NOTE: few distinct words: each new one costs the search vocabulary's keys (migration 0007).
    vocabulary = [f"{word}{n}" for n in range(5) for word in ("play", "tea", "city", "note")]
    text = " ".join(rng.choice(vocabulary) for _ in range(chars // 6))
    return f"basketball {text}"[:chars]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_one_user_at_full_weight_does_not_stall_an_asgi_instance(uvicorn_instance):
    port = uvicorn_instance
    rng = random.Random(23)
    heavy = Token.objects.create(user=User.objects.create_user("heavy")).key
    service = Token.objects.create(user=User.objects.create_superuser("svc", password="pw")).key
    for _ in range(HEAVY_TURNS):
        services.turn_append(
            owner_id="heavy", session_id="s", role="assistant", content=_words(rng, TURN_CHARS)
        )
    connection.close()
    # NOTE: the heaviest reads an ordinary user may send: a search through 220 turns of 32 KB,
    # 200 of them as messages (6 MB), a page of 500 (MEMORY["MAX_PAGE_BYTES"] cuts it to 1 MiB),
    # a context of 200 (6 MB).
    heavy_reads = [
        "/api/memory/users/heavy/search/?q=basketball+tea1",
        "/api/memory/users/heavy/context/messages/?max_tokens=10000000",
        "/api/memory/users/heavy/turns/?limit=500",
        "/api/memory/users/heavy/context/?turns=200",
    ]
    statuses: dict[str, list[int]] = {"heavy": [], "chat": []}
    lock = threading.Lock()
    stop = threading.Event()

    def heavy_client(n: int) -> None:
        k = n
        while not stop.is_set():
            status = _call(port, heavy_reads[k % len(heavy_reads)], heavy)
            with lock:
                statuses["heavy"].append(status)
            k += 1
            if status == 429:
                time.sleep(1.0)

    def chat_client(n: int) -> None:
        owner = f"chat-{n}"
        pace = random.Random(n)
        time.sleep(pace.uniform(0, CHAT_PAUSE[1]))
        k = 0
        while not stop.is_set():
            turn = {"session_id": "web", "role": "user", "content": f"message {k} of {n}"}
            written = _call(port, f"/api/memory/users/{owner}/turns/", service, turn)
            read = _call(port, f"/api/memory/users/{owner}/context/", service)
            with lock:
                statuses["chat"] += [written, read]
            k += 1
            time.sleep(pace.uniform(*CHAT_PAUSE))

    connections: list[int] = []

    def sampler() -> None:
        with psycopg.connect(database_url(), autocommit=True) as conn:
            while not stop.is_set():
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND pid <> pg_backend_pid()"
                ).fetchone()
                connections.append(row[0] if row else 0)
                time.sleep(0.05)

    # NOTE: 32 clients: one prober of health/ (its own process), the heavy user's threads and
    # chat clients, each appending to and reading its own memory.
    probe = subprocess.Popen(
        [sys.executable, "-c", PROBE, str(port), str(LOAD_SECONDS)],
        stdout=subprocess.PIPE,
        text=True,
    )
    threads = [threading.Thread(target=heavy_client, args=(n,)) for n in range(HEAVY_THREADS)]
    threads += [
        threading.Thread(target=chat_client, args=(n,)) for n in range(CLIENTS - 1 - HEAVY_THREADS)
    ]
    threads.append(threading.Thread(target=sampler))
    for thread in threads:
        thread.start()
    out, _ = probe.communicate(timeout=LOAD_SECONDS + 60)
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    health = json.loads(out)
    latencies = sorted(health["latencies"])
    p99 = latencies[int(len(latencies) * 0.99)]
    # NOTE: measured, for the record (pytest -s); the bounds below are the issue's.
    print(
        f"health: {len(latencies)} probes, p50 {latencies[len(latencies) // 2] * 1000:.1f} ms,"
        f" p99 {p99 * 1000:.1f} ms, max {latencies[-1] * 1000:.1f} ms;"
        f" heavy: {statuses['heavy'].count(200)} x 200, {statuses['heavy'].count(429)} x 429;"
        f" chat: {len(statuses['chat'])} requests; Postgres connections at most {max(connections)}"
    )
    assert set(health["statuses"]) == {200}
    assert [s for s in statuses["heavy"] + statuses["chat"] if s >= 500] == []
    # The heavy user was served, up to its limit, and refused past it.
    assert statuses["heavy"].count(200) > 0 and statuses["heavy"].count(429) > 0
    assert set(statuses["heavy"]) <= {200, 429}
    assert set(statuses["chat"]) <= {200, 201}
    assert max(connections) <= _connection_bound() + EXITING_BACKENDS
    # NOTE: the bound. Served by Django, health/ waited for the interpreter's lock, which
    # the heavy reads hold, at each of its 15 hops between the event loop and a thread: p99
    # 55-187 ms on this 2-core machine. The demo answers it on the event loop, ahead of Django,
    # from a probe at most 0.25 s old (memory.asgi.HealthFastPath): p99 12-31 ms, 20-90 ms
    # while other suites kept the machine busy.
    assert p99 < 0.1
