"""The changelog's fragments: every file in ``changelog.d/`` is one towncrier collects, and a
release section built from them lands in ``CHANGELOG.md`` below its marker."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = "<!-- towncrier release notes start -->"


def _towncrier(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "towncrier", "build", "--dir", str(where), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _project(tmp_path: Path, fragments: dict[str, str]) -> Path:
    """A copy of the project's towncrier setup (config, changelog, README) with ``fragments``."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    shutil.copy(ROOT / "CHANGELOG.md", tmp_path)
    (tmp_path / "changelog.d").mkdir()
    shutil.copy(ROOT / "changelog.d" / "README.md", tmp_path / "changelog.d")
    for name, text in fragments.items():
        (tmp_path / "changelog.d" / name).write_text(text)
    return tmp_path


def test_the_fragments_of_the_tree_build() -> None:
    # NOTE: a misspelt type would otherwise be left out of the release without a word.
    done = _towncrier(ROOT, "--draft")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (ROOT / "CHANGELOG.md").read_text().count(MARKER) == 1


def test_orphan_fragments_land_under_their_kind(tmp_path: Path) -> None:
    project = _project(
        tmp_path,
        {
            "+new-thing.added.md": "`thing_get` reads a thing.\n",
            "+old-bug.fixed.md": "A thing read twice is read once.\n",
        },
    )
    done = _towncrier(project, "--draft", "--version", "9.9.9")
    assert done.returncode == 0, done.stderr
    assert "## [9.9.9] - " in done.stdout
    assert "### Added\n\n- `thing_get` reads a thing.\n" in done.stdout
    assert "### Fixed\n\n- A thing read twice is read once.\n" in done.stdout
    assert done.stdout.index("### Added") < done.stdout.index("### Fixed")


def test_a_misspelt_fragment_is_refused(tmp_path: Path) -> None:
    project = _project(tmp_path, {"+new-thing.adds.md": "Something.\n"})
    done = _towncrier(project, "--draft", "--version", "9.9.9")
    assert done.returncode != 0
    assert "+new-thing.adds.md" in done.stdout + done.stderr


def test_a_release_section_goes_below_the_marker(tmp_path: Path) -> None:
    project = _project(tmp_path, {"+new-thing.added.md": "`thing_get` reads a thing.\n"})
    done = _towncrier(project, "--keep", "--version", "9.9.9")
    assert done.returncode == 0, done.stderr
    text = (project / "CHANGELOG.md").read_text()
    release = text.index("## [9.9.9] - ")
    assert text.index(MARKER) < release < text.index("## [0.1.0]")
    assert text.index("- `thing_get` reads a thing.", release) < text.index("## [0.1.0]")
