"""URLs of the demo project: the admin, the memory API under ``/api/memory/``, its
OpenAPI 3 schema (``/api/schema/``) with a Swagger UI (``/api/docs/``), the app's Prometheus
metrics (``/metrics``), and the demo chat page (``/chat/``, where ``/`` leads)."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from memory.metrics import metrics_view
from memoryproj import chat

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/memory/", include("memory.urls")),
    # Prometheus scrapes /metrics by default; service callers or MEMORY["METRICS_TOKEN"].
    path("metrics", metrics_view, name="metrics"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path("chat/", chat.chat, name="chat"),
    path("", RedirectView.as_view(pattern_name="chat"), name="home"),
]
