"""URLs of the memory API; the host mounts them (the demo at ``/api/memory/``)."""

from __future__ import annotations

app_name = "memory"
urlpatterns: list = []
