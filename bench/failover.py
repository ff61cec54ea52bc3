"""``make bench``'s rows of the database tier, on a pg_auto_failover formation of the bench's own
(tests/pgaf.py: a monitor, a primary and a synchronous standby on this machine): an append with
synchronous replication, a cold read served by the standby, and a failover under two app
instances' load. Where pg_autoctl is not installed the rows are shown empty, saying why.

The append and the cold read run in a process of their own (``python -m bench.failover``) whose
Django database is the formation's multi-host URL, with the standby as its read database.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.rows import Row

ROOT = Path(__file__).resolve().parent.parent
DATABASE = "memory_bench_failover"
CONTENT_CHARS = 200
COLD_TURNS = 100


class FailoverRows:
    """The ``failover`` rows; a mixin of ``bench.run.Bench`` (its ``args``)."""

    args: Any

    def row_failover(self) -> list[Row]:
        from tests.pgaf import MONITOR_SETTINGS, PGAF_MISSING, AutoFailover, pg_autoctl_binary

        append = Row(
            "failover_append",
            "append a turn (`services.turn_append`, warm cache) on a pg_auto_failover primary "
            "whose commit waits for its synchronous standby",
            "the same on the same primary with `synchronous_commit = local` (one server's "
            "commit: asynchronous replication)",
            "<= 2x",
        )
        replica = Row(
            "failover_replica_read",
            f"context read, cold, of {COLD_TURNS} turns served by the standby "
            '(`MEMORY["READ_DATABASE"]`: the owner\'s stamp read on the primary first)',
            "the same read from the primary",
            "<= 2x",
        )
        engine_floor = (
            int(MONITOR_SETTINGS["pgautofailover.node_considered_unhealthy_timeout"])
            + int(MONITOR_SETTINGS["pgautofailover.primary_demote_timeout"])
        ) / 1000
        seconds = Row(
            "failover_seconds",
            "seconds from the primary's SIGKILL to the first write acknowledged (two gunicorn "
            "instances writing throughout, the engine promoting the standby)",
            f"the engine's own wait before it promotes ({engine_floor:g} s: failure "
            "detection + demote timeout, as the bench sets them)",
            "",
            unit="s",
        )
        failed = Row(
            "failover_failed",
            "requests that failed from the kill on (all 503 with Retry-After; clients retry "
            "after 0.1 s)",
            "",
            "",
            unit="count",
        )
        rows = [append, replica, seconds, failed]
        if pg_autoctl_binary() is None:
            for row in rows:
                row.note = f"skipped: {PGAF_MISSING}"
            print(f"  failover: skipped: {PGAF_MISSING}", flush=True)
            return rows
        from tests.servers import RedisServer

        with AutoFailover() as formation, RedisServer() as redis_server:
            self.failover_measure(formation, redis_server.url, append, replica)
            self.failover_load(formation, redis_server.url, seconds, failed, engine_floor)
        return rows

    def failover_measure(self, formation: Any, redis_url: str, append: Row, replica: Row) -> None:
        """The append and cold-read rows, measured by ``python -m bench.failover``."""
        import psycopg

        primary = formation.wait_synchronous()
        with psycopg.connect(primary.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')
        standby = next(node for node in formation.nodes if node is not primary)
        env = {
            **os.environ,
            "BENCH_DATABASE_URL": formation.url(DATABASE),
            "BENCH_REPLICA_URL": standby.url_for(DATABASE),
            "BENCH_REDIS_URL": redis_url,
            "BENCH_KEY_PREFIX": "membench-failover",
        }
        args = [str(self.args.rounds), str(self.args.per_round), str(self.args.warmup)]
        done = subprocess.run(
            [sys.executable, "-m", "bench.failover", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"python -m bench.failover failed: {done.stderr[-2000:]}")
        figures = json.loads(done.stdout.strip().splitlines()[-1])
        for row, pair in ((append, figures["append"]), (replica, figures["replica"])):
            row.project, row.baseline, row.ratio = pair["project"], pair["baseline"], pair["ratio"]
            row.spread = (min(pair["round_ratios"]), max(pair["round_ratios"]))
            row.extra.update(samples_each=pair["samples"], round_ratios=pair["round_ratios"])
            row.judge()
        replica.note = (
            f"of {figures['replica_reads']} cold reads sent to the standby, it served "
            f"{figures['replica_served']}; the primary answered {figures['replica_behind']} "
            f"because the standby was behind, {figures['replica_failed']} because it failed"
        )

    def failover_load(
        self, formation: Any, redis_url: str, seconds: Row, failed: Row, engine_floor: float
    ) -> None:
        """The failover rows: tests/pgaf.py's ``failover_under_load`` on two instances."""
        from tests.pgaf import failover_under_load
        from tests.stack import AppStack

        stack = AppStack(server_url=formation.url("postgres"), redis_url=redis_url)
        try:
            stack.start()
            run = failover_under_load(formation, stack, "bench-failover")
        finally:
            stack.stop()
        seconds.project, seconds.baseline = run.first_write, engine_floor
        seconds.ratio = run.first_write / engine_floor
        seconds.note = (
            f"standby promoted {run.promoted:.2f} s after the kill, old primary back as a "
            f"standby {run.rejoined:.2f} s after it"
        )
        statuses = sorted({status for _, status, _, _ in run.failed})
        failed.project = failed.ratio = float(len(run.failed))
        failed.note = (
            f"{len(run.failed)} requests failed ({statuses}) of {len(run.load.took)} sent; "
            f"{len(run.load.acked)} turns acknowledged, all stored once; slowest request "
            f"{max(run.load.took):.2f} s"
        )
        seconds.extra.update(promoted=run.promoted, rejoined=run.rejoined)
        failed.extra.update(statuses=statuses, requests=len(run.load.took))


# --- python -m bench.failover ROUNDS PER_ROUND WARMUP ------------------------------------------


def _pair(pair: Any) -> dict[str, Any]:
    return {
        "project": pair.project,
        "baseline": pair.baseline,
        "ratio": pair.ratio,
        "round_ratios": [round(r, 3) for r in pair.round_ratios],
        "samples": pair.samples,
    }


def measure(rounds: int, per_round: int, warmup: int) -> dict[str, Any]:
    """The append and cold-read pairs on the formation this process's settings name."""
    from django.conf import settings
    from django.db import connection, connections

    from bench.timing import interleaved
    from memory import cache, selectors, services

    content = "x" * CONTENT_CHARS

    def add(owner_id: str) -> object:
        return services.turn_append(
            owner_id=owner_id, session_id="s1", role="user", content=content
        )

    for owner_id in ("sync-10", "local-10"):
        for _ in range(10):
            add(owner_id)
        selectors.context_get(owner_id=owner_id)

    def append(owner_id: str, commit: str) -> Any:
        def op() -> float:
            with connection.cursor() as cursor:
                cursor.execute(f"SET synchronous_commit = {commit}")
            started = time.perf_counter()
            add(owner_id)
            return time.perf_counter() - started

        return op

    appends = interleaved(
        append("sync-10", "on"),
        append("local-10", "local"),
        rounds=rounds,
        per_round=per_round,
        warmup=warmup,
    )
    with connection.cursor() as cursor:
        cursor.execute("SET synchronous_commit = on")

    for i in range(COLD_TURNS):
        services.turn_append(
            owner_id="cold", session_id="s1", role="user" if i % 2 else "assistant", content=content
        )
    services.facts_merge(owner_id="cold", facts={f"k{i}": f"value {i}" for i in range(10)})
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_current_wal_lsn()::text")
        (lsn,) = cursor.fetchone()  # type: ignore[misc]
    deadline = time.monotonic() + 30
    while True:
        with connections["replica"].cursor() as cursor:
            cursor.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", [lsn])
            if cursor.fetchone()[0]:  # type: ignore[index]
                break
        if time.monotonic() > deadline:
            raise TimeoutError("the standby did not replay the cold owner's writes")
        time.sleep(0.02)
    base = settings.MEMORY

    def cold(read_database: str | None) -> Any:
        def op() -> float:
            settings.MEMORY = {**base, "READ_DATABASE": read_database}
            try:
                cache.copy.copy_evict(owner_id="cold")
                started = time.perf_counter()
                context = selectors.context_get(owner_id="cold")
                elapsed = time.perf_counter() - started
            finally:
                settings.MEMORY = base
            assert context["source"] == "database", context["source"]
            return elapsed

        return op

    def events() -> dict[str, int]:
        # NOTE: stats() adds this process's counts to the shared ones first.
        counters = cache.stats()["counters"]
        names = ("replica_served", "replica_behind", "replica_failed")
        return {name: counters.get(name, 0) for name in names}

    before = events()
    reads = interleaved(
        cold("replica"), cold(None), rounds=rounds, per_round=per_round, warmup=warmup
    )
    after = events()
    return {
        "append": _pair(appends),
        "replica": _pair(reads),
        **{name: after[name] - before[name] for name in after},
        "replica_reads": rounds * per_round + warmup,
    }


def main(argv: list[str]) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    rounds, per_round, warmup = (int(arg) for arg in argv)
    print(json.dumps(measure(rounds, per_round, warmup)))


if __name__ == "__main__":
    main(sys.argv[1:])
