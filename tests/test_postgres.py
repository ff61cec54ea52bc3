"""Each Postgres fast path (``memory.postgres``) against its plain-Django specification, on real
Postgres: hypothesis drives both with the same operations, and they must answer and store the
same (JSON types counted: ``1``, ``1.0`` and ``true`` are three values). Each example runs in a
savepoint that is rolled back, so the paths start from the same empty tables."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.db import connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from rest_framework import authentication as drf_authentication
from rest_framework import exceptions
from rest_framework.authtoken.models import Token

from memory import selectors, services
from memory.authentication import TokenAuthentication
from memory.exceptions import IdempotencyKeyReused
from memory.extraction import ExtractedFact
from memory.models import (
    Fact,
    FactVersion,
    Owner,
    PendingExtraction,
    PendingSummary,
    Session,
    Summary,
    Turn,
)
from memory.permissions import ACCESS_ALL, is_service_caller
from memory.postgres import context_read
from memory.services import turns
from memory.validators import number_round_trips

pytestmark = pytest.mark.django_db

PROPERTY = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Text the validators take: no NUL, no lone surrogate.
TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=6
)
# JSON as the API takes it: bools, ints and floats apart, unicode, nesting.
JSON_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    # NOTE: the numbers the validators take (number_round_trips): 1e20 and the like are a 400.
    st.floats(allow_nan=False, allow_infinity=False).filter(number_round_trips),
    st.sampled_from([0, 1, 1.0, -0.0, 1e16, 9.2e18, -9.2e18, 2.5e-7, True, "1", "", "篮球", "é\t"]),
    st.text(max_size=4),
)
JSON = st.recursive(
    JSON_LEAF,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)
METADATA = st.dictionaries(st.sampled_from(["a", "b", "来源", ""]) | st.text(max_size=3), JSON)
# NOTE: the extractor's script states facts for these (tests of the append).
SCRIPTED = ["", "hi", "我叫王建国", "I like chess"]
CONTENT = st.one_of(
    st.sampled_from(SCRIPTED),
    st.sampled_from(SCRIPTED),
    st.sampled_from(["a\x00b", "\ud800", "x" * 11]),
    st.text(max_size=12),
)


def typed(value: Any) -> str:
    """A value as JSON text that tells ``1``, ``1.0`` and ``true`` apart; datetimes as text."""
    return json.dumps(value, sort_keys=True, default=str)


@contextmanager
def rolled_back() -> Iterator[None]:
    """Run the block in a savepoint that is rolled back: the next run finds the same tables."""
    with transaction.atomic():
        yield
        transaction.set_rollback(True)


# Turn append ---------------------------------------------------------------------------------


class ScriptedExtractor:
    """An inline extractor that states the facts its ``script`` holds for a turn's content."""

    script: dict[str, list[ExtractedFact]] = {}

    def extract(self, text: str, *, facts: Mapping[str, Any]) -> list[ExtractedFact]:
        return list(ScriptedExtractor.script.get(text, []))


FACT = st.builds(
    ExtractedFact,
    # NOTE: "Bad Key" breaks the key's rule: dropped, on both paths, before the write.
    key=st.sampled_from(["name", "likes", "ratio", "city", "Bad Key"]),
    value=JSON,
    op=st.sampled_from(["set", "set", "add", "remove"]),
)
APPEND = st.fixed_dictionaries(
    {
        "owner_id": st.sampled_from(["wang", "li", "bad owner!"]),
        "session_id": st.sampled_from(["web", "手机", "s"]),
        "role": st.sampled_from(["user", "user", "assistant", "system", "tool", "robot"]),
        "content": CONTENT,
        "metadata": METADATA,
        "idempotency_key": st.one_of(st.none(), st.sampled_from(["k1", "k2"])),
    }
)
TYPICAL = {
    "owner_id": "wang",
    "session_id": "web",
    "role": "user",
    "content": "",
    "metadata": {"n": 1},
    "idempotency_key": None,
}
# An append, or the exact repeat of an earlier one (a client's retry).
STEP = st.one_of(APPEND, st.integers(0, 20))
SCRIPT = st.fixed_dictionaries({content: st.lists(FACT, max_size=3) for content in SCRIPTED})


def append_runs(steps: list[Any], *, fast: bool) -> tuple[list[Any], dict[str, Any]]:
    """Run ``steps`` through one path of ``turn_append``; return its answers (turns or errors)
    and what it stored, each instant named by the turn written then."""
    answers: list[Any] = []
    progress: list[Any] = []
    bodies: list[dict[str, Any]] = []
    with rolled_back(), CaptureQueriesContext(connection) as queries:
        for step in steps:
            body = step if isinstance(step, dict) else bodies[step % len(bodies)] if bodies else {}
            if not body:
                continue
            bodies.append(body)
            try:
                answers.append(("turn", turns._turn_append(**body, fast=fast)))
            except IdempotencyKeyReused as e:
                answers.append(("reused", e.key, e.turn))
            except Exception as e:
                answers.append(("error", type(e).__name__, getattr(e, "message_dict", str(e))))
            progress.append(sorted(Owner.objects.values_list("external_id", "last_seq", "stamp")))
        stored = stored_rows()
        shown = [turn_shown(a) for a in answers]
    sql = [q["sql"] for q in queries]
    # NOTE: each path answered alone: the one call never fell back to the ORM's lock.
    if fast:
        assert not any("FOR UPDATE" in s for s in sql)
    else:
        assert not any("memory_turn_append" in s for s in sql)
    instants = {t["created_at"]: (t["owner__external_id"], t["seq"]) for t in stored["turns"]}
    named = json.loads(
        json.dumps(
            {"answers": shown, **stored},
            default=lambda v: ["at", *instants[v]] if isinstance(v, dt.datetime) else str(v),
        )
    )
    return named["answers"], {key: value for key, value in named.items() if key != "answers"} | {
        "progress": stamps_moved(progress)
    }


def turn_shown(answer: Any) -> Any:
    """An answer with its turn as the fields a caller sees (metadata typed)."""
    if answer[0] == "error":
        return list(answer)
    turn = answer[-1]
    return [
        *answer[:-1],
        turn.owner.external_id,
        turn.seq,
        turn.session_id,
        turn.role,
        turn.content,
        typed(turn.metadata),
        turn.idempotency_key,
        turn.created_at,
    ]


def stamps_moved(progress: list[Any]) -> list[Any]:
    """Per step, each owner's ``last_seq`` and whether its stamp grew (stamps come from a
    sequence, so their values differ between runs; they never go back)."""
    moved, last = [], {}
    for owners in progress:
        step = []
        for owner_id, seq, stamp in owners:
            assert stamp >= last.get(owner_id, 0)
            step.append([owner_id, seq, stamp > last.get(owner_id, 0)])
            last[owner_id] = stamp
        moved.append(step)
    return moved


def stored_rows() -> dict[str, Any]:
    """Every row an append writes, without pks or stamps (which differ between runs)."""

    def rows(model: Any, *fields: str, json_fields: tuple[str, ...] = ()) -> list[Any]:
        found = model.objects.order_by("owner__external_id", *fields)
        return [
            {k: typed(v) if k in json_fields else v for k, v in row.items()}
            for row in found.values("owner__external_id", *fields)
        ]

    return {
        "owners": list(
            Owner.objects.order_by("external_id").values(
                "external_id", "last_seq", "summary_tokens"
            )
        ),
        "turns": rows(
            Turn,
            "seq",
            "session_id",
            "role",
            "content",
            "metadata",
            "idempotency_key",
            "created_at",
            json_fields=("metadata",),
        ),
        "sessions": rows(Session, "session_id", "first_seen", "last_seen", "turn_count"),
        "facts": rows(
            Fact,
            "key",
            "value",
            "version",
            "session_id",
            "source_turn_seq",
            "updated_at",
            json_fields=("value",),
        ),
        "versions": rows(
            FactVersion,
            "key",
            "version",
            "value",
            "session_id",
            "source_turn_seq",
            "deleted",
            "updated_at",
            json_fields=("value",),
        ),
        "pending": PendingExtraction.objects.count(),
        "pending_summaries": rows(PendingSummary, "created_at", "enqueued_at"),
    }


# NOTE: the summary threshold: off (no summarizer), passed by nearly every turn, by a few, never.
SUMMARY_AFTER = st.sampled_from([None, 1, 3, 2000])


@settings(PROPERTY, max_examples=80)
@given(steps=st.lists(STEP, min_size=1, max_size=8), script=SCRIPT, summary_after=SUMMARY_AFTER)
@example(
    steps=[{**TYPICAL, "content": "hi"}, {**TYPICAL, "idempotency_key": "k1"}, 1, 0],
    script={
        "hi": [ExtractedFact("name", "Wang"), ExtractedFact("city", 1), ExtractedFact("ratio", 1.0)]
    },
    summary_after=None,
)
@example(
    steps=[{**TYPICAL, "content": "hi"}, {**TYPICAL, "content": "I like chess"}, 0],
    script={},
    summary_after=3,
)
def test_the_one_call_appends_as_the_orm_does(memory_settings, steps, script, summary_after):
    ScriptedExtractor.script = script
    extractor = "tests.test_postgres.ScriptedExtractor"
    summaries = (
        {"SUMMARIZER": None} if summary_after is None else {"SUMMARY_AFTER_TOKENS": summary_after}
    )
    with memory_settings(FACT_EXTRACTOR=extractor, MAX_FACTS=2, MAX_TURN_CHARS=12, **summaries):
        fast = append_runs(steps, fast=True)
        django = append_runs(steps, fast=False)
    assert fast == django


# Context read --------------------------------------------------------------------------------

INSTANT = st.datetimes(
    min_value=dt.datetime(2, 1, 1),
    max_value=dt.datetime(9998, 12, 31),
    timezones=st.sampled_from([dt.UTC, dt.timezone(dt.timedelta(hours=8))]),
)
NOW = dt.datetime(2026, 12, 2, 8, 0, tzinfo=dt.UTC)
MICROSECOND = dt.timedelta(microseconds=1)
STORED_JSON = st.recursive(
    st.one_of(JSON_LEAF.filter(lambda v: not isinstance(v, str)), TEXT),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)
STORED_METADATA = st.dictionaries(TEXT, STORED_JSON, max_size=3)
HISTORY = st.fixed_dictionaries(
    {
        "turns": st.lists(
            st.tuples(TEXT, STORED_METADATA, st.one_of(st.none(), INSTANT)), max_size=8
        ),
        "facts": st.dictionaries(
            st.sampled_from(["name", "likes", "city"]),
            st.tuples(STORED_JSON, st.one_of(st.none(), INSTANT), st.one_of(st.none(), INSTANT)),
            max_size=3,
        ),
        "summary": st.one_of(st.none(), st.tuples(TEXT, st.integers(1, 9), INSTANT)),
    }
)


@settings(PROPERTY, max_examples=40)
@given(
    owners=st.dictionaries(st.sampled_from(["wang", "li"]), HISTORY, max_size=2),
    reads=st.lists(
        st.tuples(st.sampled_from(["wang", "li", "nobody"]), st.integers(0, 10), INSTANT),
        max_size=4,
    ),
)
# NOTE: a float that jsonb keeps as an integer, near the end of 64 bits (one past it, 2e19,
# was the one discrepancy found, orjson reading it as a float; the validators now refuse it).
@example(
    owners={"wang": {"turns": [("", {"a": [9.2e18]}, None)], "facts": {}, "summary": None}},
    reads=[("wang", 1, NOW)],
)
@example(
    owners={"li": {"turns": [], "facts": {"city": (-9.2e18, None, None)}, "summary": None}},
    reads=[("li", 0, NOW)],
)
# NOTE: nineteen digits in a row anywhere (here in a turn's text) decode the whole read as Django
# decodes a jsonb value, with json.loads: a float and a wide integer beside them stay exact.
@example(
    owners={
        "wang": {
            "turns": [("1234567890123456789", {"a": 0.1, "b": [9223372036854775807]}, None)],
            "facts": {"city": (1.5, None, None)},
            "summary": None,
        }
    },
    reads=[("wang", 1, NOW)],
)
# NOTE: a fact expiring at the instant read is expired, one a microsecond later is not.
@example(
    owners={
        "li": {
            "turns": [],
            "facts": {"city": ("上海", None, NOW), "name": ("li", None, NOW + MICROSECOND)},
            "summary": None,
        }
    },
    reads=[("li", 0, NOW)],
)
# NOTE: a whole second: isoformat() then writes no fraction.
@example(
    owners={
        "wang": {
            "turns": [("", {}, dt.datetime(2000, 1, 1, tzinfo=dt.UTC))],
            "facts": {},
            "summary": ("我叫王建国", 1, dt.datetime(2000, 1, 1, tzinfo=dt.UTC)),
        }
    },
    reads=[("wang", 1, NOW)],
)
def test_the_one_statement_read_reads_as_the_orm_does(owners, reads):
    assert context_read.context_read_usable()
    with rolled_back():
        for owner_id, history in owners.items():
            for content, metadata, at in history["turns"]:
                turn = services.turn_append(
                    owner_id=owner_id,
                    session_id="s",
                    role="assistant",
                    content=content,
                    metadata=metadata,
                )
                if at is not None:
                    Turn.objects.filter(pk=turn.pk).update(created_at=at)
            for key, (value, at, expires_at) in history["facts"].items():
                services.fact_put(owner_id=owner_id, key=key, value=value)
                if at is not None:
                    Fact.objects.filter(owner__external_id=owner_id, key=key).update(updated_at=at)
                # NOTE: through update(): the service refuses an expiry in the past.
                Fact.objects.filter(owner__external_id=owner_id, key=key).update(
                    expires_at=expires_at
                )
            if history["summary"] is not None:
                text, through_seq, at = history["summary"]
                owner, _ = Owner.objects.get_or_create(external_id=owner_id)
                Summary.objects.create(
                    owner=owner, text=text, through_seq=through_seq, tokens=3, updated_at=at
                )
        for owner_id, n, now in reads:
            fast = context_read.context_read(owner_id, n, now)
            django = selectors.context.django_read(owner_id, n, now)
            assert typed(fast) == typed(django)
            assert fast[1] is django[1]


# Token authentication and the service check ------------------------------------------------

ACCOUNT_FLAGS = ("is_active", "is_superuser", "is_staff", "direct", "group", "other", "token")
ACCOUNT = st.fixed_dictionaries(
    {
        "is_active": st.booleans(),
        "is_superuser": st.booleans(),
        "is_staff": st.booleans(),
        "direct": st.booleans(),
        "group": st.booleans(),
        # NOTE: a permission of another name, and one of the same codename in another app:
        # neither is access_all_memories.
        "other": st.booleans(),
        "token": st.booleans(),
    }
)


def authenticated(auth: Any, key: str) -> Any:
    """What ``authenticate_credentials`` answers: the user and token, or the failure's text."""
    try:
        user, token = auth.authenticate_credentials(key)
    except exceptions.AuthenticationFailed as e:
        return ("failed", str(e.detail)), None
    fields = [f.attname for f in User._meta.concrete_fields]
    return ("user", [getattr(user, f) for f in fields], token.key, token.user_id), user


@settings(PROPERTY, max_examples=30)
@given(
    accounts=st.lists(ACCOUNT, min_size=1, max_size=4),
    guesses=st.lists(
        st.one_of(
            # NOTE: what a header can carry: no NUL, no lone surrogate.
            st.text(
                alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                max_size=41,
            ),
            st.sampled_from(["", "0" * 40, "é" * 40]),
        ),
        max_size=3,
    ),
)
# NOTE: hypothesis favours False, so an active token holder without the permission (the case
# where a wrong answer of the fast path would grant access) is named, with one holding it.
@example(
    accounts=[
        {**dict.fromkeys(ACCOUNT_FLAGS, False), "is_active": True, "is_staff": True, "token": True},
        {**dict.fromkeys(ACCOUNT_FLAGS, False), "is_active": True, "group": True, "token": True},
    ],
    guesses=[],
)
def test_the_one_statement_authenticates_and_checks_as_drf_and_model_backend_do(accounts, guesses):
    with rolled_back():
        wanted = Permission.objects.get(codename="access_all_memories")
        others = list(Permission.objects.filter(content_type__app_label="auth")[:1])
        others += list(Permission.objects.exclude(pk=wanted.pk).filter(codename__contains="memor"))
        group = Group.objects.create(name="services")
        group.permissions.add(wanted)
        bystanders = Group.objects.create(name="bystanders")
        bystanders.permissions.add(*others)
        keys = list(guesses)
        for i, account in enumerate(accounts):
            user = User.objects.create_user(
                f"user{i}",
                is_active=account["is_active"],
                is_superuser=account["is_superuser"],
                is_staff=account["is_staff"],
            )
            if account["direct"]:
                user.user_permissions.add(wanted)
            if account["group"]:
                user.groups.add(group)
            if account["other"]:
                user.user_permissions.add(*others)
                user.groups.add(bystanders)
            if account["token"]:
                token = Token.objects.create(user=user)
                keys += [token.key, token.key.upper(), token.key[:-1]]
        for key in keys:
            ours = TokenAuthentication()
            ours.reach_checked = True
            fast, fast_user = authenticated(ours, key)
            django, django_user = authenticated(drf_authentication.TokenAuthentication(), key)
            assert fast == django
            if django_user is not None:
                assert is_service_caller(fast_user) is django_user.has_perm(ACCESS_ALL)
        for user in User.objects.all():
            # NOTE: a user any other way authenticated (a session): the EXISTS on its own.
            assert is_service_caller(User.objects.get(pk=user.pk)) is (
                User.objects.get(pk=user.pk).has_perm(ACCESS_ALL)
            )


@pytest.fixture(autouse=True)
def _model_backend_only() -> Iterator[None]:
    """The one backend under which ``is_service_caller`` answers by its own statement."""
    with override_settings(AUTHENTICATION_BACKENDS=["django.contrib.auth.backends.ModelBackend"]):
        yield
