"""What the README and the docs say that the code can make false, held to the code: the cache's
key schema, the queries of a cold read (counted), the floors drawn in docs/architecture.md
(against the imports tests/test_architecture.py walks), the demo's environment variables, the
README's size and the sources of its figures, the links between the pages, and that every
Python block pastes into a plain ``manage.py shell``, which reads it line by line."""

from __future__ import annotations

import code
import re
import sys
import unicodedata
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory import selectors, services
from memory.cache import keys
from tests import newcomer
from tests.test_architecture import PACKAGE, import_graph

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
# NOTE: the changelog page is a history; what it says was true when it was said.
PAGES = [README, *sorted(p for p in DOCS.glob("*.md") if p.name != "changelog.md")]
# The README fits on one screen's worth of reading: DRF's is 6 KB.
README_MAX_BYTES = 10_000
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}


def prose(page: Path) -> str:
    """The page without its fenced code blocks."""
    return re.sub(r"^( *)```.*?^\1```$", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)


# -- the key schema ----------------------------------------------------------------------------


def test_every_key_and_schema_the_docs_name_is_the_codes() -> None:
    cache_doc = sys.modules["memory.cache"].__doc__ or ""
    texts = {page.name: page.read_text(encoding="utf-8") for page in PAGES}
    texts["memory/cache/__init__.py"] = cache_doc
    named = {
        (name, version)
        for name, text in texts.items()
        for version in re.findall(r"[\w>]:(v\d+):", text)
    }
    # NOTE: performance.md logs dated measurements: "key schema `v4`" there names the change
    # that introduced it. Its keys, like every page's, are the current ones.
    named |= {
        (name, version)
        for name, text in texts.items()
        if name != "performance.md"
        for version in re.findall(r"schema `(v\d+)`", text)
    }
    assert {name for name, _ in named} >= {"reliability.md", "memory/cache/__init__.py"}
    assert {(name, v) for name, v in named if v != keys.SCHEMA} == set()


# -- the queries of a cold read ----------------------------------------------------------------

COLD_CLAIM = re.compile(
    r"(?:cold read|rehydrat)[^.|]*?\b(\d+|"
    + "|".join(NUMBERS)
    + r") (?:quer(?:y|ies)|statements?)\b",
    re.I,
)


def cold_read_claims() -> dict[str, set[int]]:
    """What each page says a cold read (a rehydration) costs in queries."""
    claims: dict[str, set[int]] = {}
    for page in PAGES:
        for said in COLD_CLAIM.findall(prose(page).replace("\n", " ")):
            claims.setdefault(page.name, set()).add(NUMBERS.get(said.lower()) or int(said))
    return claims


def test_the_claim_pattern_reads_a_count_in_words_or_digits() -> None:
    text = (
        "A cold read takes four queries whatever. Every miss rehydrates in 3 queries."
        " A cold read takes one query."
    )
    assert [NUMBERS.get(s) or int(s) for s in COLD_CLAIM.findall(text)] == [4, 3, 1]


@pytest.mark.django_db
def test_a_cold_read_takes_the_queries_the_docs_say(write) -> None:
    with write():
        services.fact_put(owner_id="wang", key="name", value="Wang Jianguo")
        for i in range(30):
            services.turn_append(owner_id="wang", session_id="a", role="user", content=f"t {i}")
    # NOTE: the first read of a process runs its reconciliation; it is not the one counted.
    selectors.context_get(owner_id="warm-up")
    with CaptureQueriesContext(connection) as queries:
        assert selectors.context_get(owner_id="wang")["source"] == "database"
    claims = cold_read_claims()
    assert {"README.md", "reliability.md", "index.md"} & set(claims), claims
    assert {page: said for page, said in claims.items() if said != {len(queries)}} == {}


# -- the floors of docs/architecture.md --------------------------------------------------------


def drawn_floors() -> dict[str, int]:
    """The floor of each entry of the drawing: ``cache/`` (a package), ``conf`` (a module of
    ``memory``), ``views/tools`` (a module drawn apart from its package)."""
    page = (DOCS / "architecture.md").read_text(encoding="utf-8")
    drawing = re.search(r"^```\n(floor .*?)^```$", page, re.M | re.S)
    assert drawing, "docs/architecture.md has no drawing of floors"
    floors = {}
    for line in drawing[1].splitlines():
        number, entries = re.fullmatch(r"floor (\d+) +(.*)", line).groups()  # type: ignore[union-attr]
        for entry in re.sub(r"\(.*?\)", "", entries).split():
            assert entry not in floors, f"{entry} is drawn twice"
            floors[entry] = int(number)
    return floors


def entry_of(module: str, floors: dict[str, int]) -> str:
    """The drawing's entry a module of ``memory`` is drawn as: the most specific one."""
    parts = module.split(".")[1:]
    candidates = (
        ["/".join(parts[:2]), f"{parts[0]}/"] if len(parts) > 1 else [parts[0], f"{parts[0]}/"]
    )
    drawn = [c for c in candidates if c in floors]
    assert drawn, f"{module} is on no floor of docs/architecture.md"
    return drawn[0]


def tight_floors(graph: dict[str, set[str]], floors: dict[str, int]) -> str:
    """The drawing as the imports would have it, each entry on the lowest floor it can be."""
    edges: dict[str, set[str]] = {}
    for module, imported in graph.items():
        if module != "memory":
            entry = entry_of(module, floors)
            edges.setdefault(entry, set()).update(
                entry_of(m, floors) for m in imported if m != "memory"
            )
    lowest: dict[str, int] = {}

    def floor(entry: str) -> int:
        if entry not in lowest:
            lowest[entry] = 1 + max((floor(e) for e in edges[entry] - {entry}), default=0)
        return lowest[entry]

    rows: dict[int, list[str]] = {}
    for entry in edges:
        rows.setdefault(floor(entry), []).append(entry)
    return "\n".join(
        f"floor {n}   {'  '.join(sorted(rows[n]))}" for n in sorted(rows, reverse=True)
    )


def test_the_drawing_has_every_module_once_and_every_import_points_down() -> None:
    floors = drawn_floors()
    graph = import_graph()
    modules = set(graph) - {"memory"}
    drawn = {module: entry_of(module, floors) for module in modules}
    assert set(floors) - set(drawn.values()) == set(), "entries with no module"
    upward = sorted(
        f"{module} (floor {floors[drawn[module]]}) imports {other} (floor {floors[drawn[other]]})"
        for module in modules
        for other in graph[module] - {"memory"}
        if drawn[other] != drawn[module] and floors[drawn[other]] >= floors[drawn[module]]
    )
    assert upward == [], "the imports would draw:\n" + tight_floors(graph, floors)


def test_the_drawing_check_sees_a_module_drawn_too_low() -> None:
    floors = {"conf": 1, "cache/": 1, "tools/": 2, "tools/rest": 3}
    assert entry_of("memory.tools.rest", floors) == "tools/rest"
    assert entry_of("memory.tools.calls", floors) == "tools/"
    assert entry_of("memory.cache", floors) == "cache/"
    graph = {"memory.conf": {"memory.cache.keys"}, "memory.cache.keys": set()}
    assert tight_floors(graph, floors) == "floor 2   conf\nfloor 1   cache/"
    with pytest.raises(AssertionError):
        entry_of("memory.views.base", floors)


def test_every_entry_of_the_drawing_is_described() -> None:
    page = (DOCS / "architecture.md").read_text(encoding="utf-8")
    described = {
        name
        for row in re.findall(r"^\| (.*?) \|", page, re.M)
        for name in re.findall(r"`([\w/]+)`", row)
    }
    assert set(drawn_floors()) - described == set()
    assert all((PACKAGE / e.rstrip("/")).with_suffix("" if e.endswith("/") else ".py").exists()
               for e in drawn_floors())  # fmt: skip


# -- the demo's environment --------------------------------------------------------------------


def test_every_variable_the_demo_reads_is_in_the_settings_page() -> None:
    source = (ROOT / "memoryproj" / "settings.py").read_text()
    read = set(re.findall(r'(?:environ\.get|environ\[|_env_\w+)\(?"([A-Z][A-Z0-9_]+)"', source))
    assert {"DATABASE_URL", "REDIS_URL", "DJANGO_DEBUG"} <= read
    page = (DOCS / "settings.md").read_text(encoding="utf-8")
    assert {name for name in read if f"`{name}`" not in page} == set()


# -- the README --------------------------------------------------------------------------------


def test_the_readme_fits_on_one_screen_of_reading() -> None:
    assert len(README.read_bytes()) <= README_MAX_BYTES


def test_the_readmes_comparison_has_only_figures_its_sources_hold() -> None:
    text = README.read_text(encoding="utf-8")
    (table,) = re.findall(r"^(\| \| `memory` \| Mem0 \|.*?)\n\n", text, re.M | re.S)
    assert "LangGraph" in table and "Redis list" in table
    sources = (DOCS / "alternatives.md").read_text(encoding="utf-8")
    figures = set(re.findall(r"\d[\d,.]*\d|\d", table))
    assert len(figures) >= 10
    assert {figure for figure in figures if figure not in sources} == set()


# -- links -------------------------------------------------------------------------------------


def slug(heading: str) -> str:
    """The anchor Python-Markdown's toc gives a heading (its default ``slugify``)."""
    custom = re.search(r"\{#([\w-]+)\}\s*$", heading)
    if custom:
        return custom[1]
    text = re.sub(r"<[^>]+>|`", "", heading)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    return {slug(h) for h in re.findall(r"^#+ (.+)$", prose(page), re.M)}


def test_every_link_between_the_pages_resolves() -> None:
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", prose(page)):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.is_file():
                broken.append(f"{page.name}: {target}")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert broken == []


def test_the_slugs_are_the_toc_extensions() -> None:
    assert slug("Heavy reads and a process's other requests (issue 23, finding 3)") == (
        "heavy-reads-and-a-processs-other-requests-issue-23-finding-3"
    )
    assert slug("`memory_stats`") == "memory_stats"
    assert slug("LinkResult {#linkresult}") == "linkresult"


# -- pasting into a plain manage.py shell ------------------------------------------------------


class Paste(code.InteractiveConsole):
    """Python's interactive console, which a plain ``manage.py shell`` runs, reading a block
    line by line as a paste gives it, and keeping its syntax errors instead of running it."""

    def __init__(self) -> None:
        super().__init__()
        self.errors: list[str] = []

    def runcode(self, code: object) -> None:
        pass

    def showsyntaxerror(self, filename: str | None = None, **kwargs: object) -> None:
        self.errors.append(repr(sys.exc_info()[1]))


def paste_errors(block: str) -> list[str]:
    console = Paste()
    more = False
    for line in block.splitlines():
        more = console.push(line)
    if more:
        console.push("")
    return console.errors


def test_the_paste_check_sees_a_blank_line_inside_a_class() -> None:
    assert paste_errors("class A:\n    x = 1\n\n    def f(self):\n        return 1\n") != []
    assert paste_errors("for i in range(2):\n    print(i)\nprint(3)\n") != []
    assert paste_errors("class A:\n    x = 1\n    def f(self):\n        return 1\n\nA()\n") == []


def test_every_python_block_pastes_into_a_plain_shell() -> None:
    blocks = {
        f"{page.name} block {n}": block
        for page in PAGES
        for n, block in enumerate(
            newcomer.readme_python_blocks() if page == README else newcomer.python_blocks(page), 1
        )
    }
    assert any(name.startswith("README.md") for name in blocks)
    assert {name: errors for name, b in blocks.items() if (errors := paste_errors(b))} == {}
