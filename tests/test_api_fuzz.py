"""Property-based fuzzing of the served OpenAPI schema with schemathesis: every operation, with
valid and invalid data, as a service caller; no answer may be a 5xx or contradict the schema.

The WSGI app runs in-process, inside the test's transaction, as Django's test client runs it,
so the run needs no server and leaves nothing in the test database.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest
import schemathesis
from django.test.client import ClientHandler
from hypothesis import HealthCheck, given, settings
from rest_framework.authtoken.models import Token
from schemathesis import Case, GenerationMode
from schemathesis.specs.openapi.checks import positive_data_acceptance

pytestmark = pytest.mark.django_db

# Examples per operation and mode: 30 per operation in all.
MAX_EXAMPLES = 15
# Every operation of the schema, by the operation ids memory.views gives them.
OPERATIONS = [
    "turn_append",
    "turn_list",
    "context_get",
    "context_messages",
    "fact_list",
    "facts_merge",
    "fact_get",
    "fact_put",
    "fact_delete",
    "fact_history",
    "session_list",
    "turn_search",
    "memory_link",
    "memory_forget",
    "summary_get",
    "owner_export",
    "tool_list",
    "tool_call",
    "health_get",
]
# NOTE: operations that rightly refuse some schema-valid input with a 400, as OpenAPI 3.0
# cannot say it: free JSON (turn metadata, fact values: "no NUL in any nested string, at most
# 32 levels, 16 KiB"), a link of a user to itself, a search text that is blank or holds a
# NUL (its schema has no pattern yet), a max_tokens below what the user's facts take, and a
# page cursor that no earlier page gave (opaque), and a tool call's arguments (one object
# for five tools: each tool's own JSON Schema is in GET tools/, fuzzed by tests/test_tools.py).
# Every other check still applies to them.
REFUSES_SOME_VALID_INPUT = {
    "turn_append",
    "facts_merge",
    "fact_put",
    "memory_link",
    "turn_search",
    "context_messages",
    "session_list",
    "fact_history",
    "tool_call",
}
# Operations with nothing to make invalid.
NO_INPUT = {"health_get", "tool_list"}


class InProcessApp:
    """Django as a WSGI app that keeps the test's database connection open between requests.

    ``django.core.wsgi`` would close the connection at each request's end
    (``close_old_connections``), and with it the transaction pytest-django wraps the test in;
    Django's test client does not.
    """

    def __init__(self) -> None:
        self.handler = ClientHandler(enforce_csrf_checks=False)

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        response = self.handler(environ)
        headers = [*response.items()]
        headers += [("Set-Cookie", c.output(header="").strip()) for c in response.cookies.values()]
        start_response(f"{response.status_code} {response.reason_phrase}", headers)
        return response.streaming_content if response.streaming else [response.content]


@pytest.fixture
def service_token(service_user: Any) -> str:
    return Token.objects.create(user=service_user).key


@pytest.fixture
def api_schema(db: None) -> Any:
    return schemathesis.openapi.from_wsgi("/api/schema/?format=json", InProcessApp())


def test_every_operation_is_fuzzed(api_schema: Any) -> None:
    served = {
        result.ok().definition.raw["operationId"] for result in api_schema.get_all_operations()
    }
    assert served == set(OPERATIONS)


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=str)
@pytest.mark.parametrize("operation_id", OPERATIONS)
def test_operation_conforms_to_its_schema(
    api_schema: Any,
    service_token: str,
    django_capture_on_commit_callbacks: Any,
    operation_id: str,
    mode: GenerationMode,
) -> None:
    if mode is GenerationMode.NEGATIVE and operation_id in NO_INPUT:
        pytest.skip("no input to make invalid")
    operation = api_schema.find_operation_by_id(operation_id)
    headers = {"Authorization": f"Token {service_token}"}
    excluded = [positive_data_acceptance] if operation_id in REFUSES_SOME_VALID_INPUT else []

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def fuzz(case: Case) -> None:
        with django_capture_on_commit_callbacks(execute=True):
            case.call_and_validate(headers=headers, excluded_checks=excluded)

    fuzz()
