"""The README's fenced code blocks, by section, for the tests that run them as written
(tests/test_readme.py, tests/test_package.py)."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
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
