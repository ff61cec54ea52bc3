"""URLs of the demo project: the admin, the memory API under ``/api/memory/``, its
OpenAPI 3 schema (``/api/schema/``) with a Swagger UI (``/api/docs/``), and the demo chat page
(``/chat/``, where ``/`` leads)."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from memoryproj import chat

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/memory/", include("memory.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path("chat/", chat.chat, name="chat"),
    path("", RedirectView.as_view(pattern_name="chat"), name="home"),
]
