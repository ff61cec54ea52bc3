"""Tests of memory.integrations.langgraph's checkpointer: LangGraph's own conformance suite
(langgraph-checkpoint-conformance), graphs that run on it, its owner rule, and the turns it
mirrors from a thread's messages."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from langchain_core.messages import (
    AIMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import ProgressCallbacks
from langgraph.graph import END, START, MessagesState, StateGraph

from memory import selectors, services
from memory.integrations.langgraph import MemoryCheckpointSaver
from memory.integrations.langgraph.checkpoint import ALIST_PAGE, turn_from_message
from memory.models import Checkpoint, CheckpointBlob, CheckpointWrite
from tests.loop import run


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_checkpointer_passes_langgraphs_conformance_suite_with_every_capability():
    @checkpointer_test(name="MemoryCheckpointSaver")
    async def saver() -> Any:
        yield MemoryCheckpointSaver(owner_id=f"conformance-{uuid.uuid4().hex[:8]}")

    async def main() -> Any:
        return await validate(saver, progress=ProgressCallbacks.verbose())

    report = run(main)
    report.print_report()
    assert report.passed_all_base()
    assert report.passed_all()


def chat_graph(saver: MemoryCheckpointSaver, *, asynchronous: bool = False) -> Any:
    """A chat graph whose one node answers the last message by echoing it."""

    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(content=f"echo: {state['messages'][-1].text}")]}

    async def areply(state: MessagesState) -> dict[str, Any]:
        return reply(state)

    builder = StateGraph(MessagesState)
    builder.add_node("reply", areply if asynchronous else reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=saver)


def thread(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


def turns_of(owner_id: str) -> list[tuple[str, str, str]]:
    return [
        (t["session_id"], t["role"], t["content"])
        for t in selectors.turn_list(owner_id=owner_id, limit=500)[0]
    ]


@pytest.mark.django_db(transaction=True)
def test_a_graph_keeps_its_thread_and_its_messages_become_the_owners_turns_once():
    saver = MemoryCheckpointSaver(owner_id="wang")
    app = chat_graph(saver)
    app.invoke({"messages": [HumanMessage("I live in Shanghai")]}, thread("laptop"))
    state = app.invoke({"messages": [HumanMessage("hello")]}, thread("laptop"))

    assert [m.text for m in state["messages"]] == [
        "I live in Shanghai",
        "echo: I live in Shanghai",
        "hello",
        "echo: hello",
    ]
    assert turns_of("wang") == [
        ("laptop", "user", "I live in Shanghai"),
        ("laptop", "assistant", "echo: I live in Shanghai"),
        ("laptop", "user", "hello"),
        ("laptop", "assistant", "echo: hello"),
    ]
    # NOTE: the session, summaries and export see the thread as any conversation.
    (session,) = selectors.session_list(owner_id="wang").results
    assert session["session_id"] == "laptop" and session["turn_count"] == 4


@pytest.mark.django_db(transaction=True)
def test_a_checkpoint_put_again_or_a_thread_copied_adds_no_turn():
    saver = MemoryCheckpointSaver(owner_id="wang")
    app = chat_graph(saver)
    app.invoke({"messages": [HumanMessage("hi")]}, thread("t1"))
    latest = saver.get_tuple(thread("t1"))
    assert latest is not None
    parent = latest.parent_config
    assert parent is not None
    # The same checkpoint put again, as a retry or a replay does.
    saver.put(
        {"configurable": {**parent["configurable"]}},
        latest.checkpoint,
        latest.metadata,
        latest.checkpoint["channel_versions"],
    )
    saver.copy_thread("t1", "t2")
    assert [t[1:] for t in turns_of("wang")] == [("user", "hi"), ("assistant", "echo: hi")]
    copied = saver.get_tuple(thread("t2"))
    assert copied is not None and copied.checkpoint["id"] == latest.checkpoint["id"]


@pytest.mark.django_db(transaction=True)
def test_the_owner_is_the_savers_and_never_the_configs():
    wang = chat_graph(MemoryCheckpointSaver(owner_id="wang"))
    li = chat_graph(MemoryCheckpointSaver(owner_id="li"))
    wang.invoke({"messages": [HumanMessage("wang's secret")]}, thread("shared"))
    config = {"configurable": {"thread_id": "shared", "user_id": "wang", "owner_id": "wang"}}
    state = li.invoke({"messages": [HumanMessage("hello")]}, config)

    assert [m.text for m in state["messages"]] == ["hello", "echo: hello"]
    assert [t[2] for t in turns_of("li")] == ["hello", "echo: hello"]
    assert [t[2] for t in turns_of("wang")] == ["wang's secret", "echo: wang's secret"]
    assert MemoryCheckpointSaver(owner_id="li").get_tuple(thread("nobody")) is None


@pytest.mark.django_db(transaction=True)
def test_the_async_graph_runs_on_the_async_methods():
    saver = MemoryCheckpointSaver(owner_id="wang")

    async def main() -> Any:
        app = chat_graph(saver, asynchronous=True)
        await app.ainvoke({"messages": [HumanMessage("one")]}, thread("phone"))
        state = await app.ainvoke({"messages": [HumanMessage("two")]}, thread("phone"))
        history = [t async for t in saver.alist(thread("phone"), limit=100)]
        return state, history

    state, history = run(main)
    assert [m.text for m in state["messages"]] == ["one", "echo: one", "two", "echo: two"]
    assert len(history) == 6 and history[0].checkpoint["id"] > history[-1].checkpoint["id"]
    assert [t[2] for t in turns_of("wang")] == ["one", "echo: one", "two", "echo: two"]


@pytest.mark.django_db(transaction=True)
def test_alist_lists_what_list_does_across_its_pages():
    saver = MemoryCheckpointSaver(owner_id="wang")
    config = thread("long")
    for _ in range(2 * ALIST_PAGE + 3):
        checkpoint = empty_checkpoint()
        config = saver.put(config, checkpoint, {"source": "input", "step": -1}, {})

    async def main() -> dict[int | None, list[str]]:
        return {
            limit: [t.checkpoint["id"] async for t in saver.alist(thread("long"), limit=limit)]
            for limit in (None, ALIST_PAGE, ALIST_PAGE + 1, 2 * ALIST_PAGE + 3, 1000)
        }

    listed = run(main)
    everything = [t.checkpoint["id"] for t in saver.list(thread("long"))]
    assert len(everything) == 2 * ALIST_PAGE + 3 == len(set(everything))
    for limit, ids in listed.items():
        assert ids == everything[:limit]


@pytest.mark.django_db(transaction=True)
def test_forget_erases_the_owners_checkpoints_and_delete_thread_keeps_the_turns():
    saver = MemoryCheckpointSaver(owner_id="wang")
    app = chat_graph(saver)
    app.invoke({"messages": [HumanMessage("a")]}, thread("t1"))
    app.invoke({"messages": [HumanMessage("b")]}, thread("t2"))
    chat_graph(MemoryCheckpointSaver(owner_id="li")).invoke(
        {"messages": [HumanMessage("c")]}, thread("t1")
    )

    saver.delete_thread("t1")
    assert saver.get_tuple(thread("t1")) is None
    assert [t[2] for t in turns_of("wang")] == ["a", "echo: a", "b", "echo: b"]

    assert services.memory_forget(owner_id="wang")
    assert saver.get_tuple(thread("t2")) is None
    for model in (Checkpoint, CheckpointBlob, CheckpointWrite):
        assert not model.objects.filter(owner__external_id="wang").exists()
    assert MemoryCheckpointSaver(owner_id="li").get_tuple(thread("t1")) is not None


@pytest.mark.django_db
def test_messages_become_turns_by_their_role_and_text():
    call = {"name": "search", "args": {"q": "上海"}, "id": "c1", "type": "tool_call"}
    cases = [
        (HumanMessage("hi", id="1"), ("user", "hi")),
        (AIMessage(content="", tool_calls=[call], id="2"), ("assistant", 'search({"q": "上海"})')),
        (ToolMessage("found\x00it", tool_call_id="c1", id="3"), ("tool", "found\ufffdit")),
        (SystemMessage("be brief", id="4"), ("system", "be brief")),
        ({"role": "user", "content": "as a dict"}, ("user", "as a dict")),
    ]
    for message, expected in cases:
        turn = turn_from_message(message, thread_id="t", identity="x")
        assert turn is not None and (turn.role, turn.content) == expected
    assert turn_from_message(RemoveMessage(id="1"), thread_id="t", identity="1") is None
    same = turn_from_message(HumanMessage("hi"), thread_id="t", identity="1")
    other = turn_from_message(HumanMessage("hi"), thread_id="u", identity="1")
    assert same is not None and other is not None and same.key != other.key
    long = turn_from_message(HumanMessage("x" * 40_000), thread_id="t", identity="9")
    assert long is not None and len(long.content) == 32768


@pytest.mark.django_db
def test_a_thread_id_is_a_session_id_and_the_owner_id_is_checked():
    with pytest.raises(ValidationError):
        MemoryCheckpointSaver(owner_id="bad id")
    saver = MemoryCheckpointSaver(owner_id="wang")
    with pytest.raises(ValidationError):
        chat_graph(saver).invoke({"messages": [HumanMessage("x")]}, thread("x" * 129))
    assert saver.get_tuple(thread("x" * 129)) is None
    with pytest.raises(ValueError, match="prune strategy"):
        saver.prune(["t"], strategy="everything")
