"""The prose of the package, held to CONTRIBUTING.md: no comment or docstring cites an issue
number (a reader of the code cannot open it), and ``scripts/prose-stats`` counts what it says."""

from __future__ import annotations

from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def prose_stats() -> ModuleType:
    loader = SourceFileLoader("prose_stats", str(ROOT / "scripts" / "prose-stats"))
    spec = spec_from_loader("prose_stats", loader)
    assert spec is not None
    module = module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_no_comment_or_docstring_cites_an_issue_number():
    stats = prose_stats().stats
    assert stats(ROOT / "memory")["issue_citations"] == 0
    assert stats(ROOT / "memoryproj")["issue_citations"] == 0


def test_the_counts_are_those_of_the_source(tmp_path):
    (tmp_path / "migrations").mkdir()
    (tmp_path / "migrations" / "0001_x.py").write_text('"""Issue 1, not counted."""\n')
    (tmp_path / "a.py").write_text(
        '"""Four"""\n'
        "\n"
        "# NOTE: why.\n"
        "x = 1  # a plain comment, see issue 12\n"
        "\n"
        "\n"
        "def f():\n"
        '    """Twelve chars"""\n'
    )
    assert prose_stats().stats(tmp_path) == {
        "note_comments": 1,
        "comment_lines": 2,
        "docstrings": 2,
        "docstring_average_chars": 8.0,
        "issue_citations": 1,
    }
