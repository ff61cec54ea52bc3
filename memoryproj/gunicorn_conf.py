"""gunicorn settings for the demo's metrics in multiprocess mode: ``gunicorn -c
python:memoryproj.gunicorn_conf memoryproj.wsgi`` with ``PROMETHEUS_MULTIPROC_DIR`` set to an
empty directory of its own (docs/metrics.md)."""

from __future__ import annotations

import os
from typing import Any


def child_exit(server: Any, worker: Any) -> None:
    """A worker exited: its live gauges no longer count (its counters still do)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
