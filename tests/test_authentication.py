"""The app's token authentication: DRF's answers, and on the memory views one statement that
also says whether the caller is a service, agreeing with ``has_perm`` in every case."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.auth.models import Group, Permission, User
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from rest_framework import exceptions
from rest_framework.authtoken.models import Token
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.test import APIClient, APIRequestFactory
from rest_framework.views import APIView

from memory import services
from memory.authentication import TokenAuthentication
from memory.permissions import ACCESS_ALL, HOLDS_ACCESS_ALL, is_service_caller
from memory.views.facts import FactsView

pytestmark = pytest.mark.django_db


class PlainView(APIView):
    """A view of the host site's own, with DRF's permission."""

    permission_classes = [IsAuthenticated]


def authenticate(key, view_class=FactsView):
    request = Request(
        APIRequestFactory().get("/", HTTP_AUTHORIZATION=f"Token {key}"),
        parser_context={"view": view_class()},
    )
    return TokenAuthentication().authenticate(request)


def values(instance):
    return {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields}


def test_the_demo_project_authenticates_with_it():
    assert settings.REST_FRAMEWORK["DEFAULT_AUTHENTICATION_CLASSES"][0] == (
        "memory.authentication.TokenAuthentication"
    )


def test_one_statement_reads_what_drfs_query_reads(service_user):
    token = Token.objects.create(user=service_user)
    with CaptureQueriesContext(connection) as queries:
        user, found = authenticate(token.key)
    assert len(queries) == 1
    orm = Token.objects.select_related("user").get(key=token.key)
    assert values(found) == values(orm)
    assert values(user) == values(orm.user)
    assert found.user is user
    assert (user._state.adding, user._state.db) == (False, "default")
    # NOTE: the row's values go into the models as psycopg gives them, as the ORM's would: no
    # field of the two models converts what it reads on this backend.
    for field in [*Token._meta.concrete_fields, *User._meta.concrete_fields]:
        expression = field.get_col(field.model._meta.db_table)
        assert not field.get_db_converters(connection), field
        assert not connection.ops.get_db_converters(expression), field


def _permission_elsewhere():
    """A permission with the same codename in another app: it grants nothing here."""
    return Permission.objects.create(
        codename="access_all_memories",
        name="Same codename, other app",
        content_type=ContentType.objects.get_for_model(Group),
    )


def _callers():
    access = Permission.objects.get(
        content_type__app_label="memory", codename="access_all_memories"
    )
    other = Permission.objects.get(codename="view_owner")
    elsewhere = _permission_elsewhere()
    granting, unrelated, lookalike = (
        Group.objects.create(name=name) for name in ("svc", "ops", "lookalike")
    )
    granting.permissions.add(access)
    unrelated.permissions.add(other)
    lookalike.permissions.add(elsewhere)
    users = {
        name: User.objects.create_user(f"u-{name}", **flags)
        for name, flags in {
            "none": {},
            "direct": {},
            "group": {},
            "both": {},
            "other permissions": {},
            "same codename, other app": {},
            "staff": {"is_staff": True},
            "superuser": {"is_superuser": True},
        }.items()
    }
    users["direct"].user_permissions.add(access)
    users["group"].groups.add(granting)
    users["both"].user_permissions.add(access)
    users["both"].groups.add(granting, unrelated)
    users["other permissions"].user_permissions.add(other)
    users["other permissions"].groups.add(unrelated)
    users["same codename, other app"].user_permissions.add(elsewhere)
    users["same codename, other app"].groups.add(lookalike)
    return users


def test_the_statements_service_answer_is_has_perms(db):
    users = _callers()
    answers = {}
    for name, user in users.items():
        authed, _ = authenticate(Token.objects.create(user=user).key)
        with CaptureQueriesContext(connection) as queries:
            answers[name] = is_service_caller(authed)
        assert len(queries) == 0, name
        assert answers[name] == User.objects.get(pk=user.pk).has_perm(ACCESS_ALL), name
    assert answers == {
        "none": False,
        "direct": True,
        "group": True,
        "both": True,
        "other permissions": False,
        "same codename, other app": False,
        "staff": False,
        "superuser": True,
    }


def test_the_one_query_check_agrees_for_the_same_callers(db):
    # NOTE: the check a user authenticated any other way gets (session, force_authenticate).
    for name, user in _callers().items():
        fresh = User.objects.get(pk=user.pk)
        assert not hasattr(fresh, HOLDS_ACCESS_ALL)
        expected = User.objects.get(pk=user.pk).has_perm(ACCESS_ALL)
        assert is_service_caller(fresh) == expected, name


def test_refusals_are_drfs(owner_user):
    owner_user.is_active = False
    owner_user.save()
    inactive = Token.objects.create(user=owner_user)
    for key, detail in (
        ("nope", "Invalid token."),
        ("a\x00b", "Invalid token."),
        (inactive.key, "User inactive or deleted."),
    ):
        with pytest.raises(exceptions.AuthenticationFailed) as refused:
            authenticate(key)
        assert str(refused.value.detail) == detail
        if "\x00" not in key:
            with pytest.raises(exceptions.AuthenticationFailed) as drf:
                authenticate(key, PlainView)
            assert refused.value.detail == drf.value.detail


def test_other_views_get_drfs_query_and_no_answer(service_user):
    token = Token.objects.create(user=service_user)
    with CaptureQueriesContext(connection) as queries:
        user, found = authenticate(token.key, PlainView)
    assert found == token
    assert not hasattr(user, HOLDS_ACCESS_ALL)
    assert "auth_permission" not in queries[0]["sql"]


def test_a_service_callers_request_asks_the_database_once_for_both(service_user, write):
    with write():
        services.fact_put(owner_id="li", key="name", value="Li")
    token = Token.objects.create(user=service_user)
    client = APIClient()
    with CaptureQueriesContext(connection) as queries:
        response = client.get("/api/memory/users/li/facts/", HTTP_AUTHORIZATION=f"Token {token}")
    assert response.status_code == 200
    assert [q["sql"] for q in queries if "auth_permission" in q["sql"]] == [queries[0]["sql"]]
    assert "authtoken_token" in queries[0]["sql"]


def test_a_token_without_the_permission_gets_404_for_another_owner(owner_user, write):
    with write():
        services.fact_put(owner_id="li", key="name", value="Li")
    token = Token.objects.create(user=owner_user)
    client = APIClient(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get("/api/memory/users/wang/facts/").status_code == 200
    response = client.get("/api/memory/users/li/facts/")
    assert (response.status_code, response.json()) == (404, {"detail": "Not found."})


def test_refused_tokens_over_http(owner_user):
    owner_user.is_active = False
    owner_user.save()
    inactive = Token.objects.create(user=owner_user)
    client = APIClient()
    for key, detail in (
        ("nope", "Invalid token."),
        ("a\x00b", "Invalid token."),
        (inactive.key, "User inactive or deleted."),
    ):
        response = client.get("/api/memory/users/wang/facts/", HTTP_AUTHORIZATION=f"Token {key}")
        assert (response.status_code, response.json()) == (401, {"detail": detail})
        assert response["WWW-Authenticate"] == "Token"


class GrantsEveryone:
    """An authentication backend of a host site that grants every permission to everyone."""

    def authenticate(self, request, **credentials):
        return None

    def has_perm(self, user, perm, obj=None):
        return True


def test_another_backend_means_has_perm_decides(owner_user, write):
    with write():
        services.fact_put(owner_id="li", key="name", value="Li")
    token = Token.objects.create(user=owner_user)
    client = APIClient(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get("/api/memory/users/li/facts/").status_code == 404
    backends = [
        "django.contrib.auth.backends.ModelBackend",
        "tests.test_authentication.GrantsEveryone",
    ]
    with override_settings(AUTHENTICATION_BACKENDS=backends):
        assert client.get("/api/memory/users/li/facts/").status_code == 200


def test_a_session_caller_gets_the_permission_check_of_its_own(service_user, owner_user, write):
    with write():
        services.fact_put(owner_id="li", key="name", value="Li")
    for user, status in ((service_user, 200), (owner_user, 404)):
        client = APIClient()
        client.login(username=user.username, password="pw")
        with CaptureQueriesContext(connection) as queries:
            response = client.get("/api/memory/users/li/facts/")
        assert response.status_code == status
        checks = [q["sql"] for q in queries if "auth_permission" in q["sql"]]
        assert len(checks) == 1
        assert "authtoken_token" not in checks[0]


@pytest.mark.django_db(transaction=True)
def test_the_lookup_is_prepared_on_a_request_in_autocommit(service_user, monkeypatch):
    from memory import db

    monkeypatch.setattr(db._Prepared, "works", True)
    token = Token.objects.create(user=service_user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    for _ in range(2):
        assert client.get("/api/memory/users/wang/facts/").status_code == 200
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        statements = [row[0] for row in cursor.fetchall()]
    assert len([s for s in statements if "authtoken_token" in s]) == 1, statements
