"""LangChain over the memory: its chat history, ``MemoryChatMessageHistory(owner_id=...,
session_id=...)``, and the model's tools, ``memory_tools(owner_id=...)``, sync and async. Needs the
extra ``langchain``."""

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
    """The turn role of a LangChain message: user, assistant, system or tool (a ``ChatMessage``
    keeps its own). Raises ``ValueError`` for another kind of message or for content that is not
    text."""
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

    ``messages`` is the owner's whole context (``selectors.context_messages``): the facts as a
    system message (none while there are none), then the last turns of every session.
    ``add_messages`` appends each message as a turn of ``session_id``; ``clear`` forgets the owner
    (``services.memory_forget``). The ``a...`` methods are the async twins. Raises
    ``ValidationError`` for a bad id or message, ``MemoryUnavailable`` when the database cannot be
    reached, ``ValueError`` for a message that is not a text turn.
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
    """A model's mistake as the result ``{"error": "..."}`` it reads: ``MemoryTool``'s
    ``handle_tool_error``."""
    return {"error": str(error)}


def _answered(result: dict[str, Any]) -> dict[str, Any]:
    # NOTE: through LangChain's ToolException, which marks the ToolMessage status="error".
    if "error" in result:
        raise ToolException(result["error"])
    return result


class ToolInput(BaseModel):
    """The arguments of one of the memory's tools as a pydantic model whose JSON Schema is the
    tool's definition, exactly."""

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
    """The pydantic model of a tool's arguments, built from its JSON Schema: a field per property,
    its bounds, pattern, description and default, no extra argument, strict integers. Its
    ``model_json_schema()`` is the definition's own."""
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
    """One of the memory's tools (``memory.tools``) as a LangChain tool, on one owner's memory.

    ``invoke``/``ainvoke`` take a model's tool call (answered with a ``ToolMessage``) or its
    arguments alone (answered with the result). Arguments are checked as ``memory.tools`` checks
    them, then run with ``owner_id``, which no argument can change. A model's mistake is the result
    ``{"error": "..."}`` (status ``"error"``) and stores nothing. A bad ``owner_id`` is a
    ``ValidationError`` when the tool is made; a lost database raises ``MemoryUnavailable``.
    """

    owner_id: str
    handle_tool_error: bool | str | Callable[[ToolException], Any] | None = tool_error

    @field_validator("owner_id")
    @classmethod
    def _owner_valid(cls, owner_id: str) -> str:
        # NOTE: pydantic passes Django's ValidationError on (it is not a ValueError).
        return Toolset(owner_id=owner_id).owner_id

    @property
    def tool_call_schema(self) -> Any:
        # NOTE: the arguments model itself, so bind_tools sends the definition's own JSON Schema.
        return self.args_schema

    def _to_args_and_kwargs(
        self, tool_input: str | dict[str, Any], tool_call_id: str | None
    ) -> tuple[tuple[str, ...], dict[str, Any]]:
        # NOTE: memory.tools' checks first, so a mistake gets the message every door gives.
        if isinstance(tool_input, Mapping):
            try:
                tool_arguments(tool_get(self.name), tool_input)
            except ToolArgumentsInvalid as e:
                raise ToolException(str(e)) from e
        args, kwargs = super()._to_args_and_kwargs(tool_input, tool_call_id)
        # NOTE: an optional argument not given stays absent, not pydantic's None.
        if isinstance(tool_input, Mapping):
            kwargs = {k: v for k, v in kwargs.items() if v is not None or k in tool_input}
        return args, kwargs

    # NOTE: only ``self`` is declared, so every argument reaches ``call`` and none is taken by
    # LangChain's injection of ``run_manager`` or ``config``.
    def _run(self, /, **arguments: Any) -> dict[str, Any]:
        with thread_connection():
            result = call(self.name, arguments, owner_id=self.owner_id)
        return _answered(result)

    async def _arun(self, /, **arguments: Any) -> dict[str, Any]:
        return _answered(await acall(self.name, arguments, owner_id=self.owner_id))


def memory_tools(*, owner_id: str) -> list[BaseTool]:
    """The five tools of ``memory.tools`` as ``MemoryTool`` instances on ``owner_id``'s memory (the
    user the conversation is with, never a model's argument):
    ``model.bind_tools(memory_tools(...))``. Raises ``ValidationError`` ({"user_id": ...}) for a bad
    ``owner_id``."""
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
