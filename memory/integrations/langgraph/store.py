"""LangGraph's long-term store over the memory's facts: ``MemoryStore()``, a ``BaseStore`` (sync
``batch``, async ``abatch``) whose namespace's first element is the owner id."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    validate_op_namespace,
)

from memory import search, selectors, services
from memory.conf import conf
from memory.exceptions import FactNotFound, database_guard
from memory.integrations.langgraph.indexing import (
    StoreIndex,
    Sweeper,
    TTLMethods,
    in_event_loop,
    langgraph_errors,
    off_event_loop,
    refreshes_due,
    ttl_config_check,
    ttl_expiry,
)
from memory.integrations.langgraph.matching import (
    condition_matches,
    filter_check,
    filter_matches,
    query_units,
    words_score,
)
from memory.integrations.threads import thread_connection
from memory.payloads import FactPayload
from memory.selectors.facts import astore_vectors_get, store_vectors_get
from memory.selectors.search import afacts_similar, facts_similar
from memory.services.store_vectors import store_vectors_put
from memory.validators import validate_fact_key, validate_owner_id

# A namespace label after the owner, and a key: what folds into a fact key and back.
LABEL_RE = re.compile(r"^[a-z0-9_\-]+$")
LABEL_RULE = "1 or more of a-z, 0-9, _ and -"
# Joins the labels and the key into the fact key; neither may hold it, so it splits back.
SEPARATOR = "."
MAX_FACT_KEY_CHARS = 64


def fact_key(namespace: tuple[str, ...], key: str) -> tuple[str, str]:
    """The owner id and the fact key of the item at ``namespace`` and ``key``: ``("wang", "prefs",
    "food")`` and ``"likes"`` are the fact ``prefs.food.likes`` of the owner ``wang``.

    The first element is an owner id; the other labels and the key are each ``[a-z0-9_-]+``,
    together at most 64 characters with the dots. Raises ``InvalidNamespaceError`` (a
    ``ValueError``) for a namespace and ``ValueError`` for a key that do not fold so.
    """
    if isinstance(namespace, list):
        namespace = tuple(namespace)
    if not isinstance(namespace, tuple) or not namespace:
        raise InvalidNamespaceError(
            f"A MemoryStore namespace starts with the owner id, as in ('wang', 'prefs'); got "
            f"{namespace!r}."
        )
    owner_id, *labels = namespace
    try:
        validate_owner_id(owner_id)
    except ValidationError as e:
        raise InvalidNamespaceError(
            f"The first label of a MemoryStore namespace is an owner id: {owner_id!r} is not "
            f"one ({' '.join(e.messages)})."
        ) from e
    for label in labels:
        if not isinstance(label, str) or not LABEL_RE.fullmatch(label):
            raise InvalidNamespaceError(
                f"A MemoryStore namespace label after the owner is {LABEL_RULE}: {label!r} in "
                f"{namespace!r} is not (it becomes part of a fact key)."
            )
    if not isinstance(key, str) or not LABEL_RE.fullmatch(key):
        raise ValueError(f"A MemoryStore key is {LABEL_RULE}: {key!r} is not (a fact key).")
    folded = SEPARATOR.join((*labels, key))
    if len(folded) > MAX_FACT_KEY_CHARS:
        raise ValueError(
            f"The namespace {namespace!r} and key {key!r} fold into the fact key {folded!r} of "
            f"{len(folded)} characters: a fact key has at most {MAX_FACT_KEY_CHARS}."
        )
    validate_fact_key(folded)
    return owner_id, folded


def item_address(owner_id: str, key: str) -> tuple[tuple[str, ...], str] | None:
    """The namespace and key of the owner's fact ``key`` (``fact_key`` backwards); ``None`` for a
    key no item folds into (an empty part, as in ``a..b``), which the store does not show."""
    parts = key.split(SEPARATOR)
    if not all(LABEL_RE.fullmatch(part) for part in parts):
        return None
    return (owner_id, *parts[:-1]), parts[-1]


def _item(owner_id: str, fact: FactPayload, score: float | None = None) -> SearchItem | None:
    address = item_address(owner_id, fact["key"])
    if address is None:
        return None
    value = fact["value"]
    # NOTE: an item's value is an object; another door's fact may hold any JSON: {"value": ...}.
    at = dt.datetime.fromisoformat(fact["updated_at"])
    return SearchItem(
        namespace=address[0],
        key=address[1],
        value=value if isinstance(value, dict) else {"value": value},
        created_at=at,
        updated_at=at,
        score=score,
    )


def _plain(item: SearchItem) -> Item:
    return Item(
        value=item.value,
        key=item.key,
        namespace=item.namespace,
        created_at=item.created_at,
        updated_at=item.updated_at,
    )


def _owner_of(prefix: tuple[str, ...], what: str) -> str:
    """The owner a search's or listing's prefix (a tuple or a list) names; labels checked as
    ``fact_key``'s."""
    if isinstance(prefix, list):
        prefix = tuple(prefix)
    if not isinstance(prefix, tuple) or not prefix or prefix[0] == "*":
        raise ValueError(
            f"A MemoryStore {what} reads one owner's memory: its prefix starts with the owner "
            f"id, as in ('wang',) or ('wang', 'prefs'); got {prefix!r}."
        )
    labels = [label for label in prefix[1:] if label != "*"] if what == "listing" else prefix[1:]
    fact_key((prefix[0], *labels), "x")
    return prefix[0]


def _count(value: Any, name: str, *, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"A MemoryStore {name} is an integer of at least {least}; got {value!r}.")


class _Write(NamedTuple):
    """A put of a batch: its value (``None`` for a delete), TTL in minutes, and ``index``."""

    value: dict[str, Any] | None
    ttl: float | None
    index: Any


@dataclass
class _Plan:
    """A batch checked: its reads (index, op, owner), the owners they read, and its writes (owner ->
    fact key -> write; the last op on a key wins)."""

    size: int
    reads: list[tuple[int, Op, str]] = field(default_factory=list)
    writes: dict[str, dict[str, _Write]] = field(default_factory=dict)

    @property
    def owners(self) -> list[str]:
        return sorted({owner_id for _, _, owner_id in self.reads})


def _plan(ops: Iterable[Op], *, embedded: bool = False) -> _Plan:
    """Check every op of a batch before any runs: a bad one raises, and nothing is read or
    stored."""
    ops = list(ops)
    plan = _Plan(size=len(ops))
    for index, op in enumerate(ops):
        if not isinstance(op, (GetOp, PutOp, SearchOp, ListNamespacesOp)):
            raise ValueError(f"Unknown operation type: {type(op).__name__}.")
        validate_op_namespace(op)
        if isinstance(op, GetOp):
            plan.reads.append((index, op, fact_key(op.namespace, op.key)[0]))
        elif isinstance(op, SearchOp):
            owner_id = _owner_of(op.namespace_prefix, "search")
            if op.filter is not None and not isinstance(op.filter, dict):
                raise ValueError(f"A filter is a dict; got {op.filter!r}.")
            filter_check(op.filter)
            if op.query and not embedded:
                search.clean_query(op.query)
            elif op.query and len(op.query) > conf.MAX_TURN_CHARS:
                # NOTE: a store's own embedder takes longer text than the app's search.
                raise ValueError(f"A query is at most {conf.MAX_TURN_CHARS} characters.")
            _count(op.limit, "search limit", least=1)
            _count(op.offset, "search offset", least=0)
            plan.reads.append((index, op, owner_id))
        elif isinstance(op, ListNamespacesOp):
            prefixes = [c.path for c in op.match_conditions or () if c.match_type == "prefix"]
            if len(prefixes) != 1:
                raise ValueError(
                    "A MemoryStore listing reads one owner's namespaces: give one prefix that "
                    "starts with the owner id, as in list_namespaces(prefix=('wang',))."
                )
            owner_id = _owner_of(tuple(prefixes[0]), "listing")
            if op.max_depth is not None:
                _count(op.max_depth, "max_depth", least=1)
            _count(op.limit, "listing limit", least=1)
            _count(op.offset, "listing offset", least=0)
            plan.reads.append((index, op, owner_id))
        else:
            owner_id, key = fact_key(op.namespace, op.key)
            if op.value is not None and not isinstance(op.value, Mapping):
                raise ValueError(f"A MemoryStore value is a dict; got {type(op.value).__name__}.")
            if op.index is not None and op.index is not False and not isinstance(op.index, list):
                raise ValueError(f"A put's index is False or a list of paths; got {op.index!r}.")
            ttl_expiry(op.ttl, timezone.now())
            value = None if op.value is None else dict(op.value)
            plan.writes.setdefault(owner_id, {})[key] = _Write(value, op.ttl, op.index)
    return plan


def _search(
    op: SearchOp,
    owner_id: str,
    facts: list[FactPayload],
    similar: dict[str, float],
    scored: dict[str, float] | None,
) -> list[SearchItem]:
    """The items of a search: with ``scored`` (the store's own index), by its score, best first,
    items without a vector last; else as ``MemoryStore.search`` says."""
    prefix = tuple(op.namespace_prefix)
    units = query_units(op.query) if op.query and scored is None else []
    found = []
    for fact in facts:
        item = _item(owner_id, fact)
        if item is None or item.namespace[: len(prefix)] != prefix:
            continue
        if op.filter and not filter_matches(item.value, op.filter):
            continue
        if scored is not None:
            item.score = scored.get(fact["key"])
        elif op.query:
            words = words_score(item, fact["key"], units) if units else 0.0
            item.score = round(similar.get(fact["key"], 0.0) + words, 6)
            if not item.score:
                continue
        found.append(item)
    # Best first, then the newest (as LangGraph's Postgres store), then by key.
    found.sort(key=lambda i: (i.namespace, i.key))
    if scored is not None:
        found.sort(key=lambda i: -i.updated_at.timestamp())
        found.sort(key=lambda i: (i.score is None, -(i.score or 0.0)))
    else:
        found.sort(key=lambda i: (-(i.score or 0), -i.updated_at.timestamp()))
    return found[op.offset : op.offset + op.limit]


def _namespaces(op: ListNamespacesOp, owner_id: str, facts: list[FactPayload]) -> list[Any]:
    held = {
        address[0] for fact in facts if (address := item_address(owner_id, fact["key"])) is not None
    }
    conditions = op.match_conditions or ()
    found = {
        namespace[: op.max_depth] if op.max_depth is not None else namespace
        for namespace in held
        if all(condition_matches(condition, namespace) for condition in conditions)
    }
    return sorted(found)[op.offset : op.offset + op.limit]


def _similar_asked(plan: _Plan) -> list[tuple[int, str, str]]:
    """The searches of a batch that rank by meaning: ``(op index, owner id, query)``."""
    return [
        (index, owner_id, op.query)
        for index, op, owner_id in plan.reads
        if isinstance(op, SearchOp) and op.query
    ]


def _results(
    plan: _Plan,
    facts: dict[str, list[FactPayload]],
    similar: dict[int, dict[str, float]],
    scored: dict[int, dict[str, float]] | None = None,
) -> list[Result]:
    results: list[Result] = [None] * plan.size
    for index, op, owner_id in plan.reads:
        if isinstance(op, GetOp):
            key = fact_key(op.namespace, op.key)[1]
            fact = next((f for f in facts[owner_id] if f["key"] == key), None)
            item = _item(owner_id, fact) if fact is not None else None
            results[index] = _plain(item) if item is not None else None
        elif isinstance(op, SearchOp):
            asked = scored.get(index) if scored is not None else None
            results[index] = _search(op, owner_id, facts[owner_id], similar.get(index, {}), asked)
        elif isinstance(op, ListNamespacesOp):
            results[index] = _namespaces(op, owner_id, facts[owner_id])
    return results


def _writes_apply(
    writes: dict[str, dict[str, _Write]],
    refreshes: dict[str, dict[str, tuple[Any, dt.datetime]]],
    vectors: dict[str, dict[str, list[tuple[str, list[float]]]]],
    model: str | None,
) -> None:
    # NOTE: owners locked in id order, so two batches never wait for each other in a circle.
    now = timezone.now()
    with database_guard(), transaction.atomic():
        for owner_id in sorted(set(writes) | set(refreshes)):
            changes = writes.get(owner_id, {})
            for key in [key for key, write in changes.items() if write.value is None]:
                # A delete of nothing is nothing, as in LangGraph's stores.
                with contextlib.suppress(FactNotFound):
                    services.fact_delete(owner_id=owner_id, key=key)
            plain = {
                k: w.value for k, w in changes.items() if w.value is not None and w.ttl is None
            }
            if plain:
                services.facts_merge(owner_id=owner_id, facts=plain)
            timed = {k: w for k, w in changes.items() if w.value is not None and w.ttl is not None}
            for key, write in timed.items():
                services.fact_put(
                    owner_id=owner_id,
                    key=key,
                    value=write.value,
                    expires_at=ttl_expiry(write.ttl, now),
                )
            for key, (value, expiry) in refreshes.get(owner_id, {}).items():
                services.fact_put(owner_id=owner_id, key=key, value=value, expires_at=expiry)
            if model is not None and vectors.get(owner_id):
                store_vectors_put(owner_id=owner_id, model=model, vectors=vectors[owner_id])


_awrites_apply = sync_to_async(_writes_apply, thread_sensitive=True)


class MemoryStore(TTLMethods, BaseStore):
    """A LangGraph ``BaseStore`` over the owners' facts (``graph.compile(store=MemoryStore())``;
    a node reads and writes it as ``runtime.store``). Take the owner from the run's config (the
    authenticated user), never from what a model wrote.

    An item is a fact: the namespace's first element names the owner, and the other labels and
    the key fold into the fact key (``fact_key``); its value is the fact's value. ``get``,
    ``put``, ``delete``, ``search`` (``filter``, ``query``; with ``index=``, by the store's own
    embeddings) and ``list_namespaces`` as LangGraph defines them, with ``ttl`` and its sweeper
    (docs/agents.md). ``batch``/``abatch`` check every op first, read the memory as before the
    batch's writes, then write in one transaction: all or none.

    Raises ``InvalidNamespaceError`` for a namespace that does not fold into a fact key,
    ``ValueError`` for a bad key, value or query, or writes past ``MEMORY["MAX_FACTS"]``, and
    ``MemoryUnavailable`` when the database cannot be reached; then nothing was stored.
    """

    supports_ttl = True

    def __init__(self, *, index: IndexConfig | None = None, ttl: TTLConfig | None = None) -> None:
        self.index_config = index
        self.index = StoreIndex(index) if index is not None else None
        self.embeddings = self.index.embeddings if self.index is not None else None
        self.ttl_config = ttl_config_check(ttl)
        self._sweeper: Sweeper | None = None

    def _texts(self, plan: _Plan) -> list[tuple[str, str, str, str]]:
        """``(owner, key, path, text)`` of every text the batch's puts embed."""
        if self.index is None:
            return []
        return [
            (owner_id, key, path, text)
            for owner_id, changes in plan.writes.items()
            for key, write in changes.items()
            if write.value is not None and write.index is not False
            for path, text in self.index.texts(write.value, write.index)
        ]

    def _vectors(
        self, plan: _Plan, texts: list[tuple[str, str, str, str]], vectors: list[list[float]]
    ) -> dict[str, dict[str, list[tuple[str, list[float]]]]]:
        """The vectors each put fact gets (none for a put with ``index=False``)."""
        found: dict[str, dict[str, list[tuple[str, list[float]]]]] = {}
        for owner_id, changes in plan.writes.items():
            for key, write in changes.items():
                if write.value is not None:
                    found.setdefault(owner_id, {})[key] = []
        for (owner_id, key, path, _), vector in zip(texts, vectors, strict=True):
            found[owner_id][key].append((path, [float(x) for x in vector]))
        return found

    def _queries(self, plan: _Plan) -> list[tuple[int, str, str]]:
        """The searches a store's own index ranks: ``(op index, owner id, query)``."""
        return _similar_asked(plan) if self.index is not None else []

    def _scored(
        self,
        asked: list[tuple[int, str, str]],
        queries: list[list[float]],
        held: dict[str, dict[str, list[list[float]]]],
    ) -> dict[int, dict[str, float]] | None:
        if self.index is None:
            return None
        index = self.index
        return {
            op_index: {key: index.score(query, vectors) for key, vectors in held[owner].items()}
            for (op_index, owner, _), query in zip(asked, queries, strict=True)
        }

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        return off_event_loop(lambda: self._batch(ops))

    def _batch(self, ops: list[Op]) -> list[Result]:
        with langgraph_errors():
            plan = _plan(ops, embedded=self.index is not None)
            # NOTE: the site's embedder runs before any lock, as LangGraph's stores embed before
            # writing.
            texts = self._texts(plan)
            embedded = (
                self.index.embeddings.embed_documents([t[3] for t in texts])
                if texts and self.index is not None
                else []
            )
            asked = self._queries(plan)
            queries = (
                [self.index.embeddings.embed_query(q) for _, _, q in asked] if self.index else []
            )
            with thread_connection():
                facts = {o: selectors.fact_list(owner_id=o) for o in plan.owners}
                similar = {
                    index: facts_similar(owner_id=o, query=query, limit=conf.MAX_FACTS)
                    for index, o, query in _similar_asked(plan)
                    if self.index is None
                }
                held = {
                    o: store_vectors_get(owner_id=o, model=self.index.model)
                    for o in {owner for _, owner, _ in asked}
                    if self.index is not None
                }
                results = _results(plan, facts, similar, self._scored(asked, queries, held))
                refreshes = refreshes_due(plan.reads, plan.writes, facts, results, fact_key)
                if plan.writes or refreshes:
                    _writes_apply(
                        plan.writes,
                        refreshes,
                        self._vectors(plan, texts, embedded),
                        self.index.model if self.index is not None else None,
                    )
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        with langgraph_errors():
            plan = _plan(ops, embedded=self.index is not None)
            texts = self._texts(plan)
            index = self.index
            embedded = (
                await index.embeddings.aembed_documents([t[3] for t in texts])
                if texts and index is not None
                else []
            )
            asked = self._queries(plan)
            queries = (
                [await index.embeddings.aembed_query(q) for _, _, q in asked]
                if index is not None
                else []
            )
            facts = {o: await selectors.afact_list(owner_id=o) for o in plan.owners}
            similar = {
                i: await afacts_similar(owner_id=o, query=query, limit=conf.MAX_FACTS)
                for i, o, query in _similar_asked(plan)
                if index is None
            }
            held = {
                o: await astore_vectors_get(owner_id=o, model=index.model)
                for o in {owner for _, owner, _ in asked}
                if index is not None
            }
            results = _results(plan, facts, similar, self._scored(asked, queries, held))
            refreshes = refreshes_due(plan.reads, plan.writes, facts, results, fact_key)
            if plan.writes or refreshes:
                await _awrites_apply(
                    plan.writes,
                    refreshes,
                    self._vectors(plan, texts, embedded),
                    index.model if index is not None else None,
                )
        return results


class AsyncMemoryStore(MemoryStore):
    """A ``MemoryStore`` for async graphs, as LangGraph's ``AsyncPostgresStore``: a sync call
    (``batch``, ``get``, ``put``, ``delete``, ``search``, ``list_namespaces``) in a running event
    loop raises ``asyncio.InvalidStateError`` before touching anything; await ``aget``... there.
    Everything else, and a sync call from a thread without a loop, is ``MemoryStore``'s.
    """

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        if in_event_loop():
            raise asyncio.InvalidStateError(
                "A sync call to AsyncMemoryStore in a running event loop would block the loop: "
                "await its async methods there (aget, aput, asearch, alist_namespaces, abatch), "
                "or use MemoryStore, which answers sync calls anywhere."
            )
        return super().batch(ops)


__all__ = ["AsyncMemoryStore", "MemoryStore", "fact_key", "item_address"]
