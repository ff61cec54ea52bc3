"""LangChain over the memory: its chat history, ``MemoryChatMessageHistory(owner_id=...,
session_id=...)``, and the model's tools, ``memory_tools(owner_id=...)``, sync and async. Needs
the extra ``langchain``: ``pip install "$(echo dist/django_memory-*.whl)[langchain]"`` after
``make dist``."""

from __future__ import annotations

from memory.extras import extra_needed

with extra_needed("memory.integrations.langchain", "langchain-core", "langchain"):
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        ChatMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
    )
    from langchain_core.tools import BaseTool, ToolException

    # langchain-core's own dependency
    from pydantic import BaseModel, ConfigDict, Field, JsonValue, create_model, field_validator

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from memory import selectors, services
from memory.integrations.threads import thread_connection
from memory.payloads import ContextMessagesPayload, MessagePayload
from memory.tools import ToolDefinition, Toolset, acall, call, definitions
from memory.tools.calls import ToolArgumentsInvalid, tool_arguments, tool_get

ROLES: dict[type[BaseMessage], str] = {
    HumanMessage: "user",
    AIMessage: "assistant",
    SystemMessage: "system",
    ToolMessage: "tool",
}
# The roles a ChatMessage may have, with LangChain's own names for two of them.
CHAT_ROLES = {
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "ai": "assistant",
    "system": "system",
    "tool": "tool",
}


def message_role(message: BaseMessage) -> str:
    """The turn role of a LangChain message: user, assistant, system or tool.

    A ``ChatMessage`` keeps its own role when it is one of those (or ``human``, ``ai``). Raises
    ``ValueError`` for any other message (a ``FunctionMessage``, a ``ChatMessage`` of another
    role) or for content that is not text (a list of content blocks): a turn holds text only.
    """
    role = next((r for cls, r in ROLES.items() if isinstance(message, cls)), None)
    if isinstance(message, ChatMessage):
        role = CHAT_ROLES.get(message.role)
    if role is None:
        raise ValueError(f"A {type(message).__name__} cannot be stored as a memory turn.")
    if not isinstance(message.content, str):
        raise ValueError("Only text content can be stored as a memory turn.")
    return role


def message_from_payload(message: MessagePayload) -> BaseMessage:
    """The LangChain message of one of ``context_messages``' messages."""
    role, content = message["role"], message["content"]
    if role == "user":
        return HumanMessage(content=content)
    if role == "assistant":
        return AIMessage(content=content)
    if role == "system":
        return SystemMessage(content=content)
    # NOTE: a turn keeps no tool call id; the model sees the tool's text all the same.
    return ToolMessage(content=content, tool_call_id="")


class MemoryChatMessageHistory(BaseChatMessageHistory):
    """The chat history of one session of a memory owner, for LangChain
    (``RunnableWithMessageHistory``'s ``get_session_history``).

    ``messages`` is the owner's whole context, not this session's alone: the facts as a system
    message (left out while the owner has none, so that a new history is empty), then the
    owner's last turns of every session, oldest first (``selectors.context_messages`` with
    ``turns`` and ``max_tokens``, as given here). ``add_messages`` appends each message as a
    turn of ``session_id`` (``services.turn_append``): a ``HumanMessage`` as ``user``, an
    ``AIMessage`` as ``assistant``, a ``SystemMessage`` as ``system``, a ``ToolMessage`` as
    ``tool``. ``clear`` forgets the owner (``services.memory_forget``): every session's turns
    and all facts, since a session owns nothing of its own.

    The ``a...`` methods are the async twins. Errors are the services' and selectors':
    ``ValidationError`` for a bad id or message, ``MemoryUnavailable`` when the database cannot
    be reached; ``ValueError`` for a message that is not a text turn (``message_role``).
    """

    def __init__(
        self,
        *,
        owner_id: str,
        session_id: str,
        turns: int | None = None,
        max_tokens: int | None = None,
    ) -> None:
        super().__init__()
        self.owner_id = owner_id
        self.session_id = session_id
        self.turns = turns
        self.max_tokens = max_tokens

    def _messages(self, context: ContextMessagesPayload) -> list[BaseMessage]:
        system, *turns = context["messages"]
        messages = [message_from_payload(message) for message in turns]
        if context["facts"]:
            messages.insert(0, message_from_payload(system))
        return messages

    def _turn(self, message: BaseMessage) -> dict[str, Any]:
        role = message_role(message)
        return {
            "owner_id": self.owner_id,
            "session_id": self.session_id,
            "role": role,
            "content": message.content,
        }

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        with thread_connection():
            context = selectors.context_messages(
                owner_id=self.owner_id, max_tokens=self.max_tokens, turns=self.turns
            )
        return self._messages(context)

    async def aget_messages(self) -> list[BaseMessage]:
        return self._messages(
            await selectors.acontext_messages(
                owner_id=self.owner_id, max_tokens=self.max_tokens, turns=self.turns
            )
        )

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        # NOTE: every message is checked before the first is stored.
        turns = [self._turn(message) for message in messages]
        with thread_connection():
            for turn in turns:
                services.turn_append(**turn)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        turns = [self._turn(message) for message in messages]
        for turn in turns:
            await services.aturn_append(**turn)

    def clear(self) -> None:
        with thread_connection():
            services.memory_forget(owner_id=self.owner_id)

    async def aclear(self) -> None:
        await services.amemory_forget(owner_id=self.owner_id)


def tool_error(error: ToolException) -> Any:
    """A model's mistake as the result it reads, ``{"error": "..."}``, as ``memory.tools.call``
    answers it: ``MemoryTool``'s ``handle_tool_error``."""
    return {"error": str(error)}


def _answered(result: dict[str, Any]) -> dict[str, Any]:
    # NOTE: a mistake goes through LangChain's ToolException and comes back out of the tool's
    # handle_tool_error as the same result; on the way it marks the ToolMessage answering a
    # tool call status="error" (which langchain-anthropic sends as is_error).
    if "error" in result:
        raise ToolException(result["error"])
    return result


class ToolInput(BaseModel):
    """The arguments of one of the memory's tools as a pydantic model (``input_model``): its
    JSON Schema is the tool's definition, exactly, whatever pydantic would write."""

    # NOTE: Python's re, as memory.tools': a fact key's pattern looks ahead.
    model_config = ConfigDict(extra="forbid", regex_engine="python-re")
    definition_schema: ClassVar[dict[str, Any]] = {}

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return copy.deepcopy(cls.definition_schema)


# JSON Schema's keywords of a property, as pydantic's Field takes them.
FIELD_KEYWORDS = {
    "minLength": "min_length",
    "maxLength": "max_length",
    "pattern": "pattern",
    "minimum": "ge",
    "maximum": "le",
    "description": "description",
}
ANNOTATIONS: dict[str | None, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    None: JsonValue,
}


def input_model(definition: ToolDefinition) -> type[BaseModel]:
    """The pydantic model of a tool's arguments, built from its JSON Schema
    (``definition["parameters"]``): a field per property, of its type (a string, an integer,
    any JSON where the schema names no type), with its bounds, pattern, description and
    default, required as the schema says, and no other argument (``extra="forbid"``);
    integers are strict, as JSON's are. Its ``model_json_schema()`` is the definition's own."""
    schema = definition["parameters"]
    required = set(schema.get("required", ()))
    fields: dict[str, Any] = {}
    for name, spec in schema["properties"].items():
        kind = spec.get("type")
        options = {FIELD_KEYWORDS[k]: v for k, v in spec.items() if k in FIELD_KEYWORDS}
        if kind == "integer":
            options["strict"] = True
        default = ... if name in required else spec.get("default")
        fields[name] = (ANNOTATIONS[kind], Field(default, **options))
    title = "".join(part.title() for part in definition["name"].split("_")) + "Input"
    model = create_model(title, __base__=ToolInput, __doc__=definition["description"], **fields)
    model.definition_schema = copy.deepcopy(schema)
    return model


class MemoryTool(BaseTool):
    """One of the memory's tools (``memory.tools``) as a LangChain tool, on the memory of the
    one owner it was made for (``memory_tools``).

    ``invoke``/``ainvoke`` take one of the model's tool calls (an item of
    ``AIMessage.tool_calls``, answered with a ``ToolMessage``: the result as JSON) or its
    arguments alone, a dict (answered with the result itself). The arguments are checked as
    ``memory.tools`` checks them, then by ``args_schema`` (``input_model``: the same JSON
    Schema as a pydantic model), and run by ``memory.tools.call`` / ``acall`` with
    ``owner_id``, which no argument can name or change. A model's mistake is the result
    ``{"error": "..."}``, and stores nothing; its ``ToolMessage`` has ``status="error"``. A bad
    ``owner_id`` is a ``ValidationError`` when the tool is made; a lost database raises
    ``MemoryUnavailable`` out of ``invoke``, and nothing was stored.
    """

    owner_id: str
    handle_tool_error: bool | str | Callable[[ToolException], Any] | None = tool_error

    @field_validator("owner_id")
    @classmethod
    def _owner_valid(cls, owner_id: str) -> str:
        # NOTE: Django's ValidationError ({"user_id": ...}), as Toolset raises it: pydantic
        # passes on what is not a ValueError.
        return Toolset(owner_id=owner_id).owner_id

    @property
    def tool_call_schema(self) -> Any:
        # NOTE: the arguments model itself (no argument is injected), so that what
        # bind_tools sends a model is the definition's JSON Schema, not a copy pydantic wrote.
        return self.args_schema

    def _to_args_and_kwargs(
        self, tool_input: str | dict[str, Any], tool_call_id: str | None
    ) -> tuple[tuple[str, ...], dict[str, Any]]:
        # NOTE: memory.tools' checks first: a model's mistake is answered with their message
        # (the one every door gives) before pydantic sees the arguments, and an argument sent
        # to the tool of none is refused (LangChain skips the model of no field).
        if isinstance(tool_input, Mapping):
            try:
                tool_arguments(tool_get(self.name), tool_input)
            except ToolArgumentsInvalid as e:
                raise ToolException(str(e)) from e
        args, kwargs = super()._to_args_and_kwargs(tool_input, tool_call_id)
        # NOTE: an optional argument the caller did not give is absent, not the None that
        # pydantic fills in for a field of no default (after, before, min_score).
        if isinstance(tool_input, Mapping):
            kwargs = {k: v for k, v in kwargs.items() if v is not None or k in tool_input}
        return args, kwargs

    # NOTE: ``self`` is positional-only and no other parameter is declared, so that every
    # argument reaches ``call`` to be checked again and none is taken by LangChain's
    # injection of ``run_manager`` or ``config``.
    def _run(self, /, **arguments: Any) -> dict[str, Any]:
        with thread_connection():
            result = call(self.name, arguments, owner_id=self.owner_id)
        return _answered(result)

    async def _arun(self, /, **arguments: Any) -> dict[str, Any]:
        return _answered(await acall(self.name, arguments, owner_id=self.owner_id))


def memory_tools(*, owner_id: str) -> list[BaseTool]:
    """The five tools of ``memory.tools`` as LangChain tools on ``owner_id``'s memory (the user
    the conversation is with, never a model's argument): ``model.bind_tools(memory_tools(...))``,
    then ``invoke`` each of the reply's ``tool_calls`` on the tool of its name.

    Each is a ``MemoryTool`` made from the one definition: its name, its description, and
    ``args_schema`` the pydantic model of its arguments' JSON Schema (``input_model``). Raises
    ``ValidationError`` ({"user_id": ...}) for a bad ``owner_id``.
    """
    return [
        MemoryTool(
            name=definition["name"],
            description=definition["description"],
            args_schema=input_model(definition),
            owner_id=owner_id,
        )
        for definition in definitions()
    ]


__all__ = [
    "MemoryChatMessageHistory",
    "MemoryTool",
    "ToolInput",
    "input_model",
    "memory_tools",
    "message_from_payload",
    "message_role",
    "tool_error",
]
