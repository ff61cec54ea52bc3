"""Running a tool call for an owner: ``tool_run`` (the one step of every door: Python, REST,
MCP), ``call``/``acall`` (a model's mistake is a result it can read, ``{"error": ...}``), and
``resolve``/``aresolve`` (an OpenAI tool call in, the ``tool`` message answering it out).

A call is at most one service write (one transaction): a call that fails stored nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, TypedDict

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework.serializers import as_serializer_error

from memory import aio, codec, limits
from memory.exceptions import MemoryException, ReadsInFlight, SearchTimeout
from memory.tools.definitions import TOOLS, Tool, ToolDefinition, anthropic_tools, definitions
from memory.tools.definitions import openai_tools as _openai_tools
from memory.validators import validate_owner_id

# Longest text of arguments parsed: past it the call is refused unread (a remember_fact of
# the largest value allowed is about 16 KiB).
MAX_ARGUMENTS_CHARS = 1_000_000
# What a selector or service names a tool's argument (search's ``q`` is ``query``).
FIELD_NAMES = {"q": "query"}


class ToolNotFound(MemoryException):
    """No tool has that name."""

    def __init__(self, name: object) -> None:
        known = ", ".join(TOOLS)
        super().__init__(f"There is no tool {name!r}; the tools are {known}.")
        self.name = name


class ToolArgumentsInvalid(MemoryException):
    """The arguments of a call are not what its tool takes, or its service refused them (a
    fact key, a fact cap); nothing was stored. ``detail`` is DRF's ``{"field": [messages]}``."""

    def __init__(self, tool: str, detail: dict[str, Any]) -> None:
        self.tool = tool
        self.detail = detail
        super().__init__(f"Invalid arguments for {tool}: {_detail_text(detail)}")


def _detail_text(detail: Any) -> str:
    """DRF's error detail as one line: ``field: message message; field: ...``."""
    if isinstance(detail, dict):
        return "; ".join(f"{field}: {_detail_text(value)}" for field, value in detail.items())
    if isinstance(detail, list):
        return " ".join(_detail_text(item) for item in detail)
    return str(detail)


class ToolMessage(TypedDict):
    """The Chat Completions message that answers a tool call."""

    role: str
    tool_call_id: str
    content: str


def tool_get(name: object) -> Tool:
    """The tool of that name; ``ToolNotFound`` for any other name (or a name not a string)."""
    tool = TOOLS.get(name) if isinstance(name, str) else None
    if tool is None:
        raise ToolNotFound(name)
    return tool


def tool_arguments(tool: Tool, arguments: Any) -> dict[str, Any]:
    """``arguments`` as ``tool`` takes them: a dict (or mapping), or the JSON text of one (as a
    model writes it; empty text or ``None`` are no arguments), checked by the tool's serializer
    with its defaults filled in. Raises ``ToolArgumentsInvalid``."""
    if arguments is None:
        arguments = {}
    if isinstance(arguments, (bytes, bytearray)):
        try:
            arguments = bytes(arguments).decode()
        except UnicodeDecodeError as e:
            raise ToolArgumentsInvalid(tool.name, {"arguments": ["Not UTF-8 text."]}) from e
    if isinstance(arguments, str):
        if len(arguments) > MAX_ARGUMENTS_CHARS:
            raise ToolArgumentsInvalid(
                tool.name, {"arguments": [f"Longer than {MAX_ARGUMENTS_CHARS} characters."]}
            )
        text = arguments.strip()
        try:
            arguments = codec.loads(text) if text else {}
        except ValueError as e:
            raise ToolArgumentsInvalid(
                tool.name, {"arguments": [f"Not valid JSON ({e}); send a JSON object."]}
            ) from e
    if not isinstance(arguments, Mapping):
        raise ToolArgumentsInvalid(
            tool.name,
            {"arguments": [f"Expected a JSON object, got {type(arguments).__name__}."]},
        )
    accepted = tool.arguments.accepted(arguments)
    if accepted is not None:
        return accepted
    serializer = tool.arguments(data=dict(arguments))
    if not serializer.is_valid():
        raise ToolArgumentsInvalid(tool.name, dict(serializer.errors))
    return dict(serializer.validated_data)


def tool_run(
    *,
    name: object,
    arguments: Any,
    owner_id: str,
    caller: str | None = None,
    actor: str = "python",
) -> dict[str, Any]:
    """Run the tool ``name`` with ``arguments`` on ``owner_id``'s memory; its result: the one
    step of every door (``call``, the REST view, the MCP server). A fact version it writes
    records ``actor`` (the REST and MCP doors: ``api:<username>``).

    ``arguments`` is a dict or the JSON text of one (see ``tool_arguments``). With ``caller``,
    a call that may be a heavy read (a search; more recent turns than the cached copy holds)
    holds one of that caller's slots (``memory.limits``) while it runs, as the API's views do.
    Raises ``ValidationError`` ({"user_id": ...}) for a bad owner id, ``ToolNotFound``,
    ``ToolArgumentsInvalid`` (bad arguments, a fact key the API refuses, ``MEMORY["MAX_FACTS"]``
    reached), ``ReadsInFlight``, ``SearchTimeout``, and ``MemoryUnavailable`` when the database
    cannot be reached; whatever it raises, nothing was stored.
    """
    try:
        validate_owner_id(owner_id)
    except DjangoValidationError as e:
        raise DjangoValidationError({"user_id": e.messages}) from e
    tool = tool_get(name)
    checked = tool_arguments(tool, arguments)
    slot = (
        limits.heavy_read(caller=caller)
        if caller is not None and tool.heavy(checked)
        else nullcontext()
    )
    with slot:
        try:
            return tool.run(owner_id, checked, actor)
        except DjangoValidationError as e:
            # NOTE: the service's refusal, its fields named as the tool's arguments are; one
            # about the owner is the caller's, raised as it is.
            detail = as_serializer_error(e)
            if "user_id" in detail:
                raise
            fields = {FIELD_NAMES.get(field, field): value for field, value in detail.items()}
            raise ToolArgumentsInvalid(tool.name, fields) from e


# A model's mistakes in a call: ``call`` answers them as a result it can read, ``{"error":
# ...}``, as the MCP server does.
MISTAKES = (ToolNotFound, ToolArgumentsInvalid, SearchTimeout, ReadsInFlight)


def call(name: str, arguments: Any, *, owner_id: str) -> dict[str, Any]:
    """Run the tool call a model made, on the memory of ``owner_id`` (the user the conversation
    is with: never taken from the arguments); its result, a JSON object to hand back to the model.

    ``arguments`` is a dict, or the JSON text a model produced. The model's mistakes are
    results it can read and correct, ``{"error": "..."}``, and store nothing: an unknown tool,
    text that is not JSON, a missing, unknown or invalid argument, a fact key the API refuses
    (one made only of dots), ``MEMORY["MAX_FACTS"]`` reached, or a search past
    ``MEMORY["SEARCH_TIMEOUT_MS"]``. Raises ``ValidationError`` ({"user_id": ...}) for a bad
    ``owner_id`` (the host's mistake) and ``MemoryUnavailable`` when the database cannot be
    reached, as the services do; then nothing was stored either.
    """
    try:
        return tool_run(name=name, arguments=arguments, owner_id=owner_id)
    except MISTAKES as e:
        return {"error": str(e)}


acall = aio.twin(call)


def _part(thing: Any, name: str) -> Any:
    """A field of an OpenAI SDK object, or the key of its dict form."""
    if isinstance(thing, Mapping):
        return thing.get(name)
    return getattr(thing, name, None)


def _tool_call_parts(tool_call: Any) -> tuple[str, Any, Any, str | None]:
    """(id, function name, arguments, a refusal or None) of an OpenAI tool call."""
    call_id = _part(tool_call, "id")
    if not isinstance(call_id, str):
        raise ValueError(
            "Not an OpenAI tool call: it has no id to answer "
            '({"id", "type": "function", "function": {"name", "arguments"}}).'
        )
    kind = _part(tool_call, "type")
    function = _part(tool_call, "function")
    if kind not in (None, "function"):
        return call_id, None, None, f"Only function tools are served here, not {kind!r}."
    if function is None:
        return call_id, None, None, "The tool call names no function."
    return call_id, _part(function, "name"), _part(function, "arguments"), None


def _tool_message(call_id: str, result: Mapping[str, Any]) -> ToolMessage:
    return {"role": "tool", "tool_call_id": call_id, "content": codec.dumps(result).decode()}


def resolve(tool_call: Any, *, owner_id: str) -> ToolMessage:
    """Run an OpenAI Chat Completions tool call (the SDK's object, or its dict form ``{"id",
    "type": "function", "function": {"name", "arguments"}}``) as ``call`` runs it, and return
    the message that answers it: ``{"role": "tool", "tool_call_id": ..., "content": the result
    as JSON}``, to append to the messages. Raises ``ValueError`` for something that is not a
    tool call at all (no ``id``), and what ``call`` raises."""
    call_id, name, arguments, refusal = _tool_call_parts(tool_call)
    if refusal is not None:
        return _tool_message(call_id, {"error": refusal})
    return _tool_message(call_id, call(name, arguments, owner_id=owner_id))


aresolve = aio.twin(resolve)


@dataclass(frozen=True)
class Toolset:
    """The tools bound to one owner, for a chat loop: what to offer the model, and how to run
    what it calls. ``Toolset(owner_id="wang").resolve(tool_call)`` is ``resolve(tool_call,
    owner_id="wang")``; the owner is fixed here, never read from a call. Raises
    ``ValidationError`` ({"user_id": ...}) for a bad owner id."""

    owner_id: str

    def __post_init__(self) -> None:
        try:
            validate_owner_id(self.owner_id)
        except DjangoValidationError as e:
            raise DjangoValidationError({"user_id": e.messages}) from e

    def definitions(self) -> list[ToolDefinition]:
        return definitions()

    def openai_tools(self) -> list[dict[str, Any]]:
        return _openai_tools()

    def anthropic_tools(self) -> list[dict[str, Any]]:
        return anthropic_tools()

    def call(self, name: str, arguments: Any) -> dict[str, Any]:
        return call(name, arguments, owner_id=self.owner_id)

    async def acall(self, name: str, arguments: Any) -> dict[str, Any]:
        return await acall(name, arguments, owner_id=self.owner_id)

    def resolve(self, tool_call: Any) -> ToolMessage:
        return resolve(tool_call, owner_id=self.owner_id)

    async def aresolve(self, tool_call: Any) -> ToolMessage:
        return await aresolve(tool_call, owner_id=self.owner_id)
