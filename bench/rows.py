"""What the row modules share (``run``, ``mixed``, ``recall``): a line of the table, and the
sizes of the seeded data that more than one of them reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TOTAL_TURNS = 1_000_000
# The search owner: chat turns of varied words and lengths (bench.seed.chat_content).
SEARCH_OWNER = "searcher"
SEARCH_TURNS = 50_000


@dataclass
class Row:
    """One line of the table."""

    id: str
    title: str
    baseline_title: str
    target: str
    project: float | None = None
    baseline: float | None = None
    unit: str = "us"
    ratio: float | None = None
    met: bool | None = None
    spread: tuple[float, float] | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def judge(self) -> None:
        if self.ratio is None or not self.target:
            return
        op, _, value = self.target.partition(" ")
        if value.endswith(" ms"):
            # An absolute bound on the project's median, not on the ratio.
            if self.project is not None:
                self.met = self.project * 1000 <= float(value.removesuffix(" ms"))
            return
        limit = float(value.rstrip("x"))
        self.met = self.ratio <= limit if op == "<=" else self.ratio >= limit
