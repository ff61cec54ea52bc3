"""The API views' request reading (``memory.views.base``): DRF's content negotiation answered
without ``request.headers`` and at once where its first renderer or parser is plainly the one,
headers read from ``META``, and ``Cache-Control`` written whole; each equal to what it replaces."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.http import Http404, HttpResponse
from django.http.request import HttpHeaders
from django.test import RequestFactory
from django.utils.cache import patch_cache_control
from hypothesis import given, settings
from hypothesis import strategies as st
from rest_framework import exceptions, negotiation, parsers, renderers
from rest_framework.authtoken.models import Token
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.test import APIClient

from memory.views.base import MemoryView, _AcceptOf, _Negotiation, request_header

# NOTE: media types as clients and sites write them: plain, with a parameter or a quality,
# wildcards, odd case and spacing, vendor types, empty.
MEDIA = [
    "application/json",
    "text/html",
    "*/*",
    "application/*",
    "text/*",
    "application/json; indent=4",
    "application/json;q=0.5",
    "application/json; charset=utf-8",
    "application/vnd.api+json",
    "APPLICATION/JSON",
    " application/json",
    "application/json ",
    "text/plain",
    "",
]


def _kind(media_type: str, format_name: str) -> type:
    return type("R", (renderers.BaseRenderer,), {"media_type": media_type, "format": format_name})


RENDERER_TYPES = [
    renderers.JSONRenderer,
    renderers.BrowsableAPIRenderer,
    _kind("application/json; charset=utf-8", "json"),
    _kind("*/*", "any"),
    _kind("text/plain", "txt"),
    _kind("application/vnd.api+json", "api"),
]
PARSER_TYPES = [
    parsers.JSONParser,
    parsers.FormParser,
    parsers.MultiPartParser,
    parsers.FileUploadParser,
    type("P", (parsers.BaseParser,), {"media_type": "application/json; charset=utf-8"}),
    type("Q", (parsers.BaseParser,), {"media_type": "application/*"}),
]

accepts = st.none() | st.lists(st.sampled_from(MEDIA), min_size=1, max_size=3).map(", ".join)
queries = st.sampled_from(["", "format=json", "format=api", "x=1", "format="])


def _request(accept: str | None, query: str, content_type: str) -> Request:
    headers = {} if accept is None else {"Accept": accept}
    path = f"/x/?{query}" if query else "/x/"
    return Request(RequestFactory().post(path, b"{}", content_type=content_type, headers=headers))


def _outcome(call: Any) -> tuple[Any, ...]:
    try:
        chosen = call()
    except (exceptions.APIException, Http404) as e:
        return ("raised", type(e))
    if isinstance(chosen, tuple):
        return ("chose", id(chosen[0]), chosen[1])
    return ("chose", None if chosen is None else id(chosen))


@settings(max_examples=400, deadline=None)
@given(
    accept=accepts,
    query=queries,
    suffix=st.sampled_from([None, "json", "api"]),
    kinds=st.lists(st.sampled_from(RENDERER_TYPES), max_size=4),
)
def test_the_renderer_chosen_is_drfs(
    accept: str | None, query: str, suffix: str | None, kinds: list[type]
) -> None:
    chosen = [kind() for kind in kinds]
    ours = _outcome(
        lambda: _Negotiation().select_renderer(
            _request(accept, query, "application/json"), chosen, suffix
        )
    )
    drfs = _outcome(
        lambda: negotiation.DefaultContentNegotiation().select_renderer(
            _request(accept, query, "application/json"), chosen, suffix
        )
    )
    assert ours == drfs


@settings(max_examples=300, deadline=None)
@given(
    content_type=st.sampled_from(MEDIA),
    kinds=st.lists(st.sampled_from(PARSER_TYPES), max_size=4),
)
def test_the_parser_chosen_is_drfs(content_type: str, kinds: list[type]) -> None:
    chosen = [kind() for kind in kinds]
    request = _request(None, "", content_type)
    ours = _outcome(lambda: _Negotiation().select_parser(request, chosen))
    drfs = _outcome(lambda: negotiation.DefaultContentNegotiation().select_parser(request, chosen))
    assert ours == drfs


@pytest.mark.parametrize("accept", [None, "", "*/*", "text/html, application/json;q=0.9"])
def test_the_accept_header_is_where_each_drf_release_reads_it(accept: str | None) -> None:
    request = _request(accept, "", "application/json")
    seen = _AcceptOf(request)
    assert seen.headers.get("accept", "*/*") == request.headers.get("accept", "*/*")
    assert seen.META.get("HTTP_ACCEPT", "*/*") == request.META.get("HTTP_ACCEPT", "*/*")


NAMES = ["Accept", "Authorization", "Idempotency-Key", "If-Match", "Content-Type", "X-Trace-Id"]


@settings(max_examples=200, deadline=None)
@given(
    present=st.dictionaries(st.sampled_from(NAMES), st.text(max_size=8), max_size=6),
    name=st.sampled_from([*NAMES, "accept", "IF-MATCH", "idempotency_key"]),
)
def test_a_header_read_from_meta_is_the_one_request_headers_has(
    present: dict[str, str], name: str
) -> None:
    # NOTE: the test client puts them in META as a WSGI or ASGI server does.
    request = RequestFactory().get("/x/", headers=present)
    assert request_header(request, name) == request.headers.get(name)


class _OwnCacheControl(MemoryView):
    permission_classes: list[Any] = []
    authentication_classes: list[Any] = []

    def get(self, request: Request) -> Response:
        response = Response({"ok": True})
        if request.query_params.get("cc"):
            response["Cache-Control"] = request.query_params["cc"]
        return response


@pytest.mark.parametrize("own", [None, "max-age=60", "public, max-age=5", "no-cache"])
def test_cache_control_is_what_patch_cache_control_writes(own: str | None) -> None:
    query = {} if own is None else {"cc": own}
    response = _OwnCacheControl.as_view()(RequestFactory().get("/x/", query))
    expected = HttpResponse()
    if own is not None:
        expected["Cache-Control"] = own
    patch_cache_control(expected, no_store=True, private=True)
    assert response["Cache-Control"] == expected["Cache-Control"]


@pytest.mark.django_db(transaction=True)
def test_a_turn_posted_with_a_token_builds_no_request_headers(monkeypatch: Any) -> None:
    user = User.objects.create_user("svc")
    user.user_permissions.add(Permission.objects.get(codename="access_all_memories"))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    built = []
    init = HttpHeaders.__init__

    def counted(self: HttpHeaders, environ: Any) -> None:
        built.append(1)
        init(self, environ)

    monkeypatch.setattr(HttpHeaders, "__init__", counted)
    body = {"session_id": "s", "role": "user", "content": "hello"}
    response = client.post("/api/memory/users/wang/turns/", body, format="json")
    assert response.status_code == 201, response.content
    assert response["Content-Type"] == "application/json"
    assert response["Cache-Control"] == "no-store, private"
    assert built == []
    keyed = client.post(
        "/api/memory/users/wang/turns/", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1"
    )
    again = client.post(
        "/api/memory/users/wang/turns/", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1"
    )
    assert keyed.status_code == again.status_code == 201
    assert keyed.json() == again.json()
    assert built == []
