"""How to install one of the package's optional extras, in the docs' words, for the errors
and check hints that name one: there is no release on an index yet."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from importlib.util import find_spec
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Warning

# django-tasks' default backend, which runs a task inside the request that enqueues it.
IMMEDIATE_BACKEND = "django_tasks.backends.immediate.ImmediateBackend"


def extra_install(extra: str) -> str:
    """The install line of ``extra`` (``"langchain"``): the wheel ``make dist`` builds, with
    the extra, until a release; ``django-memory[extra]`` from the index once there is one."""
    return (
        f'pip install "$(echo dist/django_memory-*.whl)[{extra}]" after make dist in the '
        f'repository (pip install "django-memory[{extra}]" once released)'
    )


@contextmanager
def extra_needed(module: str, needs: str, extra: str) -> Iterator[None]:
    """Imports of ``module`` that need ``extra``: an ``ImportError`` in the block is raised
    again saying that ``module`` needs ``needs``, and the extra's install line."""
    try:
        yield
    except ImportError as e:
        raise ImportError(
            f"{module} needs {needs}, the extra {extra}: {extra_install(extra)}"
        ) from e


def worker_checks(
    missing: CheckMessage, subject: str, consequence: str, id: str
) -> list[CheckMessage]:
    """The checks of a setting whose work runs as django-tasks tasks: ``missing`` when
    django-tasks is not installed, else ``tasks_inline_warning``'s."""
    if find_spec("django_tasks") is None:
        return [missing]
    return tasks_inline_warning(subject, consequence, id)


def tasks_inline_warning(subject: str, consequence: str, id: str) -> list[CheckMessage]:
    """The check warning ``id`` when ``TASKS`` runs tasks immediately (django-tasks' default),
    so that what ``subject`` defers runs in the request (``consequence``); else nothing."""
    tasks: dict[str, Any] = getattr(settings, "TASKS", None) or {}
    if tasks.get("default", {}).get("BACKEND", IMMEDIATE_BACKEND) != IMMEDIATE_BACKEND:
        return []
    return [
        Warning(
            f"{subject}, but TASKS runs tasks immediately: {consequence}",
            hint='Set TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}} '
            "and run `manage.py db_worker`, or another worker backend.",
            id=id,
        )
    ]
