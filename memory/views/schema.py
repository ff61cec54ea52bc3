"""The OpenAPI schema of the API as drf-spectacular builds it: the shared parameters (path ids,
headers), the error responses each operation lists, and the links between operations."""

from __future__ import annotations

import re
from typing import Any

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse

from memory.serializers import ErrorSerializer
from memory.validators import FACT_KEY_RE, OWNER_ID_RE


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


def _fact_link(operation_id: str, description: str) -> dict[str, Any]:
    return {
        "operationId": operation_id,
        "parameters": {"user_id": "$request.path.user_id", "key": "$request.path.key"},
        "description": description,
    }


# NOTE: OpenAPI links from a fact's writes to its history, which say what the history does
# after a delete: it stays (a 200), so a client (or a schema-driven tester) expects no 404.
LINKS: dict[str, dict[str, dict[str, Any]]] = {
    "fact_put": {
        "FactHistory": _fact_link("fact_history", "Every version of the fact, this one first.")
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
    """drf-spectacular's schema, plus the OpenAPI links of ``LINKS`` on success responses."""

    def get_operation(self, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        operation = super().get_operation(*args, **kwargs)
        if operation is not None:
            for code, response in operation["responses"].items():
                if code.startswith("2") and operation["operationId"] in LINKS:
                    response["links"] = LINKS[operation["operationId"]]
        return operation  # type: ignore[no-any-return]
