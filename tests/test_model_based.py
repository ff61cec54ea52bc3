"""A model-based test: hypothesis interleaves appends, fact changes, deletes, forgets, cache
flushes, key deletions, expiries and lost cache updates, and after every step the context
served (cache or database) must equal a plain Python model of what it must be."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.test import TestCase
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from memory import reconcile, selectors, services, store
from memory.exceptions import FactNotFound

OWNERS = ["wang", "li"]
SESSIONS = ["laptop", "phone", "reconnect"]
KEYS = ["name", "likes", "location"]
VALUES = st.one_of(
    st.text(alphabet="abc王建国篮球 ", min_size=1, max_size=8),
    st.lists(st.sampled_from(["basketball", "篮球", "golf"]), max_size=3),
    st.integers(-5, 5),
)
CONTEXT_TURNS = 5


def committed(*, lost: bool = False) -> Any:
    """Run writes to commit; with ``lost`` their cache updates never run (a crashed writer)."""
    return TestCase.captureOnCommitCallbacks(execute=not lost)


class MemoryMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # NOTE: fresh owner ids per example: the test database and Redis outlive examples.
        self.run = uuid.uuid4().hex[:8]
        self.turns: dict[str, list[tuple[str, str]]] = {owner: [] for owner in OWNERS}
        self.facts: dict[str, dict[str, Any]] = {owner: {} for owner in OWNERS}

    def owner_id(self, owner: str) -> str:
        return f"{owner}-{self.run}"

    @initialize()
    def quiet_process(self) -> None:
        store.health.reset()
        reconcile.reset()

    @rule(
        owner=st.sampled_from(OWNERS),
        session=st.sampled_from(SESSIONS),
        text=st.text(alphabet="我叫王建国 hello🏀", min_size=1, max_size=12),
    )
    def append(self, owner: str, session: str, text: str) -> None:
        with committed():
            services.turn_append(
                owner_id=self.owner_id(owner), session_id=session, role="user", content=text
            )
        self.turns[owner].append((session, text))

    @rule(owner=st.sampled_from(OWNERS), key=st.sampled_from(KEYS), value=VALUES)
    def put(self, owner: str, key: str, value: Any) -> None:
        with committed():
            services.fact_put(owner_id=self.owner_id(owner), key=key, value=value)
        self.facts[owner][key] = value

    @rule(owner=st.sampled_from(OWNERS), values=st.dictionaries(st.sampled_from(KEYS), VALUES))
    def merge(self, owner: str, values: dict[str, Any]) -> None:
        with committed():
            services.facts_merge(owner_id=self.owner_id(owner), facts=values)
        self.facts[owner].update(values)

    @rule(owner=st.sampled_from(OWNERS), key=st.sampled_from(KEYS))
    def delete(self, owner: str, key: str) -> None:
        try:
            with committed():
                services.fact_delete(owner_id=self.owner_id(owner), key=key)
        except FactNotFound:
            assert key not in self.facts[owner]
        else:
            del self.facts[owner][key]

    @rule(owner=st.sampled_from(OWNERS))
    def forget(self, owner: str) -> None:
        with committed():
            services.memory_forget(owner_id=self.owner_id(owner))
        self.turns[owner] = []
        self.facts[owner] = {}

    @rule(owner=st.sampled_from(OWNERS), text=st.just("lost update"))
    def append_with_lost_cache_update(self, owner: str, text: str) -> None:
        """The writer dies between COMMIT and its Redis call; another process reads next."""
        with committed(lost=True):
            services.turn_append(
                owner_id=self.owner_id(owner), session_id="laptop", role="user", content=text
            )
        self.turns[owner].append(("laptop", text))
        reconcile.reset()
        store.health.reset()

    @rule()
    def flush_cache(self) -> None:
        for owner in OWNERS:
            store.memory_evict(owner_id=self.owner_id(owner))

    @rule(owner=st.sampled_from(OWNERS))
    def expire_key(self, owner: str) -> None:
        from django.core.cache import caches

        client = caches["memory"].client.get_client(write=True)
        client.pexpire(store.owner_key(self.owner_id(owner)), 1)

    @invariant()
    def context_matches_model(self) -> None:
        for owner in OWNERS:
            for _ in range(2):  # the first read may rehydrate, the second is a hit
                context = selectors.context_get(owner_id=self.owner_id(owner), turns=CONTEXT_TURNS)
                expected = self.turns[owner][-CONTEXT_TURNS:]
                assert [(t["session_id"], t["content"]) for t in context["turns"]] == expected
                total = len(self.turns[owner])
                assert [t["seq"] for t in context["turns"]] == list(
                    range(total - len(expected) + 1, total + 1)
                )
                assert context["facts"] == self.facts[owner]


@pytest.mark.django_db
def test_context_always_matches_a_plain_model(memory_settings):
    # NOTE: extraction off: the model knows only the facts it was told to set.
    with memory_settings(RECONCILE_GRACE=0, CACHE_TURNS=8, FACT_EXTRACTOR=None):
        run = MemoryMachine.TestCase
        run.settings = settings(
            max_examples=25,
            stateful_step_count=20,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        )
        run().runTest()
