"""The public Python API is a promise: the names of the public modules' ``__all__``
(docs/python-api.md) are those of ``tests/data/public_api.txt``, the surface as of the last
release, and every name that has appeared or gone since is named in a changelog fragment.

At a release, once ``towncrier build`` has collected the fragments, the snapshot is rewritten:
``python -m tests.test_public_api --write``.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT / "tests" / "data" / "public_api.txt"
FRAGMENTS = ROOT / "changelog.d"

# The modules whose ``__all__`` a host site may import from, under semantic versioning. Every
# other module path of ``memory`` is internal (``memory.ops`` says so in its docstring).
PUBLIC_MODULES = (
    "memory.services",
    "memory.selectors",
    "memory.exceptions",
    "memory.tools",
    "memory.metrics",
    "memory.extraction",
    "memory.recall",
    "memory.integrations.channels",
    "memory.integrations.langchain",
    "memory.integrations.langgraph",
    "memory.integrations.openai_agents",
)

# The page that documents each public module's names, each name written there.
PAGES = {
    "memory.services": "python-api.md",
    "memory.selectors": "python-api.md",
    "memory.exceptions": "python-api.md",
    "memory.tools": "python-api.md",
    "memory.metrics": "python-api.md",
}


def public_names() -> set[str]:
    """``module.name`` for every name of every public module's ``__all__``."""
    return {
        f"{module}.{name}"
        for module in PUBLIC_MODULES
        for name in importlib.import_module(module).__all__
    }


def snapshot_names(text: str) -> set[str]:
    return {line.strip() for line in text.splitlines() if line.strip() and line[0] != "#"}


def mentioned(text: str) -> set[str]:
    """What the Markdown ``text`` names in backticks: ``name``, ``module.name``, ``name(...)``."""
    spans = {span.split("(")[0].strip() for span in re.findall(r"`([^`\n]+)`", text)}
    return spans | {span.rpartition(".")[2] for span in spans}


def unexplained(live: set[str], snapshot: set[str], fragments: Iterable[str]) -> list[str]:
    """The names that appeared (``+``) or went (``-``) since the snapshot and that no fragment
    names, by their qualified name or their own."""
    named = set().union(*(mentioned(text) for text in fragments))
    changed = [f"+{n}" for n in live - snapshot] + [f"-{n}" for n in snapshot - live]
    return sorted(c for c in changed if not {c[1:], c[1:].rpartition(".")[2]} & named)


def fragment_texts() -> list[str]:
    return [p.read_text() for p in sorted(FRAGMENTS.glob("*.md")) if p.name != "README.md"]


def test_every_public_name_that_came_or_went_since_the_release_has_a_changelog_line() -> None:
    live, snapshot = public_names(), snapshot_names(SNAPSHOT.read_text())
    assert unexplained(live, snapshot, fragment_texts()) == []


def test_the_check_sees_a_name_that_came_or_went_without_a_line() -> None:
    snapshot = {"memory.services.turn_append", "memory.selectors.asearch"}
    live = {"memory.services.turn_append", "memory.services.turn_merge"}
    assert unexplained(live, snapshot, ["`fact_put` is faster."]) == [
        "+memory.services.turn_merge",
        "-memory.selectors.asearch",
    ]
    fragments = ["`turn_merge(owner_id=...)` merges.", "`memory.selectors.asearch` is gone."]
    assert unexplained(live, snapshot, fragments) == []


def test_the_snapshot_is_sorted_and_names_only_public_modules() -> None:
    names = [line for line in SNAPSHOT.read_text().splitlines() if line and line[0] != "#"]
    assert names == sorted(set(names))
    assert {name.rpartition(".")[0] for name in names} <= set(PUBLIC_MODULES)


def test_every_public_name_of_the_python_api_is_on_its_page() -> None:
    missing = []
    for module, page in PAGES.items():
        text = (ROOT / "docs" / page).read_text()
        for name in importlib.import_module(module).__all__:
            if name not in mentioned(text):
                missing.append(f"{module}.{name} ({page})")
    assert missing == []


def test_the_operators_helpers_are_not_public() -> None:
    from memory import ops, selectors, services

    assert set(ops.__all__).isdisjoint(services.__all__)
    assert set(ops.__all__).isdisjoint(selectors.__all__)
    assert "no stability promise" in " ".join((ops.__doc__ or "").split()).lower()


def _write() -> None:
    import django

    sys.path.insert(0, str(ROOT))
    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    django.setup()
    head = [line for line in SNAPSHOT.read_text().splitlines() if line.startswith("#")]
    SNAPSHOT.write_text("\n".join([*head, *sorted(public_names())]) + "\n")


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    _write()
