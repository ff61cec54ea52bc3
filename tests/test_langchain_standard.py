"""LangChain's own standard tests (langchain-tests' ``ToolsUnitTests`` and
``ToolsIntegrationTests``) over the five tools of memory.integrations.langchain, each with its
input model; and what those models accept and refuse."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.tools import BaseTool
from langchain_tests.integration_tests import ToolsIntegrationTests
from langchain_tests.unit_tests import ToolsUnitTests
from pydantic import ValidationError as PydanticValidationError

from memory import tools
from memory.integrations.langchain import input_model, memory_tools
from tests.loop import run

EXAMPLES: dict[str, dict[str, Any]] = {
    "search_memory": {"query": "basketball", "limit": 3},
    "get_profile": {},
    "remember_fact": {"key": "likes", "value": ["basketball"]},
    "forget_fact": {"key": "likes"},
    "recent_turns": {"limit": 2},
}


def memory_tool(name: str) -> BaseTool:
    return next(tool for tool in memory_tools(owner_id="wang") if tool.name == name)


class Standard:
    name = ""

    @property
    def tool_constructor(self) -> BaseTool:
        return memory_tool(self.name)

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return EXAMPLES[self.name]


class TestSearchMemoryUnit(Standard, ToolsUnitTests):
    name = "search_memory"


class TestGetProfileUnit(Standard, ToolsUnitTests):
    name = "get_profile"


class TestRememberFactUnit(Standard, ToolsUnitTests):
    name = "remember_fact"


class TestForgetFactUnit(Standard, ToolsUnitTests):
    name = "forget_fact"


class TestRecentTurnsUnit(Standard, ToolsUnitTests):
    name = "recent_turns"


# NOTE: the integration tests' async sync code (memory.tools.acall) runs in another thread,
# with a connection of its own: they commit, and the database is flushed after each.


@pytest.fixture(autouse=True)
def _worker_connection_closed() -> Iterator[None]:
    """After each test, the connection of the thread that served ``acall`` is closed, so that
    the test database can be flushed and dropped."""
    yield
    run(lambda: asyncio.sleep(0))


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
class TestSearchMemoryIntegration(Standard, ToolsIntegrationTests):
    name = "search_memory"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
class TestGetProfileIntegration(Standard, ToolsIntegrationTests):
    name = "get_profile"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
class TestRememberFactIntegration(Standard, ToolsIntegrationTests):
    name = "remember_fact"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
class TestForgetFactIntegration(Standard, ToolsIntegrationTests):
    name = "forget_fact"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
class TestRecentTurnsIntegration(Standard, ToolsIntegrationTests):
    name = "recent_turns"


def test_every_example_is_the_example_of_a_tool():
    assert list(EXAMPLES) == [definition["name"] for definition in tools.definitions()]


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("search_memory", {}),
        ("search_memory", {"query": ""}),
        ("search_memory", {"query": "x" * 201}),
        ("search_memory", {"query": "   "}),
        ("search_memory", {"query": "a", "limit": 0}),
        ("search_memory", {"query": "a", "limit": "5"}),
        ("get_profile", {"owner_id": "li"}),
        ("remember_fact", {"key": "likes"}),
        ("remember_fact", {"key": "Likes", "value": 1}),
        ("remember_fact", {"key": "..", "value": 1}),
        ("forget_fact", {"key": 3}),
        ("recent_turns", {"limit": 51}),
        ("recent_turns", {"turns": 5}),
    ],
)
def test_each_input_model_refuses_what_its_schema_refuses(name, arguments):
    (definition,) = [d for d in tools.definitions() if d["name"] == name]
    with pytest.raises(PydanticValidationError):
        input_model(definition)(**arguments)


def test_each_input_model_takes_its_example_with_the_schemas_defaults():
    models = {d["name"]: input_model(d) for d in tools.definitions()}
    # NOTE: an optional argument of no default is None in the model, and absent in the call
    # the tool makes (MemoryTool drops what the caller did not give).
    assert models["search_memory"](query="上海").model_dump() == {
        "query": "上海",
        "limit": 5,
        "after": None,
        "before": None,
        "min_score": None,
    }
    assert models["recent_turns"]().model_dump() == {"limit": 10}
    assert models["remember_fact"](key="a", value=None).model_dump() == {"key": "a", "value": None}
    assert models["get_profile"]().model_dump() == {}
    for definition in tools.definitions():
        model = models[definition["name"]]
        assert model.model_json_schema() == definition["parameters"]
        assert model(**EXAMPLES[definition["name"]])
