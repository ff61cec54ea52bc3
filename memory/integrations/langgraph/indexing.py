"""What ``MemoryStore`` does with LangGraph's ``index`` and ``ttl`` configurations: the texts a
fact is embedded from, the similarity of vectors, a fact's TTL, and the sweeper thread."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import math
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from django.core.exceptions import ValidationError
from langgraph.store.base import GetOp, IndexConfig, Item, SearchOp, TTLConfig
from langgraph.store.base.embed import ensure_embeddings, get_text_at_path

from memory.integrations.threads import thread_connection
from memory.services.expiry import afacts_expire, facts_expire

# A read refreshes a fact's TTL once this share of it has passed since the last write: a
# refresh is a write (a new version of the fact), so a fact read in a loop is not rewritten
# on every read.
REFRESH_AFTER = 0.1
DISTANCES = ("cosine", "inner_product", "l2")
logger = logging.getLogger("memory.store")
T = TypeVar("T")


class StoreIndex:
    """A store's own ``index`` configuration: its embedder (``embed``), the ``fields`` embedded by
    default, and ``distance_type`` (``cosine``, ``inner_product``, ``l2``). ``model`` names its
    vectors: another configuration's are not compared."""

    def __init__(self, config: IndexConfig) -> None:
        if not isinstance(config, dict) or config.get("embed") is None:
            raise ValueError("A MemoryStore's index configuration names its embedder: 'embed'.")
        self.config = config
        self.embeddings = ensure_embeddings(config["embed"])
        # "text_fields" is SqliteStore's name for the same.
        options: dict[str, Any] = dict(config)
        given = options.get("fields") or options.get("text_fields")
        self.fields: list[str] = list(given or ["$"])
        self.distance: str = str(options.get("distance_type") or "cosine")
        if self.distance not in DISTANCES:
            raise ValueError(
                f"Unsupported distance_type {self.distance!r}: use {', '.join(DISTANCES)}."
            )
        embed = config["embed"]
        name = getattr(embed, "model", None) or getattr(embed, "model_name", None) or ""
        kind = f"{type(embed).__module__}.{getattr(type(embed), '__qualname__', type(embed))}"
        if callable(embed) and not hasattr(embed, "embed_documents"):
            kind = f"{getattr(embed, '__module__', '')}.{getattr(embed, '__qualname__', 'embed')}"
        self.model = f"store:{kind}:{name}:{config.get('dims', '')}"[:100]

    def texts(self, value: dict[str, Any], fields: Sequence[str] | None) -> list[tuple[str, str]]:
        """``(path, text)`` of each text of ``value`` at ``fields`` (else the default)."""
        found = []
        for path in fields if fields is not None else self.fields:
            for i, text in enumerate(get_text_at_path(value, path)):
                found.append((f"{path}#{i}", text))
        return found

    def score(self, query: list[float], vectors: list[list[float]]) -> float:
        """The best similarity of ``query`` to one of ``vectors``: cosine, the inner product,
        or the negative Euclidean distance."""
        return max(_similarity(self.distance, query, vector) for vector in vectors)


def _similarity(distance: str, a: list[float], b: list[float]) -> float:
    if len(a) != len(b):
        return -math.inf
    if distance == "inner_product":
        return sum(x * y for x, y in zip(a, b, strict=True))
    if distance == "l2":
        return -math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b, strict=True)))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return sum(x * y for x, y in zip(a, b, strict=True)) / norm if norm else 0.0


def ttl_expiry(minutes: float | None, at: dt.datetime) -> dt.datetime | None:
    """When a fact put at ``at`` with a TTL of ``minutes`` expires; ``None`` without one."""
    if minutes is None:
        return None
    if isinstance(minutes, bool) or not isinstance(minutes, (int, float)) or minutes <= 0:
        raise ValueError(f"A TTL is a positive number of minutes; got {minutes!r}.")
    return at + dt.timedelta(minutes=minutes)


def ttl_refreshed(updated_at: str, expires_at: str | None, now: dt.datetime) -> dt.datetime | None:
    """The new expiry of a fact read at ``now``: its TTL again from now; ``None`` without a TTL, or
    before ``REFRESH_AFTER`` of it has passed."""
    if expires_at is None:
        return None
    written = dt.datetime.fromisoformat(updated_at)
    ttl = dt.datetime.fromisoformat(expires_at) - written
    if ttl <= dt.timedelta(0) or now - written < ttl * REFRESH_AFTER:
        return None
    return now + ttl


def ttl_config_check(config: TTLConfig | None) -> TTLConfig | None:
    if config is None:
        return None
    if not isinstance(config, dict):
        raise ValueError(f"A MemoryStore's ttl configuration is a dict; got {config!r}.")
    if config.get("default_ttl") is not None:
        ttl_expiry(config["default_ttl"], dt.datetime.now(dt.UTC))
    return config


class Sweeper:
    """A thread that runs ``sweep`` every ``minutes`` until stopped; ``future`` is done when
    it has stopped."""

    def __init__(self, sweep: Callable[[], int], minutes: float) -> None:
        self.sweep = sweep
        self.seconds = max(float(minutes) * 60, 0.01)
        self.stopping = threading.Event()
        self.future: Future[None] = Future()
        self.thread = threading.Thread(target=self._run, name="memory-store-sweeper", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stopping.wait(self.seconds):
                try:
                    self.sweep()
                except Exception:
                    # A lost database is tried again at the next interval.
                    logger.exception("The LangGraph store's TTL sweep failed.")
        finally:
            self.future.set_result(None)

    def stop(self, timeout: float | None) -> bool:
        self.stopping.set()
        self.thread.join(timeout)
        return not self.thread.is_alive()


def refreshes_due(
    reads: Sequence[tuple[int, Any, str]],
    writes: Mapping[str, Mapping[str, Any]],
    facts: Mapping[str, Sequence[Mapping[str, Any]]],
    results: Sequence[Any],
    key_of: Callable[[tuple[str, ...], str], tuple[str, str]],
) -> dict[str, dict[str, tuple[Any, dt.datetime]]]:
    """The facts a batch's reads refresh the TTL of: owner -> key -> (value, new expiry); never a
    key the batch writes."""
    now = dt.datetime.now(dt.UTC)
    due: dict[str, dict[str, tuple[Any, dt.datetime]]] = {}
    for index, op, owner_id in reads:
        if not isinstance(op, (GetOp, SearchOp)) or not op.refresh_ttl:
            continue
        found = results[index]
        items = [found] if isinstance(found, Item) else found if isinstance(found, list) else []
        keys = {key_of(item.namespace, item.key)[1] for item in items}
        for fact in facts[owner_id]:
            if fact["key"] not in keys or fact["key"] in writes.get(owner_id, {}):
                continue
            expiry = ttl_refreshed(fact["updated_at"], fact.get("expires_at"), now)
            if expiry is not None:
                due.setdefault(owner_id, {})[fact["key"]] = (fact["value"], expiry)
    return due


def in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def _ready(value: T) -> T:
    return value


def _sweep() -> int:
    with thread_connection():
        return facts_expire()


class TTLMethods:
    """``MemoryStore``'s TTL sweep. In a running event loop, ``sweep_ttl``, ``start_ttl_sweeper``
    and ``stop_ttl_sweeper`` return awaitables, as LangGraph's async stores' do; elsewhere their
    result. A sweeper starts, or is told to stop, when the method is called, awaited or not."""

    ttl_config: TTLConfig | None
    _sweeper: Sweeper | None

    def sweep_ttl(self) -> Any:
        """Delete the expired facts now (``memory.ops.facts_expire``, the app's own sweep, of
        every owner); how many went."""
        return self.asweep_ttl() if in_event_loop() else _sweep()

    async def asweep_ttl(self) -> int:
        return await afacts_expire()

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> Any:
        """Sweep every ``sweep_interval_minutes`` (else the ``ttl`` configuration's
        ``sweep_interval_minutes``, else 5) in a thread of the store's, until
        ``stop_ttl_sweeper``; returns a future, done when it stopped. One sweeper a store."""
        if self._sweeper is None:
            minutes = sweep_interval_minutes
            if minutes is None:
                minutes = (self.ttl_config or {}).get("sweep_interval_minutes") or 5
            self._sweeper = Sweeper(_sweep, minutes)
        future = self._sweeper.future
        return _ready(future) if in_event_loop() else future

    def stop_ttl_sweeper(self, timeout: float | None = None) -> Any:
        """Stop the sweeper; whether it stopped within ``timeout`` seconds."""
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is None:
            return _ready(True) if in_event_loop() else True
        sweeper.stopping.set()
        if in_event_loop():
            return asyncio.to_thread(sweeper.stop, timeout)
        return sweeper.stop(timeout)


def off_event_loop(call: Callable[[], T]) -> T:
    """``call()``; in a running event loop, in a thread of its own, the loop waiting for it.

    Django refuses database calls in the loop's thread. It blocks the loop, as LangGraph's own
    stores' sync calls do; await the ``a...`` methods to keep the loop free.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return call()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="memory-store") as pool:
        return pool.submit(call).result()


@contextlib.contextmanager
def langgraph_errors() -> Iterator[None]:
    """Django's ``ValidationError`` of a service (a value too large, ``MAX_FACTS``, a query)
    as the ``ValueError`` LangGraph's stores raise."""
    try:
        yield
    except ValidationError as e:
        raise ValueError(" ".join(e.messages)) from e
