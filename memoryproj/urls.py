"""URLs of the demo project: the admin, the memory API under ``/api/memory/``, its
OpenAPI 3 schema (``/api/schema/``) with Swagger UI (``/api/docs/``) and Redoc (``/api/redoc/``),
the app's Prometheus metrics (``/metrics``), the demo chat page (``/chat/``, where ``/`` leads;
``/chat/stream/`` streams a reply) and its login and logout pages (``/accounts/``)."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from memory.metrics import metrics_view
from memoryproj import chat

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/memory/", include("memory.urls")),
    # Prometheus scrapes /metrics by default; service callers or MEMORY["METRICS_TOKEN"].
    path("metrics", metrics_view, name="metrics"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema"), name="redoc"),
    path("chat/", chat.chat, name="chat"),
    path("chat/stream/", chat.chat_stream, name="chat-stream"),
    path("accounts/login/", chat.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", RedirectView.as_view(pattern_name="chat"), name="home"),
]

# NOTE: a lost database met outside any view (the session saved after it) is a 503 too.
handler500 = "memoryproj.middleware.server_error"
