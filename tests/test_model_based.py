"""A model-based test: hypothesis interleaves appends, fact changes, deletes, forgets, ORM writes
that bypass the services, cache flushes, key deletions, expiries, lost floors during a fill,
Redis outages (breaker states) and writers dying between commit and cache update; after every
step the context (sync and async), the facts and their history served (cache or database) must
equal a plain Python model of what they must be, within the protocol's bounds (memory.cache)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings as django_settings
from django.db import transaction
from django.test import TestCase, override_settings
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from memory import cache, selectors, services
from memory.exceptions import FactNotFound
from memory.models import Fact

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
        self.versions: dict[str, dict[str, int]] = {owner: {} for owner in OWNERS}
        # NOTE: a writer died between commit and cache update: until some process's repairer
        # runs its next round, another process may serve the older copy (the stated bound).
        self.unrepaired = False

    def owner_id(self, owner: str) -> str:
        return f"{owner}-{self.run}"

    @initialize()
    def quiet_process(self) -> None:
        cache.reset()

    @rule(missing=st.booleans())
    def reads_lately(self, missing: bool) -> None:
        """This process's recent reads mostly missed (a read and its claim are one script) or
        mostly hit (the claim goes after the read)."""
        cache.copy.miss_share.share = 1.0 if missing else 0.0

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
        cache.reset()
        self.unrepaired = True

    @rule(owner=st.sampled_from(OWNERS), text=st.just("said while Redis was down"))
    def append_while_redis_is_down(self, owner: str, text: str) -> None:
        """Redis unreachable for this write: the breaker opens, the update waits for repair."""
        down = override_settings(MEMORY={**django_settings.MEMORY, "CACHE_ALIAS": "dead"})
        with down, committed():
            services.turn_append(
                owner_id=self.owner_id(owner), session_id="phone", role="user", content=text
            )
        self.turns[owner].append(("phone", text))

    @rule()
    def breaker_window_ends(self) -> None:
        cache.client.breaker.expire()

    @rule()
    def repairer_round(self) -> None:
        cache.run_once()
        self.unrepaired = False

    @rule(owner=st.sampled_from(OWNERS), key=st.sampled_from(KEYS), value=VALUES)
    def orm_write(self, owner: str, key: str, value: Any) -> None:
        """A fact's value edited through the ORM in a shell, bypassing the services."""
        fact = Fact.objects.filter(owner__external_id=self.owner_id(owner), key=key).first()
        if fact is None:
            return
        with committed(), transaction.atomic():
            fact.value = value
            fact.save()
        self.facts[owner][key] = value

    @rule(owner=st.sampled_from(OWNERS), lose=st.sampled_from(["delete", "evict"]))
    def fill_races_a_write_and_loses_the_floor(self, owner: str, lose: str) -> None:
        """A cold reader reads the database; a write commits and lands (leaving a floor); the
        floor is deleted or evicted; only then does the reader store what it read."""
        owner_id = self.owner_id(owner)
        cache.copy.copy_evict(owner_id=owner_id)

        def load(n: int) -> Any:
            stale = selectors.context.database_read(owner_id, n)
            with committed():
                services.turn_append(
                    owner_id=owner_id, session_id="reconnect", role="user", content="racer"
                )
            cache.copy.copy_evict(owner_id=owner_id)
            return stale

        cache.read_through(owner_id=owner_id, turns=CONTEXT_TURNS, load=load)
        self.turns[owner].append(("reconnect", "racer"))

    @rule()
    def flush_cache(self) -> None:
        for owner in OWNERS:
            cache.copy.copy_evict(owner_id=self.owner_id(owner))

    @rule(owner=st.sampled_from(OWNERS))
    def expire_key(self, owner: str) -> None:
        from django.core.cache import caches

        client = caches["memory"].client.get_client(write=True)
        client.pexpire(cache.keys.owner_key(self.owner_id(owner)), 1)

    @invariant()
    def context_matches_model(self) -> None:
        if self.unrepaired:
            cache.run_once()
            self.unrepaired = False
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
                # The async front door reads the same copy on its own connections.
                twin = async_to_sync(selectors.acontext_get)(
                    owner_id=self.owner_id(owner), turns=CONTEXT_TURNS
                )
                assert (twin["turns"], twin["facts"]) == (context["turns"], context["facts"])
                facts = selectors.fact_list(owner_id=self.owner_id(owner))
                assert {fact["key"]: fact["value"] for fact in facts} == self.facts[owner]


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
