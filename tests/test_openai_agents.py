"""Tests of memory.integrations.openai_agents: MemorySession under the Agents SDK's Runner with a
scripted model (no network), across sessions, processes and a flushed Redis; and its methods."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest
import redis
from agents import Agent, RunConfig, Runner, function_tool
from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import ModelResponse, TResponseInputItem, TResponseOutputItem
from agents.memory import Session, SessionSettings
from agents.model_settings import ModelSettings
from agents.models.interface import Model, ModelTracing
from agents.tool import Tool
from agents.usage import Usage
from asgiref.sync import async_to_sync, sync_to_async
from django.core.exceptions import ValidationError
from django.db import connections
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from memory import selectors, services
from memory.integrations.openai_agents import MemorySession, item_from_turn, turn_from_item
from memory.selectors.turns import aturn_tail
from tests import instance
from tests.loop import run

INTRO = "My name is Wang Jianguo. What's the weather in Shanghai?"


class ScriptedModel(Model):
    """A model that answers each call with the next of ``outputs``; ``calls`` gets what each
    call was given (instructions and input items)."""

    def __init__(self, outputs: list[list[TResponseOutputItem]]) -> None:
        self.outputs = list(outputs)
        self.calls: list[dict[str, Any]] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any | None,
    ) -> ModelResponse:
        self.calls.append({"instructions": system_instructions, "input": input})
        return ModelResponse(output=self.outputs.pop(0), usage=Usage(), response_id=None)

    async def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the scripted model does not stream")
        yield  # pragma: no cover


def message(text: str, id: str = "msg_1") -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=id,
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


def weather_call() -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call",
        call_id="call_1",
        name="weather",
        arguments='{"city":"Shanghai"}',
        id="fc_1",
    )


@function_tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


async def facts_instructions(context: Any, agent: Agent[Any]) -> str:
    """The agent's instructions: the facts of the owner its session belongs to."""
    session = context.context["session"]
    facts = await selectors.acontext_messages(owner_id=session.owner_id, turns=0)
    return f"Be brief.\n{facts['messages'][0]['content']}"


def agent(model: Model) -> Agent[Any]:
    return Agent(name="assistant", instructions=facts_instructions, model=model, tools=[weather])


def first_outputs(reply: str) -> list[list[TResponseOutputItem]]:
    """The first session's script: a weather call, then the reply."""
    return [[weather_call()], [message(reply)]]


async def aagent_turn(
    *, owner_id: str, session_id: str, text: str, outputs: list[list[TResponseOutputItem]]
) -> dict[str, Any]:
    """One run of the agent (``Runner.run``) in a MemorySession; what its model's first call
    was given."""
    model = ScriptedModel(outputs)
    session = MemorySession(owner_id=owner_id, session_id=session_id)
    result = await Runner.run(
        agent(model),
        text,
        session=session,
        context={"session": session},
        run_config=RunConfig(tracing_disabled=True),
    )
    assert result.final_output == outputs[-1][-1].content[0].text  # type: ignore[union-attr]
    return model.calls[0]


def agent_turn(*, owner_id: str, session_id: str, text: str, reply: str) -> dict[str, Any]:
    """``aagent_turn`` with ``Runner.run_sync``, the SDK's door for sync code, and one reply."""
    model = ScriptedModel([[message(reply)]])
    session = MemorySession(owner_id=owner_id, session_id=session_id)
    try:
        result = Runner.run_sync(
            agent(model),
            text,
            session=session,
            context={"session": session},
            run_config=RunConfig(tracing_disabled=True),
        )
    finally:
        # NOTE: the session's sync code ran in asgiref's thread, on a connection of its own.
        asyncio.run(sync_to_async(connections.close_all, thread_sensitive=True)())
    assert result.final_output == reply
    return model.calls[0]


FIRST_ITEMS = [
    {"content": INTRO, "role": "user"},
    {
        "arguments": '{"city":"Shanghai"}',
        "call_id": "call_1",
        "name": "weather",
        "type": "function_call",
        "id": "fc_1",
    },
    {"call_id": "call_1", "output": "sunny in Shanghai", "type": "function_call_output"},
    {
        "id": "msg_1",
        "content": [{"annotations": [], "text": "It is sunny in Shanghai.", "type": "output_text"}],
        "role": "assistant",
        "status": "completed",
        "type": "message",
    },
]


def sessions_of(async_fn: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
    """``async_fn`` for a sync test: its sync code runs in this thread, in the test's
    transaction (asgiref's ``async_to_sync``)."""
    return async_to_sync(async_fn)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_second_session_in_another_process_after_a_flushall_gets_the_first_ones_items(
    own_redis,
):
    first = run(
        lambda: aagent_turn(
            owner_id="wang",
            session_id="laptop",
            text=INTRO,
            outputs=first_outputs("It is sunny in Shanghai."),
        )
    )
    assert first["input"] == [{"content": INTRO, "role": "user"}]
    cache = redis.Redis.from_url(own_redis.url)
    assert cache.dbsize() > 0
    cache.flushall()
    assert cache.dbsize() == 0

    second = instance.run(
        "openai_agents",
        "wang",
        "phone",
        "What's my name?",
        "You are Wang Jianguo.",
        env={"REDIS_URL": own_redis.url},
    )

    assert second["input"] == [*FIRST_ITEMS, {"content": "What's my name?", "role": "user"}]
    assert second["instructions"] == "Be brief.\nKnown facts about the user:\n- name: Wang Jianguo"
    context = selectors.context_get(owner_id="wang")
    # NOTE: the other process rehydrated the flushed copy; this one reads it.
    assert context["source"] == "cache"
    assert [(t["session_id"], t["role"], t["content"]) for t in context["turns"]] == [
        ("laptop", "user", INTRO),
        ("laptop", "assistant", 'weather({"city":"Shanghai"})'),
        ("laptop", "tool", "sunny in Shanghai"),
        ("laptop", "assistant", "It is sunny in Shanghai."),
        ("phone", "user", "What's my name?"),
        ("phone", "assistant", "You are Wang Jianguo."),
    ]


@pytest.mark.django_db(transaction=True)
def test_the_sync_runner_sees_every_session_and_the_facts():
    agent_turn(owner_id="wang", session_id="a", text="I live in Shanghai", reply="上海很好！")
    seen = agent_turn(owner_id="wang", session_id="b", text="我喜欢打篮球", reply="好的")
    assert seen["input"] == [
        {"content": "I live in Shanghai", "role": "user"},
        {
            "id": "msg_1",
            "content": [{"annotations": [], "text": "上海很好！", "type": "output_text"}],
            "role": "assistant",
            "status": "completed",
            "type": "message",
        },
        {"content": "我喜欢打篮球", "role": "user"},
    ]
    # NOTE: the SDK stores the input before it calls the model: the facts it states are known.
    assert seen["instructions"] == (
        'Be brief.\nKnown facts about the user:\n- likes: ["打篮球"]\n- location: Shanghai'
    )
    assert selectors.fact_list(owner_id="wang")[0]["value"] == ["打篮球"]


def test_the_session_is_the_sdks_session_protocol():
    session = MemorySession(owner_id="wang", session_id="tab")
    assert isinstance(session, Session)
    assert (session.owner_id, session.session_id) == ("wang", "tab")
    assert session.session_settings == SessionSettings()


ITEMS: list[dict[str, Any]] = [
    {"role": "user", "content": "我叫王建国"},
    {
        "type": "message",
        "role": "developer",
        "content": [{"type": "input_text", "text": "Be kind."}],
    },
    {"type": "message", "role": "system", "content": "Answer in Chinese."},
    {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "What is in this picture?"},
            {"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "auto"},
        ],
    },
    {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "The user shows a cat."}],
    },
    {
        "type": "function_call",
        "call_id": "call_2",
        "name": "describe",
        "arguments": '{"url": "https://example.com/cat.png"}',
    },
    {"type": "function_call_output", "call_id": "call_2", "output": "a sleeping cat"},
    {
        "type": "message",
        "id": "msg_2",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "refusal", "refusal": "I cannot name that cat."}],
    },
    {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search"}},
]


@pytest.mark.django_db
def test_items_are_stored_as_turns_and_come_back_exactly(write):
    session = MemorySession(owner_id="wang", session_id="tab")
    with write():
        sessions_of(session.add_items)(ITEMS)
    turns = selectors.context_get(owner_id="wang")["turns"]
    assert [(t["session_id"], t["role"], t["content"]) for t in turns] == [
        ("tab", "user", "我叫王建国"),
        ("tab", "system", "Be kind."),
        ("tab", "system", "Answer in Chinese."),
        ("tab", "user", "What is in this picture?\n[input_image]"),
        ("tab", "assistant", "The user shows a cat."),
        ("tab", "assistant", 'describe({"url": "https://example.com/cat.png"})'),
        ("tab", "tool", "a sleeping cat"),
        ("tab", "assistant", "I cannot name that cat."),
        ("tab", "assistant", "[web_search_call]"),
    ]
    # NOTE: an item's one text is stored once, in the turn's content.
    assert turns[0]["metadata"] == {
        "openai_agents": {"item": {"role": "user", "content": None}, "text": ["content"]}
    }
    assert sessions_of(session.get_items)() == ITEMS
    assert selectors.fact_list(owner_id="wang")[0]["value"] == "王建国"


@pytest.mark.django_db
def test_turns_written_by_other_doors_read_as_plain_messages(write):
    with write():
        for role in ("user", "assistant", "system", "tool"):
            services.turn_append(owner_id="wang", session_id="api", role=role, content=role)
    items = sessions_of(MemorySession(owner_id="wang", session_id="sdk").get_items)()
    assert items == [
        {"role": "user", "content": "user"},
        {"role": "assistant", "content": "assistant"},
        {"role": "system", "content": "system"},
        {"role": "system", "content": "Tool output: tool"},
    ]


@pytest.mark.django_db
def test_get_items_reads_the_owners_newest_turns_of_every_session_oldest_first(
    write, memory_settings
):
    with write():
        for i in range(6):
            sessions_of(MemorySession(owner_id="wang", session_id=f"s{i % 2}").add_items)(
                [{"role": "user", "content": f"turn {i}"}]
            )
        sessions_of(MemorySession(owner_id="li", session_id="s0").add_items)(
            [{"role": "user", "content": "li's"}]
        )
    session = MemorySession(owner_id="wang", session_id="s0")
    get = sessions_of(session.get_items)

    def contents(items: list[Any]) -> list[str]:
        return [item["content"] for item in items]

    assert contents(get()) == [f"turn {i}" for i in range(6)]
    assert contents(get(2)) == ["turn 4", "turn 5"]
    assert get(0) == []
    with memory_settings(CONTEXT_TURNS=3, MAX_CONTEXT_TURNS=4):
        # NOTE: no limit is every turn, as in the SDK's own sessions; a limit past
        # MAX_CONTEXT_TURNS is that many, read from the database.
        assert contents(get()) == [f"turn {i}" for i in range(6)]
        assert contents(get(5)) == [f"turn {i}" for i in range(1, 6)]
        assert contents(get(100)) == [f"turn {i}" for i in range(6)]
        assert contents(get(4)) == [f"turn {i}" for i in range(2, 6)]
    settled = MemorySession(
        owner_id="wang", session_id="s1", session_settings=SessionSettings(limit=1)
    )
    assert contents(sessions_of(settled.get_items)()) == ["turn 5"]
    assert contents(sessions_of(settled.get_items)(2)) == ["turn 4", "turn 5"]
    for bad in (-1, "3", True):
        with pytest.raises(ValidationError) as e:
            get(bad)
        assert e.value.message_dict == {"limit": ["Ensure this value is an integer >= 0."]}
    assert contents(sessions_of(MemorySession(owner_id="nobody", session_id="s").get_items)()) == []


@pytest.mark.django_db
def test_get_items_without_a_limit_returns_the_whole_history_past_every_window(
    write, memory_settings
):
    session = MemorySession(owner_id="wang", session_id="tab")
    with write(), memory_settings(CACHE_TURNS=5, CONTEXT_TURNS=5, MAX_CONTEXT_TURNS=10):
        for i in range(25):
            sessions_of(session.add_items)([{"role": "user", "content": f"msg-{i}"}])
        items = sessions_of(session.get_items)()
    assert [item["content"] for item in items] == [f"msg-{i}" for i in range(25)]


@pytest.mark.django_db
def test_a_closed_session_refuses_every_call_as_the_sdks_sessions_do(write):
    session = MemorySession(owner_id="wang", session_id="tab")
    with write():
        sessions_of(session.add_items)([{"role": "user", "content": "Hello"}])
    session.close()
    calls = (
        functools.partial(session.add_items, []),
        functools.partial(session.add_items, [{"role": "user", "content": "again"}]),
        session.get_items,
        session.pop_item,
        session.clear_session,
    )
    for call in calls:
        with pytest.raises(RuntimeError, match=r"^MemorySession is closed$"):
            sessions_of(call)()
    # NOTE: closing a session is not forgetting: another session still reads the turn.
    again = MemorySession(owner_id="wang", session_id="tab")
    assert sessions_of(again.get_items)() == [{"role": "user", "content": "Hello"}]


@pytest.mark.django_db(transaction=True)
def test_sessions_first_used_at_once_in_threads_of_their_own_event_loops_each_store_theirs():
    # NOTE: as the SDK's sessions are used: each thread runs its own loop (asyncio.run).
    barrier = threading.Barrier(2)
    results: dict[str, Any] = {}

    def worker(owner_id: str) -> None:
        async def main() -> list[Any]:
            session = MemorySession(owner_id=owner_id, session_id="tab")
            barrier.wait()
            await session.add_items([{"role": "user", "content": f"from {owner_id}"}])
            return await session.get_items()

        try:
            results[owner_id] = run(main)
        except Exception as e:
            results[owner_id] = e

    threads = [threading.Thread(target=worker, args=(owner,)) for owner in ("wang", "li")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {
        "wang": [{"role": "user", "content": "from wang"}],
        "li": [{"role": "user", "content": "from li"}],
    }


def _turn_writers_waiting(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pg_locks WHERE relation = 'memory_turn'::regclass AND NOT granted"
    ).fetchone()
    return row[0] if row else 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("operation", ["add", "pop", "clear"])
def test_a_cancelled_write_ends_before_the_cancellation_reaches_the_caller(operation):
    # NOTE: as the SDK's own sessions: whoever sees the CancelledError knows the outcome (the
    # write committed) and may retry without racing it. The write waits on a real lock.
    session = MemorySession(owner_id="wang", session_id="tab")
    sessions_of(session.add_items)([{"role": "user", "content": "first"}])
    mutations = {
        "add": lambda: session.add_items([{"role": "user", "content": "second"}]),
        "pop": session.pop_item,
        "clear": session.clear_session,
    }

    async def main() -> tuple[bool, list[str]]:
        with psycopg.connect(instance.database_url()) as conn:
            conn.execute("LOCK TABLE memory_turn IN ACCESS EXCLUSIVE MODE")
            task = asyncio.ensure_future(mutations[operation]())
            deadline = time.monotonic() + 30
            while not _turn_writers_waiting(conn) and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            # NOTE: twice, as the SDK's tests cancel: a second cancel does not cut the wait.
            for _ in range(2):
                task.cancel()
                await asyncio.sleep(0.05)
            waited = not task.done()
            conn.rollback()
        with pytest.raises(asyncio.CancelledError):
            await task
        turns = await aturn_tail(owner_id="wang")
        return waited, [turn["content"] for turn in turns]

    waited, turns = run(main)
    assert waited
    assert turns == {"add": ["first", "second"], "pop": [], "clear": []}[operation]


@pytest.mark.django_db
@pytest.mark.parametrize("odd", [object(), {1, 2}, b"bytes"])
def test_an_item_json_cannot_hold_is_jsons_type_error_and_nothing_is_stored(odd, write):
    session = MemorySession(owner_id="wang", session_id="tab")
    with pytest.raises(TypeError), write():
        sessions_of(session.add_items)(
            [{"role": "user", "content": "first"}, {"role": "user", "content": odd}]
        )
    assert selectors.context_get(owner_id="wang")["turns"] == []
    with write():
        sessions_of(session.add_items)([{"role": "user", "content": "after"}])
    assert sessions_of(session.get_items)() == [{"role": "user", "content": "after"}]


@pytest.mark.django_db
def test_the_window_is_returned_as_it_is_even_an_output_whose_call_is_before_it(write):
    session = MemorySession(owner_id="wang", session_id="tab")
    with write():
        sessions_of(session.add_items)(FIRST_ITEMS)
    assert sessions_of(session.get_items)(2) == FIRST_ITEMS[2:]
    assert sessions_of(session.get_items)(3) == FIRST_ITEMS[1:]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ("just text", ValueError),
        ({"content": "no role"}, ValueError),
        ({"role": "critic", "content": "x"}, ValueError),
        ({"role": ["user"], "content": "x"}, ValueError),
        ({"type": 7}, ValueError),
        ({"role": "user", "content": "x" * 40_000}, ValidationError),
        ({"role": "user", "content": "nul \x00"}, ValidationError),
        (
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "x" * 20_000},
            ValidationError,
        ),
    ],
)
def test_a_refused_item_stores_none_of_them(bad, error, write):
    session = MemorySession(owner_id="wang", session_id="tab")
    with pytest.raises(error), write():
        sessions_of(session.add_items)([{"role": "user", "content": "My name is Bob"}, bad])
    assert selectors.context_get(owner_id="wang")["turns"] == []
    assert selectors.fact_list(owner_id="wang") == []


@pytest.mark.django_db
def test_pop_item_deletes_and_returns_this_sessions_newest_turn(write):
    laptop = MemorySession(owner_id="wang", session_id="laptop")
    phone = MemorySession(owner_id="wang", session_id="phone")
    with write():
        sessions_of(laptop.add_items)(FIRST_ITEMS[:1])
        sessions_of(laptop.add_items)(FIRST_ITEMS[3:])
        sessions_of(phone.add_items)([{"role": "user", "content": "From the phone"}])
        assert sessions_of(laptop.pop_item)() == FIRST_ITEMS[3]
    assert [(t["seq"], t["content"]) for t in selectors.context_get(owner_id="wang")["turns"]] == [
        (1, INTRO),
        (3, "From the phone"),
    ]
    with write():
        assert sessions_of(phone.pop_item)() == {"role": "user", "content": "From the phone"}
        assert sessions_of(phone.pop_item)() is None
        assert sessions_of(MemorySession(owner_id="li", session_id="laptop").pop_item)() is None
    assert sessions_of(laptop.get_items)() == FIRST_ITEMS[:1]
    # NOTE: what the popped turn stated stays known.
    assert selectors.fact_list(owner_id="wang")[0]["value"] == "Wang Jianguo"


@pytest.mark.django_db
def test_pop_item_looks_past_the_cached_window(write, memory_settings):
    laptop = MemorySession(owner_id="wang", session_id="laptop")
    with write(), memory_settings(CACHE_TURNS=2, CONTEXT_TURNS=2, MAX_CONTEXT_TURNS=4):
        sessions_of(laptop.add_items)([{"role": "user", "content": "old"}])
        sessions_of(MemorySession(owner_id="wang", session_id="phone").add_items)(
            [{"role": "user", "content": f"phone {i}"} for i in range(3)]
        )
        assert sessions_of(laptop.pop_item)() == {"role": "user", "content": "old"}
        sessions_of(laptop.add_items)([{"role": "user", "content": "older"}])
        sessions_of(MemorySession(owner_id="wang", session_id="phone").add_items)(
            [{"role": "user", "content": f"phone {i}"} for i in range(3, 7)]
        )
        # NOTE: beyond the owner's newest MAX_CONTEXT_TURNS, a session's turn is not found.
        assert sessions_of(laptop.pop_item)() is None


@pytest.mark.django_db
def test_clear_session_deletes_every_turn_of_the_owner_and_keeps_the_facts(write):
    with write():
        sessions_of(MemorySession(owner_id="wang", session_id="a").add_items)(FIRST_ITEMS)
        sessions_of(MemorySession(owner_id="wang", session_id="b").add_items)(
            [{"role": "user", "content": "hello"}]
        )
        sessions_of(MemorySession(owner_id="li", session_id="a").add_items)(
            [{"role": "user", "content": "hello"}]
        )
        sessions_of(MemorySession(owner_id="wang", session_id="b").clear_session)()
    assert sessions_of(MemorySession(owner_id="wang", session_id="a").get_items)() == []
    assert selectors.context_get(owner_id="wang")["facts"] == {"name": "Wang Jianguo"}
    assert len(sessions_of(MemorySession(owner_id="li", session_id="a").get_items)()) == 1
    with write():
        sessions_of(MemorySession(owner_id="nobody", session_id="a").clear_session)()


@pytest.mark.django_db
def test_bad_ids_are_validation_errors():
    with pytest.raises(ValidationError) as e:
        MemorySession(owner_id="bad id", session_id="s")
    assert list(e.value.message_dict) == ["user_id"]
    with pytest.raises(ValidationError) as e:
        MemorySession(owner_id="wang", session_id="bad\nid")
    assert list(e.value.message_dict) == ["session_id"]


def test_an_item_and_its_turn_convert_both_ways():
    item = {
        "type": "function_call_output",
        "call_id": "c",
        "output": [{"type": "input_text", "text": "hi"}],
    }
    turn = turn_from_item(item)
    assert (turn.role, turn.content) == ("tool", "hi")
    payload = {
        "seq": 1,
        "session_id": "s",
        "role": turn.role,
        "content": turn.content,
        "metadata": turn.metadata,
        "created_at": "2026-01-01T00:00:00Z",
    }
    assert item_from_turn(payload) == item
    # NOTE: metadata that does not hold the text where it says falls back to the turn.
    broken = {**payload, "metadata": {"openai_agents": {"item": {"role": "user"}, "text": [3]}}}
    assert item_from_turn(broken) == {"role": "system", "content": "Tool output: hi"}


@pytest.mark.django_db(transaction=True)
def test_the_methods_run_in_an_event_loop_as_the_sdk_calls_them():
    async def main() -> tuple[list[Any], Any, list[Any]]:
        session = MemorySession(owner_id="wang", session_id="ws")
        await session.add_items(FIRST_ITEMS)
        added = await session.get_items()
        popped = await session.pop_item()
        await session.clear_session()
        return added, popped, await session.get_items()

    added, popped, cleared = run(main)
    assert added == FIRST_ITEMS
    assert popped == FIRST_ITEMS[-1]
    assert cleared == []


def test_without_openai_agents_the_import_error_names_the_extra():
    out = instance.import_error_without("agents", "memory.integrations.openai_agents")
    assert out.startswith("memory.integrations.openai_agents needs openai-agents")
    # NOTE: no release on an index yet: the wheel make dist builds, as the README installs it.
    assert 'pip install "$(echo dist/django_memory-*.whl)[openai-agents]" after make dist' in out


def test_session_settings_are_the_sdks_as_its_own_sessions_take_them():
    assert MemorySession(owner_id="wang", session_id="s").session_settings == SessionSettings()
    given = MemorySession(owner_id="wang", session_id="s", session_settings={"limit": 0})
    assert isinstance(given.session_settings, SessionSettings)
    assert given.session_settings.limit == 0
    assert given.session_settings.resolve({"limit": 4}).limit == 4
    kept = SessionSettings(limit=3)
    assert (
        MemorySession(owner_id="w", session_id="s", session_settings=kept).session_settings is kept
    )
    with pytest.raises(TypeError, match="Unknown session settings: limitt"):
        MemorySession(owner_id="wang", session_id="s", session_settings={"limitt": 1})
    with pytest.raises(TypeError):
        MemorySession(owner_id="wang", session_id="s", session_settings=[("limit", 1)])  # type: ignore[arg-type]


@pytest.mark.django_db(transaction=True)
def test_the_runner_runs_with_settings_given_as_a_dict_and_the_run_configs_override():
    session = MemorySession(owner_id="wang", session_id="tab", session_settings={"limit": 3})

    async def main() -> list[dict[str, Any]]:
        await session.add_items([{"role": "user", "content": f"turn {i}"} for i in range(5)])
        assert [i["content"] for i in await session.get_items()] == ["turn 2", "turn 3", "turn 4"]
        model = ScriptedModel([[message("first")], [message("second")]])
        for settings in (None, SessionSettings(limit=1)):
            await Runner.run(
                agent(model),
                "and now?",
                session=session,
                context={"session": session},
                run_config=RunConfig(tracing_disabled=True, session_settings=settings),
            )
        return model.calls

    first, second = run(main)
    assert [item.get("content") for item in first["input"]] == [
        "turn 2",
        "turn 3",
        "turn 4",
        "and now?",
    ]
    assert len(second["input"]) == 2 and second["input"][-1]["content"] == "and now?"
