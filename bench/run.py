"""``python -m bench``: seed the bench database, measure every row against its baseline in the same
run, print one table and write it as JSON (``bench/results/latest.json``).

``--only warm,cold`` runs some rows; ``--profile ROW`` runs a row's project operation under
pyinstrument instead of measuring it; ``--phases`` takes the ``append_floor`` row's calls apart
(``bench/phases.py``). Row ids: see ``ROWS``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from bench.embed import EmbedRows
from bench.failover import FailoverRows
from bench.mixed import MIX_OWNERS, MIX_TURNS, MixedRows, mix_owner
from bench.recall import RecallRows
from bench.rows import SEARCH_OWNER, SEARCH_TURNS, TOTAL_TURNS, Row
from bench.tail import TailRows
from bench.websocket import WebsocketRows

if TYPE_CHECKING:
    from bench.seed import OwnerPlan

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_JSON = ROOT / "bench" / "results" / "latest.json"

ROWS = (
    "warm",
    "async_warm",
    "cold",
    "append",
    "append_floor",
    "summary_refresh",
    "blob",
    "http_get",
    "http_post",
    "http_post_floor",
    "cold_big",
    "herd",
    "redis_mem",
    "search",
    "semantic_search",
    "recall",
    "quality",
    "append_embed",
    "search_health",
    "cluster",
    "tool_http",
    "mcp",
    "export",
    "mixed",
    "websocket",
    "append_tail",
    "embed_rate",
    "embed_mix",
    "embed_cores",
    "embed_lag",
    "failover",
)

TOTAL_OWNERS = 1_000
CONTENT_CHARS = 200
# NOTE: the other owners' turns give the table its size; short, so that the search column and
# its GIN indexes (computed by Postgres for every row) cost the seed seconds, not minutes.
FILLER_CHARS = 32
FACTS = {
    "name": "Wang Jianguo",
    "preferred_name": "Xiao Wang",
    "likes": ["basketball", "jazz", "noodles"],
    "dislikes": ["cilantro"],
    "location": "Shanghai",
    "occupation": "teacher",
    "language": "Mandarin",
    "timezone": "Asia/Shanghai",
    "pet": {"kind": "cat", "name": "Mimi"},
    "birthday": "1988-05-04",
}
HTTP_OWNERS = 32
HTTP_CONNECTIONS = 16
# The baseline's word: in about 3% of the owner's turns.
SEARCH_BASELINE_WORD = "python"
# NOTE: what issue 12 timed at 0.5-5.6 s: a typo, a list of near misses, no match, stop words
# only, and Chinese (a phrase, a character in a sixth of the turns, mixed with English).
SEARCH_QUERIES = {
    "typo": "basktball",
    "two typos": "basktball shangai",
    "typo of a rare word": "pythn",
    "near-miss list": (
        "basktballs shangaii teachrr memroy contxt musik coffe nodles wekend frend liek werk"
        " basktbal shanghia teecher"
    ),
    "no match": "xylophone",
    "stop words only": "the and of to in is it",
    "Chinese phrase": "我喜欢打篮球",
    "Chinese character": "我",
    "mixed": "like 篮球",
    "common word": "like",
}


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return ""
    if unit == "us":
        return f"{value * 1e6:,.0f} us"
    if unit == "req/s":
        return f"{value:,.0f} req/s"
    if unit == "bytes":
        return f"{value:,.0f} B"
    if unit == "count":
        return f"{value:,.0f}"
    return f"{value:,.1f} {unit}"


def table(rows: list[Row]) -> str:
    """The rows as a Markdown table."""
    lines = [
        "| row | project | baseline | baseline is | ratio | target | met |",
        "| --- | ---: | ---: | --- | ---: | --- | --- |",
    ]
    for row in rows:
        ratio = "" if row.ratio is None else f"{row.ratio:.2f}x"
        if row.unit == "count" and row.ratio is not None:
            ratio = f"{row.ratio:.0f}"
        elif row.spread is not None and row.ratio is not None:
            ratio += f" ({row.spread[0]:.2f}-{row.spread[1]:.2f})"
        met = {True: "yes", False: "**no**", None: "shown"}[row.met]
        lines.append(
            f"| {row.title} | {_fmt(row.project, row.unit)} | {_fmt(row.baseline, row.unit)}"
            f" | {row.baseline_title} | {ratio} | {row.target or 'shown'} | {met} |"
        )
    return "\n".join(lines)


# --- set-up -----------------------------------------------------------------------------------


def _django_setup() -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    import django

    django.setup()


class Bench(RecallRows, MixedRows, WebsocketRows, TailRows, EmbedRows, FailoverRows):
    """The bench's state: its settings, connections and seeded owners."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        import psycopg
        from django.conf import settings

        from bench.seed import connect_params

        self.settings = settings
        self.raw = psycopg.connect(autocommit=True, **connect_params(settings.DATABASE_URL))  # type: ignore[arg-type]
        import redis

        self.redis = redis.Redis.from_url(settings.REDIS_URL)
        self.token = ""
        self.pool10: list[str] = []
        self.blob_pool: list[str] = []
        self.timings: dict[str, float] = {}

    # -- seeding --------------------------------------------------------------------------------

    def keys_clear(self) -> int:
        """Delete every Redis key under the bench's own prefix; never anything else."""
        from memory import cache

        keys = list(self.redis.scan_iter(match=f"{self.settings.KEY_PREFIX}:*", count=1000))
        for start in range(0, len(keys), 1000):
            self.redis.delete(*keys[start : start + 1000])
        cache.reset()
        return len(keys)

    def pool_size(self) -> int:
        return self.args.rounds * self.args.per_round + self.args.warmup + 1

    def plans(self) -> list[OwnerPlan]:
        """Every owner of the bench: those the rows measure, then fillers up to a million turns
        of a thousand owners."""
        from bench.seed import OwnerPlan

        self.pool10 = [f"p10-{i:04d}" for i in range(self.pool_size())]
        plans = [
            OwnerPlan("huge", 100_000),
            OwnerPlan("ten", 10),
            OwnerPlan("ctx", 100),
            OwnerPlan("hist10k", 10_000),
            OwnerPlan("herd", 100),
            OwnerPlan("mem", 20),
            OwnerPlan("floor-app", 10),
            OwnerPlan("floor-raw", 10),
            *(OwnerPlan(f"hg-{i:02d}", 100) for i in range(HTTP_OWNERS)),
            *(OwnerPlan(f"hp-{i:02d}", 10) for i in range(HTTP_OWNERS)),
            *(OwnerPlan(f"hf-{i:02d}", 10) for i in range(HTTP_OWNERS)),
            *(OwnerPlan(owner_id, 10) for owner_id in self.pool10),
            OwnerPlan(SEARCH_OWNER, SEARCH_TURNS, chat=True),
            *(OwnerPlan(mix_owner(i), MIX_TURNS) for i in range(MIX_OWNERS)),
        ]
        # NOTE: the mixed load's owners come on top of the thousand; the million turns stay.
        fillers = TOTAL_OWNERS + MIX_OWNERS - len(plans)
        per_filler, extra = divmod(TOTAL_TURNS - sum(plan.turns for plan in plans), fillers)
        plans += [
            OwnerPlan(f"f-{i:04d}", per_filler + (1 if i < extra else 0), FILLER_CHARS)
            for i in range(fillers)
        ]
        return plans

    def seed(self) -> None:
        """Seed the million turns, or keep those of the last run when the plan and the schema
        are the same and put back as seeded the owners that run wrote to."""
        from django.contrib.auth.models import Permission, User
        from rest_framework.authtoken.models import Token

        from bench.seed import (
            blob_seed,
            facts_seed,
            owners_delete,
            schema_signature,
            seed_turns,
            signature_get,
            signature_set,
            tables_reset,
            turns_trim,
        )

        started = time.perf_counter()
        self.keys_clear()
        plans = self.plans()
        # NOTE: the plan's own owners (not the fillers) are part of it: a row that adds one reseeds.
        named = hashlib.blake2b(
            " ".join(
                plan.owner_id for plan in plans if not plan.owner_id.startswith("f-")
            ).encode(),
            digest_size=6,
        ).hexdigest()
        signature = (
            f"{TOTAL_TURNS}/{TOTAL_OWNERS}/{len(self.pool10)}/{FILLER_CHARS}/{CONTENT_CHARS}/"
            f"{named}/{SEARCH_OWNER}:{SEARCH_TURNS}:chat/{schema_signature(self.raw)}"
        )
        if self.args.reseed or signature_get(self.raw) != signature:
            tables_reset(self.raw)
            seeded = seed_turns(self.raw, plans, bulk=True)
            with_facts = ["huge", "ten", "ctx", "herd", "mem"]
            with_facts += [f"hg-{i:02d}" for i in range(HTTP_OWNERS)]
            facts_seed(self.raw, [seeded.pks[owner_id] for owner_id in with_facts], FACTS)
            self.raw.execute("VACUUM ANALYZE")
            # NOTE: a service caller holds the permission (being staff grants nothing).
            user, _ = User.objects.get_or_create(username="bench-service")
            user.user_permissions.add(
                Permission.objects.get(
                    content_type__app_label="memory", codename="access_all_memories"
                )
            )
            Token.objects.get_or_create(user=user)
            signature_set(self.raw, signature)
            self.timings["seed_s"] = round(time.perf_counter() - started, 2)
            self.timings["seed_copy_s"] = round(seeded.seconds, 2)
            print(
                f"seeded {seeded.turns:,} turns of {seeded.owners:,} owners in"
                f" {self.timings['seed_s']:.1f} s (COPY with the indexes rebuilt after:"
                f" {seeded.seconds:.1f} s)",
                flush=True,
            )
        else:
            base = {
                pk: next(plan.turns for plan in plans if plan.owner_id == owner_id)
                for pk, owner_id in self.raw.execute(
                    "SELECT id, external_id FROM memory_owner WHERE external_id = ANY(%s)",
                    [[plan.owner_id for plan in plans if not plan.owner_id.startswith("f-")]],
                )
            }
            known = {plan.owner_id for plan in plans}
            strays = [
                owner_id
                for (owner_id,) in self.raw.execute("SELECT external_id FROM memory_owner")
                if owner_id not in known
            ]
            owners_delete(self.raw, strays)
            trimmed = turns_trim(self.raw, base)
            self.timings["reset_s"] = round(time.perf_counter() - started, 2)
            print(
                f"kept the million turns of the last run (same plan and schema); {trimmed:,}"
                f" turns it appended deleted in {self.timings['reset_s']:.1f} s",
                flush=True,
            )
        self.blob_pool = [
            f"b10-{i:04d}"
            for i in range(self.args.per_round_blob * self.args.rounds + self.args.warmup + 1)
        ]
        blob_seed(self.raw, {"blob10k": 10_000, **dict.fromkeys(self.blob_pool, 10)}, CONTENT_CHARS)
        self.token = Token.objects.get(user__username="bench-service").key
        count = self.raw.execute("SELECT count(*) FROM memory_turn").fetchone()
        owners = self.raw.execute("SELECT count(*) FROM memory_owner").fetchone()
        self.timings["turns"] = count[0] if count else 0
        self.timings["owners"] = owners[0] if owners else 0
        self.timings["ready_s"] = round(time.perf_counter() - started, 2)

    # -- operations -----------------------------------------------------------------------------

    def warm_ops(self) -> tuple[Callable[[], float], Callable[[], float]]:
        from bench.timing import timed
        from memory import cache, selectors
        from memory.conf import conf

        selectors.context_get(owner_id="ctx")
        assert selectors.context_get(owner_id="ctx")["source"] == "cache"
        ttl = conf.CACHE_TTL
        redis_client = self.redis
        # The baseline: the same payloads, one hash field each (a turn's or a fact's packed
        # array), in a hash of the bench's own; it knows which fields the context needs and
        # fetches just those.
        context = selectors.context_get(owner_id="ctx")
        snapshot = cache.copy.copy_read(owner_id="ctx", turns=conf.CONTEXT_TURNS)
        assert isinstance(snapshot, cache.copy.Hit)
        key = f"{self.settings.KEY_PREFIX}:bench-raw:{{ctx}}"
        fields = {f"t:{turn['seq']}": cache.copy.turn_pack(turn) for turn in context["turns"]}
        fields |= {
            f"f:{fact['key']}": cache.copy.fact_pack(fact) for fact in snapshot.snapshot.facts
        }
        redis_client.delete(key)
        redis_client.hset(key, mapping=fields)  # type: ignore[arg-type]
        names = list(fields)

        def raw() -> object:
            pipe = redis_client.pipeline(transaction=False)
            pipe.hmget(key, names)
            pipe.expire(key, ttl)
            return pipe.execute()

        return timed(lambda: selectors.context_get(owner_id="ctx")), timed(raw)

    def raw_cold(self, owner_id: str, turns: int) -> Callable[[], object]:
        raw = self.raw

        def read() -> object:
            row = raw.execute(
                "SELECT id, stamp FROM memory_owner WHERE external_id = %s", [owner_id]
            ).fetchone()
            assert row is not None
            rows = raw.execute(
                "SELECT seq, session_id, role, content, metadata, created_at FROM memory_turn"
                " WHERE owner_id = %s ORDER BY seq DESC LIMIT %s",
                [row[0], turns],
            ).fetchall()
            facts = raw.execute(
                "SELECT key, value, session_id, updated_at, version FROM memory_fact"
                " WHERE owner_id = %s ORDER BY key",
                [row[0]],
            ).fetchall()
            return row, rows, facts

        return read

    def cold_op(self, owner_id: str) -> Callable[[], float]:
        from memory import cache, selectors

        def op() -> float:
            cache.copy.copy_evict(owner_id=owner_id)
            started = time.perf_counter()
            context = selectors.context_get(owner_id=owner_id)
            elapsed = time.perf_counter() - started
            assert context["source"] == "database", context["source"]
            return elapsed

        return op

    def cold_ops(self) -> tuple[Callable[[], float], Callable[[], float]]:
        from bench.timing import timed
        from memory.conf import conf

        depth = max(conf.CONTEXT_TURNS, conf.CACHE_TURNS + 1)
        return self.cold_op("ctx"), timed(self.raw_cold("ctx", depth))

    def append_ops(self) -> tuple[Callable[[], float], Callable[[], float]]:
        from bench.timing import timed
        from memory import selectors, services

        content = "x" * CONTENT_CHARS
        pool = iter(self.pool10)
        for owner_id in [*self.pool10, "hist10k"]:
            selectors.context_get(owner_id=owner_id)

        def append(owner_id: str) -> object:
            return services.turn_append(
                owner_id=owner_id, session_id="s1", role="user", content=content
            )

        return timed(lambda: append("hist10k")), timed(lambda: append(next(pool)))

    def append_floor_ops(self) -> tuple[Callable[[], float], Callable[[], float]]:
        """``turn_append`` of a user turn with nothing to extract, warm cache, against its floor
        (``bench.floor``: one SQL statement on the same tables, committed, then one Redis EVAL
        appending the payload)."""
        from bench.floor import SESSION_SQL, floor_append
        from bench.timing import timed
        from memory import cache, selectors, services
        from memory.conf import conf

        content = "x" * CONTENT_CHARS
        selectors.context_get(owner_id="floor-app")
        raw, redis_client = self.raw, self.redis
        key = cache.keys.owner_key("floor-raw")
        raw.execute(SESSION_SQL, {"owner": "floor-raw", "session": "s1"})

        def floor() -> object:
            return floor_append(
                raw.execute, redis_client, owner="floor-raw", session="s1", content=content,
                key=key, ttl=conf.CACHE_TTL,
            )  # fmt: skip

        def append() -> object:
            return services.turn_append(
                owner_id="floor-app", session_id="s1", role="user", content=content
            )

        return timed(append), timed(floor)

    def async_warm_ops(self) -> tuple[Callable[[], float], Callable[[], float]]:
        """``acontext_get`` on a warm copy, awaited in a running event loop, against its sync
        twin ``context_get`` called directly: what the async front door costs."""
        import asyncio
        import time

        from memory import selectors

        selectors.context_get(owner_id="ctx")
        loop = asyncio.new_event_loop()

        async def many(n: int) -> float:
            started = time.perf_counter()
            for _ in range(n):
                await selectors.acontext_get(owner_id="ctx")
            return (time.perf_counter() - started) / n

        def sync_once() -> float:
            started = time.perf_counter()
            selectors.context_get(owner_id="ctx")
            return time.perf_counter() - started

        assert loop.run_until_complete(selectors.acontext_get(owner_id="ctx"))["source"] == "cache"
        return (lambda: loop.run_until_complete(many(1))), sync_once

    def blob_ops(self) -> tuple[Callable[[], float], Callable[[], float]]:
        import orjson

        from bench.timing import timed

        raw = self.raw
        content = "x" * CONTENT_CHARS
        pool = iter(self.blob_pool)

        def append(owner_id: str) -> object:
            with raw.transaction():
                row = raw.execute(
                    "SELECT doc::text FROM bench_blob WHERE owner = %s FOR UPDATE", [owner_id]
                ).fetchone()
                assert row is not None
                turns = orjson.loads(row[0])
                turns.append(
                    {
                        "seq": len(turns) + 1,
                        "session_id": "s1",
                        "role": "user",
                        "content": content,
                        "metadata": {},
                        "created_at": dt.datetime.now(dt.UTC).isoformat(),
                    }
                )
                raw.execute(
                    "UPDATE bench_blob SET doc = %s::jsonb WHERE owner = %s",
                    [orjson.dumps(turns).decode(), owner_id],
                )
            return turns

        return timed(lambda: append("blob10k")), timed(lambda: append(next(pool)))

    def cold_big_ops(self) -> tuple[Callable[[], float], Callable[[], float]]:
        return self.cold_op("huge"), self.cold_op("ten")

    def client_ops(self) -> tuple[Callable[[], float], Callable[[], float]]:
        """GET context and POST turn through Django's test client, in this process (profiling
        the HTTP rows without a server)."""
        from django.test import Client

        from bench.seed import content_of
        from bench.timing import timed
        from memory import selectors

        selectors.context_get(owner_id="hg-00")
        client = Client(HTTP_HOST="127.0.0.1", HTTP_AUTHORIZATION=f"Token {self.token}")
        body = {"session_id": "web", "role": "user", "content": content_of(CONTENT_CHARS, 1)}

        def get() -> object:
            response = client.get("/api/memory/users/hg-00/context/")
            assert response.status_code == 200, response.content
            return response

        def post() -> object:
            response = client.post(
                "/api/memory/users/hp-00/turns/", body, content_type="application/json"
            )
            assert response.status_code == 201, response.content
            return response

        return timed(get), timed(post)

    def tool_ops(self) -> tuple[Callable[[], float], Callable[[], float]]:
        """A tool call over ``POST users/{user_id}/tools/get_profile/`` and the same work over
        the plain endpoint, ``GET users/{user_id}/facts/``, through Django's test client in this
        process (the same middleware, authentication and views as a server's), warm."""
        from django.test import Client

        from bench.timing import timed
        from memory import selectors

        selectors.context_get(owner_id="hg-01")
        client = Client(HTTP_HOST="127.0.0.1", HTTP_AUTHORIZATION=f"Token {self.token}")

        def tool() -> object:
            response = client.post(
                "/api/memory/users/hg-01/tools/get_profile/",
                {"arguments": {}},
                content_type="application/json",
            )
            assert response.status_code == 200, response.content
            return response

        def plain() -> object:
            response = client.get("/api/memory/users/hg-01/facts/")
            assert response.status_code == 200, response.content
            return response

        return timed(tool), timed(plain)

    async def mcp_times(self, url: str) -> tuple[list[float], list[float], list[float]]:
        """MCP calls of ``get_profile`` in one session over Streamable HTTP, and the same tool
        over REST on the same server, alternated call by call in rounds: each round's median
        MCP and REST times, and their ratios."""
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        headers = {"Authorization": f"Bearer {self.token}", "X-Memory-User": "hg-02"}
        rest = f"{url}/api/memory/users/hg-02/tools/get_profile/"
        rest_headers = {"Authorization": f"Token {self.token}"}
        mcp_medians: list[float] = []
        rest_medians: list[float] = []
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            httpx2.AsyncClient(headers=rest_headers, timeout=30) as plain,
            Client(streamable_http_client(f"{url}/mcp/", http_client=http)) as client,
        ):

            async def mcp_call() -> float:
                started = time.perf_counter()
                result = await client.call_tool("get_profile", {})
                assert not result.is_error, result
                return time.perf_counter() - started

            async def rest_call() -> float:
                started = time.perf_counter()
                response = await plain.post(rest, json={"arguments": {}})
                assert response.status_code == 200, response.text
                return time.perf_counter() - started

            for _ in range(self.args.warmup):
                await mcp_call()
                await rest_call()
            for _ in range(self.args.rounds):
                a: list[float] = []
                b: list[float] = []
                for i in range(self.args.per_round):
                    if i % 2:
                        a.append(await mcp_call())
                        b.append(await rest_call())
                    else:
                        b.append(await rest_call())
                        a.append(await mcp_call())
                mcp_medians.append(statistics.median(a))
                rest_medians.append(statistics.median(b))
        ratios = [m / r for m, r in zip(mcp_medians, rest_medians, strict=True)]
        return mcp_medians, rest_medians, ratios

    # -- rows -----------------------------------------------------------------------------------

    def measured(self, row: Row, ops: tuple[Callable[[], float], Callable[[], float]], *,
                 per_round: int | None = None) -> Row:  # fmt: skip
        from bench.timing import interleaved

        pair = interleaved(
            ops[0],
            ops[1],
            rounds=self.args.rounds,
            per_round=per_round or self.args.per_round,
            warmup=self.args.warmup,
        )
        row.project, row.baseline, row.ratio = pair.project, pair.baseline, pair.ratio
        row.spread = pair.spread
        row.extra["samples_each"] = pair.samples
        row.extra["round_ratios"] = [round(r, 3) for r in pair.round_ratios]
        row.judge()
        return row

    def row_warm(self) -> Row:
        row = Row(
            "warm",
            "context read, warm cache, service layer (`context_get`, 20 turns + 10 facts)",
            "one raw redis-py pipeline: HMGET of the same 30 payloads, a hash field each, + EXPIRE",
            "<= 1.2x",
        )
        return self.measured(row, self.warm_ops(), per_round=self.args.per_round * 5)

    def row_cold(self) -> Row:
        row = Row(
            "cold",
            "context read, cold (rehydrate), service layer",
            "raw psycopg: owner, last 51 turns and facts, three queries"
            " (the project's one statement also reads the summary)",
            "<= 1.5x",
        )
        return self.measured(row, self.cold_ops())

    def row_append(self) -> Row:
        row = Row(
            "append",
            "append a turn (`services.turn_append`, warm cache), history of 10,000",
            "the same at 10 turns",
            "<= 1.2x",
        )
        return self.measured(row, self.append_ops())

    def row_append_floor(self) -> Row:
        row = Row(
            "append_floor",
            "append a user turn, warm cache, nothing to extract (`services.turn_append`)",
            "its floor: one SQL statement (bump counter and stamp, touch the session, insert "
            "the turn) committed + one Redis EVAL, on the same tables",
            "<= 1.1x",
        )
        # NOTE: three times the samples of the other rows: an append waits on two servers'
        # round trips and a WAL flush, whose jitter on a shared machine is most of its spread.
        return self.measured(row, self.append_floor_ops(), per_round=self.args.per_round * 3)

    def summary_refresh_ops(self) -> tuple[Callable[[], float], Callable[[], float]]:
        """A summary refresh (``ops.summary_refresh``, the built-in summarizer) of the
        newest 100 turns of an owner whose summary covers the rest; each op first puts the
        owner's summary back 100 turns (not timed)."""
        from django.utils import timezone

        from memory import ops, services
        from memory.models import Owner, Summary

        window = 100
        small = "summ101"
        if not Owner.objects.filter(external_id=small).exists():
            for i in range(window + 1):
                role = "user" if i % 2 == 0 else "assistant"
                content = f"My name is Wang Jianguo and I like topic {i}." if i % 2 == 0 else "OK."
                services.turn_append(owner_id=small, session_id="s1", role=role, content=content)

        def op(owner_id: str) -> Callable[[], float]:
            owner = Owner.objects.get(external_id=owner_id)

            def refresh() -> float:
                Summary.objects.update_or_create(
                    owner=owner,
                    defaults={
                        "text": "- My name is Wang Jianguo.",
                        "through_seq": owner.last_seq - window,
                        "tokens": 7,
                        "updated_at": timezone.now(),
                    },
                )
                Owner.objects.filter(pk=owner.pk).update(summary_tokens=5000)
                started = time.perf_counter()
                ops.summary_refresh(owner_id=owner_id)
                elapsed = time.perf_counter() - started
                assert Summary.objects.get(owner=owner).through_seq == owner.last_seq
                return elapsed

            return refresh

        return op("hist10k"), op(small)

    def row_summary_refresh(self) -> Row:
        row = Row(
            "summary_refresh",
            "summary refresh time: the newest 100 turns (`ops.summary_refresh`, built-in "
            "summarizer), history of 10,000",
            "the same at 101 turns",
            "<= 1.2x",
        )
        return self.measured(row, self.summary_refresh_ops())

    def row_cluster(self) -> list[Row]:
        """Warm read and append with the cache on a Redis Cluster of the bench's own (three
        primaries with a replica each, on this machine), against the same on one Redis."""
        from django.conf import settings

        from bench.timing import timed
        from memory import cache, selectors, services
        from tests.servers import RedisCluster

        warm = Row(
            "cluster_warm",
            "context read, warm cache, on a Redis Cluster (3 primaries + 3 replicas)",
            "the same on one Redis",
            "<= 1.3x",
        )
        append = Row(
            "cluster_append",
            "append a turn on a Redis Cluster with `CACHE_REPLICAS` 1 (the update waits for "
            "the replica)",
            "the same on one Redis, no replica",
            "<= 1.5x",
        )
        single = settings.MEMORY
        content = "x" * CONTENT_CHARS
        with RedisCluster(masters=3, replicas=1) as cluster:
            settings.CACHES["bench-cluster"] = {
                "BACKEND": "django_redis.cache.RedisCache",
                "LOCATION": cluster.url,
                "OPTIONS": {
                    **settings.CACHES["memory"]["OPTIONS"],
                    "CLIENT_CLASS": "memory.cache.cluster.ClusterClient",
                },
            }
            on_cluster = {**single, "CACHE_ALIAS": "bench-cluster", "CACHE_REPLICAS": 1}

            def there(fn: Callable[[], object]) -> Callable[[], float]:
                # NOTE: settings are re-read on each access: the switch costs the op nothing.
                def op() -> float:
                    settings.MEMORY = on_cluster
                    try:
                        started = time.perf_counter()
                        fn()
                        return time.perf_counter() - started
                    finally:
                        settings.MEMORY = single

                return op

            def read() -> object:
                return selectors.context_get(owner_id="ctx")

            def add(owner_id: str) -> Callable[[], object]:
                return lambda: services.turn_append(
                    owner_id=owner_id, session_id="s1", role="user", content=content
                )

            try:
                for side in (there(read), timed(read)):
                    side()
                    side()
                assert there(lambda: None) and cache.enabled()
                self.measured(warm, (there(read), timed(read)), per_round=self.args.per_round * 5)
                self.measured(append, (there(add("cluster-a")), timed(add("cluster-b"))))
            finally:
                settings.MEMORY = single
                settings.CACHES.pop("bench-cluster", None)
                cache.reset()
        return [warm, append]

    def row_async_warm(self) -> Row:
        row = Row(
            "async_warm",
            "context read, warm cache, async (`acontext_get` awaited in an event loop)",
            "its sync twin `context_get`, same owner, same run",
            "<= 1.2x",
        )
        return self.measured(row, self.async_warm_ops(), per_round=self.args.per_round * 5)

    def row_quality(self) -> list[Row]:
        """Recall@5 of each search mode on the quality set (bench/quality.py; ``make
        bench-quality`` prints its whole table)."""
        from bench.quality import quality_note, quality_run, quality_summary

        summary = quality_summary(quality_run())
        text = next(figures for figures in summary if figures["mode"] == "text")
        rows = []
        for figures in summary:
            row = Row(
                f"quality_{figures['mode']}",
                f"quality set recall@5, {figures['mode']} search: 128 questions in "
                "LongMemEval's shape over 30-38 dated sessions, English and Chinese",
                "text search",
                ">= 0.9x" if figures["mode"] == "hybrid" else "",
                project=figures["recall5"] * 100,
                baseline=text["recall5"] * 100,
                unit="%",
                ratio=figures["recall5"],
                note=quality_note(figures),
                extra={k: v for k, v in figures.items() if k != "mode"},
            )
            row.judge()
            rows.append(row)
        return rows

    def row_blob(self) -> Row:
        row = Row(
            "blob",
            "the same, JSON-blob-per-user store (jsonb read-modify-write), history of 10,000",
            "its own 10 turns",
            "",
        )
        return self.measured(row, self.blob_ops(), per_round=self.args.per_round_blob)

    def row_cold_big(self) -> Row:
        row = Row(
            "cold_big",
            "context read, cold, owner with 100,000 turns in a table of 1,000,000",
            "owner with 10 turns",
            "<= 1.5x",
        )
        return self.measured(row, self.cold_big_ops())

    def row_herd(self) -> Row:
        from django.db import connection

        from memory import cache, selectors

        readers = 100

        def burst() -> tuple[int, list[str]]:
            """Evict the owner, let ``readers`` threads read it at once; count rehydrations."""
            cache.run_once()
            cache.copy.copy_evict(owner_id="herd")
            before = cache.stats()["counters"].get("rehydrations", 0)
            barrier = threading.Barrier(readers)
            sources: list[str] = []
            errors: list[BaseException] = []

            def reader() -> None:
                try:
                    barrier.wait()
                    sources.append(selectors.context_get(owner_id="herd")["source"])
                except BaseException as e:
                    errors.append(e)
                finally:
                    connection.close()

            threads = [threading.Thread(target=reader) for _ in range(readers)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            if errors:
                raise errors[0]
            return cache.stats()["counters"].get("rehydrations", 0) - before, sources

        # NOTE: a first burst warms this process (100 Redis connections, loaded scripts), as a
        # server's threads are warm; it is reported, not judged.
        first, _ = burst()
        counts: list[int] = []
        from_database: list[int] = []
        for _ in range(self.args.rounds):
            count, sources = burst()
            counts.append(count)
            from_database.append(sources.count("database"))
        row = Row(
            "herd",
            f"{readers} concurrent cold reads of one owner (threads of one process):"
            " database rehydrations, most in a burst",
            "",
            "<= 2",
            unit="count",
        )
        row.project = float(max(counts))
        row.ratio = float(max(counts))
        row.note = (
            f"rehydrations per burst: {counts} (first burst of the process: {first});"
            f" answers read from the database per burst: {from_database}"
        )
        row.extra = {"per_burst": counts, "first_burst": first, "from_database": from_database}
        row.judge()
        return row

    def row_redis_mem(self) -> Row:
        import orjson

        from memory import cache, selectors
        from memory.models import Fact, Turn

        cache.copy.copy_evict(owner_id="mem")
        selectors.context_get(owner_id="mem")
        used = self.redis.memory_usage(cache.keys.owner_key("mem"), samples=0) or 0
        contents = Turn.objects.filter(owner__external_id="mem").values_list("content", flat=True)
        facts = Fact.objects.filter(owner__external_id="mem").values_list("key", "value")
        raw = sum(len(text.encode()) for text in contents)
        raw += sum(len(key.encode()) + len(orjson.dumps(value)) for key, value in facts)
        row = Row(
            "redis_mem",
            "Redis memory for one cached owner (20 turns of 200 chars, 10 facts): MEMORY USAGE",
            "raw bytes of that content (turn texts, fact keys and JSON values)",
            "<= 2.0x",
            project=float(used),
            baseline=float(raw),
            unit="bytes",
            ratio=used / raw,
        )
        row.judge()
        return row

    def search_ops(self, q: str) -> tuple[Callable[[], float], Callable[[], float]]:
        """``selectors.turn_search`` of ``q`` on the search owner, and the baseline: one raw
        full-text statement for a word that matches, ranked, on the same owner's index. A
        search stopped by the time limit counts in ``self.search_timeouts`` (and its time)."""
        from bench.timing import timed
        from memory import selectors
        from memory.exceptions import SearchTimeout

        raw = self.raw
        row = raw.execute(
            "SELECT id FROM memory_owner WHERE external_id = %s", [SEARCH_OWNER]
        ).fetchone()
        assert row is not None
        owner_pk = row[0]

        def plain() -> object:
            rows = raw.execute(
                "SELECT seq, session_id, role, content, metadata, created_at FROM memory_turn,"
                " plainto_tsquery('english', %s) AS q"
                " WHERE owner_id = %s::bigint AND search @@ q"
                " ORDER BY ts_rank_cd(search, q, 1) DESC, seq DESC LIMIT 20",
                [SEARCH_BASELINE_WORD, owner_pk],
            ).fetchall()
            assert len(rows) == 20
            return rows

        def project() -> object:
            try:
                return selectors.turn_search(owner_id=SEARCH_OWNER, q=q)
            except SearchTimeout:
                self.search_timeouts[q] = self.search_timeouts.get(q, 0) + 1
                return None

        return timed(project), timed(plain)

    def row_search(self) -> list[Row]:
        from django.test import override_settings

        from memory import selectors

        self.search_timeouts: dict[str, int] = {}
        rows = []
        for name, q in SEARCH_QUERIES.items():
            # NOTE: the first search of each, outside the measure, reads what a reseed left
            # cold; the rounds then run under the default time limit.
            with override_settings(MEMORY={**self.settings.MEMORY, "SEARCH_TIMEOUT_MS": 60_000}):
                found = len(selectors.turn_search(owner_id=SEARCH_OWNER, q=q))
            row = Row(
                "search",
                f"search `{q if len(q) < 30 else q[:24] + '...'}` ({name}, {len(q)} chars,"
                f" {found} results), owner of {SEARCH_TURNS:,} turns in {TOTAL_TURNS:,}",
                f"one raw full-text statement for `{SEARCH_BASELINE_WORD}` (matches), ranked",
                "<= 150 ms",
            )
            self.measured(row, self.search_ops(q), per_round=max(1, self.args.per_round // 4))
            timeouts = self.search_timeouts.get(q, 0)
            row.extra.update(query=q, kind=name, results=found, timeouts=timeouts)
            if timeouts:
                row.note = f"`{q}`: {timeouts} searches stopped by the time limit (a 503)"
            rows.append(row)
        return rows

    def row_search_health(self) -> Row:
        """``health/`` of a gunicorn with 2 sync workers (issue 12's set-up), alone and while 8
        clients loop the hostile searches, on loopback."""
        import urllib.error
        import urllib.parse
        import urllib.request

        from bench.load import ServerSettings, gunicorn

        server = ServerSettings(workers=2, threads=1, worker_class="sync")
        auth = {"Authorization": f"Token {self.token}"}
        seconds = self.args.http_seconds * 5
        clients = 8
        codes: dict[int, int] = {}
        lock = threading.Lock()

        def get(url: str, headers: dict[str, str]) -> int:
            request = urllib.request.Request(url, headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=120) as answer:
                    answer.read()
                    return int(answer.status)
            except urllib.error.HTTPError as e:
                return int(e.code)

        def health_times(url: str, until: float) -> list[float]:
            times = []
            while time.monotonic() < until:
                started = time.perf_counter()
                assert get(f"{url}/api/memory/health/", {}) == 200
                times.append(time.perf_counter() - started)
                time.sleep(0.05)
            return times

        with gunicorn(server) as url:
            quiet = health_times(url, time.monotonic() + 2)
            stop = time.monotonic() + seconds
            queries = list(SEARCH_QUERIES.values())

            def client(first: int) -> None:
                n = first
                while time.monotonic() < stop:
                    q = urllib.parse.urlencode({"q": queries[n % len(queries)]})
                    code = get(f"{url}/api/memory/users/{SEARCH_OWNER}/search/?{q}", auth)
                    with lock:
                        codes[code] = codes.get(code, 0) + 1
                    n += 1

            threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
            for thread in threads:
                thread.start()
            time.sleep(0.5)
            loaded = health_times(url, stop)
            for thread in threads:
                thread.join()
        row = Row(
            "search_health",
            f"GET health/ while {clients} clients loop the hostile searches, gunicorn 2 sync"
            " workers (median)",
            "GET health/ of the same server with no load",
            "",
            project=statistics.median(loaded),
            baseline=statistics.median(quiet),
        )
        row.ratio = row.project / row.baseline if row.baseline else None
        searches = sum(codes.values())
        row.note = (
            f"{searches} searches in {seconds:.0f} s, answers {dict(sorted(codes.items()))};"
            f" health/ {len(loaded)} times, slowest {max(loaded) * 1000:.0f} ms"
        )
        row.extra = {
            "searches": codes,
            "health_max": max(loaded),
            "health_answers": len(loaded),
            "server": server.describe(),
        }
        return row

    def row_export(self) -> Row:
        """The export of the 100,000-turn owner (``selectors.owner_export``, every chunk read),
        against a raw ``COPY`` of the same turns' columns to the client: turns per second."""
        from bench.timing import interleaved, timed
        from memory import selectors

        owner = self.raw.execute("SELECT id FROM memory_owner WHERE external_id = 'huge'")
        (pk,) = owner.fetchone()  # type: ignore[misc]
        turns = 100_000

        def export() -> object:
            size = 0
            for chunk in selectors.owner_export(owner_id="huge"):
                size += len(chunk)
            return size

        def copy() -> object:
            size = 0
            with self.raw.cursor().copy(
                "COPY (SELECT seq, session_id, role, content, metadata, created_at"
                " FROM memory_turn WHERE owner_id = %s ORDER BY seq) TO STDOUT",
                [pk],
            ) as stream:
                for block in stream:
                    size += len(block)
            return size

        pair = interleaved(timed(export), timed(copy), rounds=3, per_round=2, warmup=1)
        row = Row(
            "export",
            "export of the owner of 100,000 turns (`owner_export`: facts, history, turns,"
            " sessions as JSON, one snapshot)",
            "raw `COPY ... TO STDOUT` of the same turns' columns (text format)",
            "",
            unit="turns/s",
        )
        row.project, row.baseline = turns / pair.project, turns / pair.baseline
        row.ratio, row.spread = pair.ratio, pair.spread
        row.extra["seconds_each"] = [round(pair.project, 3), round(pair.baseline, 3)]
        row.note = (
            f"{turns / pair.project:,.0f} turns/s exported ({pair.project:.2f} s), COPY"
            f" {turns / pair.baseline:,.0f} turns/s ({pair.baseline:.2f} s); ratio is time over"
            " COPY's"
        )
        return row

    def row_tool_http(self) -> Row:
        row = Row(
            "tool_http",
            "a tool call over `POST users/{user_id}/tools/{name}/` (`get_profile`, warm, "
            "Django's test client in process)",
            "the same work over the plain endpoint: `GET users/{user_id}/facts/`",
            "<= 1.2x",
        )
        return self.measured(row, self.tool_ops())

    def row_websocket(self) -> list[Row]:
        """The chat over a websocket against the HTTP chat (bench/websocket.py)."""
        return self.websocket_rows(Row)

    def row_mcp(self) -> Row:
        """An MCP tool call's median time: the demo's ASGI app (``/mcp/``) under uvicorn, one
        MCP session over Streamable HTTP on loopback."""
        import asyncio

        from memory import selectors
        from tests.servers import uvicorn_demo

        selectors.context_get(owner_id="hg-02")
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "bench.settings"}
        with uvicorn_demo(env, name="bench-mcp") as port:
            mcp, rest, ratios = asyncio.run(self.mcp_times(f"http://127.0.0.1:{port}"))
        row = Row(
            "mcp",
            "an MCP tool call (`get_profile` over Streamable HTTP at `/mcp/`, one session, "
            "uvicorn on loopback; median)",
            "the same tool over `POST users/{user_id}/tools/get_profile/` on the same server",
            "",
            project=statistics.median(mcp),
            baseline=statistics.median(rest),
            ratio=statistics.median(ratios),
            spread=(min(ratios), max(ratios)),
        )
        row.extra["round_ratios"] = [round(r, 3) for r in ratios]
        row.extra["samples_each"] = self.args.rounds * self.args.per_round
        row.note = "uvicorn, 1 worker; MCP client: the mcp SDK's, protocol negotiated by it"
        return row

    def rows_http(self, wanted: set[str]) -> list[Row]:
        import orjson

        from bench.load import Load, ProcessCPU, ServerSettings, generator, gunicorn, run_load
        from bench.seed import content_of
        from memory import selectors

        for i in range(HTTP_OWNERS):
            selectors.context_get(owner_id=f"hg-{i:02d}")
        server = ServerSettings()
        auth = (("Authorization", f"Token {self.token}"),)
        body = orjson.dumps({"session_id": "web", "role": "user", "content": content_of(200, 1)})
        json_headers = (*auth, ("Content-Type", "application/json"))
        loads = {
            "bare_get": Load("GET", ("/bench/bare/",), auth),
            "context": Load(
                "GET",
                tuple(f"/api/memory/users/hg-{i:02d}/context/" for i in range(HTTP_OWNERS)),
                auth,
            ),
            "bare_post": Load("POST", ("/bench/bare/",), json_headers, body),
            "turn": Load(
                "POST",
                tuple(f"/api/memory/users/hp-{i:02d}/turns/" for i in range(HTTP_OWNERS)),
                json_headers,
                body,
            ),
            "floor": Load(
                "POST",
                tuple(f"/bench/floor/hf-{i:02d}/" for i in range(HTTP_OWNERS)),
                json_headers,
                body,
            ),
        }
        pairs = []
        if "http_get" in wanted:
            pairs.append(("context", "bare_get"))
        if "http_post" in wanted:
            pairs.append(("turn", "bare_post"))
        if "http_post_floor" in wanted:
            from bench.floor import SESSION_SQL

            for i in range(HTTP_OWNERS):
                self.raw.execute(SESSION_SQL, {"owner": f"hf-{i:02d}", "session": "web"})
            pairs.append(("floor", "bare_post"))
        names = list(dict.fromkeys(name for pair in pairs for name in pair))
        results: dict[str, list[float]] = {name: [] for name in names}
        bad: dict[str, int] = dict.fromkeys(names, 0)
        # With --http-cpu: each load's CPU seconds by kind of process, and its requests.
        cpu: dict[str, dict[str, float]] = {name: {} for name in names}
        served: dict[str, int] = dict.fromkeys(names, 0)
        measure_cpu = self.args.http_cpu and ProcessCPU.available
        seconds = self.args.http_seconds
        with gunicorn(server) as url:
            for name in names:
                run_load(url, loads[name], seconds=1, connections=HTTP_CONNECTIONS)
            for r in range(self.args.http_rounds):
                order = names[r % len(names) :] + names[: r % len(names)]
                for name in order:
                    before = ProcessCPU.snapshot() if measure_cpu else {}
                    result = run_load(
                        url, loads[name], seconds=seconds, connections=HTTP_CONNECTIONS
                    )
                    if measure_cpu:
                        for kind, used in ProcessCPU.since(before).items():
                            cpu[name][kind] = cpu[name].get(kind, 0.0) + used
                    served[name] += result.requests
                    results[name].append(result.requests_per_second)
                    bad[name] += result.bad
        rows = []
        titles = {
            "context": (
                "http_get",
                "GET context over HTTP, warm, gunicorn on loopback, "
                f"{HTTP_CONNECTIONS} concurrent clients (req/s)",
                "a bare DRF view returning a constant, same server and auth",
                ">= 0.5x",
            ),
            "turn": (
                "http_post",
                f"POST turn over HTTP, same set-up, {HTTP_CONNECTIONS} clients over "
                f"{HTTP_OWNERS} owners (req/s)",
                "the same bare view, POST with the same body",
                ">= 0.8x",
            ),
            "floor": (
                "http_post_floor",
                "POST of the same body to the append's floor behind DRF (bench.floor: one SQL "
                f"statement, one Redis EVAL; DRF's token authentication), {HTTP_OWNERS} other "
                "owners (req/s)",
                "the same bare view, POST with the same body",
                "",
            ),
        }
        for project, baseline in pairs:
            row_id, title, baseline_title, target = titles[project]
            ratios = [a / b for a, b in zip(results[project], results[baseline], strict=True)]
            row = Row(
                row_id,
                title,
                baseline_title,
                target,
                project=statistics.median(results[project]),
                baseline=statistics.median(results[baseline]),
                unit="req/s",
                ratio=statistics.median(ratios),
                spread=(min(ratios), max(ratios)),
            )
            row.extra = {
                "round_ratios": [round(x, 3) for x in ratios],
                "non_2xx_or_errors": bad[project] + bad[baseline],
                "server": server.describe(),
                "load_generator": generator(),
                "connections": HTTP_CONNECTIONS,
                "seconds_each": seconds,
            }
            row.note = f"{server.describe()}, load by {generator()}"
            if measure_cpu:
                per_request = {
                    side: {
                        kind: round(used / served[name] * 1e6)
                        for kind, used in sorted(cpu[name].items())
                    }
                    for side, name in (("project", project), ("baseline", baseline))
                }
                row.extra["cpu_us_per_request"] = per_request
                row.note += "; " + _cpu_note(per_request)
            if project == "turn" and results.get("floor"):
                # NOTE: the POST against the least a durable append behind DRF costs, round by
                # round: what the goal's bare view leaves out.
                of_floor = [a / b for a, b in zip(results["turn"], results["floor"], strict=True)]
                row.extra["of_floor"] = round(statistics.median(of_floor), 3)
                row.note += f"; {statistics.median(of_floor):.2f}x the floor view's rate"
            if bad[project] or bad[baseline]:
                row.note += f"; {bad[project] + bad[baseline]} non-2xx/errors"
            row.judge()
            rows.append(row)
        return rows


def _cpu_note(per_request: dict[str, dict[str, int]]) -> str:
    """``--http-cpu``'s line: CPU per request by kind of process, project/baseline."""
    project, baseline = per_request["project"], per_request["baseline"]
    kinds = sorted(set(project) | set(baseline))
    parts = [f"{kind} {project.get(kind, 0):,}/{baseline.get(kind, 0):,}" for kind in kinds]
    total_project, total_baseline = sum(project.values()), sum(baseline.values())
    ratio = total_baseline / total_project if total_project else float("nan")
    return (
        f"CPU us per request, project/baseline: {', '.join(parts)};"
        f" all {total_project:,}/{total_baseline:,} ({ratio:.2f}x as many requests per CPU second)"
    )


def _profile(bench: Bench, row_id: str) -> None:
    from pyinstrument import Profiler

    ops = {
        "warm": bench.warm_ops,
        "cold": bench.cold_ops,
        "append": bench.append_ops,
        "append_floor": bench.append_floor_ops,
        "async_warm": bench.async_warm_ops,
        "cold_big": bench.cold_big_ops,
        "search": lambda: bench.search_ops(SEARCH_QUERIES["near-miss list"]),
        "http_get": bench.client_ops,
        "http_post": bench.client_ops,
        "tool_http": bench.tool_ops,
    }
    if row_id not in ops:
        raise SystemExit(f"--profile takes one of {', '.join(ops)}")
    project, baseline = ops[row_id]()
    if row_id == "http_post":
        project = baseline
    n = bench.args.per_round * bench.args.rounds
    profiler = Profiler(interval=0.0001)
    profiler.start()
    for _ in range(n):
        project()
    profiler.stop()
    print(profiler.output_text(unicode=True, color=False, show_all=bench.args.profile_all))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--only", default="", help=f"comma-separated rows of {', '.join(ROWS)}")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--per-round", type=int, default=40)
    parser.add_argument("--per-round-blob", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--http-rounds", type=int, default=12)
    parser.add_argument("--http-seconds", type=float, default=2.0)
    parser.add_argument(
        "--http-cpu",
        action="store_true",
        help="also read each HTTP load's CPU per request by process from /proc (Linux)",
    )
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--profile", default="", help="profile one row's project operation")
    parser.add_argument(
        "--reseed", action="store_true", help="seed the million turns again even if kept"
    )
    parser.add_argument("--profile-all", action="store_true", help="show library frames too")
    parser.add_argument(
        "--phases",
        action="store_true",
        help="take the append_floor row's calls apart, phase by phase, with their time in Redis's"
        " scripts (bench/phases.py)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    wanted = set(args.only.split(",")) if args.only else set(ROWS)
    unknown = wanted - set(ROWS)
    if unknown:
        raise SystemExit(f"unknown rows: {', '.join(sorted(unknown))}")
    started = time.perf_counter()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    from bench import settings as bench_settings
    from bench.seed import database_create

    database_create(bench_settings.DATABASE_URL)
    _django_setup()
    from django.core.management import call_command

    from memory.services.embeddings import vectors_create

    call_command("migrate", verbosity=0, interactive=False)
    # NOTE: a bench database migrated before pgvector was installed has no vector tables.
    vectors_create("default")
    bench = Bench(args)
    bench.seed()
    if args.profile:
        _profile(bench, args.profile)
        return 0
    if args.phases:
        from bench.phases import phases_print

        phases_print(bench)
        return 0
    rows: list[Row] = []
    for row_id in ROWS:
        if row_id not in wanted or row_id.startswith("http"):
            continue
        row_started = time.perf_counter()
        result = getattr(bench, f"row_{row_id}")()
        for row in result if isinstance(result, list) else [result]:
            row.extra["seconds"] = round(time.perf_counter() - row_started, 1)
            shown = "shown" if row.ratio is None else f"{row.ratio:.2f}"
            print(f"  {row_id}: {shown} ({row.extra['seconds']} s)", flush=True)
            rows.append(row)
    if wanted & {"http_get", "http_post", "http_post_floor"}:
        http_started = time.perf_counter()
        for row in bench.rows_http(wanted):
            row.extra["seconds"] = round(time.perf_counter() - http_started, 1)
            print(f"  {row.id}: {row.ratio:.2f}", flush=True)
            rows.append(row)
    order = {row_id: i for i, row_id in enumerate(ROWS)}
    # NOTE: a row function may give several rows (``cluster``: ``cluster_warm``, ...).
    rows.sort(key=lambda row: order.get(row.id, order.get(row.id.split("_")[0], len(order))))
    bench.keys_clear()
    elapsed = time.perf_counter() - started
    print()
    print(table(rows))
    print()
    for row in rows:
        if row.note:
            print(f"{row.id}: {row.note}")
    print(f"\nbench took {elapsed:.0f} s")
    import django

    result = {
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "seconds": round(elapsed, 1),
        "machine": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "django": django.get_version(),
        },
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "seed": bench.timings,
        "rows": [
            {
                "id": row.id,
                "title": row.title,
                "baseline_title": row.baseline_title,
                "unit": "seconds" if row.unit == "us" else row.unit,
                "project": row.project,
                "baseline": row.baseline,
                "ratio": row.ratio,
                "target": row.target,
                "met": row.met,
                "note": row.note,
                **row.extra,
            }
            for row in rows
        ],
        "table": table(rows),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json.relative_to(ROOT) if args.json.is_relative_to(ROOT) else args.json}")
    return 0
