"""Appends under concurrency, the tail published (``Bench`` inherits ``row_append_tail``).

32 clients, each on its own keep-alive connection, POST turns as fast as they are answered to
the gunicorn the HTTP rows run (``bench.load.ServerSettings``: 2 workers x 4 threads), over
1,000 owners drawn uniformly plus 4 hot owners that take a quarter of the writes between them
(four chat users typing at once against the same per-owner lock). Each request is timed from
its first byte sent to its answer read: an acknowledged append (201, committed in PostgreSQL).

The baseline is the bare DRF view (``bench.views.BareView``, same authentication, same body)
under the same 32 clients on the same server, rounds alternated with the project's. The row
shows p50/p95/p99 of each and the appends per second; its ratio is the project's appends per
second over the bare view's requests per second (target as the ``http_post`` row's). Per core:
appends per CPU second of the server's workers and of the PostgreSQL backends serving the bench
database (read from ``/proc`` by process, so that the other work on a shared machine stays out).
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.rows import Row

TAIL_CLIENTS = 32
TAIL_OWNERS = 1_000
TAIL_HOT = 4
# The share of the writes that go to the hot owners, together.
TAIL_HOT_SHARE = 0.25
TAIL_ROUNDS = 3
TAIL_SECONDS = 4.0


def cpu_ticks(pids: set[int]) -> int:
    """The CPU ticks (user and system, ``/proc``) the processes ``pids`` have used; a process that
    has ended counts none."""
    total = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])
    return total


def stack_pids(server_pgid: int, database: str) -> set[int]:
    """The server's processes (its process group) and the PostgreSQL backends connected to
    ``database`` (their command line names it)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            pid = int(entry.name)
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if os.getpgid(pid) == server_pgid or (
                command.startswith("postgres:") and f" {database} " in command
            ):
                found.add(pid)
        except OSError:
            continue
    return found


def hot_weights(owners: int, hot: int, hot_share: float) -> tuple[float, ...]:
    """Cumulative weights over ``hot + owners`` owners: the first ``hot`` take ``hot_share`` of
    the draws between them, the rest share the remainder evenly."""
    each_hot = hot_share / hot
    each_cold = (1 - hot_share) / owners
    total = 0.0
    out = []
    for rank in range(hot + owners):
        total += each_hot if rank < hot else each_cold
        out.append(total)
    return tuple(out)


class TailRows:
    """``row_append_tail`` of ``Bench``."""

    token: str
    args: Any
    settings: Any

    def row_append_tail(self) -> Row:
        import orjson

        from bench.load import (
            MixedLoad,
            MixedResult,
            ServerSettings,
            gunicorn,
            http_request,
            run_mixed,
        )
        from bench.mixed import mix_owner
        from bench.rows import Row
        from bench.seed import connect_params, content_of

        server = ServerSettings()
        auth = {"Authorization": f"Token {self.token}", "Content-Type": "application/json"}
        body = orjson.dumps({"session_id": "web", "role": "user", "content": content_of(200, 1)})
        database = str(connect_params(self.settings.DATABASE_URL)["dbname"])
        count = TAIL_HOT + TAIL_OWNERS
        weights = hot_weights(TAIL_OWNERS, TAIL_HOT, TAIL_HOT_SHARE)
        tick = os.sysconf("SC_CLK_TCK")
        with gunicorn(server) as url:
            loads = {
                "project": MixedLoad(
                    reads=(),
                    writes=tuple(
                        http_request(
                            "POST", url, f"/api/memory/users/{mix_owner(i)}/turns/", auth, body
                        )
                        for i in range(count)
                    ),
                    cum_weights=weights,
                    read_share=0.0,
                ),
                "baseline": MixedLoad(
                    reads=(),
                    writes=(http_request("POST", url, "/bench/bare/", auth, body),),
                    cum_weights=(1.0,),
                    read_share=0.0,
                ),
            }
            for load in loads.values():
                run_mixed([url], load, seconds=1, connections=TAIL_CLIENTS)
            pgid = os.getpgid(int(_server_pid(url)))
            latencies: dict[str, list[float]] = {"project": [], "baseline": []}
            rates: dict[str, list[float]] = {"project": [], "baseline": []}
            cpu: dict[str, float] = {"project": 0.0, "baseline": 0.0}
            bad = 0
            for r in range(TAIL_ROUNDS):
                order = ("project", "baseline") if r % 2 == 0 else ("baseline", "project")
                for side in order:
                    pids = stack_pids(pgid, database)
                    before = cpu_ticks(pids)
                    result: MixedResult = run_mixed(
                        [url], loads[side], seconds=TAIL_SECONDS, connections=TAIL_CLIENTS
                    )
                    cpu[side] += (cpu_ticks(pids | stack_pids(pgid, database)) - before) / tick
                    latencies[side] += result.latencies
                    rates[side].append(len(result.latencies) / result.seconds)
                    bad += result.bad
        figures = {
            side: {
                "p50": statistics.median(values),
                "p95": _percentile(values, 0.95),
                "p99": _percentile(values, 0.99),
                "per_second": statistics.median(rates[side]),
                "per_core_second": len(values) / cpu[side] if cpu[side] else None,
            }
            for side, values in latencies.items()
        }
        ratios = [a / b for a, b in zip(rates["project"], rates["baseline"], strict=True)]
        project, baseline = figures["project"], figures["baseline"]
        row = Row(
            "append_tail",
            f"POST turn over HTTP, {TAIL_CLIENTS} concurrent writers over {TAIL_OWNERS:,} owners "
            f"and {TAIL_HOT} hot ones ({TAIL_HOT_SHARE:.0%} of the writes), {server.describe()} "
            "(appends/s)",
            "the bare DRF view, POST, same clients and server",
            ">= 0.8x",
            project=project["per_second"],
            baseline=baseline["per_second"],
            unit="req/s",
            ratio=statistics.median(ratios),
            spread=(min(ratios), max(ratios)),
        )

        def ms(value: float) -> str:
            return f"{value * 1000:.1f}"

        def core(value: float | None) -> str:
            return "?" if value is None else f"{value:,.0f}"

        row.note = (
            f"acknowledged append p50/p95/p99 {ms(project['p50'])}/{ms(project['p95'])}/"
            f"{ms(project['p99'])} ms against the bare view's {ms(baseline['p50'])}/"
            f"{ms(baseline['p95'])}/{ms(baseline['p99'])} ms; "
            f"{core(project['per_core_second'])} appends per core-second of the server and its "
            f"PostgreSQL backends ({core(baseline['per_core_second'])} bare requests); "
            f"{bad} non-2xx/errors"
        )
        row.extra = {
            "round_ratios": [round(x, 3) for x in ratios],
            "figures": figures,
            "cpu_seconds": cpu,
            "requests": {side: len(values) for side, values in latencies.items()},
            "non_2xx_or_errors": bad,
            "server": server.describe(),
            "clients": TAIL_CLIENTS,
            "seconds_each": TAIL_SECONDS,
            "rounds": TAIL_ROUNDS,
        }
        row.judge()
        return row


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


def _server_pid(url: str) -> int:
    """The gunicorn master listening on ``url``'s port (the one process whose command line
    binds it)."""
    port = url.rsplit(":", 1)[1]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "gunicorn" in command and f":{port} " in command:
            return int(entry.name)
    raise RuntimeError(f"no gunicorn found bound to {url}")
