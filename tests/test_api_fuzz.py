"""Property-based fuzzing of the served OpenAPI schema with Schemathesis: every operation, every
check, the examples, coverage and fuzzing phases with valid and invalid data, and stateful
sequences along the schema's links, as a service caller and as an ordinary user. No answer may
be a 5xx or contradict the schema, and a request the schema allows is refused only for the
state it meets, with a refusal the schema documents (``STATE_REFUSALS``).

The WSGI app runs in-process, inside the test's transaction, as Django's test client runs it,
against the real Postgres and Redis, so the run needs no server and leaves nothing behind.
``MEMORY_FUZZ_EXAMPLES`` sets the examples per operation and phase (``make fuzz``: many more).
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Callable, Iterable
from typing import Any

import pytest
import schemathesis
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.core.cache import caches
from django.db import transaction
from django.test.client import ClientHandler
from hypothesis import HealthCheck, settings
from rest_framework.authtoken.models import Token
from schemathesis import Case
from schemathesis.specs.openapi.checks import positive_data_acceptance

from memory import cache

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

# Examples per operation and phase (the coverage phase adds its own boundary cases).
MAX_EXAMPLES = int(os.environ.get("MEMORY_FUZZ_EXAMPLES", "5"))
STATEFUL_STEPS = int(os.environ.get("MEMORY_FUZZ_STEPS", "8"))
# Every operation of the schema, by the operation ids memory.views gives them.
OPERATIONS = {
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
    "tool_search_memory",
    "tool_get_profile",
    "tool_remember_fact",
    "tool_forget_fact",
    "tool_recent_turns",
    "health_get",
}
# NOTE: the refusals of a request the schema allows that depend on the state it meets (or on
# a relation of two values no schema states), each documented in the operation's responses:
# (operation, status, field of the 400 or None, a pattern its message matches).
STATE_REFUSALS = [
    ("fact_put", 412, None, "version"),
    ("fact_delete", 412, None, "version"),
    ("turn_append", 422, None, "Idempotency-Key"),
    ("session_list", 400, "cursor", "Invalid cursor"),
    ("fact_history", 400, "cursor", "Invalid cursor"),
    ("context_messages", 400, "max_tokens", "facts"),
    ("fact_put", 400, "expires_at", "in the future"),
    ("fact_put", 400, "value", "MAX_FACTS|more than .* facts"),
    ("facts_merge", 400, "facts", "MAX_FACTS|more than .* facts"),
    ("memory_link", 400, "from_user_id", "itself"),
    ("tool_remember_fact", 400, "arguments", "MAX_FACTS|more than .* facts"),
]


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


def refused_for_state(operation_id: str, status: int, body: Any) -> bool:
    """Whether an answer to a request the schema allows is one of ``STATE_REFUSALS``."""
    for op, code, field, pattern in STATE_REFUSALS:
        if (op, code) != (operation_id, status) or not isinstance(body, dict):
            continue
        if field is None:
            text = str(body.get("detail", ""))
        elif set(body) == {field}:
            text = str(body[field])
        else:
            continue
        if re.search(pattern, text):
            return True
    return False


def state_refusals_only(ctx: Any, response: Any, case: Case) -> bool | None:
    """Schemathesis' ``positive_data_acceptance``, but for the refusals ``STATE_REFUSALS``."""
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive:
        return None
    if response.status_code not in (400, 412, 413, 414, 415, 422):
        return None
    try:
        body = response.json()
    except ValueError:
        body = None
    operation_id = case.operation.definition.raw["operationId"]
    assert refused_for_state(operation_id, response.status_code, body), (
        f"{operation_id}: a request the schema allows was refused with "
        f"{response.status_code} {response.text[:300]}"
    )
    return None


@pytest.fixture(autouse=True)
def _node_id(request: pytest.FixtureRequest) -> None:
    # NOTE: schemathesis' lazy schema (from_fixture) reads and sets the test's node id where
    # pytest before 9 kept it, only to name each operation in reports.
    if not hasattr(request.node, "_nodeid"):
        request.node._nodeid = request.node.nodeid


def _schema(user: User | None) -> Any:
    loaded = schemathesis.openapi.from_wsgi("/api/schema/?format=json", InProcessApp())
    if user is not None:
        token = Token.objects.create(user=user).key

        # NOTE: an auth provider: explicit credentials, which the auth checks strip or replace
        # with invalid ones to see them refused.
        @loaded.auth()
        class TokenAuth:
            def get(self, case: Case, context: Any) -> str:
                return token

            def set(self, case: Case, data: str, context: Any) -> None:
                case.headers = {**(case.headers or {}), "Authorization": f"Token {data}"}

    return loaded


@pytest.fixture
def api_schema(db: None) -> Any:
    return _schema(None)


@pytest.fixture
def service_schema(service_user: User) -> Any:
    """The schema, called as a service caller: reaches every owner's memory."""
    return _schema(service_user)


@pytest.fixture
def user_schema(owner_user: User) -> Any:
    """The schema, called as an ordinary user (wang): reaches his own memory only."""
    return _schema(owner_user)


as_service = schemathesis.pytest.from_fixture("service_schema")
as_user = schemathesis.pytest.from_fixture("user_schema")


def test_every_operation_is_fuzzed(api_schema: Any) -> None:
    served = {
        result.ok().definition.raw["operationId"] for result in api_schema.get_all_operations()
    }
    assert served == OPERATIONS


def _call_and_validate(case: Case, own: str | None, capture: Any) -> None:
    # NOTE: an ordinary user reaches only his own memory: about half the valid cases ask for
    # it, so that they get past the owner check; the others test that check (a 404, no leak).
    positive = case.meta is not None and case.meta.generation.mode.is_positive
    owned = own is not None and positive and "user_id" in (case.path_parameters or {})
    if owned and zlib.crc32(repr((case.body, case.query)).encode()) % 2:
        case.path_parameters["user_id"] = own
    with capture(execute=True):
        case.call_and_validate(
            excluded_checks=[positive_data_acceptance],
            additional_checks=[state_refusals_only],
        )


FUZZ = settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@as_service.parametrize()
@FUZZ
def test_every_operation_conforms_as_a_service_caller(
    case: Case, django_capture_on_commit_callbacks: Any
) -> None:
    _call_and_validate(case, None, django_capture_on_commit_callbacks)


@as_user.parametrize()
@FUZZ
def test_every_operation_conforms_as_an_ordinary_user(
    case: Case, owner_user: User, django_capture_on_commit_callbacks: Any
) -> None:
    _call_and_validate(case, owner_user.get_username(), django_capture_on_commit_callbacks)


def _clean_cache() -> None:
    """Drop this test process's cache keys and the cache layer's state of the process."""
    client = caches["memory"].client.get_client(write=True)
    keys = list(client.scan_iter(match=f"{django_settings.TEST_KEY_PREFIX}*", count=1000))
    if keys:
        client.delete(*keys)
    cache.reset()


def _stateful_run(api_schema: Any, capture: Any) -> None:
    class Machine(api_schema.as_state_machine()):  # type: ignore[misc]
        # NOTE: each scenario starts from the same empty memory (a savepoint rolled back, the
        # cache emptied), so that Hypothesis can replay and shrink it.
        def setup(self) -> None:
            self.savepoint = transaction.savepoint()

        def teardown(self) -> None:
            transaction.savepoint_rollback(self.savepoint)
            _clean_cache()

        def validate_response(self, response: Any, case: Case, **kwargs: Any) -> None:
            case.validate_response(
                response,
                excluded_checks=[positive_data_acceptance],
                additional_checks=[state_refusals_only],
                transport_kwargs=kwargs or None,
            )

        def call(self, case: Case, **kwargs: Any) -> Any:
            with capture(execute=True):
                return case.call(**kwargs)

    Machine.run(
        settings=settings(FUZZ, max_examples=MAX_EXAMPLES, stateful_step_count=STATEFUL_STEPS)
    )


def test_stateful_sequences_conform_as_a_service_caller(
    service_schema: Any, django_capture_on_commit_callbacks: Any
) -> None:
    _stateful_run(service_schema, django_capture_on_commit_callbacks)


def test_stateful_sequences_conform_as_an_ordinary_user(
    user_schema: Any, django_capture_on_commit_callbacks: Any
) -> None:
    _stateful_run(user_schema, django_capture_on_commit_callbacks)
