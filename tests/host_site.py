"""A host site's own async views over the app, mounted beside the demo's URLs: what a chat
backend's async code calls (``acontext_get``, ``aturn_append``), for the ASGI fault tests.
Test-only: the owner comes from the URL, as no shipped view would take it."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.urls import include, path
from django.views.decorators.csrf import csrf_exempt

from memory import selectors, services


async def context_view(request: HttpRequest, owner_id: str) -> JsonResponse:
    return JsonResponse(await selectors.acontext_get(owner_id=owner_id))


@csrf_exempt
async def turn_view(request: HttpRequest, owner_id: str) -> JsonResponse:
    turn = await services.aturn_append(
        owner_id=owner_id, session_id="host", role="user", content=request.body.decode()
    )
    return JsonResponse({"seq": turn.seq}, status=201)


urlpatterns = [
    path("host/<str:owner_id>/context/", context_view),
    path("host/<str:owner_id>/turns/", turn_view),
    path("", include("memoryproj.urls")),
]
