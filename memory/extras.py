"""How to install one of the package's optional extras, in the docs' words, for the errors
and check hints that name one: there is no release on an index yet."""

from __future__ import annotations


def extra_install(extra: str) -> str:
    """The install line of ``extra`` (``"langchain"``): the wheel ``make dist`` builds, with
    the extra, until a release; ``django-memory[extra]`` from the index once there is one."""
    return (
        f'pip install "$(echo dist/django_memory-*.whl)[{extra}]" after make dist in the '
        f'repository (pip install "django-memory[{extra}]" once released)'
    )
