"""Durable user-level conversation memory for Django: turns and facts in Postgres, a coherent
Redis copy, a DRF API. ``__version__`` is the package's one version (pyproject reads it)."""

from __future__ import annotations

__version__ = "0.1.0"
