"""Scripted stand-ins for the model APIs' client packages as docs/tools.md uses them, ``openai``,
``anthropic`` and ``langchain_openai`` (no network, no key): each client answers with the next
reply of its script, made from what it was sent after checking it. tests/test_docs_tools.py puts
them on a shell's ``PYTHONPATH`` under the real names (``stand_ins``), for the page's blocks."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from memory import tools
from tests.test_langchain_tools import ToolCallingFakeModel, tool_call

Reply = Callable[[list[Any]], Any]
NAME = "Zhou Jie"


def stand_ins(directory: Path) -> Path:
    """``directory`` with a module for each client package, each this module's client."""
    directory.mkdir(parents=True, exist_ok=True)
    for package, client in [
        ("openai", "OpenAI"),
        ("anthropic", "Anthropic"),
        ("langchain_openai", "ChatOpenAI"),
    ]:
        (directory / f"{package}.py").write_text(
            f"from tests.model_apis import {client}  # noqa: F401  (a stand-in)\n"
        )
    return directory


def _tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> Any:
    function = SimpleNamespace(name=name, arguments=json.dumps(arguments))
    return SimpleNamespace(id=call_id, type="function", function=function)


def _tool_results(messages: list[Any]) -> list[dict[str, Any]]:
    """The results of the tool messages after the model's last message, as JSON."""
    results = []
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") != "tool":
            break
        results.insert(0, json.loads(message["content"]))
    return results


def openai_script() -> list[Reply]:
    def look_up(messages: list[Any]) -> Any:
        return SimpleNamespace(content=None, tool_calls=[_tool_call("call_1", "get_profile", {})])

    def remember(messages: list[Any]) -> Any:
        # NOTE: the block forgot its user first: a second run starts as empty as the first.
        assert _tool_results(messages) == [{"facts": {}}]
        return SimpleNamespace(
            content=None,
            tool_calls=[
                _tool_call("call_2", "remember_fact", {"key": "name", "value": NAME}),
                _tool_call("call_3", "remember_fact", {"key": "preferred_name", "value": "Jim"}),
            ],
        )

    def answer(messages: list[Any]) -> Any:
        results = _tool_results(messages)
        assert [result["fact"]["key"] for result in results] == ["name", "preferred_name"]
        assert [result["fact"]["version"] for result in results] == [1, 1]
        return SimpleNamespace(
            content="Nice to meet you, Jim! I'll remember that.", tool_calls=None
        )

    return [look_up, remember, answer]


def anthropic_script() -> list[Reply]:
    def look_up(messages: list[Any]) -> Any:
        block = SimpleNamespace(type="tool_use", id="toolu_1", name="get_profile", input={})
        return SimpleNamespace(content=[block], stop_reason="tool_use")

    def answer(messages: list[Any]) -> Any:
        (result,) = messages[-1]["content"]
        assert result["tool_use_id"] == "toolu_1" and result["is_error"] is False
        facts = json.loads(result["content"])["facts"]
        text = f"You are {facts['name']}, and you like to be called {facts['preferred_name']}."
        return SimpleNamespace(
            content=[SimpleNamespace(type="text", text=text)], stop_reason="end_turn"
        )

    return [look_up, answer]


class OpenAI:
    """``openai.OpenAI`` as the page uses it: ``chat.completions.create``."""

    def __init__(self) -> None:
        script = openai_script()

        def create(*, model: str, messages: list[Any], tools: list[Any]) -> Any:
            assert tools == globals()["tools"].openai_tools()
            message = script.pop(0)(list(messages))
            return SimpleNamespace(choices=[SimpleNamespace(message=message)])

        self.chat = SimpleNamespace(completions=SimpleNamespace(create=create))


class Anthropic:
    """``anthropic.Anthropic`` as the page uses it: ``messages.create``."""

    def __init__(self) -> None:
        script = anthropic_script()

        def create(*, model: str, max_tokens: int, tools: list[Any], messages: list[Any]) -> Any:
            assert tools == globals()["tools"].anthropic_tools()
            return script.pop(0)(list(messages))

        self.messages = SimpleNamespace(create=create)


LANGCHAIN_SCRIPT = [
    AIMessage(content="", tool_calls=[tool_call("get_profile", {}, "call_1")]),
    AIMessage(
        content="",
        tool_calls=[tool_call("remember_fact", {"key": "location", "value": "Shanghai"}, "call_2")],
    ),
    AIMessage(content="Welcome to Shanghai, Jim! I'll remember that."),
]


def _answers(messages: list[BaseMessage]) -> list[tuple[str, str, Any]]:
    """The tool messages after the model's last message: (call id, status, result)."""
    answers = []
    for message in reversed(messages):
        if not isinstance(message, ToolMessage):
            break
        answers.insert(0, (message.tool_call_id, message.status, json.loads(message.content)))
    return answers


class ChatOpenAI(ToolCallingFakeModel):
    """``langchain_openai.ChatOpenAI``: langchain-core's fake chat model with tools, answering
    with ``LANGCHAIN_SCRIPT`` after checking each tool's answer to the call before."""

    def __init__(self, *, model: str) -> None:
        super().__init__(messages=iter(LANGCHAIN_SCRIPT))

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        assert kwargs.get("tools") == tools.openai_tools()
        answers = _answers(messages)
        if len(self.seen) == 1:
            assert answers == [
                ("call_1", "success", {"facts": {"name": NAME, "preferred_name": "Jim"}})
            ]
        elif len(self.seen) == 2:
            ((call_id, status, result),) = answers
            assert (call_id, status, result["fact"]["key"]) == ("call_2", "success", "location")
        return super()._generate(messages, *args, **kwargs)
