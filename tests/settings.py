"""Settings of the test suite: the demo project's, on real Postgres and real Redis.

``tests/services.py`` (a pytest plugin) has set DATABASE_URL and REDIS_URL before this loads.
"""

from __future__ import annotations

import os

# NOTE: the demo refuses to start without a key when DEBUG is off, as the suite runs it; set
# here (not built into the project), and inherited by the instances the tests spawn.
os.environ.setdefault("DJANGO_SECRET_KEY", "tests-only-secret-key-" + "x" * 40)

from memoryproj.settings import *  # noqa: F403
from memoryproj.settings import CACHES, DATABASES, MEMORY

# NOTE: a prefix of this run's own, so that the suite can share a Redis with anything else
# and clean up after itself without FLUSHDB.
TEST_KEY_PREFIX = os.environ.get("MEMORY_TEST_KEY_PREFIX") or f"memtest{os.getpid()}"
# NOTE: no repairer thread in the test process: tests drive repair step by step
# (memory.cache.run_once), and a thread of its own would hold a connection to the test database.
# NOTE: no embedder by default either: an append would enqueue an embedding run, a task row
# that tests counting the task table do not expect; tests/test_recall.py turns it on.
# NOTE: and appends enqueue their embedding runs at commit, not by a handoff thread whose writes
# would land outside a test's transaction (tests/test_recall.py runs the thread on its own).
MEMORY = {
    **MEMORY,
    "KEY_PREFIX": TEST_KEY_PREFIX,
    "REPAIR_THREAD": False,
    "EMBEDDER": None,
    "ENQUEUE_THREAD": False,
    # NOTE: with no repairer thread to renew it, a history lease that ran out mid-test would be
    # confirmed by a query of the test's own, in the tests that count queries; the tests of the
    # lease (tests/test_cache_history.py) set theirs.
    "HISTORY_LEASE": 3600,
}
for _alias in CACHES.values():
    if "django_redis" in _alias["BACKEND"] and _alias.get("KEY_PREFIX") == "memoryproj":
        _alias["KEY_PREFIX"] = f"{TEST_KEY_PREFIX}-site"

# NOTE: the websocket chat's channel layer under this run's prefix too (memoryproj/settings.py).
if "CONFIG" in CHANNEL_LAYERS["default"]:  # noqa: F405
    CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = f"{TEST_KEY_PREFIX}-chat"  # noqa: F405

# NOTE: a test database of this run's own too, so that two suites (a developer's and CI's, or
# helpers working side by side) never drop each other's database.
DATABASES["default"]["TEST"] = {
    "NAME": os.environ.get("MEMORY_TEST_DB") or f"test_memory_{os.getpid()}",
}

# A cache alias on a port nothing listens on: Redis "down" by real means (django-redis's own
# tests do the same with "doesnotexist").
CACHES["dead"] = {
    "BACKEND": "django_redis.cache.RedisCache",
    "LOCATION": "redis://127.0.0.1:1/0",
    "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 0.2, "SOCKET_TIMEOUT": 0.2},
}

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# NOTE: the suite makes thousands of requests as a handful of users: no throttle limits it
# (the classes stay on; tests/test_permissions.py sets a rate to see a 429).
REST_FRAMEWORK = {
    **REST_FRAMEWORK,  # noqa: F405
    "DEFAULT_THROTTLE_RATES": {
        "user": None,
        "anon": None,
        "chat_session": None,
        "chat_address": None,
        "chat_new": None,
    },
}

# NOTE: the suite runs without collectstatic: WhiteNoise looks the files up per request instead
# of warning that STATIC_ROOT does not exist (tests/test_demo_settings.py serves a collected one).
WHITENOISE_AUTOREFRESH = True
