"""``manage.py memory_eval``: measure the search on a LongMemEval or LoCoMo file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from django.core.management.base import CommandError

from memory.evaluation.files import EvalFileError, evalset_read
from memory.evaluation.run import eval_run, eval_tables
from memory.management.args import arg, at_least_one
from memory.management.base import MemoryCommand

MODES = ("text", "semantic", "hybrid")


def _ks(value: str) -> list[int]:
    try:
        ks = sorted({int(x) for x in value.split(",") if x.strip()})
    except ValueError as e:
        raise CommandError(f"--k takes numbers such as 5,10: {value!r}") from e
    if not ks or ks[0] < 1 or ks[-1] > 100:
        raise CommandError("--k takes numbers from 1 to 100.")
    return ks


class Command(MemoryCommand):
    help = (
        "Load a LongMemEval file (longmemeval_s_cleaned.json) or a LoCoMo file (locomo10.json) "
        "into throwaway owners (--prefix), search each question, and print the retrieval "
        "metrics as the benchmarks compute them: recall_any/all@k at turn and session level "
        "(LongMemEval's eval_utils), LoCoMo's evidence recall@k. The owners are forgotten "
        "afterwards unless --keep. Embeds in this process where search by meaning is on."
    )

    arguments = (
        arg("file", metavar="FILE", help="The benchmark's JSON file."),
        arg(
            "--mode",
            action="append",
            choices=MODES,
            help="A search mode to measure (repeatable; default: every mode that is on).",
        ),
        arg("--k", default="5,10", help="The k of @k, comma-separated (5,10)."),
        arg("--limit", type=int, help="Only the first N questions (LongMemEval: N owners)."),
        arg("--prefix", default="eval-", help="The throwaway owners' id prefix (eval-)."),
        arg("--keep", action="store_true", help="Keep the owners afterwards."),
        arg(
            "--reuse",
            action="store_true",
            help="Search owners a --keep run left as they are, when they hold the same turns "
            "(no new import; only what is not embedded yet is embedded). Implies --keep.",
        ),
        arg(
            "--baselines",
            action="store_true",
            help="Also rank by BM25, by the embedder's vectors alone (dense), and by their "
            "reciprocal rank fusion, on the same owners.",
        ),
        arg("--ndcg", action="store_true", help="Also print ndcg@k."),
    )

    def handle(self, *args: Any, **options: Any) -> None:
        from memory.selectors.search import semantic_on

        ks = _ks(options["k"])
        if not options["prefix"]:
            raise CommandError("--prefix must not be empty: the owners are forgotten after.")
        name = options["file"]
        try:
            evalset = evalset_read(data=orjson.loads(Path(name).read_bytes()))
        except OSError as e:
            raise CommandError(f"Cannot read {name}: {e}") from e
        except orjson.JSONDecodeError as e:
            raise CommandError(f"{name} is not JSON: {e}") from e
        except EvalFileError as e:
            raise CommandError(f"{name}: {e}") from e
        at_least_one(options, "limit")
        if options["limit"] is not None:
            evalset.questions = evalset.questions[: options["limit"]]
            wanted = {q.corpus for q in evalset.questions}
            evalset.conversations = {k: v for k, v in evalset.conversations.items() if k in wanted}
        on = semantic_on()
        modes = options["mode"] or (list(MODES) if on else ["text"])
        if not on and set(modes) - {"text"}:
            raise CommandError("Search by meaning is off (MEMORY['EMBEDDER']): only --mode text.")
        run = eval_run(
            evalset=evalset,
            modes=modes,
            prefix=options["prefix"],
            keep=options["keep"] or options["reuse"],
            reuse=options["reuse"],
            baselines=options["baselines"],
            progress=lambda line: self.stderr.write(line) if options["verbosity"] > 1 else None,
        )
        self.stdout.write(f"{evalset.format}: {name}")
        self.stdout.write(eval_tables(run=run, ks=ks, ndcg=options["ndcg"]))
        self.stdout.write(
            f"loaded in {run.load_seconds:.1f} s, embedded in {run.embed_seconds:.1f} s"
        )
