"""Names of the Redis keys the app writes: one hash per owner, its fill lock, the counters."""

from __future__ import annotations

import hashlib

from memory.conf import conf

# NOTE: bumped whenever a cached payload's shape changes, so an old copy is never read as new (v4:
# turns and facts are JSON arrays in TURN_FIELDS / FACT_FIELDS order).
SCHEMA = "v4"


def prefix() -> str:
    return f"{conf.KEY_PREFIX}:{SCHEMA}"


def owner_key(owner_id: str) -> str:
    """The owner's memory hash; the ``{...}`` hash tag keeps its keys in one cluster slot.

    The tag is a digest, not the owner id, so that key names in monitoring and a forgotten owner's
    floor do not name the owner.
    """
    digest = hashlib.blake2b(owner_id.encode(), digest_size=12).hexdigest()
    return f"{prefix()}:{{{digest}}}"


def lock_key(owner_id: str) -> str:
    """The owner's fill lock: held by the one reader rehydrating the owner."""
    return f"{owner_key(owner_id)}:fill"


def key_pattern() -> str:
    """A SCAN pattern matching every key this app writes under the configured prefix."""
    return f"{prefix()}:*"
