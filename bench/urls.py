"""URLs of the benchmark server: the demo project's, plus the baseline views."""

from __future__ import annotations

from django.urls import path

from bench.views import BareView, FloorView
from memoryproj.urls import urlpatterns as project_urlpatterns

urlpatterns = [
    *project_urlpatterns,
    path("bench/bare/", BareView.as_view(), name="bench-bare"),
    path("bench/floor/<str:owner_id>/", FloorView.as_view(), name="bench-floor"),
]
