"""Tests of docs/tools.md: every plain Python block runs, in order, on the real servers, with
scripted stand-ins for the ``openai``, ``anthropic`` and ``langchain_openai`` packages (no
network, no key): the tool loops of the page are the ones a chat backend runs, and print what
the page says they print."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from memory import selectors, tools
from tests.instance import ROOT
from tests.test_langchain_tools import ToolCallingFakeModel, tool_call

PAGE = ROOT / "docs" / "tools.md"
# NOTE: plain ```python blocks only; one with a title (```python title="...") is shown, not run.
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)
PRINTED = re.compile(r"^print\(.*\)  # (.*)$", re.MULTILINE)

Reply = Callable[[list[Any]], Any]


def python_blocks() -> list[str]:
    return PYTHON_BLOCK.findall(PAGE.read_text(encoding="utf-8"))


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


def openai_module(script: list[Reply]) -> ModuleType:
    """``openai`` as the page uses it: ``OpenAI().chat.completions.create`` answers with the
    next reply of ``script``, each made from the messages sent."""

    class Completions:
        def create(self, *, model: str, messages: list[Any], tools: list[Any]) -> Any:
            assert tools == globals()["tools"].openai_tools()
            message = script.pop(0)(list(messages))
            return SimpleNamespace(choices=[SimpleNamespace(message=message)])

    class OpenAI:
        def __init__(self) -> None:
            self.chat = SimpleNamespace(completions=Completions())

    module = ModuleType("openai")
    module.OpenAI = OpenAI  # type: ignore[attr-defined]
    return module


def anthropic_module(script: list[Reply]) -> ModuleType:
    """``anthropic`` as the page uses it: ``Anthropic().messages.create`` answers likewise."""

    class Messages:
        def create(
            self, *, model: str, max_tokens: int, tools: list[Any], messages: list[Any]
        ) -> Any:
            assert tools == globals()["tools"].anthropic_tools()
            return script.pop(0)(list(messages))

    class Anthropic:
        def __init__(self) -> None:
            self.messages = Messages()

    module = ModuleType("anthropic")
    module.Anthropic = Anthropic  # type: ignore[attr-defined]
    return module


def langchain_openai_module(made: list[ToolCallingFakeModel]) -> ModuleType:
    """``langchain_openai`` as the page uses it: ``ChatOpenAI(model=...)`` is langchain-core's
    fake chat model with tools (``made`` gets it), answering with ``LANGCHAIN_SCRIPT``."""

    class ChatOpenAI(ToolCallingFakeModel):
        def __init__(self, *, model: str) -> None:
            super().__init__(messages=iter(LANGCHAIN_SCRIPT))
            made.append(self)

    module = ModuleType("langchain_openai")
    module.ChatOpenAI = ChatOpenAI  # type: ignore[attr-defined]
    return module


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


def check_langchain_loop(model: ToolCallingFakeModel) -> None:
    """What the page's LangChain loop gave the model: the tools, then each tool's answer."""
    assert model.offered == [tools.openai_tools()] * 3
    assert _answers(model.seen[1]) == [
        ("call_1", "success", {"facts": {"name": "Wang Jianguo", "preferred_name": "Jim"}})
    ]
    ((call_id, status, result),) = _answers(model.seen[2])
    assert (call_id, status, result["fact"]["key"]) == ("call_2", "success", "location")


def openai_script() -> list[Reply]:
    def look_up(messages: list[Any]) -> Any:
        return SimpleNamespace(content=None, tool_calls=[_tool_call("call_1", "get_profile", {})])

    def remember(messages: list[Any]) -> Any:
        assert _tool_results(messages) == [{"facts": {}}]
        return SimpleNamespace(
            content=None,
            tool_calls=[
                _tool_call("call_2", "remember_fact", {"key": "name", "value": "Wang Jianguo"}),
                _tool_call("call_3", "remember_fact", {"key": "preferred_name", "value": "Jim"}),
            ],
        )

    def answer(messages: list[Any]) -> Any:
        results = _tool_results(messages)
        assert [result["fact"]["key"] for result in results] == ["name", "preferred_name"]
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


def test_the_tools_page_shows_the_three_loops_and_a_mistake():
    blocks = python_blocks()
    assert len(blocks) == 4
    assert "toolset.resolve(call)" in blocks[0] and "openai_tools()" in blocks[0]
    assert "anthropic_tools()" in blocks[1] and "tool_result" in blocks[1]
    assert "memory_tools(owner_id=" in blocks[2] and ".bind_tools(" in blocks[2]
    assert '"error"' in blocks[3]


@pytest.mark.django_db(transaction=True)
def test_every_python_block_of_the_tools_page_runs(monkeypatch, capsys):
    openai_replies, anthropic_replies = openai_script(), anthropic_script()
    monkeypatch.setitem(sys.modules, "openai", openai_module(openai_replies))
    monkeypatch.setitem(sys.modules, "anthropic", anthropic_module(anthropic_replies))
    chat_models: list[ToolCallingFakeModel] = []
    monkeypatch.setitem(sys.modules, "langchain_openai", langchain_openai_module(chat_models))
    for number, block in enumerate(python_blocks(), 1):
        code = compile(block, f"{PAGE.name}, python block {number}", "exec")
        exec(code, {"__name__": f"docs_tools_{number}"})
        printed = capsys.readouterr().out.splitlines()
        assert printed == PRINTED.findall(block), number
    assert openai_replies == [] and anthropic_replies == []
    (chat_model,) = chat_models
    check_langchain_loop(chat_model)
    assert selectors.context_get(owner_id="wang")["facts"] == {
        "location": "Shanghai",
        "name": "Wang Jianguo",
        "preferred_name": "Jim",
    }
    assert tools.call("get_profile", {}, owner_id="li") == {"facts": {}}
