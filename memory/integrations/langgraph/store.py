"""LangGraph's long-term store over the memory's facts: ``MemoryStore()``, a ``BaseStore`` (sync
``batch``, async ``abatch``) whose namespace's first element is the owner id."""

from __future__ import annotations

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    validate_op_namespace,
)

import contextlib
import datetime as dt
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.db import transaction

from memory import codec, search, selectors, services
from memory.conf import conf
from memory.exceptions import FactNotFound, database_guard
from memory.integrations.threads import thread_connection
from memory.payloads import FactPayload
from memory.validators import validate_fact_key, validate_owner_id

# A namespace label after the owner, and a key: what folds into a fact key and back.
LABEL_RE = re.compile(r"^[a-z0-9_\-]+$")
LABEL_RULE = "1 or more of a-z, 0-9, _ and -"
# Joins the labels and the key into the fact key; neither may hold it, so it splits back.
SEPARATOR = "."
MAX_FACT_KEY_CHARS = 64
# The filter operators of LangGraph's stores.
NUMBER_OPERATORS = {
    "$gt": lambda a, b: a > b,
    "$gte": lambda a, b: a >= b,
    "$lt": lambda a, b: a < b,
    "$lte": lambda a, b: a <= b,
}
OPERATORS = {"$eq", "$ne", *NUMBER_OPERATORS}
WORD_RE = re.compile(r"\w+")


def fact_key(namespace: tuple[str, ...], key: str) -> tuple[str, str]:
    """The owner id and the fact key of the item at ``namespace`` and ``key``:
    ``("wang", "prefs", "food")`` and ``"likes"`` are the fact ``prefs.food.likes`` of the
    owner ``wang``; ``("wang",)`` and ``"name"`` the fact ``name``.

    The first element of the namespace is an owner id (1-128 of letters, digits and
    ``_ - @ :``; LangGraph refuses a ``.`` in any label). The other labels and the key are each
    1 or more of ``a-z 0-9 _ -`` (so the ``.`` between them splits back), together at most 64
    characters with the dots. Raises ``InvalidNamespaceError`` (a ``ValueError``) for a
    namespace and ``ValueError`` for a key that do not fold so.
    """
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
    """The namespace and key of the owner's fact ``key`` (``fact_key`` backwards); ``None``
    for a fact key that no item folds into (an empty part, as ``a..b`` or ``.a`` have, which
    the REST API may write), which the store does not show."""
    parts = key.split(SEPARATOR)
    if not all(LABEL_RE.fullmatch(part) for part in parts):
        return None
    return (owner_id, *parts[:-1]), parts[-1]


def _item(owner_id: str, fact: FactPayload, score: float | None = None) -> SearchItem | None:
    address = item_address(owner_id, fact["key"])
    if address is None:
        return None
    value = fact["value"]
    # NOTE: an item's value is an object; a fact of another door (the extractor's "name")
    # may hold any JSON value, shown as {"value": ...}.
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
    """The owner a search's or a listing's prefix names; its labels checked as ``fact_key``'s."""
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


def _filter_check(spec: Any) -> None:
    if isinstance(spec, dict):
        for name, expected in spec.items():
            if not isinstance(name, str):
                raise ValueError(f"A filter's keys are strings; got {name!r}.")
            if name.startswith("$") and name not in OPERATORS:
                raise ValueError(
                    f"Unsupported filter operator {name!r}: use {', '.join(sorted(OPERATORS))}."
                )
            _filter_check(expected)
    elif isinstance(spec, (list, tuple)):
        for expected in spec:
            _filter_check(expected)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _equal(value: Any, expected: Any) -> bool:
    # NOTE: as jsonb compares: 1 and 1.0 are equal, true and 1 are not.
    if _number(value) and _number(expected):
        return bool(value == expected)
    return codec.json_equal(value, expected)


def _matches(value: Any, expected: Any) -> bool:
    """Whether ``value`` matches ``expected`` as a LangGraph filter does: objects by their
    keys (recursively), arrays element by element, operators (``$eq``, ``$ne``, ``$gt``,
    ``$gte``, ``$lt``, ``$lte``; the last four match numbers only), else equal JSON."""
    if isinstance(expected, dict):
        if any(name.startswith("$") for name in expected):
            return all(_operator(value, name, operand) for name, operand in expected.items())
        return isinstance(value, dict) and all(
            _matches(value.get(name), operand) for name, operand in expected.items()
        )
    if isinstance(expected, (list, tuple)):
        return (
            isinstance(value, list)
            and len(value) == len(expected)
            and all(_matches(a, b) for a, b in zip(value, expected, strict=True))
        )
    return _equal(value, expected)


def _operator(value: Any, name: str, operand: Any) -> bool:
    if name == "$eq":
        return _equal(value, operand)
    if name == "$ne":
        return not _equal(value, operand)
    return _number(value) and _number(operand) and bool(NUMBER_OPERATORS[name](value, operand))


def _normal(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def _words(text: str) -> list[str]:
    """The words of normalised ``text`` outside its CJK runs."""
    return [w for word in WORD_RE.findall(text) for w in search.CJK_RUN_RE.split(word) if w]


def _units(text: str) -> list[str]:
    """What a query is matched by: its words, and the overlapping pairs of its CJK runs (one
    character alone), after NFKC and case folding."""
    text = _normal(text)
    units = _words(text)
    for run in search.CJK_RUN_RE.findall(text):
        units.extend([run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)])
    return units


def _score(item: SearchItem, key: str, units: list[str]) -> float:
    """The share of the query's ``units`` found in the fact's key or value (as JSON text): a
    word as a whole word, a CJK pair anywhere."""
    text = _normal(f"{key} {codec.dumps(item.value).decode()}")
    words = set(_words(text))
    found = sum(unit in text if search.CJK_RUN_RE.match(unit) else unit in words for unit in units)
    return found / len(units)


def _match_condition(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "suffix":
        namespace, path = namespace[::-1], path[::-1]
    return all(p in ("*", n) for n, p in zip(namespace, path, strict=False))


@dataclass
class _Plan:
    """A batch checked: its reads (index, op, owner), the owners they read, and its writes
    (owner -> fact key -> value, ``None`` for a delete; the last op on a key wins)."""

    size: int
    reads: list[tuple[int, Op, str]] = field(default_factory=list)
    writes: dict[str, dict[str, dict[str, Any] | None]] = field(default_factory=dict)

    @property
    def owners(self) -> list[str]:
        return sorted({owner_id for _, _, owner_id in self.reads})


def _plan(ops: Iterable[Op]) -> _Plan:
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
            _filter_check(op.filter)
            if op.query is not None:
                search.clean_query(op.query)
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
            if op.namespace[0] == "langgraph":
                raise InvalidNamespaceError(
                    f'Root label for namespace cannot be "langgraph". Got: {op.namespace}'
                )
            if op.ttl is not None:
                raise NotImplementedError(
                    "TTL is not supported by MemoryStore: a fact lives until it is deleted. "
                    "Put it with ttl=None."
                )
            if op.value is not None and not isinstance(op.value, Mapping):
                raise ValueError(f"A MemoryStore value is a dict; got {type(op.value).__name__}.")
            value = None if op.value is None else dict(op.value)
            plan.writes.setdefault(owner_id, {})[key] = value
    return plan


def _search(
    op: SearchOp, owner_id: str, facts: list[FactPayload], similar: dict[str, float]
) -> list[SearchItem]:
    prefix = tuple(op.namespace_prefix)
    units = _units(op.query) if op.query is not None else []
    found = []
    for fact in facts:
        item = _item(owner_id, fact)
        if item is None or item.namespace[: len(prefix)] != prefix:
            continue
        if op.filter and not _matches(item.value, op.filter):
            continue
        if op.query is not None:
            words = _score(item, fact["key"], units) if units else 0.0
            item.score = round(similar.get(fact["key"], 0.0) + words, 6)
            if not item.score:
                continue
        found.append(item)
    # NOTE: best first, then the newest (as LangGraph's Postgres store), then by key.
    found.sort(key=lambda i: (i.namespace, i.key))
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
        if all(_match_condition(condition, namespace) for condition in conditions)
    }
    return sorted(found)[op.offset : op.offset + op.limit]


def _similar_asked(plan: _Plan) -> list[tuple[int, str, str]]:
    """The searches of a batch that rank by meaning: ``(op index, owner id, query)``."""
    return [
        (index, owner_id, op.query)
        for index, op, owner_id in plan.reads
        if isinstance(op, SearchOp) and op.query is not None
    ]


def _results(
    plan: _Plan,
    facts: dict[str, list[FactPayload]],
    similar: dict[int, dict[str, float]],
) -> list[Result]:
    results: list[Result] = [None] * plan.size
    for index, op, owner_id in plan.reads:
        if isinstance(op, GetOp):
            key = fact_key(op.namespace, op.key)[1]
            fact = next((f for f in facts[owner_id] if f["key"] == key), None)
            item = _item(owner_id, fact) if fact is not None else None
            results[index] = _plain(item) if item is not None else None
        elif isinstance(op, SearchOp):
            results[index] = _search(op, owner_id, facts[owner_id], similar.get(index, {}))
        elif isinstance(op, ListNamespacesOp):
            results[index] = _namespaces(op, owner_id, facts[owner_id])
    return results


def _writes_apply(writes: dict[str, dict[str, dict[str, Any] | None]]) -> None:
    # NOTE: one transaction around the services' own (savepoints): a batch's writes are stored
    # all together or, when one is refused (MAX_FACTS, a value too large) or the database
    # fails, none of them. Owners are locked in the order of their ids, so two batches never
    # wait for each other in a circle.
    with database_guard(), transaction.atomic():
        for owner_id in sorted(writes):
            changes = writes[owner_id]
            for key in [key for key, value in changes.items() if value is None]:
                # NOTE: a delete of nothing is nothing, as in LangGraph's stores.
                with contextlib.suppress(FactNotFound):
                    services.fact_delete(owner_id=owner_id, key=key)
            puts = {key: value for key, value in changes.items() if value is not None}
            if puts:
                services.facts_merge(owner_id=owner_id, facts=puts)


_awrites_apply = sync_to_async(_writes_apply, thread_sensitive=True)


class MemoryStore(BaseStore):
    """A LangGraph ``BaseStore`` over the owners' facts (``graph.compile(store=MemoryStore())``;
    a node reads and writes it as ``runtime.store`` or its ``store`` argument).

    An item is a fact: the namespace's first element names the owner, and the other labels
    and the key fold into the fact key with dots (``fact_key``: ``("wang", "prefs")`` and
    ``"food"`` are wang's fact ``prefs.food``); its value, a dict, is the fact's value. Facts
    written by other doors show too, at the namespace their key unfolds to (wang's ``name`` at
    ``("wang",)``, a value that is not an object as ``{"value": ...}``). ``updated_at`` is the
    fact's, and so is ``created_at`` (a fact keeps no creation time; its history does:
    ``selectors.fact_history``). Take the owner from the run's config (the authenticated
    user), never from what a model wrote.

    - ``get`` and ``put``/``delete`` read and write one fact (``services.facts_merge``,
      ``services.fact_delete``; a delete of nothing is nothing).
    - ``search(("wang", ...), query=, filter=, limit=, offset=)`` reads that owner's facts
      under the prefix (at most ``MEMORY["MAX_FACTS"]``, through the cache) and returns at
      most ``limit``: those whose value matches ``filter`` (LangGraph's: equality, ``$eq``,
      ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``), and with ``query`` (1-200 characters)
      those whose key or value holds one of its words, case-insensitively, and, where search
      by meaning is on (``MEMORY["EMBEDDER"]`` and pgvector), every fact with a vector of its
      current version; ``score`` the share of the query's words found plus the fact's cosine
      similarity to the query (``selectors.facts_similar``), best first; without a query, the
      newest first. The facts' vectors are the owner's embedding run's (off the request path):
      a fact just written is found by its words until then. The store's ``index`` arguments
      are ignored: the embedder is the app's.
    - ``list_namespaces(prefix=("wang", ...), suffix=, max_depth=, limit=, offset=)``: the
      namespaces that hold that owner's facts; a prefix naming the owner is required (a store
      never lists its owners).
    - TTLs are not supported (``supports_ttl`` is false): a put with a ``ttl`` raises
      ``NotImplementedError``, ``refresh_ttl`` is ignored.

    ``batch`` and its async twin ``abatch`` check every op first (a bad one raises and nothing
    runs), then read the memory as it was before the batch's writes (as LangGraph's
    ``InMemoryStore``: the last put of a key wins), then write, in one transaction: all the
    writes or none. Errors: ``InvalidNamespaceError``/``ValueError`` for what does not fold
    into a fact key, ``ValidationError`` for a value that is not JSON or is over
    ``MEMORY["MAX_JSON_BYTES"]``, or ({"facts": ...}) for writes that would take an owner past
    ``MEMORY["MAX_FACTS"]`` facts, ``MemoryUnavailable`` when the database cannot be reached;
    then nothing was stored. Redis failures never reach the caller.
    """

    supports_ttl = False

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        plan = _plan(ops)
        with thread_connection():
            facts = {owner_id: selectors.fact_list(owner_id=owner_id) for owner_id in plan.owners}
            similar = {
                index: selectors.facts_similar(owner_id=owner_id, query=query, limit=conf.MAX_FACTS)
                for index, owner_id, query in _similar_asked(plan)
            }
            results = _results(plan, facts, similar)
            if plan.writes:
                _writes_apply(plan.writes)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        plan = _plan(ops)
        facts = {
            owner_id: await selectors.afact_list(owner_id=owner_id) for owner_id in plan.owners
        }
        similar = {
            index: await selectors.afacts_similar(
                owner_id=owner_id, query=query, limit=conf.MAX_FACTS
            )
            for index, owner_id, query in _similar_asked(plan)
        }
        results = _results(plan, facts, similar)
        if plan.writes:
            await _awrites_apply(plan.writes)
        return results


__all__ = ["MemoryStore", "fact_key", "item_address"]
