"""The benchmark suite of ``memory`` (``make bench``): real PostgreSQL and Redis, ratios against
baselines measured in the same run. Not part of ``make test``; see docs/performance.md."""

from __future__ import annotations
