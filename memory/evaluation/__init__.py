"""Measuring recall on the public benchmarks' files (``manage.py memory_eval``): ``files``
reads LongMemEval and LoCoMo files, ``metrics`` scores rankings as they do (and ranks by
BM25, a baseline), ``run`` loads a file into throwaway owners and searches it."""

from __future__ import annotations
