"""Many clients at once across two real app instances, for a bounded time: every owner's turns
are exactly 1..N, every acknowledged write is there, and every context equals Postgres."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.servers import RedisServer
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
