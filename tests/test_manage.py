"""manage.py run by an interpreter without Django: Django's own hint, or the project's .venv."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# NOTE: the interpreter this suite's virtual environment was made from, which has no Django.
BARE_PYTHON = getattr(sys, "_base_executable", "")

pytestmark = pytest.mark.slow


def bare_python_lacks_django() -> bool:
    if not BARE_PYTHON or not Path(BARE_PYTHON).exists():
        return False
    found = subprocess.run([BARE_PYTHON, "-c", "import django"], capture_output=True)
    return found.returncode != 0


needs_bare_python = pytest.mark.skipif(
    not bare_python_lacks_django(), reason="no interpreter without Django to run manage.py with"
)


def manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    return subprocess.run(
        [BARE_PYTHON, "manage.py", *args],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "tests.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@needs_bare_python
def test_without_django_manage_py_runs_itself_with_the_venv_and_says_so() -> None:
    result = manage("check")
    assert result.returncode == 0, result.stderr
    assert f"manage.py: no Django in {BARE_PYTHON}; using {ROOT / '.venv/bin/python'}" in (
        result.stderr
    )


@needs_bare_python
def test_without_django_or_a_venv_manage_py_gives_djangos_hint() -> None:
    # NOTE: the variable is what marks a second run; with it, no venv is tried.
    result = manage("check", MEMORY_MANAGE_REEXEC="1")
    assert result.returncode == 1
    assert "Couldn't import Django." in result.stderr
    assert "Did you forget to activate a virtual environment?" in result.stderr
    assert "make install" in result.stderr
