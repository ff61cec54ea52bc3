"""Tests of memory.integrations.langchain's memory_tools: the five tools as LangChain tools over
invoke and ainvoke (and in LangGraph's ToolNode), a model's mistakes as results that store
nothing, an owner no argument can name, and a tool-calling loop with langchain-core's fake chat
model across two sessions of one user, the second in another process after a flushed Redis."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import redis
from asgiref.sync import async_to_sync
from django.core.exceptions import ValidationError
from django.db import connection
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.messages import ToolMessage as LangChainToolMessage
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from pydantic import Field

from memory import selectors, services, tools
from memory.exceptions import MemoryUnavailable
from memory.integrations.langchain import MemoryChatMessageHistory, MemoryTool, memory_tools
from tests import instance
from tests.loop import run
from tests.test_tools import NAMES, stored

ALLERGY = "I'm allergic to peanuts, please remember that."
COOK = "What should I cook tonight?"


# A tool-calling loop ------------------------------------------------------------------------


class ToolCallingFakeModel(GenericFakeChatModel):
    """langchain-core's fake chat model (each call answers with the next of ``messages``: an
    ``AIMessage`` with ``tool_calls``, or text), taking tools as a real chat model does:
    ``bind_tools`` binds them as OpenAI function tools. ``seen`` gets the messages of each
    call and ``offered`` the tools it was given."""

    seen: list[list[BaseMessage]] = Field(default_factory=list)
    offered: list[Any] = Field(default_factory=list)

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Any:
        return self.bind(tools=[convert_to_openai_tool(tool) for tool in tools], **kwargs)

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.seen.append(list(messages))
        self.offered.append(kwargs.get("tools"))
        return super()._generate(messages, *args, **kwargs)


def tool_call(name: str, args: dict[str, Any], id: str) -> dict[str, Any]:
    return {"name": name, "args": args, "id": id, "type": "tool_call"}


# The model's replies in each session of the loop test: the first remembers what the user said,
# the second looks the user up in a new session.
SCRIPTS: dict[str, list[AIMessage]] = {
    "remember": [
        AIMessage(
            content="",
            tool_calls=[
                tool_call("remember_fact", {"key": "allergies", "value": ["peanuts"]}, "call_1")
            ],
        ),
        AIMessage(content="Noted: no peanuts, ever."),
    ],
    "recall": [
        AIMessage(
            content="",
            tool_calls=[
                tool_call("get_profile", {}, "call_2"),
                tool_call("search_memory", {"query": "peanuts"}, "call_3"),
            ],
        ),
        AIMessage(content="A stir-fry with cashews... no: with sesame, no peanuts."),
    ],
}
SYSTEM = "You are a cook with a long-term memory. Use your tools."


def _seen(model: ToolCallingFakeModel) -> list[list[dict[str, Any]]]:
    """What each call of the model was given, as JSON: type, content, and the tool calls or
    the tool message's status."""
    calls = []
    for messages in model.seen:
        shown = []
        for message in messages:
            item: dict[str, Any] = {"type": message.type, "content": message.content}
            if isinstance(message, AIMessage):
                item["tool_calls"] = [[c["name"], c["args"], c["id"]] for c in message.tool_calls]
            if isinstance(message, LangChainToolMessage):
                item.update(name=message.name, id=message.tool_call_id, status=message.status)
            shown.append(item)
        calls.append(shown)
    return calls


def chat_turn(*, owner_id: str, session_id: str, text: str, script: str) -> dict[str, Any]:
    """One turn of a chat app with the memory's tools, in a new conversation (a new thread):
    the model answers ``text`` with ``SCRIPTS[script]``, calling tools (``invoke``) until it
    answers in text; the user's message and the answer are logged as turns of ``session_id``.
    Returns what the model was given and offered, as JSON."""
    memory = memory_tools(owner_id=owner_id)
    by_name = {tool.name: tool for tool in memory}
    model = ToolCallingFakeModel(messages=iter(SCRIPTS[script]))
    bound = model.bind_tools(memory)
    messages: list[BaseMessage] = [SystemMessage(content=SYSTEM), HumanMessage(content=text)]
    while True:
        reply = bound.invoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            break
        messages.extend(by_name[call["name"]].invoke(call) for call in reply.tool_calls)
    MemoryChatMessageHistory(owner_id=owner_id, session_id=session_id).add_messages(
        [messages[1], reply]
    )
    return {"seen": _seen(model), "offered": model.offered, "answer": reply.content}


async def achat_turn(*, owner_id: str, session_id: str, text: str, script: str) -> dict[str, Any]:
    """``chat_turn`` with ``ainvoke``: the tools' (and the history's) async methods."""
    memory = memory_tools(owner_id=owner_id)
    by_name = {tool.name: tool for tool in memory}
    model = ToolCallingFakeModel(messages=iter(SCRIPTS[script]))
    bound = model.bind_tools(memory)
    messages: list[BaseMessage] = [SystemMessage(content=SYSTEM), HumanMessage(content=text)]
    while True:
        reply = await bound.ainvoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            break
        for call in reply.tool_calls:
            messages.append(await by_name[call["name"]].ainvoke(call))
    await MemoryChatMessageHistory(owner_id=owner_id, session_id=session_id).aadd_messages(
        [messages[1], reply]
    )
    return {"seen": _seen(model), "offered": model.offered, "answer": reply.content}


def _check_first_session(first: dict[str, Any]) -> None:
    assert first["answer"] == "Noted: no peanuts, ever."
    assert first["offered"] == [tools.openai_tools()] * 2
    *_, answered = first["seen"][1]
    assert answered["name"] == "remember_fact" and answered["status"] == "success"
    assert json.loads(answered["content"])["fact"]["value"] == ["peanuts"]


def _check_second_session(second: dict[str, Any]) -> None:
    assert second["answer"] == SCRIPTS["recall"][-1].content
    system, question, asked, profile, found = second["seen"][1]
    assert (system["content"], question["content"]) == (SYSTEM, COOK)
    assert asked["tool_calls"] == [
        ["get_profile", {}, "call_2"],
        ["search_memory", {"query": "peanuts"}, "call_3"],
    ]
    # What the first session stored: its fact, and its turns.
    assert (profile["id"], profile["status"]) == ("call_2", "success")
    assert json.loads(profile["content"]) == {"facts": {"allergies": ["peanuts"]}}
    assert (found["id"], found["status"]) == ("call_3", "success")
    results = json.loads(found["content"])["results"]
    # NOTE: both turns hold the word; which ranks first is the search's business.
    assert sorted((t["session_id"], t["role"], t["content"]) for t in results) == [
        ("laptop", "assistant", "Noted: no peanuts, ever."),
        ("laptop", "user", ALLERGY),
    ]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_tool_loop_in_another_process_after_a_flushall_reads_what_the_first_session_stored(
    own_redis,
):
    first = run(
        lambda: achat_turn(owner_id="wang", session_id="laptop", text=ALLERGY, script="remember")
    )
    _check_first_session(first)
    cache = redis.Redis.from_url(own_redis.url)
    assert cache.dbsize() > 0
    cache.flushall()
    assert cache.dbsize() == 0

    second = instance.run(
        "langchain_tools", "wang", "phone", COOK, "recall", env={"REDIS_URL": own_redis.url}
    )

    _check_second_session(second)
    context = selectors.context_get(owner_id="wang")
    # NOTE: the other process rehydrated the flushed copy; this one reads it.
    assert context["source"] == "cache"
    assert context["facts"] == {"allergies": ["peanuts"]}
    assert [(t["session_id"], t["role"]) for t in context["turns"]] == [
        ("laptop", "user"),
        ("laptop", "assistant"),
        ("phone", "user"),
        ("phone", "assistant"),
    ]


@pytest.mark.django_db(transaction=True)
def test_the_sync_tool_loop_reads_in_a_new_session_what_the_first_stored():
    _check_first_session(
        chat_turn(owner_id="wang", session_id="laptop", text=ALLERGY, script="remember")
    )
    _check_second_session(
        chat_turn(owner_id="wang", session_id="phone", text=COOK, script="recall")
    )
    # Another user's tools see none of it.
    li = {tool.name: tool for tool in memory_tools(owner_id="li")}
    assert li["get_profile"].invoke({}) == {"facts": {}}
    assert li["search_memory"].invoke({"query": "peanuts"}) == {"results": []}


# The tools ---------------------------------------------------------------------------------


@pytest.fixture(params=["invoke", "ainvoke"])
def use(request: pytest.FixtureRequest) -> Callable[[BaseTool, Any], Any]:
    """``use(tool, input)``: the tool's ``invoke``, or its ``ainvoke`` awaited, whose sync code
    runs in this thread and the test's transaction (asgiref's ``async_to_sync``)."""
    if request.param == "invoke":
        return lambda tool, value: tool.invoke(value)
    return lambda tool, value: async_to_sync(tool.ainvoke)(value)


def by_name(owner_id: str) -> dict[str, BaseTool]:
    return {tool.name: tool for tool in memory_tools(owner_id=owner_id)}


@pytest.fixture
def wang(write: Any) -> None:
    with write():
        services.fact_put(owner_id="wang", key="name", value="Wang Jianguo")
        for i, content in enumerate(["I played basketball today", "Nice!", "上海今天下雨"]):
            services.turn_append(
                owner_id="wang",
                session_id="laptop",
                role="user" if i % 2 == 0 else "assistant",
                content=content,
            )


def test_the_five_tools_come_from_the_one_definition():
    made = memory_tools(owner_id="wang")
    assert [tool.name for tool in made] == NAMES
    for tool, definition, openai in zip(
        made, tools.definitions(), tools.openai_tools(), strict=True
    ):
        assert isinstance(tool, MemoryTool) and tool.owner_id == "wang"
        assert tool.description == definition["description"]
        assert tool.args_schema.model_json_schema() == definition["parameters"]
        # What bind_tools sends a chat model is the OpenAI shape of the same definition.
        assert convert_to_openai_tool(tool) == openai
        assert not {"owner", "owner_id", "user_id"} & set(tool.args)


@pytest.mark.django_db
def test_each_tool_answers_as_memory_tools_call_does(wang, write, use):
    memory = by_name("wang")
    assert use(memory["get_profile"], {}) == {"facts": {"name": "Wang Jianguo"}}
    found = use(memory["search_memory"], {"query": "basketball"})
    assert [t["content"] for t in found["results"]] == ["I played basketball today"]
    assert use(memory["search_memory"], {"query": "上海", "limit": 1}) == tools.call(
        "search_memory", {"query": "上海", "limit": 1}, owner_id="wang"
    )
    recent = use(memory["recent_turns"], {"limit": 2})
    assert [t["seq"] for t in recent["turns"]] == [2, 3]
    with write():
        remembered = use(memory["remember_fact"], {"key": "likes", "value": ["basketball"]})
    assert remembered["fact"]["key"] == "likes" and remembered["fact"]["version"] == 1
    assert selectors.context_get(owner_id="wang")["facts"]["likes"] == ["basketball"]
    with write():
        assert use(memory["forget_fact"], {"key": "likes"}) == {"deleted": True}
        assert use(memory["forget_fact"], {"key": "likes"}) == {"deleted": False}
    assert use(memory["get_profile"], {}) == {"facts": {"name": "Wang Jianguo"}}


@pytest.mark.django_db
def test_a_tool_call_is_answered_with_a_tool_message(wang, use):
    memory = by_name("wang")
    message = use(memory["get_profile"], tool_call("get_profile", {}, "call_9"))
    assert isinstance(message, LangChainToolMessage)
    assert (message.tool_call_id, message.name, message.status) == (
        "call_9",
        "get_profile",
        "success",
    )
    assert json.loads(message.content) == {"facts": {"name": "Wang Jianguo"}}
    # A mistake is answered too, marked as one.
    message = use(memory["recent_turns"], tool_call("recent_turns", {"limit": 0}, "call_10"))
    assert (message.tool_call_id, message.status) == ("call_10", "error")
    assert "greater than or equal to 1" in json.loads(message.content)["error"]


MISTAKES = [
    ("remember_fact", {"key": "name"}, "value: This field is required."),
    ("remember_fact", {"key": "Name", "value": 1}, "key: Enter 1-64 characters"),
    ("remember_fact", {"key": "..", "value": 1}, "key: A key may not be made only of dots"),
    ("remember_fact", {"key": "a", "value": "x\x00"}, "Null characters"),
    ("remember_fact", {"key": "a", "value": 1, "self": 2}, "Unknown argument"),
    ("forget_fact", {"key": 3}, "key: Not a valid string."),
    ("forget_fact", {"key": "name", "run_manager": None}, "Unknown argument"),
    ("search_memory", {}, "query: This field is required."),
    ("search_memory", {"query": "a", "limit": 21}, "less than or equal to 20"),
    ("recent_turns", {"limit": "5"}, "limit: A valid integer is required."),
    ("recent_turns", {"turns": 5}, "Unknown argument; this tool takes limit."),
    ("get_profile", {"config": {}}, "Unknown argument"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "arguments", "says"), MISTAKES)
def test_a_models_mistake_is_a_result_it_can_read_and_stores_nothing(
    wang, write, use, name, arguments, says
):
    before = stored("wang")
    with write():
        result = use(by_name("wang")[name], arguments)
    assert list(result) == ["error"]
    assert result["error"].startswith(f"Invalid arguments for {name}: ")
    assert says in result["error"]
    assert stored("wang") == before


@pytest.mark.django_db
def test_a_fact_past_the_cap_is_an_error_and_stores_nothing(wang, write, use, memory_settings):
    with memory_settings(MAX_FACTS=1), write():
        before = stored("wang")
        result = use(by_name("wang")["remember_fact"], {"key": "city", "value": "Shanghai"})
        assert "at most 1 facts" in result["error"]
        assert stored("wang") == before


@pytest.mark.django_db
@pytest.mark.parametrize("owner", ["owner_id", "user_id", "owner", "username"])
def test_no_argument_names_the_owner(wang, write, use, owner):
    memory = by_name("wang")
    before = stored("wang"), stored("li")
    with write():
        for name, arguments in (
            ("remember_fact", {"key": "name", "value": "Li", owner: "li"}),
            ("forget_fact", {"key": "name", owner: "li"}),
            ("get_profile", {owner: "li"}),
            ("search_memory", {"query": "basketball", owner: "li"}),
        ):
            result = use(memory[name], arguments)
            assert "The owner is never an argument" in result["error"]
            message = use(memory[name], tool_call(name, arguments, "call_1"))
            assert message.status == "error"
    assert (stored("wang"), stored("li")) == before
    assert [tool.owner_id for tool in memory.values()] == ["wang"] * 5


@pytest.mark.django_db
def test_each_owners_tools_work_on_that_owners_memory_only(wang, write, use):
    with write():
        use(by_name("li")["remember_fact"], {"key": "name", "value": "Li Lei"})
    assert use(by_name("li")["get_profile"], {}) == {"facts": {"name": "Li Lei"}}
    assert use(by_name("li")["recent_turns"], {}) == {"turns": []}
    assert use(by_name("wang")["get_profile"], {}) == {"facts": {"name": "Wang Jianguo"}}


def test_a_bad_owner_is_the_hosts_mistake_when_the_tools_are_made():
    for bad in ("no spaces", "", "x" * 129):
        with pytest.raises(ValidationError) as raised:
            memory_tools(owner_id=bad)
        assert list(raised.value.message_dict) == ["user_id"]


def test_a_lost_database_raises(dead_database, use):
    memory = by_name("wang")
    with pytest.raises(MemoryUnavailable):
        use(memory["remember_fact"], {"key": "name", "value": "x"})
    with pytest.raises(MemoryUnavailable):
        use(memory["get_profile"], tool_call("get_profile", {}, "call_1"))


@pytest.mark.django_db(transaction=True)
def test_a_connection_opened_in_a_worker_thread_is_closed_after_use():
    # NOTE: LangChain runs sync tools in executor threads (ainvoke without a coroutine,
    # batch, LangGraph's ToolNode): no request ever closes their connections.
    seen: dict[str, Any] = {}

    def work() -> None:
        memory = by_name("wang")
        memory["remember_fact"].invoke({"key": "name", "value": "Wang"})
        seen["after_write"] = connection.connection is not None
        seen["profile"] = memory["get_profile"].invoke({})
        seen["after_read"] = connection.connection is not None

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    assert seen == {
        "after_write": False,
        "profile": {"facts": {"name": "Wang"}},
        "after_read": False,
    }


@pytest.mark.django_db(transaction=True)
def test_langgraphs_tool_node_runs_them_sync_and_async():
    # NOTE: ToolNode runs sync tools in its thread pool, each call closing the connection it
    # opened there (a leaked one would keep the test database from being flushed).
    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode(memory_tools(owner_id="wang")))
    builder.add_edge(START, "tools")
    graph = builder.compile()
    asked = AIMessage(
        content="",
        tool_calls=[
            tool_call("remember_fact", {"key": "location", "value": "Beijing"}, "c1"),
            tool_call("recent_turns", {"limit": 0}, "c2"),
        ],
    )

    def answers(state: dict[str, Any]) -> list[tuple[str, str, Any]]:
        return [(m.tool_call_id, m.status, json.loads(m.content)) for m in state["messages"][1:]]

    sync = answers(graph.invoke({"messages": [asked]}))
    assert [(call_id, status) for call_id, status, _ in sync] == [
        ("c1", "success"),
        ("c2", "error"),
    ]
    assert sync[0][2]["fact"]["value"] == "Beijing"
    assert "greater than or equal to 1" in sync[1][2]["error"]
    asked = AIMessage(content="", tool_calls=[tool_call("get_profile", {}, "c3")])
    assert answers(run(lambda: graph.ainvoke({"messages": [asked]}))) == [
        ("c3", "success", {"facts": {"location": "Beijing"}})
    ]
