"""``python -m bench``: run the benchmark suite and print its table (see bench/run.py)."""

from __future__ import annotations

from bench.run import main

raise SystemExit(main())
