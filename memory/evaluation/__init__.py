"""Measuring recall on the public benchmarks' files (``manage.py memory_eval``): ``files``
reads LongMemEval and LoCoMo files, ``metrics`` scores rankings as they do (and ranks by
BM25, a baseline), ``run`` loads a file into throwaway owners and searches it."""

from __future__ import annotations

from memory.evaluation.files import EvalFileError, EvalSet, evalset_read
from memory.evaluation.run import BASELINES, EvalRun, eval_owner_id, eval_run, eval_tables

__all__ = [
    "BASELINES",
    "EvalFileError",
    "EvalRun",
    "EvalSet",
    "eval_owner_id",
    "eval_run",
    "eval_tables",
    "evalset_read",
]
