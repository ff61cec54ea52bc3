"""The bench's whole mixed load (``Bench`` inherits ``row_mixed``): 10,000 owners drawn by Zipf's
law, 90% context reads and 10% appends, over HTTP to two instances of the project (two gunicorn
servers sharing PostgreSQL and Redis), as a deployment behind a load balancer sees it.

What it prints: p99 and median latency of every request, requests per second, and requests per
second per core of CPU the whole stack used (the two servers, PostgreSQL and Redis, measured in
``/proc``): a figure of the project's cost that the load generator sharing this machine does not
enter. There is no baseline to divide by: the row is the whole, shown, not judged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.rows import Row

MIX_OWNERS = 10_000
# Turns each mixed-load owner is seeded with.
MIX_TURNS = 4
MIX_READ_SHARE = 0.9
MIX_CONNECTIONS = 16
MIX_SECONDS = 10.0


def mix_owner(rank: int) -> str:
    return f"mx-{rank:05d}"


class MixedRows:
    """``row_mixed`` of ``Bench``."""

    token: str
    args: Any

    def row_mixed(self) -> Row:
        import statistics

        import orjson

        from bench.load import (
            MixedLoad,
            ProcessCPU,
            ServerSettings,
            gunicorn,
            http_request,
            run_mixed,
            zipf_weights,
        )
        from bench.rows import Row
        from bench.seed import content_of

        server = ServerSettings(workers=1, threads=4)
        auth = {"Authorization": f"Token {self.token}"}
        body = orjson.dumps({"session_id": "web", "role": "user", "content": content_of(200, 1)})
        with gunicorn(server) as first, gunicorn(server) as second:
            urls = [first, second]
            load = MixedLoad(
                reads=tuple(
                    http_request(
                        "GET", first, f"/api/memory/users/{mix_owner(i)}/context/", auth, b""
                    )
                    for i in range(MIX_OWNERS)
                ),
                writes=tuple(
                    http_request(
                        "POST",
                        first,
                        f"/api/memory/users/{mix_owner(i)}/turns/",
                        {**auth, "Content-Type": "application/json"},
                        body,
                    )
                    for i in range(MIX_OWNERS)
                ),
                cum_weights=zipf_weights(MIX_OWNERS),
                read_share=MIX_READ_SHARE,
            )
            run_mixed(urls, load, seconds=2, connections=MIX_CONNECTIONS)
            before = ProcessCPU.snapshot() if ProcessCPU.available else {}
            result = run_mixed(urls, load, seconds=MIX_SECONDS, connections=MIX_CONNECTIONS)
            cpu = ProcessCPU.since(before) if ProcessCPU.available else {}
        requests = len(result.latencies)
        per_second = requests / result.seconds
        stack = sum(cpu.get(kind, 0.0) for kind in ("gunicorn", "postgres", "redis"))
        per_core = requests / stack if stack else None
        row = Row(
            "mixed",
            f"a whole mixed load over HTTP: {MIX_OWNERS:,} owners (Zipf), "
            f"{MIX_READ_SHARE:.0%} context reads and the rest appends, two instances "
            f"({server.describe()} each), {MIX_CONNECTIONS} clients, p99 latency",
            "none: shown",
            "shown",
            project=result.percentile(0.99),
            unit="us",
        )
        row.note = (
            f"median {statistics.median(result.latencies) * 1000:.1f} ms, "
            f"{per_second:,.0f} req/s"
            + (f", {per_core:,.0f} req/s per core of the stack's CPU" if per_core else "")
            + f"; {result.bad} failed"
        )
        row.extra = {
            "requests": requests,
            "requests_per_second": per_second,
            "requests_per_core_second": per_core,
            "p50": statistics.median(result.latencies),
            "p99": result.percentile(0.99),
            "cpu_seconds": cpu,
            "failed": result.bad,
        }
        return row
