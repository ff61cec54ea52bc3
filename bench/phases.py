"""``python -m bench --phases``: where one call of the ``append_floor`` row spends its time against
its floor's, in place (the two alternated call by call, as the row runs them), each server's
CPU a call, and each call's time in Redis's scripts (the delta script's ordinary calls and its
folds, ``memory/cache/lua/apply.lua``)."""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

PHASES = (
    "before its statement",
    "its statement, sent to reply",
    "from the reply to the Redis command",
    "the Redis command and after",
)
# A call whose scripts took more than this many times the median call's is counted as a fold.
FOLD_FACTOR = 2.5
# NOTE: marks of one thread only: the repairer's thread sends Redis commands of its own.
_clock = threading.local()


def phases_of(
    started: float, marks: Sequence[tuple[str, float]], ended: float
) -> tuple[float, float, float, float] | None:
    """One call's ``PHASES`` in seconds, from its marks: ``("sql", t)`` where a statement was
    sent, ``("sql_done", t)`` where it returned, ``("redis", t)`` where a Redis command was sent.
    ``None`` for a call that sent anything but one statement, then one Redis command."""
    if [kind for kind, _ in marks] != ["sql", "sql_done", "redis"]:
        return None
    (_, sent), (_, replied), (_, cached) = marks
    return sent - started, replied - sent, cached - replied, ended - cached


def _mark(kind: str) -> None:
    marks = getattr(_clock, "marks", None)
    if marks is not None:
        marks.append((kind, time.perf_counter()))


@contextmanager
def _clocked() -> Iterator[None]:
    """psycopg's ``Cursor.execute`` and redis-py's ``send_packed_command`` marking the clock
    (every statement and command of either client goes through them), for this block."""
    import psycopg
    from redis.connection import Connection

    execute, send = psycopg.Cursor.execute, Connection.send_packed_command

    def marked_execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        _mark("sql")
        try:
            return execute(self, *args, **kwargs)
        finally:
            _mark("sql_done")

    def marked_send(self: Any, *args: Any, **kwargs: Any) -> Any:
        _mark("redis")
        return send(self, *args, **kwargs)

    psycopg.Cursor.execute = marked_execute  # type: ignore[method-assign]
    Connection.send_packed_command = marked_send  # type: ignore[method-assign]
    try:
        yield
    finally:
        psycopg.Cursor.execute = execute  # type: ignore[method-assign]
        Connection.send_packed_command = send  # type: ignore[method-assign]


def _call(op: Callable[[], object]) -> tuple[float, float, float, float] | None:
    _clock.marks = []
    started = time.perf_counter()
    op()
    ended = time.perf_counter()
    marks, _clock.marks = _clock.marks, None
    return phases_of(started, marks, ended)


def _backend_seconds(pid: int) -> float | None:
    """The CPU seconds the PostgreSQL backend ``pid`` has used (Linux ``/proc``), else None (no
    ``/proc``, or that process is not a PostgreSQL one here: a server on another host)."""
    from bench.tail import cpu_ticks

    try:
        with open(f"/proc/{pid}/comm") as f:
            if f.read().strip() != "postgres":
                return None
    except OSError:
        return None
    return cpu_ticks({pid}) / os.sysconf("SC_CLK_TCK")


def _redis_seconds(client: Any) -> float:
    """The CPU seconds the Redis server has used (``INFO cpu``), for all its clients."""
    cpu = client.info("cpu")
    return float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])


def _servers(op: Callable[[], object], pid: int, redis_client: Any, n: int) -> tuple[Any, float]:
    """``op`` run ``n`` times alone: its backend's and Redis's CPU, us a call."""
    cpu, redis_cpu = _backend_seconds(pid), _redis_seconds(redis_client)
    for _ in range(n):
        op()
    after = _backend_seconds(pid)
    backend = None if cpu is None or after is None else (after - cpu) / n * 1e6
    return backend, (_redis_seconds(redis_client) - redis_cpu) / n * 1e6


def _scripts_usec(client: Any) -> int:
    """The microseconds Redis has spent in scripts (``EVAL`` and ``EVALSHA``, the commands they
    ran included), for all its clients (``INFO commandstats``)."""
    stats = client.info("commandstats")
    return sum(
        int(stats[name]["usec"]) for name in ("cmdstat_eval", "cmdstat_evalsha") if name in stats
    )


def _script_times(op: Callable[[], object], redis_client: Any, n: int) -> list[int]:
    """``op`` run ``n`` times alone: the microseconds of Redis's scripts in each call."""
    times = []
    before = _scripts_usec(redis_client)
    for _ in range(n):
        op()
        after = _scripts_usec(redis_client)
        times.append(after - before)
        before = after
    return times


def script_split(times: Sequence[int]) -> tuple[float, float, float, float]:
    """Calls' script times (us) summed up: their mean, the median call's, the share of calls
    above ``FOLD_FACTOR`` times that median (the apply script's folds, which rewrite the turns'
    big field), and those calls' median (0 when there are none)."""
    median = statistics.median(times)
    folds = [t for t in times if t > FOLD_FACTOR * median]
    return (
        statistics.fmean(times),
        median,
        len(folds) / len(times),
        statistics.median(folds) if folds else 0.0,
    )


def phases_print(bench: Any) -> None:
    """Print the ``append_floor`` row's phases, project against baseline (medians of alternated
    calls), each side's CPU a call in its PostgreSQL backend and in Redis, and its calls' time
    in Redis's scripts."""
    from django.db import connections

    project, baseline = bench.append_floor_ops()
    n = bench.args.per_round * bench.args.rounds * 10
    for _ in range(bench.args.warmup * 20):
        project()
        baseline()
    sides: dict[str, list[tuple[float, float, float, float]]] = {"project": [], "baseline": []}
    with _clocked():
        for i in range(n):
            order = (("project", project), ("baseline", baseline))
            for side, op in order if i % 2 else order[::-1]:
                if (phases := _call(op)) is not None:
                    sides[side].append(phases)
    if not all(sides.values()):
        raise SystemExit("--phases: no call of a side sent one statement, then one Redis command")
    medians = {
        side: [statistics.median(column) * 1e6 for column in zip(*got, strict=True)]
        for side, got in sides.items()
    }
    counts = f"{len(sides['project'])} and {len(sides['baseline'])}"
    print(f"append_floor: medians of {counts} calls, us")
    print("\n| phase | project | baseline | project - baseline |\n| --- | ---: | ---: | ---: |")
    for i, phase in enumerate(PHASES):
        mine, floor = medians["project"][i], medians["baseline"][i]
        print(f"| {phase} | {mine:,.1f} | {floor:,.1f} | {mine - floor:+,.1f} |")
    mine, floor = sum(medians["project"]), sum(medians["baseline"])
    print(f"| sum | {mine:,.1f} | {floor:,.1f} | {mine - floor:+,.1f} |")
    own = connections["default"].connection.info.backend_pid
    raw = bench.raw.info.backend_pid
    pids = {"project": own, "baseline": raw}
    servers = {
        side: _servers(op, pids[side], bench.redis, n)
        for side, op in (("project", project), ("baseline", baseline))
    }
    print(f"\neach side alone, {n} calls: CPU in its PostgreSQL backend and in Redis, us a call")
    for side, (backend, redis_us) in servers.items():
        shown = "unknown (not a local server)" if backend is None else f"{backend:,.1f}"
        print(f"- {side}: backend {shown}, Redis {redis_us:,.1f}")
    print(f"\neach side alone, {n} calls: time in Redis's scripts a call (INFO commandstats), us")
    for side, op in (("project", project), ("baseline", baseline)):
        mean, median, share, fold = script_split(_script_times(op, bench.redis, n))
        print(
            f"- {side}: mean {mean:,.1f}, median {median:,.1f}; {share:.0%} of the calls above "
            f"{FOLD_FACTOR}x the median, their median {fold:,.1f}"
        )
    print("(the project's calls far above its median are the delta script's folds)")
