"""The tools over the REST API: ``GET tools/`` (the definitions) and ``POST
users/{user_id}/tools/{name}/`` (a call, ``{"arguments": {...}}`` -> ``{"result": {...}}``), on
the app's base view: the same authentication, owner check, throttles and error mapping as every
other user endpoint. A call runs ``memory.tools.calls.tool_run``, the step of every door.
"""

from __future__ import annotations

import copy
from typing import Any

from django.urls import URLPattern, path
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response

from memory.tools.calls import ToolArgumentsInvalid, ToolNotFound, tool_get, tool_run
from memory.tools.definitions import TOOLS, definitions
from memory.views.base import MemoryView, request_actor
from memory.views.schema import (
    READ_ERRORS,
    WRITE_ERRORS,
    openapi_31,
    owner_operation,
    schema_responses,
)


class ToolCallInputSerializer(serializers.Serializer[dict[str, Any]]):
    """The body of ``POST users/{user_id}/tools/{name}/``."""

    arguments = serializers.DictField(
        help_text="The tool's arguments, as its JSON Schema (GET tools/, parameters) says; no "
        "argument ever names the owner, which is the user_id of the path. Anything the schema "
        "does not allow is a 400 that names the argument, and nothing is stored."
    )


class ToolCallResultSerializer(serializers.Serializer[dict[str, Any]]):
    """What the tool answered: see each tool's description (GET tools/)."""

    result = serializers.DictField()


class ToolDefinitionSerializer(serializers.Serializer[dict[str, Any]]):
    """A tool: its name, what it does (written for a model to read), and the JSON Schema
    (2020-12) of its arguments."""

    name = serializers.CharField()
    description = serializers.CharField()
    parameters = serializers.DictField()


class ToolListSerializer(serializers.Serializer[dict[str, Any]]):
    """Every tool a model may be given."""

    tools = ToolDefinitionSerializer(many=True)


def _arguments(data: Any) -> dict[str, Any]:
    """The ``arguments`` of a call's body, as ``ToolCallInputSerializer`` validates it.

    NOTE: an object of arguments is taken as it is without building the serializer (its
    DictField is most of what it costs), which words the errors of any other body."""
    if type(data) is dict and type(data.get("arguments")) is dict:
        return data["arguments"]  # type: ignore[no-any-return]
    serializer = ToolCallInputSerializer(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data["arguments"]  # type: ignore[no-any-return]


class ToolsView(MemoryView):
    """``tools/``: the tools' definitions."""

    @extend_schema(
        tags=["tools"],
        responses=schema_responses(
            {200: ToolListSerializer}, tuple(c for c in READ_ERRORS if c != 404)
        ),
        summary="The tools a model may use on a user's memory",
        operation_id="tool_list",
    )
    def get(self, request: Request) -> Response:
        return Response({"tools": definitions()})


class ToolCallView(MemoryView):
    """``users/{user_id}/tools/{name}/``: run one tool call on the owner's memory."""

    # NOTE: in the schema, each tool is a path of its own (``tool_view``), whose body states
    # that tool's arguments; this route answers the same, and a 404 for an unknown tool.
    @extend_schema(exclude=True)
    def post(self, request: Request, user_id: str, name: str) -> Response:
        try:
            tool_get(name)
        except ToolNotFound as e:
            raise exceptions.NotFound(str(e)) from e
        try:
            result = tool_run(
                name=name,
                arguments=_arguments(request.data),
                owner_id=user_id,
                caller=self.heavy_caller(request, user_id),
                actor=request_actor(request),
            )
        except ToolArgumentsInvalid as e:
            raise exceptions.ValidationError({"arguments": e.detail}) from e
        return Response({"result": result})


TOOL_CALL_400 = (
    'Invalid arguments, as {"arguments": {"argument": ["message"]}}: what the tool\'s JSON '
    'Schema refuses, an unknown argument, or a remember_fact past MEMORY["MAX_FACTS"]. '
    "Nothing is stored."
)


def _tool_body(name: str) -> dict[str, Any]:
    """The body of a call of the tool ``name``: its arguments' JSON Schema, with a fact's
    value as the schema's ``JsonValue`` (the rules its definition, written for a model,
    only describes)."""
    arguments = copy.deepcopy(TOOLS[name].schema())
    if not arguments.get("required"):
        # NOTE: OpenAPI 3.0 takes no empty list of required properties.
        arguments.pop("required", None)
    value = arguments.get("properties", {}).get("value")
    if value is not None:
        description = value.get("description", "")
        arguments["properties"]["value"] = (
            {"anyOf": [{"$ref": "#/components/schemas/JsonValue"}], "description": description}
            if openapi_31()
            else {"nullable": True, "description": description}
        )
    return {
        "type": "object",
        "properties": {"arguments": arguments},
        "required": ["arguments"],
    }


def tool_view(name: str) -> Any:
    """The view of ``users/{user_id}/tools/<name>/``: ``ToolCallView`` for one tool, with its
    own operation (``tool_<name>``) and body (``body_schema``, built with the schema) in it."""

    @owner_operation(
        f"tool_{name}",
        f"Run the tool {name} on the user's memory",
        {200: ToolCallResultSerializer},
        WRITE_ERRORS,
        request=ToolCallInputSerializer,
        bad_input=TOOL_CALL_400,
        description=TOOLS[name].description,
    )
    def post(self: ToolCallView, request: Request, user_id: str) -> Response:
        return ToolCallView.post(self, request, user_id, name)

    doc = f"``users/{{user_id}}/tools/{name}/``: run {name} on the owner's memory."
    attributes = {
        "post": post,
        "__doc__": doc,
        "body_schema": staticmethod(lambda: _tool_body(name)),
    }
    view: type[ToolCallView] = type(f"ToolCallView_{name}", (ToolCallView,), attributes)
    return view.as_view()


# NOTE: before ``tools/<str:name>/``, so that each tool's own view answers it in the schema.
urlpatterns: list[URLPattern] = [
    *(path(f"tools/{name}/", tool_view(name)) for name in TOOLS),
    path("tools/<str:name>/", ToolCallView.as_view(), name="tool-call"),
]
