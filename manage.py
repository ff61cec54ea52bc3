#!/usr/bin/env python
"""Django's command-line utility for the memory demo project.

Run it with the project's virtual environment (``.venv/bin/python manage.py ...``, which
``make install`` or ``make run`` creates); run with an interpreter that has no Django while
``.venv`` exists, it says so and runs itself again with ``.venv/bin/python``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

VENV_PYTHON = Path(__file__).resolve().parent / ".venv" / "bin" / "python"


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryproj.settings")
    try:
        from django.core.management import execute_from_command_line
    except ImportError as exc:
        # NOTE: once at most (the variable marks the second run), so this cannot loop.
        if VENV_PYTHON.exists() and not os.environ.get("MEMORY_MANAGE_REEXEC"):
            print(f"manage.py: no Django in {sys.executable}; using {VENV_PYTHON}", file=sys.stderr)
            os.environ["MEMORY_MANAGE_REEXEC"] = "1"
            os.execv(VENV_PYTHON, [str(VENV_PYTHON), *sys.argv])
        raise ImportError(
            "Couldn't import Django. Are you sure it's installed and "
            "available on your PYTHONPATH environment variable? Did you "
            "forget to activate a virtual environment? (`make install` creates .venv; "
            "then run `.venv/bin/python manage.py ...`.)"
        ) from exc
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
