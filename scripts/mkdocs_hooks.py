"""MkDocs hooks of the docs site (mkdocs.yml ``hooks``): pages generated from the code itself.

- ``<!-- openapi:operations -->`` becomes the REST reference: every operation of the OpenAPI 3
  schema that ``manage.py spectacular`` generates from the views (nothing fetched from outside),
  with its parameters, body and statuses, then every schema it names.
- ``<!-- memory:settings -->`` becomes the table of ``MEMORY`` keys, read from
  ``memory/conf.py``'s ``DEFAULTS`` (each key's comment and default value).
- ``<!-- memory:async-twins -->`` becomes the table of the async twins of ``memory.services``
  and ``memory.selectors`` (read from their ``__all__``), each linked to its sync function's
  entry in the reference.

A marker the hooks cannot fill fails the build rather than leaving a gap.
"""

from __future__ import annotations

import ast
import io
import json
import os
import subprocess
import sys
import tempfile
import tokenize
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OPERATIONS = "<!-- openapi:operations -->"
SETTINGS = "<!-- memory:settings -->"
ASYNC_TWINS = "<!-- memory:async-twins -->"
METHODS = ("get", "post", "put", "patch", "delete")
MANAGE = (sys.executable, "manage.py")
LITERAL = set("\\`|*_<>&[]{}")

_schema: dict[str, Any] | None = None


def openapi_schema() -> dict[str, Any]:
    """The demo project's OpenAPI schema, generated once per build by ``manage.py spectacular``
    in a subprocess (the demo's settings, DEBUG on so no secret key is needed, no database)."""
    global _schema
    if _schema is None:
        env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
        env.update(DJANGO_SETTINGS_MODULE="memoryproj.settings", DJANGO_DEBUG="1")
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "schema.json"
            result = subprocess.run(
                [*MANAGE, "spectacular", "--format=openapi-json", f"--file={out}"],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            if result.returncode != 0:
                raise RuntimeError(f"manage.py spectacular failed:\n{result.stderr[-3000:]}")
            _schema = json.loads(out.read_text())
    return _schema


def _cell(text: Any) -> str:
    return " ".join(str(text or "").split()).replace("|", "&#124;")


def _code(text: str) -> str:
    # NOTE: a pattern may hold backslashes, backticks, pipes, stars and angle brackets: each as
    # a character reference, so that neither Markdown nor the table sees it.
    return "<code>" + "".join(f"&#{ord(c)};" if c in LITERAL else c for c in text) + "</code>"


def _type(schema: dict[str, Any]) -> str:
    """A short description of a JSON Schema: its type or schema name, and its limits."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    for combiner in ("allOf", "oneOf", "anyOf"):
        if combiner in schema:
            parts = [_type(s) for s in schema[combiner]]
            return (" or " if combiner != "allOf" else ", ").join(parts)
    kind = schema.get("type", "any JSON")
    # NOTE: OpenAPI 3.1 says "or null" as a list of types, 3.0 as nullable.
    nullable = bool(schema.get("nullable"))
    if isinstance(kind, list):
        nullable = nullable or "null" in kind
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else " or ".join(kinds) or "null"
    if kind == "array":
        kind = f"array of {_type(schema.get('items', {}))}"
    elif kind == "object" and "additionalProperties" in schema and not schema.get("properties"):
        extra = schema["additionalProperties"]
        kind = f"object of {_type(extra)}" if extra else "object"
    limits = []
    if "enum" in schema:
        limits.append("one of " + ", ".join(_code(json.dumps(v)) for v in schema["enum"]))
    for key, label in (
        ("minLength", "length ≥"),
        ("maxLength", "length ≤"),
        ("minimum", "≥"),
        ("maximum", "≤"),
        ("exclusiveMinimum", ">"),
        ("exclusiveMaximum", "<"),
        ("minItems", "items ≥"),
        ("maxItems", "items ≤"),
    ):
        if key in schema:
            limits.append(f"{label} {schema[key]}")
    if "pattern" in schema:
        limits.append(f"pattern {_code(schema['pattern'])}")
    if "format" in schema:
        limits.append(schema["format"])
    if "not" in schema and schema["not"] == {"pattern": "\\u0000"}:
        limits.append("no NUL")
    if nullable:
        limits.append("or null")
    return f"{kind} ({', '.join(limits)})" if limits else str(kind)


def _body_schema(content: dict[str, Any] | None) -> dict[str, Any] | None:
    if not content:
        return None
    for media in content.values():
        if "schema" in media:
            return media["schema"]  # type: ignore[no-any-return]
    return None


def _operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method, path, op)
        for path, item in schema["paths"].items()
        for method, op in item.items()
        if method in METHODS
    ]


def operations_markdown(schema: dict[str, Any]) -> str:
    """The REST reference of ``schema``: a summary table, one section per operation, and one
    per component schema."""
    info = schema.get("info", {})
    lines = [
        f"Generated from the OpenAPI {schema.get('openapi', '3')} schema of `{info.get('title')}` "
        f"{info.get('version', '')} at build time. The demo serves the same schema at "
        "`/api/schema/` and a Swagger UI at `/api/docs/`.",
        "",
        "| method | path | what | answers |",
        "| --- | --- | --- | --- |",
    ]
    ops = _operations(schema)
    for method, path, op in ops:
        anchor = op.get("operationId", f"{method}-{path}").replace("_", "-")
        lines.append(
            f"| {method.upper()} | [`{path}`](#{anchor}) | {_cell(op.get('summary'))} "
            f"| {', '.join(op['responses'])} |"
        )
    for method, path, op in ops:
        anchor = op.get("operationId", f"{method}-{path}").replace("_", "-")
        lines += ["", f"## {method.upper()} `{path}` {{#{anchor}}}", ""]
        if op.get("summary"):
            lines += [f"**{op['summary']}.** {op.get('description', '')}".rstrip(), ""]
        params = op.get("parameters", [])
        if params:
            lines += [
                "| parameter | in | type | required | meaning |",
                "| --- | --- | --- | --- | --- |",
            ]
            for p in params:
                lines.append(
                    f"| `{p['name']}` | {p['in']} | {_type(p.get('schema', {}))} "
                    f"| {'yes' if p.get('required') else 'no'} | {_cell(p.get('description'))} |"
                )
            lines.append("")
        body = op.get("requestBody")
        if body:
            body_schema = _body_schema(body.get("content"))
            if body_schema is not None:
                lines += [f"Body: {_type(body_schema)}.", ""]
        lines += ["| status | body | when |", "| --- | --- | --- |"]
        for status, response in op["responses"].items():
            answer = _body_schema(response.get("content"))
            lines.append(
                f"| {status} | {_type(answer) if answer is not None else 'none'} "
                f"| {_cell(response.get('description'))} |"
            )
    lines += ["", "## Schemas", ""]
    for name, component in schema.get("components", {}).get("schemas", {}).items():
        lines += [f"### {name} {{#{name.lower()}}}", ""]
        if component.get("description"):
            lines += [_cell(component["description"]), ""]
        props = component.get("properties")
        if not props:
            lines += [_type(component), ""]
            continue
        required = set(component.get("required", []))
        lines += ["| field | type | required | meaning |", "| --- | --- | --- | --- |"]
        for field, field_schema in props.items():
            lines.append(
                f"| `{field}` | {_type(field_schema)} | {'yes' if field in required else 'no'} "
                f"| {_cell(field_schema.get('description'))} |"
            )
        lines.append("")
    return "\n".join(lines) + "\n"


def settings_rows() -> list[tuple[str, str, str]]:
    """``(key, default, meaning)`` for each ``DEFAULTS`` entry of memory/conf.py: the comment
    above a key is its meaning, as that file writes them."""
    source = (ROOT / "memory" / "conf.py").read_text()
    comments: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string.lstrip("#").strip()
    tree = ast.parse(source)
    rows = []
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "DEFAULTS":
            assert isinstance(node.value, ast.Dict)
            for key, value in zip(node.value.keys, node.value.values, strict=True):
                assert isinstance(key, ast.Constant)
                meaning, line = [], key.lineno - 1
                while line in comments:
                    meaning.insert(0, comments[line])
                    line -= 1
                rows.append((key.value, ast.unparse(value), " ".join(meaning)))
    if not rows:
        raise RuntimeError("memory/conf.py: no DEFAULTS dict found")
    return rows


def settings_markdown() -> str:
    lines = ["| key | default | meaning |", "| --- | --- | --- |"]
    for key, default, meaning in settings_rows():
        lines.append(f"| `{key}` | `{default}` | {_cell(meaning)} |")
    return "\n".join(lines) + "\n"


def async_twins() -> list[tuple[str, str, str]]:
    """``(module, twin, sync function)`` for each ``a<name>`` of ``memory.services`` and
    ``memory.selectors`` whose ``<name>`` they export too, read from each ``__all__``."""
    rows = []
    for module in ("services", "selectors"):
        tree = ast.parse((ROOT / "memory" / module / "__init__.py").read_text())
        exported: list[str] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(
                getattr(target, "id", None) == "__all__" for target in node.targets
            ):
                exported = list(ast.literal_eval(node.value))
        if not exported:
            raise RuntimeError(f"memory/{module}/__init__.py: no __all__ found")
        rows += [
            (module, name, name[1:])
            for name in exported
            if name.startswith("a") and name[1:] in exported
        ]
    return rows


def async_twins_markdown() -> str:
    lines = ["| async twin | of |", "| --- | --- |"]
    for module, twin, sync in async_twins():
        lines.append(f"| `{module}.{twin}` | [`{module}.{sync}`](#memory.{module}.{sync}) |")
    return "\n".join(lines) + "\n"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Fill the markers of a page (MkDocs event)."""
    if OPERATIONS in markdown:
        markdown = markdown.replace(OPERATIONS, operations_markdown(openapi_schema()))
    if SETTINGS in markdown:
        markdown = markdown.replace(SETTINGS, settings_markdown())
    if ASYNC_TWINS in markdown:
        markdown = markdown.replace(ASYNC_TWINS, async_twins_markdown())
    return markdown
