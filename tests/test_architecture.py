"""The shape of the ``memory`` package: its imports form no circle (each module imports only
modules below it, deferred imports inside functions included), so that a reader can take the
floors one at a time. ``docs/architecture.md`` draws them (tests/test_docs_drift.py holds the
drawing to these imports). The bench, a guest of the house, imports in no circle either."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "memory"
BENCH = PACKAGE.parent / "bench"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    name = ".".join(parts)
    return name.removesuffix(".__init__")


def _parsed(path: Path) -> ast.Module:
    """``path``'s syntax tree. CPython 3.11 keeps the AST conversion's recursion depth per
    interpreter, not per thread (gh-106905): another thread converting a tree at the same time
    fails it once with a SystemError, and a second parse is the answer."""
    text = path.read_text()
    try:
        return ast.parse(text)
    except SystemError:
        return ast.parse(text)


def _imported(path: Path, name: str, modules: set[str]) -> set[str]:
    """The modules of ``memory`` that ``path`` imports, anywhere in it but under
    ``if TYPE_CHECKING:`` (names only for the type checker)."""
    tree = _parsed(path)
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(child) for child in ast.walk(node))
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return {m for m in found if m in modules and m != name}


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Each module of ``package`` (its migrations left out), with the modules of ``package``
    it imports."""
    paths = [p for p in package.rglob("*.py") if "migrations" not in p.parts]
    modules = {_module_name(p) for p in paths}
    return {_module_name(p): _imported(p, _module_name(p), modules) for p in paths}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_package_has_no_import_circle():
    assert circles(import_graph()) == []


def test_the_bench_has_no_import_circle():
    graph = import_graph(BENCH)
    assert "bench.rows" in graph["bench.recall"]
    assert circles(graph) == []


def test_the_walk_finds_a_circle_where_there_is_one():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert "memory.cache.client" in import_graph()["memory.cache.copy"]


# A module's size, in bytes, past which it is split (issue 24): a reader takes one concern
# at a time.
MAX_MODULE_BYTES = 25_000


def test_no_module_is_over_the_size_a_reader_takes_at_once():
    sizes = {
        str(p.relative_to(PACKAGE)): p.stat().st_size
        for p in PACKAGE.rglob("*.py")
        if "migrations" not in p.parts
    }
    assert {path: size for path, size in sizes.items() if size > MAX_MODULE_BYTES} == {}


def _cache_names_used(path: Path) -> set[str]:
    """What a module outside the cache package takes of it: ``cache.<name>`` where ``cache``
    is ``memory.cache``, and ``memory.cache.<module>`` imported by name."""
    tree = _parsed(path)
    aliases = set()
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "memory":
            aliases.update(a.asname or a.name for a in node.names if a.name == "cache")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("memory.cache"):
            used.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            used.update(a.name for a in node.names if a.name.startswith("memory.cache."))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            used.add(node.attr)
    return used


def test_the_app_uses_only_the_cache_packages_public_api():
    from memory import cache

    outside = [
        p
        for p in PACKAGE.rglob("*.py")
        if "migrations" not in p.parts and (PACKAGE / "cache") not in p.parents
    ]
    strays = {
        str(p.relative_to(PACKAGE)): sorted(_cache_names_used(p) - set(cache.__all__))
        for p in outside
    }
    assert {path: names for path, names in strays.items() if names} == {}


def test_the_cache_check_sees_an_internal_name(tmp_path: Path):
    module = tmp_path / "stray.py"
    module.write_text(
        "from memory import cache as c\nfrom memory.cache.keys import owner_key\n"
        "c.copy_drop(owner_id='x', stamp=1)\nc.read_through\n"
    )
    assert _cache_names_used(module) == {"copy_drop", "read_through", "memory.cache.keys.owner_key"}


def _private_imports(path: Path, name: str) -> set[str]:
    """The private names (``_x``) ``path`` imports from a module of another package of
    ``memory`` (a module directly under ``memory/`` is a package of its own)."""
    package = name.split(".")[:2]
    found = set()
    for node in ast.walk(_parsed(path)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("memory."):
            source = node.module.split(".")[:2]  # type: ignore[union-attr]
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if private and source != package:
                    found.add(f"{node.module}.{alias.name}")
    return found


def test_no_package_takes_another_ones_private_names():
    strays = {
        _module_name(p): sorted(_private_imports(p, _module_name(p)))
        for p in PACKAGE.rglob("*.py")
        if "migrations" not in p.parts
    }
    assert {module: names for module, names in strays.items() if names} == {}


def test_the_private_name_check_sees_one(tmp_path: Path):
    module = tmp_path / "stray.py"
    module.write_text(
        "from memory.appends import retry_checked\nfrom memory.views.base import _x\n"
    )
    assert _private_imports(module, "memory.tools.stray") == {"memory.views.base._x"}
    assert _private_imports(module, "memory.views.stray") == set()
