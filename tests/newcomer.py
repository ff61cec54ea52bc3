"""What a newcomer has: a copy of the project as a release or a clone holds it, the README's
fenced code blocks by section, and a docs page's Python blocks run as the page says, for the tests
that run them as written (tests/test_readme.py, tests/test_package.py, tests/test_docs_*.py). No
git: these run from an unpacked sdist too."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import threading
from collections.abc import Mapping
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
# NOTE: a block's info string may give it a title (```python title="settings.py"): a file of
# the reader's site, shown, not run.
FENCE = re.compile(
    r"^(?P<indent> *)```(?P<lang>\w*)(?: +title=\"(?P<title>[^\"]*)\")?\n"
    r"(?P<body>.*?)^(?P=indent)```$",
    re.M | re.S,
)


@dataclass(frozen=True)
class Block:
    section: str
    lang: str
    code: str
    title: str = ""


def blocks(text: str | None = None) -> list[Block]:
    """Every fenced block of the README (or of the page ``text``), dedented, with the ``##``
    section it sits in."""
    text = README.read_text() if text is None else text
    found = []
    for match in FENCE.finditer(text):
        headings = re.findall(r"^## (.+)$", text[: match.start()], re.M)
        found.append(
            Block(
                section=headings[-1] if headings else "",
                lang=match["lang"],
                code=textwrap.dedent(match["body"]),
                title=match["title"] or "",
            )
        )
    return found


def section_blocks(section: str, lang: str, page: Path = README) -> list[str]:
    """The code of the blocks in language ``lang`` under the section of ``page`` (the README)
    that starts with ``section``; at least one, or the page and its tests have drifted apart."""
    found = blocks(page.read_text(encoding="utf-8"))
    codes = [b.code for b in found if b.section.startswith(section) and b.lang == lang]
    assert codes, f"{page.name} has no {lang} block under {section!r}"
    return codes


def readme_python_blocks() -> list[str]:
    """The README's Python blocks that run (in the site's ``manage.py shell``), in order: the
    plain ones, not a titled file of the reader's site."""
    return [b.code for b in blocks() if b.lang == "python" and not b.title]


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


def clone(dest: Path) -> Path:
    """A fresh copy of the project in ``dest`` whose ``.venv`` is this suite's environment,
    ready: its ``.installed`` mark is newer than the requirements, as after ``make install``."""
    tree = project_copy(dest)
    venv = tree / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    (site,) = (venv / "lib").glob("python3*/site-packages")
    (site / "suite-environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (venv / ".installed").touch()
    (venv / ".runtime").touch()
    return tree


# A docs page's Python blocks: plain ```python blocks only; one with a title
# (```python title="...") is a file of the reader's site, shown, not run.
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)
EXAMPLE = "example.py"
# NOTE: Django's shell says this first, on stdout, before it runs what it reads.
AUTO_IMPORTS = re.compile(r"^\d+ objects? imported automatically.*\n\n?", re.MULTILINE)


def python_blocks(page: Path) -> list[str]:
    return PYTHON_BLOCK.findall(page.read_text(encoding="utf-8"))


def how_to_run(page: Path, *, pasted: bool = False) -> str:
    """The commands ``page`` gives for running a block saved as ``example.py`` (``pasted``: for
    pasting one into the interactive ``manage.py shell``): its shell block that says so,
    without its comments and the other way's last command."""
    (block,) = [
        code
        for code in re.findall(r"^```sh\n(.*?)^```$", page.read_text(), re.M | re.S)
        if f"< {EXAMPLE}" in code
    ]
    commands = [line.split("#")[0].strip() for line in block.splitlines()]
    assert commands == [
        ". .tmp/demo.env",
        ".venv/bin/python manage.py shell",
        f".venv/bin/python manage.py shell < {EXAMPLE}",
    ], f"{page.name} no longer says how to run its blocks as its tests do"
    return "\n".join(commands[:2] if pasted else [commands[0], commands[2]])


def shell_pasted(tree: Path, script: str, block: str, env: Mapping[str, str], *, what: str) -> str:
    """``block`` pasted into the interactive shell that ``script`` (ending in ``manage.py
    shell``) opens in ``tree``, then the end of input; what it printed. A plain ``manage.py
    shell`` is Python's interactive console: it reads the paste line by line, so a blank line
    ends a statement, and it reports an error and reads on (``File "<console>"`` on stderr).

    NOTE: written once the console has said its banner: a shell that finds input waiting at
    its start runs it whole, as a file, which is the other way a page gives. ``HOME`` is the
    copy's own, so that the console's history file is not the user's."""
    home = tree / ".tmp" / "home"
    home.mkdir(parents=True, exist_ok=True)
    shell = subprocess.Popen(
        ["bash", "-c", "set -euo pipefail\n" + script],
        cwd=tree,
        env={**env, "HOME": str(home)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert shell.stdin and shell.stdout and shell.stderr
    errors: list[str] = []
    ready = threading.Event()

    def read_errors() -> None:
        for line in shell.stderr:  # type: ignore[union-attr]
            errors.append(line)
            if "(InteractiveConsole)" in line:
                ready.set()
        ready.set()

    reader = threading.Thread(target=read_errors, daemon=True)
    reader.start()
    try:
        assert ready.wait(timeout=120), f"{what}: the shell did not start"
        shell.stdin.write(block + "\n\n")
        shell.stdin.close()
        printed = shell.stdout.read()
        shell.wait(timeout=300)
    finally:
        if shell.poll() is None:
            shell.kill()
            shell.wait()
    reader.join(timeout=30)
    stderr = "".join(errors)
    assert shell.returncode == 0 and 'File "<console>"' not in stderr, (
        f"{what}, pasted:\n{printed[-3000:]}\n{stderr[-5000:]}"
    )
    return printed


def run_page_blocks(
    tree: Path, page: Path, env: Mapping[str, str], *, pasted: bool = False
) -> list[str]:
    """Every Python block of ``page`` (a page of ``tree``), in order, as the page says: saved
    as ``example.py`` in the copy ``tree`` and run by the page's commands, each in a new shell
    with the environment ``env`` (``pasted``: pasted into the interactive ``manage.py shell``
    the page's commands open). Returns what each block printed (pasted: with the console's
    prompts and the values of its expressions)."""
    script = "set -euo pipefail\n" + how_to_run(tree / "docs" / page.name, pasted=pasted)
    printed = []
    for number, block in enumerate(python_blocks(tree / "docs" / page.name), 1):
        what = f"{page.name}, python block {number}"
        if pasted:
            printed.append(shell_pasted(tree, script, block, env, what=what))
            continue
        (tree / EXAMPLE).write_text(block, encoding="utf-8")
        shell = subprocess.run(
            ["bash", "-c", script],
            cwd=tree,
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert shell.returncode == 0, f"{what}:\n{shell.stdout[-3000:]}\n{shell.stderr[-5000:]}"
        printed.append(AUTO_IMPORTS.sub("", shell.stdout, count=1))
    return printed
