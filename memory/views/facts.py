"""``users/{user_id}/facts/``, one fact, and a fact's history."""

from __future__ import annotations

from django.urls import URLPattern, path, register_converter
from drf_spectacular.utils import OpenApiResponse
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from memory import selectors, services
from memory.exceptions import (
    FactNotFound,
)
from memory.payloads import fact_payload
from memory.serializers import (
    FactHistorySerializer,
    FactListSerializer,
    FactPutInputSerializer,
    FactSerializer,
    FactsMergeInputSerializer,
    PageQuerySerializer,
)
from memory.views.base import (
    MemoryView,
    _if_match,
    _next_url,
    _validated,
    request_actor,
)
from memory.views.schema import (
    EXPIRED_400,
    FACT_KEY,
    IF_MATCH,
    MAX_FACTS_400,
    READ_ERRORS,
    WRITE_ERRORS,
    owner_operation,
    owner_read,
)


class FactsView(MemoryView):
    """``users/{user_id}/facts/``: every fact; merge several at once."""

    @owner_read("fact_list", "List facts, by key", FactListSerializer)
    def get(self, request: Request, user_id: str) -> Response:
        return Response({"facts": selectors.fact_list(owner_id=user_id)})

    @owner_operation(
        "facts_merge",
        "Set several facts; answer with all facts",
        {200: FactListSerializer},
        WRITE_ERRORS,
        request=FactsMergeInputSerializer,
        bad_input=MAX_FACTS_400 + " Nothing is set.",
    )
    def patch(self, request: Request, user_id: str) -> Response:
        data = _validated(FactsMergeInputSerializer, request.data)
        facts = services.facts_merge(owner_id=user_id, actor=request_actor(request), **data)
        return Response({"facts": [fact_payload(fact) for fact in facts]})


class FactView(MemoryView):
    """``users/{user_id}/facts/{key}/``: read, set or delete one fact, the writes optionally with
    If-Match."""

    @owner_read(
        "fact_get", "One fact (404 if there is none)", FactSerializer, parameters=[FACT_KEY]
    )
    def get(self, request: Request, user_id: str, key: str) -> Response:
        return Response(selectors.fact_get(owner_id=user_id, key=key))

    @owner_operation(
        "fact_put",
        "Set one fact (201 when created)",
        {
            200: OpenApiResponse(FactSerializer, description="The fact, changed or as it was."),
            201: OpenApiResponse(FactSerializer, description="The fact, created."),
        },
        (*WRITE_ERRORS, 412),
        parameters=[FACT_KEY, IF_MATCH],
        request=FactPutInputSerializer,
        bad_input=EXPIRED_400,
    )
    def put(self, request: Request, user_id: str, key: str) -> Response:
        expected_version = _if_match(request)
        data = _validated(FactPutInputSerializer, request.data)
        fact, created = services.fact_put(
            owner_id=user_id,
            key=key,
            expected_version=expected_version,
            actor=request_actor(request),
            **data,
        )
        return Response(fact_payload(fact), status=201 if created else 200)

    @owner_operation(
        "fact_delete",
        "Delete one fact (404 if there is none)",
        {204: OpenApiResponse(description="Deleted; its history keeps a deleted version.")},
        (*READ_ERRORS, 412),
        parameters=[FACT_KEY, IF_MATCH],
    )
    def delete(self, request: Request, user_id: str, key: str) -> Response:
        expected_version = _if_match(request)
        services.fact_delete(
            owner_id=user_id,
            key=key,
            expected_version=expected_version,
            actor=request_actor(request),
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class FactHistoryView(MemoryView):
    """``users/{user_id}/facts/{key}/history/``: the versions of one fact, newest first, paged."""

    query_serializer = PageQuerySerializer

    @owner_read(
        "fact_history",
        "Versions of one fact, newest first (404 if the key never existed)",
        FactHistorySerializer,
        parameters=[FACT_KEY],
    )
    def get(self, request: Request, user_id: str, key: str) -> Response:
        versions, cursor = selectors.fact_history(owner_id=user_id, key=key, **self.query)
        if not versions and "cursor" not in self.query:
            # NOTE: every key ever set has at least one version, so an empty history means
            # no such fact (or a forgotten owner): a 404, like a DELETE of it.
            raise FactNotFound(key)
        return Response({"results": versions, "next": _next_url(request, cursor)})


class FactKeyConverter:
    """``<fact_key:key>``: 1-64 lower-case letters, digits and ``_ - .``, not only dots."""

    # NOTE: the lookahead ends at the segment's end, so "facts/../" (or %2E%2E) matches no fact URL.
    regex = r"(?!\.+(?![a-z0-9_\-.]))[a-z0-9_\-.]{1,64}"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(FactKeyConverter, "fact_key")
urlpatterns: list[URLPattern] = [
    path("facts/", FactsView.as_view(), name="facts"),
    path("facts/<fact_key:key>/", FactView.as_view(), name="fact"),
    path("facts/<fact_key:key>/history/", FactHistoryView.as_view(), name="fact-history"),
]
