"""Settings of the app instances that fault and load tests run under gunicorn: the demo
project's, plus MEMORY keys from the ``MEMORY_OVERRIDES`` environment variable (JSON)."""

from __future__ import annotations

import json
import os

from memoryproj.settings import *  # noqa: F403
from memoryproj.settings import MEMORY

MEMORY = {**MEMORY, **json.loads(os.environ.get("MEMORY_OVERRIDES", "{}"))}
# NOTE: a host site's own URLs around the demo's (tests/host_site.py), where a test asks for it.
ROOT_URLCONF = os.environ.get("MEMORY_TEST_URLCONF") or ROOT_URLCONF  # noqa: F405
# NOTE: the chat's responder, where a test names one (tests/chat_sockets.py: a slow one).
MEMORYPROJ_RESPONDER = os.environ.get("MEMORY_TEST_RESPONDER") or MEMORYPROJ_RESPONDER  # noqa: F405
