"""What a newcomer has: a copy of the project as a release or a clone holds it, and the README's
fenced code blocks by section, for the tests that run them as written (tests/test_readme.py,
tests/test_package.py). No git: these run from an unpacked sdist too."""

from __future__ import annotations

import re
import shutil
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
# What a build or a run leaves in a tree, as .gitignore lists it: never part of a release.
LEFT_BEHIND = {
    ".git",
    ".venv",
    ".tmp",
    "__pycache__",
    ".pytest_cache",
    ".ruff_cache",
    ".mypy_cache",
    ".hypothesis",
    "artifacts",
    "build",
    "dist",
    "site",
    "staticfiles",
}
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>\w*)\n(?P<body>.*?)^(?P=indent)```$", re.M | re.S)


@dataclass(frozen=True)
class Block:
    section: str
    lang: str
    code: str


def blocks(text: str | None = None) -> list[Block]:
    """Every fenced block of the README, dedented, with the ``##`` section it sits in."""
    text = README.read_text() if text is None else text
    found = []
    for match in FENCE.finditer(text):
        headings = re.findall(r"^## (.+)$", text[: match.start()], re.M)
        found.append(
            Block(
                section=headings[-1] if headings else "",
                lang=match["lang"],
                code=textwrap.dedent(match["body"]),
            )
        )
    return found


def section_blocks(section: str, lang: str) -> list[str]:
    """The code of the blocks in language ``lang`` under the section that starts with
    ``section``; at least one, or the README and its tests have drifted apart."""
    codes = [b.code for b in blocks() if b.section.startswith(section) and b.lang == lang]
    assert codes, f"README.md has no {lang} block under {section!r}"
    return codes


def left_behind(directory: str, names: list[str]) -> set[str]:
    """The ``names`` in ``directory`` that are build or run output (a copytree ``ignore``)."""
    ignored = {name for name in names if name in LEFT_BEHIND}
    # NOTE: the demo's local database files too (make run's default), as .gitignore has them.
    ignored |= {n for n in names if n.endswith((".pyc", ".egg-info")) or ".sqlite" in n}
    if Path(directory).name == "bench":
        ignored.add("results")
    return ignored


def project_files(tree: Path) -> set[str]:
    """The files of the project in ``tree`` (paths relative to it), without build or run
    output anywhere in their path."""
    files = set()
    for path in tree.rglob("*"):
        relative = path.relative_to(tree)
        ancestors = [relative, *relative.parents[:-1]]
        if path.is_file() and not any(
            left_behind(str(tree / ancestor.parent), [ancestor.name]) for ancestor in ancestors
        ):
            files.add(relative.as_posix())
    return files


def project_copy(dest: Path) -> Path:
    """A copy of the project without what builds and runs leave behind: what a fresh clone or
    an unpacked sdist has."""
    shutil.copytree(ROOT, dest, ignore=left_behind, symlinks=False)
    return dest
