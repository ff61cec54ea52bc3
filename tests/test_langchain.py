"""Tests of memory.integrations.langchain: MemoryChatMessageHistory under langchain-core's
RunnableWithMessageHistory and fake chat model, across sessions, processes and a flushed Redis."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis
from django.core.exceptions import ValidationError
from django.db import connection
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import ConfigurableFieldSpec, Runnable, RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory

from memory import selectors
from memory.integrations.langchain import MemoryChatMessageHistory
from tests import instance
from tests.loop import run

pytestmark = pytest.mark.filterwarnings(
    # NOTE: langchain-core 1.x deprecates RunnableWithMessageHistory (for LangGraph) but keeps it.
    "ignore::langchain_core._api.deprecation.LangChainDeprecationWarning"
)

FACTS = 'Known facts about the user:\n- likes: ["basketball"]\n- name: Wang Jianguo'


def chain(replies: list[str], seen: list[list[BaseMessage]]) -> Runnable[Any, Any]:
    """A chat chain over the memory: history, then the input, to a fake model that answers
    ``replies`` in turn; ``seen`` gets the messages each call gave the model."""
    prompt = ChatPromptTemplate.from_messages(
        [MessagesPlaceholder("history"), ("human", "{input}")]
    )

    def record(value: Any) -> Any:
        seen.append(value.to_messages())
        return value

    model = FakeMessagesListChatModel(responses=[AIMessage(content=reply) for reply in replies])
    return RunnableWithMessageHistory(
        prompt | RunnableLambda(record) | model,
        lambda user_id, session_id: MemoryChatMessageHistory(
            owner_id=user_id, session_id=session_id
        ),
        input_messages_key="input",
        history_messages_key="history",
        history_factory_config=[
            ConfigurableFieldSpec(id="user_id", annotation=str, is_shared=True),
            ConfigurableFieldSpec(id="session_id", annotation=str, is_shared=True),
        ],
    )


def _typed(messages: list[BaseMessage]) -> list[list[str]]:
    return [[message.type, str(message.content)] for message in messages]


def chain_turn(*, owner_id: str, session_id: str, text: str, reply: str) -> list[list[str]]:
    """One turn of the chain (``invoke``); what the model was given, as [[type, content]...]."""
    seen: list[list[BaseMessage]] = []
    config = {"configurable": {"user_id": owner_id, "session_id": session_id}}
    answer = chain([reply], seen).invoke({"input": text}, config=config)
    assert answer.content == reply
    return _typed(seen[0])


async def achain_turn(*, owner_id: str, session_id: str, text: str, reply: str) -> list[list[str]]:
    """``chain_turn`` with ``ainvoke``: the history's async methods."""
    seen: list[list[BaseMessage]] = []
    config = {"configurable": {"user_id": owner_id, "session_id": session_id}}
    answer = await chain([reply], seen).ainvoke({"input": text}, config=config)
    assert answer.content == reply
    return _typed(seen[0])


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_second_session_in_another_process_after_a_flushall_gets_the_first_ones_turns(
    own_redis,
):
    first = run(
        lambda: achain_turn(
            owner_id="wang",
            session_id="laptop",
            text="My name is Wang Jianguo, I like basketball",
            reply="Nice to meet you, Jianguo!",
        )
    )
    assert first == [["human", "My name is Wang Jianguo, I like basketball"]]
    cache = redis.Redis.from_url(own_redis.url)
    assert cache.dbsize() > 0
    cache.flushall()
    assert cache.dbsize() == 0

    second = instance.run(
        "langchain",
        "wang",
        "phone",
        "What's my name?",
        "You are Wang Jianguo.",
        env={"REDIS_URL": own_redis.url},
    )

    assert second == [
        ["system", FACTS],
        ["human", "My name is Wang Jianguo, I like basketball"],
        ["ai", "Nice to meet you, Jianguo!"],
        ["human", "What's my name?"],
    ]
    context = selectors.context_get(owner_id="wang")
    # NOTE: the other process rehydrated the flushed copy; this one reads it.
    assert context["source"] == "cache"
    assert [(t["session_id"], t["role"], t["content"]) for t in context["turns"]] == [
        ("laptop", "user", "My name is Wang Jianguo, I like basketball"),
        ("laptop", "assistant", "Nice to meet you, Jianguo!"),
        ("phone", "user", "What's my name?"),
        ("phone", "assistant", "You are Wang Jianguo."),
    ]


@pytest.mark.django_db(transaction=True)
def test_the_sync_chain_sees_every_session_and_the_facts():
    chain_turn(owner_id="wang", session_id="a", text="I live in Shanghai", reply="上海很好！")
    seen = chain_turn(owner_id="wang", session_id="b", text="我喜欢打篮球", reply="好的")
    assert seen == [
        ["system", "Known facts about the user:\n- location: Shanghai"],
        ["human", "I live in Shanghai"],
        ["ai", "上海很好！"],
        ["human", "我喜欢打篮球"],
    ]
    assert selectors.fact_list(owner_id="wang")[0]["value"] == ["打篮球"]


@pytest.mark.django_db
def test_a_new_history_is_empty():
    assert MemoryChatMessageHistory(owner_id="nobody", session_id="s").messages == []


@pytest.mark.django_db
def test_messages_map_to_roles_and_back(write):
    history = MemoryChatMessageHistory(owner_id="wang", session_id="tab")
    with write():
        history.add_messages(
            [
                SystemMessage(content="Be brief."),
                HumanMessage(content="我叫王建国"),
                AIMessage(content="你好！"),
                ToolMessage(content='{"temp": 21}', tool_call_id="call-1"),
                ChatMessage(role="assistant", content="It is 21 degrees."),
                ChatMessage(role="human", content="Thanks"),
            ]
        )
    turns = selectors.context_get(owner_id="wang")["turns"]
    assert [(t["role"], t["session_id"]) for t in turns] == [
        ("system", "tab"),
        ("user", "tab"),
        ("assistant", "tab"),
        ("tool", "tab"),
        ("assistant", "tab"),
        ("user", "tab"),
    ]
    messages = history.messages
    assert [type(m) for m in messages] == [
        SystemMessage,
        SystemMessage,
        HumanMessage,
        AIMessage,
        ToolMessage,
        AIMessage,
        HumanMessage,
    ]
    assert messages[0].content == "Known facts about the user:\n- name: 王建国"
    assert [m.content for m in messages[1:]] == [
        "Be brief.",
        "我叫王建国",
        "你好！",
        '{"temp": 21}',
        "It is 21 degrees.",
        "Thanks",
    ]


@pytest.mark.django_db
def test_turns_and_max_tokens_bound_the_history(write):
    history = MemoryChatMessageHistory(owner_id="wang", session_id="s", turns=2)
    with write():
        for i in range(5):
            history.add_user_message(f"message {i}")
    assert [m.content for m in history.messages] == ["message 3", "message 4"]
    budget = MemoryChatMessageHistory(owner_id="wang", session_id="s", max_tokens=15)
    # NOTE: the facts' message (none yet: 8 tokens) is left out of the history, not the budget.
    assert [m.content for m in budget.messages] == ["message 4"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "message",
    [
        FunctionMessage(name="f", content="x"),
        ChatMessage(role="critic", content="x"),
        HumanMessage(content=[{"type": "image_url", "image_url": {"url": "data:,"}}]),
    ],
)
def test_a_message_that_is_not_a_text_turn_is_refused_and_nothing_stored(message):
    history = MemoryChatMessageHistory(owner_id="wang", session_id="s")
    with pytest.raises(ValueError):
        history.add_messages([HumanMessage(content="first"), message])
    assert selectors.context_get(owner_id="wang")["turns"] == []


@pytest.mark.django_db
def test_bad_ids_are_validation_errors():
    with pytest.raises(ValidationError):
        MemoryChatMessageHistory(owner_id="bad id", session_id="s").add_user_message("hi")
    with pytest.raises(ValidationError):
        _ = MemoryChatMessageHistory(owner_id="bad id", session_id="s").messages


@pytest.mark.django_db
def test_clear_forgets_the_owner_of_every_session(write):
    with write():
        MemoryChatMessageHistory(owner_id="wang", session_id="a").add_user_message("我叫王建国")
        MemoryChatMessageHistory(owner_id="wang", session_id="b").add_ai_message("hi")
        MemoryChatMessageHistory(owner_id="li", session_id="a").add_user_message("hello")
        MemoryChatMessageHistory(owner_id="wang", session_id="b").clear()
    assert MemoryChatMessageHistory(owner_id="wang", session_id="a").messages == []
    assert selectors.fact_list(owner_id="wang") == []
    assert [
        m.content for m in MemoryChatMessageHistory(owner_id="li", session_id="a").messages
    ] == ["hello"]


@pytest.mark.django_db(transaction=True)
def test_async_methods_are_the_sync_ones():
    async def main() -> tuple[list[BaseMessage], list[BaseMessage]]:
        history = MemoryChatMessageHistory(owner_id="wang", session_id="ws")
        await history.aadd_messages(
            [HumanMessage(content="My name is Wang Jianguo"), AIMessage(content="Hi!")]
        )
        added = await history.aget_messages()
        await history.aclear()
        return added, await history.aget_messages()

    added, cleared = run(main)
    assert _typed(added) == [
        ["system", "Known facts about the user:\n- name: Wang Jianguo"],
        ["human", "My name is Wang Jianguo"],
        ["ai", "Hi!"],
    ]
    assert cleared == []
    assert selectors.context_get(owner_id="wang")["turns"] == []


def test_without_langchain_core_the_import_error_names_the_extra():
    out = instance.import_error_without("langchain_core", "memory.integrations.langchain")
    assert out.startswith("memory.integrations.langchain needs langchain-core")
    # NOTE: no release on an index yet: the wheel make dist builds, as the README installs it.
    assert 'pip install "$(echo dist/django_memory-*.whl)[langchain]" after make dist' in out


@pytest.mark.django_db(transaction=True)
def test_a_connection_opened_in_a_worker_thread_is_closed_after_use():
    # NOTE: LangChain's executor threads are such threads: no request ever closes theirs.
    seen: dict[str, Any] = {}

    def work() -> None:
        history = MemoryChatMessageHistory(owner_id="wang", session_id="s")
        history.add_user_message("hi")
        seen["after_add"] = connection.connection is not None
        seen["messages"] = [m.content for m in history.messages]
        seen["after_read"] = connection.connection is not None

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    assert seen == {"after_add": False, "messages": ["hi"], "after_read": False}
