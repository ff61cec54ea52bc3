"""URLs of the demo project: the admin, the memory API under ``/api/memory/``, its
OpenAPI 3 schema (``/api/schema/``) with Swagger UI (``/api/docs/``) and Redoc (``/api/redoc/``),
the app's Prometheus metrics (``/metrics``), the demo chat page (``/chat/``, where ``/`` leads;
``/chat/stream/`` streams a reply), its login and logout pages (``/accounts/``) and the site's
icon (``/favicon.ico``, which browsers ask for on every page)."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from memory.metrics import metrics_view
from memoryproj import assets, chat

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/memory/", include("memory.urls")),
    # Prometheus scrapes /metrics by default; service callers or MEMORY["METRICS_TOKEN"].
    path("metrics", metrics_view, name="metrics"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema"), name="redoc"),
    path("api/redoc/redoc.standalone.js", assets.redoc_bundle, name="redoc-bundle"),
    path("chat/", chat.chat, name="chat"),
    path("chat/stream/", chat.chat_stream, name="chat-stream"),
    path("accounts/login/", chat.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("favicon.ico", assets.favicon, name="favicon"),
    path("", RedirectView.as_view(pattern_name="chat"), name="home"),
]

# NOTE: a lost database met outside any view (the session saved after it) is a 503 too.
handler500 = "memoryproj.middleware.server_error"
