"""URLs of the demo project: the admin and the memory API under ``/api/memory/``."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/memory/", include("memory.urls")),
]
