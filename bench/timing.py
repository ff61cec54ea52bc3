"""Interleaved measurement: a project operation and its baseline, alternated op by op, in
rounds; the figures are medians, and the ratio is the median of the per-round ratios.

Timings on a shared machine drift; measured side by side, the ratio drifts far less.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

# An operation that runs once and returns the seconds its timed part took (so that untimed
# set-up, such as evicting a cached copy before a cold read, stays out of the figure).
Op = Callable[[], float]


def timed(fn: Callable[[], object]) -> Op:
    """An ``Op`` timing the whole of ``fn``."""

    def op() -> float:
        started = time.perf_counter()
        fn()
        return time.perf_counter() - started

    return op


@dataclass
class Pair:
    """A project figure and its baseline, in seconds per operation, and their ratio."""

    project: float
    baseline: float
    ratio: float
    round_ratios: list[float] = field(default_factory=list)
    samples: int = 0

    @property
    def spread(self) -> tuple[float, float]:
        """The lowest and highest per-round ratio."""
        return min(self.round_ratios), max(self.round_ratios)


def interleaved(project: Op, baseline: Op, *, rounds: int, per_round: int, warmup: int) -> Pair:
    """Run ``project`` and ``baseline`` alternately, ``per_round`` times each per round.

    Which goes first alternates op by op, so that neither always runs on a cache the other
    just warmed. Returns the median over rounds of each side's per-round median and the
    median per-round ratio.
    """
    for _ in range(warmup):
        project()
        baseline()
    project_medians: list[float] = []
    baseline_medians: list[float] = []
    ratios: list[float] = []
    for _ in range(rounds):
        a: list[float] = []
        b: list[float] = []
        for i in range(per_round):
            if i % 2:
                a.append(project())
                b.append(baseline())
            else:
                b.append(baseline())
                a.append(project())
        pa, pb = statistics.median(a), statistics.median(b)
        project_medians.append(pa)
        baseline_medians.append(pb)
        ratios.append(pa / pb)
    return Pair(
        project=statistics.median(project_medians),
        baseline=statistics.median(baseline_medians),
        ratio=statistics.median(ratios),
        round_ratios=ratios,
        samples=rounds * per_round,
    )
