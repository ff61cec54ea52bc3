"""``manage.py memory_stats``: how much the memory app holds, and how its Redis cache fares."""

from __future__ import annotations

import json
from typing import Any

from memory import ops
from memory.management.args import arg
from memory.management.base import MemoryCommand

# The shared counters memory.cache keeps in Redis, in the order they are printed.
COUNTERS = ("hits", "misses", "short", "rehydrations", "fills", "fills_refused", "deltas", "drops")


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit} ({n:,} bytes)"
    return f"{n:,} bytes"


class Command(MemoryCommand):
    help = (
        "Show the number of owners, sessions, turns and facts, the cache's hit and miss "
        "counters, and the Redis memory used by the app's keys."
    )

    arguments = (arg("--json", action="store_true", help="Print one JSON object."),)

    def handle(self, *args: Any, **options: Any) -> None:
        stats = ops.stats_get()
        if options["json"]:
            self.stdout.write(json.dumps(stats, indent=2, ensure_ascii=False))
            return
        rows: list[tuple[str, str]] = [
            (name, f"{stats[name]:,}") for name in ("owners", "sessions", "turns", "facts")
        ]
        cache = stats["cache"]
        rows.append(("cache", cache["cache"]))
        if cache["cache"] == "ok":
            counters = cache["counters"]
            rows += [
                ("cache keys", f"{cache['keys']:,}"),
                ("cache memory", _bytes(cache["memory_bytes"])),
            ]
            rows += [(name, f"{counters.get(name, 0):,}") for name in COUNTERS]
            reads = counters.get("hits", 0) + counters.get("misses", 0)
            if reads:
                rows.append(("hit rate", f"{counters.get('hits', 0) / reads:.1%}"))
        width = max(len(name) for name, _ in rows)
        for name, value in rows:
            self.stdout.write(f"{name:<{width}}  {value}")
