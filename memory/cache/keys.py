"""Names of the Redis keys the app writes: one hash per owner, its fill lock, the counters."""

from __future__ import annotations

import functools
import hashlib

from memory.cache.history import history_current
from memory.cache.runs import node_named
from memory.conf import conf

# NOTE: bumped whenever the shape of a cached payload changes, so that an old copy is never
# read as a new one.
# v2: the copy holds the owner's summary (``sum``), so a v1 copy, which lacks it, is not read.
# v3: each fact payload holds ``expires_at``, which every read filters by; a v2 copy lacks it.
# v4: turn and fact payloads are JSON arrays in a fixed order (copy.TURN_FIELDS, FACT_FIELDS),
#     not objects: a v3 copy's objects would be read as arrays.
# v5: the cached turns are one field (``turns``, with their end offsets in ``ends``), the facts
#     one (``facts``, ``fends``), not one field each: a v4 copy has neither.
# v6: the newest turns may be in ``tail``, ``turns`` may begin with turns no longer cached, and
#     ``ends`` begins with where the first cached one starts: a v5 reader would misread both.
SCHEMA = "v6"


def prefix() -> str:
    return f"{conf.KEY_PREFIX}:{SCHEMA}"


# NOTE: remembered, as a hit would otherwise hash its owner id on every read.
@functools.lru_cache(maxsize=4096)
def owner_tag(owner_id: str) -> str:
    """The cluster hash tag of every key of the owner, ``{<digest>}``, on any history: the
    owner's slot (and shard) is a function of the owner alone, known without the database.
    A digest, so that no key name shows the owner id.
    """
    digest = hashlib.blake2b(owner_id.encode(), digest_size=12).hexdigest()
    return f"{{{digest}}}"


def owner_key(owner_id: str, epoch: str | None = None) -> str:
    """The owner's memory hash on the database history ``epoch`` (with the server's run; on a
    cluster, its node's: rule 10); the hash tag (``owner_tag``) keeps all its keys in one
    cluster slot, whatever the history (rule 9).
    ``None`` (operators, tests) means ``history.history_current``.
    """
    tag = owner_tag(owner_id)
    return f"{prefix()}:h{epoch or history_current()}{node_named(tag)}:{tag}"


def lock_key(owner_id: str, epoch: str | None = None) -> str:
    """The owner's fill lock: held by the one reader rehydrating the owner."""
    return f"{owner_key(owner_id, epoch)}:fill"


def stats_key() -> str:
    """The counters every process adds to (``copy.stats``)."""
    return f"{prefix()}:stats"


def key_pattern() -> str:
    """A SCAN pattern matching every key this app writes under the configured prefix."""
    return f"{prefix()}:*"
