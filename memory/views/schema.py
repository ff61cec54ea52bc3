"""The OpenAPI schema of the API as drf-spectacular builds it: the schemas of the app's own
serializer fields (``JsonValue`` and the rest), the shared parameters (path ids, headers),
the error responses each operation lists, and the links between operations."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import ResolvedComponent
from drf_spectacular.settings import spectacular_settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.fields import empty

from memory.conf import conf
from memory.serializers import (
    JSON_RULES,
    MAX_FACTS_PER_MERGE,
    AnyJSONField,
    ContentField,
    ContextMessagesQuerySerializer,
    ErrorSerializer,
    FactsMapField,
    JSONValueField,
    MetadataField,
    PageQuerySerializer,
    SearchModeField,
)
from memory.validators import (
    FACT_KEY_RE,
    INTEGRAL_FLOAT,
    MAX_JSON_INT,
    MIN_JSON_INT,
    OWNER_ID_RE,
)

# Fields ------------------------------------------------------------------------------------

# NOTE: the JSON value the server stores, recursively, as JSON Schema 2020-12 can say it; depth,
# size and floats from 1e16 on are left to the description.
_NO_NUL = {"not": {"pattern": "\\u0000"}}
JSON_VALUE_SCHEMA: dict[str, Any] = {
    "description": JSON_RULES,
    "anyOf": [
        {"type": "null"},
        {"type": "boolean"},
        {"type": "string", **_NO_NUL},
        {"type": "integer", "minimum": MIN_JSON_INT, "maximum": MAX_JSON_INT},
        {
            "type": "number",
            "exclusiveMinimum": -INTEGRAL_FLOAT,
            "exclusiveMaximum": INTEGRAL_FLOAT,
        },
        {"type": "array", "items": {"$ref": "#/components/schemas/JsonValue"}},
        {
            "type": "object",
            "propertyNames": _NO_NUL,
            "additionalProperties": {"$ref": "#/components/schemas/JsonValue"},
        },
    ],
}


def openapi_31() -> bool:
    return not spectacular_settings.OAS_VERSION.startswith("3.0")


def json_value_ref(auto_schema: Any) -> dict[str, Any]:
    """A reference to the ``JsonValue`` component (``JSON_VALUE_SCHEMA``), registered once."""
    component = ResolvedComponent(
        name="JsonValue",
        type=ResolvedComponent.SCHEMA,
        object="JsonValue",
        schema=JSON_VALUE_SCHEMA,
    )
    auto_schema.registry.register_on_missing(component)
    return component.ref


class JSONValueFieldSchema(OpenApiSerializerFieldExtension):
    """The schema of ``JSONValueField``: ``JsonValue`` in OpenAPI 3.1; in 3.0, which can say
    neither the keys' rule nor null beside other types, any value with the rules described."""

    target_class = JSONValueField

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        # NOTE: an ``anyOf`` of one, so drf-spectacular adds null as another branch: a ``oneOf`` of
        # the reference and null would match null twice.
        if openapi_31():
            return {"anyOf": [json_value_ref(auto_schema)], "description": JSON_RULES}
        return {"nullable": True, "description": JSON_RULES}


class AnyJSONFieldSchema(OpenApiSerializerFieldExtension):
    """The schema of ``AnyJSONField``: any value, null included (drf-spectacular's own
    ``oneOf`` of any value and null is matched twice by null, which ``oneOf`` refuses)."""

    target_class = AnyJSONField

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        return {"anyOf": [{}]} if openapi_31() else {"nullable": True}


class MetadataFieldSchema(OpenApiSerializerFieldExtension):
    """The schema of ``MetadataField``: an object of ``JsonValue`` in OpenAPI 3.1."""

    target_class = MetadataField

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        description = f"A JSON object, {{}} by default. {JSON_RULES}"
        if openapi_31():
            return {
                "type": "object",
                "propertyNames": _NO_NUL,
                "additionalProperties": json_value_ref(auto_schema),
                "description": description,
            }
        return {"type": "object", "additionalProperties": {}, "description": description}


class ContentFieldSchema(OpenApiSerializerFieldExtension):
    """The schema of ``ContentField``: one string with its pattern, the empty one included.

    NOTE: drf-spectacular would write ``oneOf`` the pattern and an empty string, both of which the
    empty string matches: the schema would refuse a turn the server stores.
    """

    target_class = ContentField

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        # NOTE: "no NUL" as ``not`` a pattern that finds one: a ``pattern`` on a blank-allowed
        # field is what drf-spectacular turns into that ``oneOf``.
        return {
            "type": "string",
            "maxLength": conf.MAX_TURN_CHARS,
            "not": {"pattern": "\\u0000"},
            "description": ContentField.DESCRIPTION,
        }


class FactsMapFieldSchema(OpenApiSerializerFieldExtension):
    """The schema of ``FactsMapField``: its keys' rule as ``propertyNames`` in OpenAPI 3.1; in 3.0
    only the description states it."""

    target_class = FactsMapField

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "object", "maxProperties": MAX_FACTS_PER_MERGE}
        if spectacular_settings.OAS_VERSION.startswith("3.0"):
            schema["additionalProperties"] = {"nullable": True, "description": JSON_RULES}
        else:
            schema["propertyNames"] = {
                "type": "string",
                "minLength": 1,
                "maxLength": 64,
                "pattern": FACT_KEY_RE.pattern,
            }
            schema["additionalProperties"] = json_value_ref(auto_schema)
        return schema


class SearchModeFieldSchema(OpenApiSerializerFieldExtension):
    """The schema of ``SearchModeField``: the modes this site answers, read when the schema
    is built (``text`` alone where search by meaning is off)."""

    target_class = SearchModeField

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        from memory.selectors.search import semantic_on

        modes = ["text", "semantic", "hybrid"] if semantic_on() else ["text"]
        return {"type": "string", "enum": modes}


# Parameters and responses --------------------------------------------------------------------


def _path_parameter(name: str, pattern: re.Pattern[str], description: str) -> OpenApiParameter:
    return OpenApiParameter(
        name,
        OpenApiTypes.STR,
        OpenApiParameter.PATH,
        pattern=pattern.pattern,
        description=description,
    )


USER_ID = _path_parameter(
    "user_id", OWNER_ID_RE, "The memory owner's external id: 1-128 letters, digits and _ - . @ :"
)
FACT_KEY = _path_parameter(
    "key", FACT_KEY_RE, "A fact key: 1-64 lower-case letters, digits and _ - ., not only dots."
)
IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    required=False,
    pattern=r"^[\x20-\x7e]{1,128}$",
    description="1-128 printable ASCII characters. A retry with the same key and body for the "
    "same owner stores nothing new and answers with the turn first stored; the same key with "
    "a different body is a 422 and stores nothing.",
)
IF_MATCH = OpenApiParameter(
    "If-Match",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    required=False,
    pattern=r'^([0-9]{1,18}|"[0-9]{1,18}")$',
    description='The version the fact must be at (3 or "3"); otherwise 412 and nothing changes.',
)

ERRORS: dict[int, OpenApiResponse] = {
    400: OpenApiResponse(
        OpenApiTypes.OBJECT,
        description='Invalid input, as {"field": ["message"]}; also a query parameter given twice.',
    ),
    401: OpenApiResponse(ErrorSerializer, description="Not authenticated."),
    403: OpenApiResponse(
        ErrorSerializer, description="Not authenticated (session authentication) or not allowed."
    ),
    404: OpenApiResponse(
        ErrorSerializer, description="Not found, or another user's memory (never revealed)."
    ),
    412: OpenApiResponse(ErrorSerializer, description="If-Match names a stale version."),
    422: OpenApiResponse(
        ErrorSerializer,
        description="The Idempotency-Key was already used with a different body; nothing stored.",
    ),
    413: OpenApiResponse(ErrorSerializer, description="The body is over the configured size."),
    414: OpenApiResponse(
        description="The request line (path and query) is past the server's limit (gunicorn's "
        "is 4094 bytes), answered by the server in front of the app. Every request line this "
        "schema allows is shorter (at most about 2,700 bytes, every character percent-encoded)."
    ),
    415: OpenApiResponse(ErrorSerializer, description="The body is not JSON."),
    429: OpenApiResponse(
        ErrorSerializer,
        description="Throttled: too many requests, or (search, export, long contexts and turn "
        "pages) "
        'too many heavy reads in flight (MEMORY["HEAVY_READS_PER_CALLER"]); see Retry-After.',
    ),
    503: OpenApiResponse(ErrorSerializer, description="The database is unreachable."),
}
READ_ERRORS = (400, 401, 403, 404, 414, 429, 503)
WRITE_ERRORS = (400, 401, 403, 404, 413, 414, 415, 429, 503)
BAD_INPUT = 'Invalid input, as {"field": ["message"]}; also a query parameter given twice'
MAX_FACTS_400 = f'{BAD_INPUT}, or a new key past MEMORY["MAX_FACTS"].'
EXPIRED_400 = f"{MAX_FACTS_400[:-1]}, or an expires_at that is not in the future."
CURSOR_400 = f"{BAD_INPUT}, or a cursor that no page of this list gave (cursors are opaque)."
BUDGET_400 = (
    f"{BAD_INPUT}, or a max_tokens under what the user's facts alone take (their system "
    "message is always sent whole)."
)
# The 400 of a read whose query string refuses more than its fields' types.
QUERY_400: dict[Any, str] = {
    PageQuerySerializer: CURSOR_400,
    ContextMessagesQuerySerializer: BUDGET_400,
}


def schema_responses(
    success: dict[int, Any], errors: tuple[int, ...], bad_input: str | None = None
) -> dict[int, Any]:
    # NOTE: a serializer alone would leave its response's description empty; its docstring says it.
    responses: dict[int, Any] = {
        code: response
        if isinstance(response, OpenApiResponse)
        else OpenApiResponse(response, description=(response.__doc__ or "").strip())
        for code, response in success.items()
    }
    responses.update({code: ERRORS[code] for code in sorted(errors)})
    if bad_input is not None:
        responses[400] = OpenApiResponse(OpenApiTypes.OBJECT, description=bad_input)
    return responses


_Handler = TypeVar("_Handler", bound=Callable[..., Any])


def owner_read(
    operation_id: str, summary: str, result: Any, **options: Any
) -> Callable[[_Handler], _Handler]:
    """``owner_operation`` of a read: ``result`` answered with a 200, or one of ``READ_ERRORS``."""
    return owner_operation(operation_id, summary, {200: result}, **options)


def owner_operation(
    operation_id: str,
    summary: str,
    success: dict[int, Any],
    errors: tuple[int, ...] = READ_ERRORS,
    *,
    parameters: Sequence[Any] = (),
    request: Any = empty,
    bad_input: str | None = None,
    description: str | None = None,
) -> Callable[[_Handler], _Handler]:
    """``extend_schema`` of an operation on an owner's URL: the ``user_id`` path parameter
    before ``parameters``, and the responses of ``schema_responses``."""
    return extend_schema(
        operation_id=operation_id,
        parameters=[USER_ID, *parameters],
        request=request,
        responses=schema_responses(success, errors, bad_input),
        description=description,
        summary=summary,
    )


def _fact_link(operation_id: str, description: str) -> dict[str, Any]:
    return {
        "operationId": operation_id,
        "parameters": {"user_id": "$request.path.user_id", "key": "$request.path.key"},
        "description": description,
    }


# NOTE: OpenAPI links from a write to the reads that show it; a delete's say the history stays.
def _owner_link(operation_id: str, description: str) -> dict[str, Any]:
    return {
        "operationId": operation_id,
        "parameters": {"user_id": "$request.path.user_id"},
        "description": description,
    }


LINKS: dict[str, dict[str, dict[str, Any]]] = {
    "fact_put": {
        "FactGet": _fact_link("fact_get", "The fact as it was just set."),
        "FactHistory": _fact_link("fact_history", "Every version of the fact, this one first."),
        "FactList": _owner_link("fact_list", "Every fact of the owner, this one among them."),
    },
    "facts_merge": {
        "FactList": _owner_link("fact_list", "Every fact of the owner, the ones set among them."),
    },
    "turn_append": {
        "TurnList": _owner_link("turn_list", "The owner's turns, this one last."),
        "Context": _owner_link("context_get", "The context, with this turn as its newest."),
    },
    "fact_delete": {
        "FactHistory": _fact_link(
            "fact_history",
            "The history outlives the fact: a 200 whose newest version has deleted: true.",
        ),
        "FactPut": _fact_link("fact_put", "Setting the key again continues its version count."),
    },
}


class MemorySchema(AutoSchema):
    """drf-spectacular's schema, plus: the tag of a view's operations, the name of its module
    (``views/turns.py``: ``turns``); the ``query_serializer`` of its ``get`` and that query's
    ``QUERY_400``; the OpenAPI links of ``LINKS`` on success responses; and the body a view's
    ``body_schema()`` gives, where it has one, in place of its serializer's."""

    def get_tags(self) -> list[str]:
        return [type(self.view).__module__.rpartition(".")[2]]

    def _query(self) -> Any:
        return getattr(self.view, "query_serializer", None) if self.method == "GET" else None

    def get_override_parameters(self) -> list[Any]:
        query = self._query()
        parameters = list(super().get_override_parameters())
        return parameters if query is None else [*parameters, query]

    def get_operation(self, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        operation = super().get_operation(*args, **kwargs)
        body_schema = getattr(self.view, "body_schema", None)
        if operation is not None and body_schema is not None and "requestBody" in operation:
            operation["requestBody"]["content"] = {"application/json": {"schema": body_schema()}}
        if operation is not None and "400" in operation["responses"]:
            bad_input = QUERY_400.get(self._query())
            if bad_input is not None:
                operation["responses"]["400"]["description"] = bad_input
        if operation is not None:
            for code, response in operation["responses"].items():
                if code.startswith("2") and operation["operationId"] in LINKS:
                    response["links"] = LINKS[operation["operationId"]]
        return operation
