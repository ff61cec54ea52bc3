"""Tests of memory.admin: pages, search, filters and actions, and that every admin change keeps
the Redis copy coherent (nothing the admin changed or deleted is served stale afterwards)."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.contrib.messages import get_messages
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from memory import ops, selectors, services
from memory.models import Fact, FactVersion, Owner, Session, Turn

pytestmark = pytest.mark.django_db


@pytest.fixture
def chat(write):
    """Wang told the assistant his name in two tabs, then chatted; Li said one thing."""
    with write():
        services.fact_put(owner_id="wang", key="name", value="王建国", session_id="laptop")
        services.fact_put(owner_id="wang", key="likes", value=["篮球", "chess"])
        for i in range(1, 7):
            services.turn_append(
                owner_id="wang",
                session_id="laptop" if i <= 3 else "phone",
                role="user" if i % 2 else "assistant",
                content=f"turn {i} 我喜欢打篮球" if i == 1 else f"turn {i}",
            )
        services.turn_append(owner_id="li", session_id="web", role="user", content="hello")
    return Owner.objects.get(external_id="wang")


def seed_history(owner_id: str, turns: int, write) -> Owner:
    """An owner with ``turns`` turns in one session, written fast: one through the service, the
    rest bulk-inserted with ``last_seq`` and the session count fixed to match."""
    with write():
        services.turn_append(owner_id=owner_id, session_id="tab", role="user", content="turn 1")
        services.fact_put(owner_id=owner_id, key="name", value="Wang")
    owner = Owner.objects.get(external_id=owner_id)
    now = timezone.now()
    Turn.objects.bulk_create(
        Turn(
            owner=owner,
            seq=seq,
            session_id="tab",
            role="user",
            content=f"turn {seq}",
            created_at=now,
        )
        for seq in range(2, turns + 1)
    )
    Owner.objects.filter(pk=owner.pk).update(last_seq=turns)
    Session.objects.filter(owner=owner).update(turn_count=turns)
    owner.refresh_from_db()
    return owner


def url(model: str, view: str, *args: object) -> str:
    return reverse(f"admin:memory_{model}_{view}", args=args)


def results(response) -> list:
    return list(response.context["cl"].result_list)


def texts(response) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


def warm(owner_id: str) -> None:
    """Leave a cached copy of the owner, and check it is one."""
    selectors.context_get(owner_id=owner_id)
    assert selectors.context_get(owner_id=owner_id)["source"] == "cache"


# Owners


def test_owner_changelist_searches_by_owner_id(admin_client, chat):
    response = admin_client.get(url("owner", "changelist"), {"q": "wan"})
    assert response.status_code == 200
    assert [owner.external_id for owner in results(response)] == ["wang"]


def test_owner_changelist_filters_pending_cache_updates(admin_client, chat):
    Owner.objects.filter(external_id="li").update(cache_dirty=True)
    response = admin_client.get(url("owner", "changelist"), {"cache_dirty__exact": "1"})
    assert [owner.external_id for owner in results(response)] == ["li"]


def test_owner_page_is_view_only(admin_client, chat):
    assert admin_client.get(url("owner", "add")).status_code == 403
    response = admin_client.get(url("owner", "change", chat.pk))
    assert response.status_code == 200
    assert response.context["has_change_permission"] is False
    post = admin_client.post(url("owner", "change", chat.pk), {"external_id": "evil"})
    assert post.status_code == 403
    assert Owner.objects.filter(external_id="wang").exists()


def test_owner_page_shows_latest_turns_and_facts_inline(admin_client, chat):
    response = admin_client.get(url("owner", "change", chat.pk))
    facts, turns = (formset.formset for formset in response.context["inline_admin_formsets"])
    assert [form.instance.seq for form in turns.forms] == [6, 5, 4, 3, 2, 1]
    assert [form.instance.key for form in facts.forms] == ["likes", "name"]
    page = response.content.decode()
    assert "王建国" in page and "篮球" in page
    assert f"{url('turn', 'changelist')}?owner={chat.pk}" in page
    assert f"{url('fact', 'changelist')}?owner={chat.pk}" in page


def test_owner_page_says_what_is_not_summarised_yet(admin_client, chat, write):
    """Beside "none yet", the tokens counted towards the first summary, said as such."""
    page = admin_client.get(url("owner", "change", chat.pk)).content.decode()
    assert "none yet" in page
    tokens = Owner.objects.get(pk=chat.pk).summary_tokens
    assert tokens > 0
    assert "Summary tokens" not in page
    assert (
        f"{tokens} tokens of turns; the first summary is written once they pass 2,000 "
        "(MEMORY[&#x27;SUMMARY_AFTER_TOKENS&#x27;])."
    ) in page
    with write():
        ops.summary_refresh(owner_id="wang")
    page = admin_client.get(url("owner", "change", chat.pk)).content.decode()
    assert "none yet" not in page
    assert "0 tokens of turns; a refresh is written once they pass 2,000" in page


def test_owner_page_inlines_are_bounded(admin_client, write):
    owner = seed_history("wang", 300, write)
    response = admin_client.get(url("owner", "change", owner.pk))
    turns = response.context["inline_admin_formsets"][1].formset
    assert [form.instance.seq for form in turns.forms] == list(range(300, 280, -1))


def _owner_page_queries(client, owner: Owner) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url("owner", "change", owner.pk))
    assert response.status_code == 200
    return len(queries)


def test_owner_page_queries_do_not_grow_with_history(admin_client, write):
    short = seed_history("short", 10, write)
    long = seed_history("long", 2_000, write)
    _owner_page_queries(admin_client, short)  # the session and user, once loaded
    assert _owner_page_queries(admin_client, short) == _owner_page_queries(admin_client, long)
    # NOTE: six with the summary's read (one row).
    assert _owner_page_queries(admin_client, long) <= 6


def test_owner_delete_page_counts_instead_of_listing_turns(admin_client, write):
    owner = seed_history("wang", 2_000, write)
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(url("owner", "delete", owner.pk))
    assert response.status_code == 200
    assert len(queries) <= 12
    page = response.content.decode()
    assert "2,000 turns" in page
    assert "turn 1999" not in page


def test_owner_delete_forgets_through_the_service(admin_client, chat, write):
    warm("wang")
    with write():
        response = admin_client.post(url("owner", "delete", chat.pk), {"post": "yes"})
    assert response.status_code == 302
    assert not Owner.objects.filter(external_id="wang").exists()
    context = selectors.context_get(owner_id="wang")
    assert (context["turns"], context["facts"]) == ([], {})


def test_forget_action_confirms_then_forgets(admin_client, chat, write):
    li = Owner.objects.get(external_id="li")
    warm("wang")
    selected = {"action": "forget_owners", ACTION_CHECKBOX_NAME: [chat.pk, li.pk]}
    confirm = admin_client.post(url("owner", "changelist"), {**selected, "index": 0})
    assert confirm.status_code == 200
    assert confirm.templates[0].name == "admin/memory/owner/forget_confirmation.html"
    assert Owner.objects.count() == 2
    with write():
        response = admin_client.post(url("owner", "changelist"), {**selected, "post": "yes"})
    assert response.status_code == 302
    assert texts(response) == ["Forgot 2 owner(s)."]
    assert not Owner.objects.exists()
    assert selectors.context_get(owner_id="wang")["facts"] == {}


def test_forgotten_owner_leaves_no_trace_in_admin(admin_client, chat, write):
    """Forget means forgotten: no list, search or page of the admin shows anything of it."""
    selected = {"action": "forget_owners", ACTION_CHECKBOX_NAME: [chat.pk], "post": "yes"}
    with write():
        admin_client.post(url("owner", "changelist"), selected)
    for model in ("owner", "turn", "fact", "session"):
        page = admin_client.get(url(model, "changelist")).content.decode()
        assert "王建国" not in page and "篮球" not in page and ">wang<" not in page
        for needle in ("wang", "王建国", "篮球"):
            assert results(admin_client.get(url(model, "changelist"), {"q": needle})) == []
    assert admin_client.get(url("owner", "change", chat.pk)).status_code in (302, 404)


def test_owner_changelist_offers_forget_not_delete(admin_client, chat):
    actions = admin_client.get(url("owner", "changelist")).context["action_form"]
    choices = [name for name, _ in actions.fields["action"].choices]
    assert choices == ["", "forget_owners", "drop_cached_copy", "export_memory"]


def test_drop_cached_copy_action_makes_next_read_rehydrate(admin_client, chat):
    warm("wang")
    response = admin_client.post(
        url("owner", "changelist"),
        {"action": "drop_cached_copy", ACTION_CHECKBOX_NAME: [chat.pk], "index": 0},
    )
    assert response.status_code == 302
    assert texts(response) == ["Dropped the cached copy of 1 owner(s)."]
    assert selectors.context_get(owner_id="wang")["source"] == "database"
    assert selectors.context_get(owner_id="wang")["source"] == "cache"


def test_drop_cached_copy_with_redis_down_says_so(admin_client, chat, dead_cache):
    response = admin_client.post(
        url("owner", "changelist"),
        {"action": "drop_cached_copy", ACTION_CHECKBOX_NAME: [chat.pk], "index": 0},
    )
    assert response.status_code == 302
    assert texts(response) == [
        "Redis did not confirm for wang; is it down? Their copies are unchanged."
    ]


# Sessions


def test_session_changelist_filters_by_owner_and_links_to_turns(admin_client, chat):
    response = admin_client.get(url("session", "changelist"), {"owner": chat.pk})
    assert [s.session_id for s in results(response)] == ["phone", "laptop"]
    assert f"?owner={chat.pk}&amp;session=phone" in response.content.decode()
    assert admin_client.get(url("session", "add")).status_code == 403


# Turns


def test_turn_changelist_filters_by_owner_session_role_and_date(admin_client, chat):
    changelist = url("turn", "changelist")
    by_owner = admin_client.get(changelist, {"owner": chat.pk})
    assert [t.seq for t in results(by_owner)] == [6, 5, 4, 3, 2, 1]
    by_session = admin_client.get(changelist, {"owner": chat.pk, "session": "laptop"})
    assert [t.seq for t in results(by_session)] == [3, 2, 1]
    by_role = admin_client.get(changelist, {"owner": chat.pk, "role__exact": "assistant"})
    assert [t.seq for t in results(by_role)] == [6, 4, 2]
    midnight = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)
    by_date = admin_client.get(
        changelist, {"created_at__gte": str(midnight), "role__exact": "user", "owner": chat.pk}
    )
    assert [t.seq for t in results(by_date)] == [5, 3, 1]


def test_turn_session_filter_offers_the_owners_sessions(admin_client, chat):
    response = admin_client.get(url("turn", "changelist"), {"owner": chat.pk})
    specs = {spec.title: spec for spec in response.context["cl"].filter_specs}
    assert [value for value, _ in specs["session"].lookup_choices] == ["phone", "laptop"]
    assert specs["owner"].lookup_choices == [(str(chat.pk), "wang")]


def test_turn_changelist_rejects_a_bad_owner_filter(admin_client, chat):
    response = admin_client.get(url("turn", "changelist"), {"owner": "wang"})
    assert response.status_code == 302
    assert response["Location"].endswith("?e=1")


@pytest.mark.parametrize("model", ["turn", "session", "fact"])
@pytest.mark.parametrize(
    "query",
    [
        {"owner": "²"},  # str.isdigit() takes it, int() does not
        {"owner": "١٢"},  # Arabic-Indic digits: int() takes them, the database id is ASCII
        {"owner": "9" * 30},  # past a bigint
        {"owner": "-1"},
        {"session": "\x00"},
        {"session": "web\x00"},
        {"owner": "²", "session": "\x00"},
        {"q": "\x00"},
        {"q": "wang\x00"},
    ],
)
def test_a_bad_owner_or_session_filter_is_refused_not_a_500(admin_client, chat, model, query):
    response = admin_client.get(url(model, "changelist"), query)
    assert response.status_code in (200, 302)
    if response.status_code == 302:
        assert response["Location"].endswith("?e=1")


def test_turn_search_by_owner_id_and_content(admin_client, chat):
    changelist = url("turn", "changelist")
    assert [t.owner.external_id for t in results(admin_client.get(changelist, {"q": "li"}))] == [
        "li"
    ]
    found = results(admin_client.get(changelist, {"q": "篮球"}))
    assert [(t.owner.external_id, t.seq) for t in found] == [("wang", 1)]


def test_turns_are_read_only(admin_client, chat):
    turn = Turn.objects.get(owner=chat, seq=1)
    assert admin_client.get(url("turn", "add")).status_code == 403
    page = admin_client.get(url("turn", "change", turn.pk))
    assert page.status_code == 200
    assert page.context["has_change_permission"] is False
    assert admin_client.post(url("turn", "change", turn.pk), {"content": "x"}).status_code == 403
    assert Turn.objects.get(pk=turn.pk).content == turn.content


def test_turn_page_shows_metadata_pretty_and_non_ascii(admin_client, write):
    with write():
        turn = services.turn_append(
            owner_id="wang",
            session_id="tab",
            role="user",
            content="我叫王建国",
            metadata={"来源": ["手机", "app"]},
        )
    page = admin_client.get(url("turn", "change", turn.pk)).content.decode()
    assert "我叫王建国" in page
    assert "{\n  &quot;来源&quot;: [\n    &quot;手机&quot;,\n    &quot;app&quot;\n  ]\n}" in page


def test_turn_delete_is_not_served_stale(admin_client, chat, write):
    warm("wang")
    turn = Turn.objects.get(owner=chat, seq=4)
    with write():
        response = admin_client.post(url("turn", "delete", turn.pk), {"post": "yes"})
    assert response.status_code == 302
    context = selectors.context_get(owner_id="wang")
    assert [t["seq"] for t in context["turns"]] == [1, 2, 3, 5, 6]
    assert Session.objects.get(owner=chat, session_id="phone").turn_count == 2


def test_turn_bulk_delete_is_not_served_stale(admin_client, chat, write):
    warm("wang")
    pks = list(Turn.objects.filter(owner=chat, seq__in=[1, 6]).values_list("pk", flat=True))
    selected = {"action": "delete_selected", ACTION_CHECKBOX_NAME: pks}
    assert admin_client.post(url("turn", "changelist"), {**selected, "index": 0}).status_code == 200
    with write():
        response = admin_client.post(url("turn", "changelist"), {**selected, "post": "yes"})
    assert response.status_code == 302
    assert [t["seq"] for t in selectors.context_get(owner_id="wang")["turns"]] == [2, 3, 4, 5]


# Facts


def test_fact_changelist_searches_by_key_and_filters_by_owner(admin_client, chat, write):
    with write():
        services.fact_put(owner_id="li", key="name", value="Li")
    changelist = url("fact", "changelist")
    by_key = results(admin_client.get(changelist, {"q": "lik"}))
    assert [(f.owner.external_id, f.key) for f in by_key] == [("wang", "likes")]
    by_owner = results(admin_client.get(changelist, {"owner": chat.pk}))
    assert [f.key for f in by_owner] == ["likes", "name"]


def test_fact_form_shows_json_pretty_and_non_ascii(admin_client, chat):
    fact = Fact.objects.get(owner=chat, key="likes")
    page = admin_client.get(url("fact", "change", fact.pk)).content.decode()
    assert "[\n  &quot;篮球&quot;,\n  &quot;chess&quot;\n]" in page


def test_fact_edit_updates_the_cached_context(admin_client, chat, write):
    warm("wang")
    fact = Fact.objects.get(owner=chat, key="name")
    with write():
        response = admin_client.post(
            url("fact", "change", fact.pk),
            {"value": json.dumps("王小明", ensure_ascii=False), "expected_version": "1"},
        )
    assert response.status_code == 302
    context = selectors.context_get(owner_id="wang")
    assert context["facts"]["name"] == "王小明"
    assert context["source"] == "cache"
    fact.refresh_from_db()
    assert (fact.value, fact.version, fact.session_id) == ("王小明", 2, None)
    history = selectors.fact_history(owner_id="wang", key="name").results
    assert [version["value"] for version in history] == ["王小明", "王建国"]


def test_fact_edit_after_a_change_meanwhile_is_refused(admin_client, chat, write):
    fact = Fact.objects.get(owner=chat, key="name")
    with write():
        services.fact_put(owner_id="wang", key="name", value="Jim")
        response = admin_client.post(
            url("fact", "change", fact.pk), {"value": '"Bob"', "expected_version": "1"}
        )
    assert response.status_code == 302
    assert response["Location"] == url("fact", "change", fact.pk)
    assert "was changed meanwhile (now version 2)" in texts(response)[0]
    assert selectors.context_get(owner_id="wang")["facts"]["name"] == "Jim"


def test_fact_edit_rejects_bad_json(admin_client, chat):
    fact = Fact.objects.get(owner=chat, key="name")
    response = admin_client.post(
        url("fact", "change", fact.pk), {"value": "{not json", "expected_version": "1"}
    )
    assert response.status_code == 200
    assert "value" in response.context["adminform"].form.errors
    assert Fact.objects.get(pk=fact.pk).value == "王建国"


def test_fact_add_goes_through_the_service(admin_client, chat, write):
    warm("wang")
    with write():
        response = admin_client.post(
            url("fact", "add"), {"user_id": "wang", "key": "location", "value": '"上海"'}
        )
    assert response.status_code == 302
    assert selectors.context_get(owner_id="wang")["facts"]["location"] == "上海"
    assert Fact.objects.get(owner=chat, key="location").version == 1


def test_fact_edit_sets_and_clears_the_expiry_and_names_the_admin(admin_client, chat, write):
    fact = Fact.objects.get(owner=chat, key="name")
    page = admin_client.get(url("fact", "change", fact.pk)).content.decode()
    assert 'name="expires_at_0"' in page and "memory_expire" in page
    when = timezone.localtime(timezone.now() + dt.timedelta(days=2)).replace(microsecond=0)
    with write():
        response = admin_client.post(
            url("fact", "change", fact.pk),
            {
                "value": '"王建国"',
                "expected_version": "1",
                "expires_at_0": when.strftime("%Y-%m-%d"),
                "expires_at_1": when.strftime("%H:%M:%S"),
            },
        )
    assert response.status_code == 302
    fact.refresh_from_db()
    assert (fact.version, fact.expires_at) == (2, when)
    assert selectors.fact_list(owner_id="wang")[1]["expires_at"] is not None
    page = admin_client.get(url("fact", "change", fact.pk)).content.decode()
    assert when.strftime("%Y-%m-%d") in page and "by admin:admin" in page
    changelist = admin_client.get(url("fact", "changelist")).content.decode()
    assert "column-expires_at" in changelist
    with write():
        admin_client.post(
            url("fact", "change", fact.pk), {"value": '"王建国"', "expected_version": "2"}
        )
    fact.refresh_from_db()
    assert (fact.version, fact.expires_at) == (3, None)
    versions = FactVersion.objects.filter(key="name").order_by("version")
    assert list(versions.values_list("actor", flat=True)) == [
        "python",
        "admin:admin",
        "admin:admin",
    ]


def test_fact_edit_refuses_an_expiry_in_the_past(admin_client, chat):
    fact = Fact.objects.get(owner=chat, key="name")
    response = admin_client.post(
        url("fact", "change", fact.pk),
        {
            "value": '"王建国"',
            "expected_version": "1",
            "expires_at_0": "2001-01-01",
            "expires_at_1": "00:00:00",
        },
    )
    assert response.status_code == 200
    assert "expires_at" in response.context["adminform"].form.errors
    assert Fact.objects.get(pk=fact.pk).version == 1


def test_fact_delete_names_the_admin_in_history(admin_client, chat, write):
    fact = Fact.objects.get(owner=chat, key="name")
    with write():
        admin_client.post(url("fact", "delete", fact.pk), {"post": "yes"})
    last = FactVersion.objects.filter(key="name").order_by("-version").first()
    assert (last.deleted, last.actor) == (True, "admin:admin")


def test_fact_add_validates_owner_and_key(admin_client, db):
    response = admin_client.post(
        url("fact", "add"), {"user_id": "bad id!", "key": "Bad Key", "value": "1"}
    )
    assert response.status_code == 200
    assert set(response.context["adminform"].form.errors) == {"user_id", "key"}
    assert not Fact.objects.exists()


@pytest.mark.parametrize("key", [".", ".."])
def test_fact_add_refuses_a_key_made_only_of_dots(admin_client, db, key):
    response = admin_client.post(url("fact", "add"), {"user_id": "wang", "key": key, "value": "1"})
    assert response.status_code == 200
    assert "only of dots" in response.context["adminform"].form.errors["key"][0]
    assert not Fact.objects.exists()


def test_a_fact_keyed_only_by_dots_can_still_be_deleted_in_the_admin(admin_client, chat, write):
    """As stored before such keys were refused; the admin deletes it through the service."""
    fact = Fact.objects.get(owner=chat, key="likes")
    Fact.objects.filter(pk=fact.pk).update(key="..")
    with write():
        response = admin_client.post(url("fact", "delete", fact.pk), {"post": "yes"})
    assert response.status_code == 302
    assert selectors.context_get(owner_id="wang")["facts"] == {"name": "王建国"}
    assert selectors.fact_history(owner_id="wang", key="..").results[0]["deleted"] is True


def test_fact_delete_is_not_served_stale(admin_client, chat, write):
    warm("wang")
    fact = Fact.objects.get(owner=chat, key="likes")
    with write():
        response = admin_client.post(url("fact", "delete", fact.pk), {"post": "yes"})
    assert response.status_code == 302
    assert selectors.context_get(owner_id="wang")["facts"] == {"name": "王建国"}
    history = selectors.fact_history(owner_id="wang", key="likes").results
    assert history[0]["deleted"] is True


def test_fact_bulk_delete_is_not_served_stale(admin_client, chat, write):
    warm("wang")
    pks = list(Fact.objects.filter(owner=chat).values_list("pk", flat=True))
    with write():
        response = admin_client.post(
            url("fact", "changelist"),
            {"action": "delete_selected", ACTION_CHECKBOX_NAME: pks, "post": "yes"},
        )
    assert response.status_code == 302
    assert selectors.context_get(owner_id="wang")["facts"] == {}


# Permissions: every memory page needs access_all_memories (as the API), then the model's own


MEMORY_MODEL_PERMISSIONS = [
    f"{action}_{model}"
    for action in ("view", "change", "delete", "add")
    for model in ("owner", "fact", "turn", "session", "factversion")
]


def _staff_with(client, staff_user, *codenames: str, service: bool = True):
    if service:
        codenames = (*codenames, "access_all_memories")
    staff_user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client.force_login(staff_user)
    return client


def test_staff_without_the_permission_sees_nothing_even_with_model_permissions(
    client, staff_user, chat
):
    client = _staff_with(client, staff_user, *MEMORY_MODEL_PERMISSIONS, service=False)
    index = client.get(reverse("admin:index"))
    assert index.status_code == 200
    assert [app["app_label"] for app in index.context["app_list"]] == []
    fact = Fact.objects.get(owner=chat, key="name")
    for page in (
        url("owner", "changelist"),
        url("owner", "change", chat.pk),
        url("fact", "changelist"),
        url("fact", "change", fact.pk),
        url("turn", "changelist"),
        url("session", "changelist"),
    ):
        assert client.get(page).status_code == 403, page
    assert client.post(url("owner", "delete", chat.pk), {"post": "yes"}).status_code == 403
    assert client.post(url("fact", "change", fact.pk), {"value": '"x"'}).status_code == 403
    # NOTE: and the API agrees: an ordinary user, who reaches only the owner named "ops".
    api = APIClient()
    api.force_authenticate(staff_user)
    assert api.get("/api/memory/users/wang/facts/").status_code == 404
    assert api.delete("/api/memory/users/wang/").status_code == 404
    assert selectors.context_get(owner_id="wang")["facts"]["name"] == "王建国"


def test_staff_with_no_permission_at_all_sees_nothing(client, staff_user, chat):
    client.force_login(staff_user)
    assert client.get(reverse("admin:index")).context["app_list"] == []
    assert client.get(url("owner", "changelist")).status_code == 403


def test_view_only_staff_sees_facts_but_cannot_act(client, staff_user, chat):
    client = _staff_with(client, staff_user, "view_owner", "view_fact", "view_turn")
    owners = client.get(url("owner", "changelist"))
    assert owners.status_code == 200
    assert owners.context["action_form"] is None
    fact = Fact.objects.get(owner=chat, key="likes")
    page = client.get(url("fact", "change", fact.pk))
    assert page.status_code == 200
    assert page.context["has_change_permission"] is False
    assert "[\n  &quot;篮球&quot;,\n  &quot;chess&quot;\n]" in page.content.decode()
    assert "expected_version" not in page.content.decode()
    post = client.post(url("fact", "change", fact.pk), {"value": '"x"', "expected_version": "1"})
    assert post.status_code == 403
    turn = Turn.objects.get(owner=chat, seq=1)
    assert client.post(url("turn", "delete", turn.pk), {"post": "yes"}).status_code == 403
    assert client.post(url("owner", "delete", chat.pk), {"post": "yes"}).status_code == 403
    assert Owner.objects.filter(pk=chat.pk).exists()


def test_fact_edits_need_the_change_permission(client, staff_user, chat, write):
    client = _staff_with(client, staff_user, "view_fact", "view_owner")
    fact = Fact.objects.get(owner=chat, key="name")
    edit = {"value": json.dumps("王小明", ensure_ascii=False), "expected_version": "1"}
    assert client.post(url("fact", "change", fact.pk), edit).status_code == 403
    staff_user.user_permissions.add(Permission.objects.get(codename="change_fact"))
    with write():
        response = client.post(url("fact", "change", fact.pk), edit)
    assert response.status_code == 302
    assert selectors.context_get(owner_id="wang")["facts"]["name"] == "王小明"


def test_forget_needs_the_delete_permission_on_owners(client, staff_user, chat, write):
    client = _staff_with(client, staff_user, "view_owner", "change_owner")
    forget = {"action": "forget_owners", ACTION_CHECKBOX_NAME: [chat.pk], "post": "yes"}
    client.post(url("owner", "changelist"), forget)
    assert client.post(url("owner", "delete", chat.pk), {"post": "yes"}).status_code == 403
    assert Owner.objects.filter(pk=chat.pk).exists()
    staff_user.user_permissions.add(Permission.objects.get(codename="delete_owner"))
    with write():
        response = client.post(url("owner", "changelist"), forget)
    assert response.status_code == 302
    assert not Owner.objects.filter(pk=chat.pk).exists()


def test_cache_and_forget_actions_follow_owner_permissions(client, staff_user, chat):
    client = _staff_with(client, staff_user, "view_owner", "change_owner")
    actions = client.get(url("owner", "changelist")).context["action_form"]
    assert [name for name, _ in actions.fields["action"].choices] == [
        "",
        "drop_cached_copy",
        "export_memory",
    ]
    staff_user.user_permissions.add(Permission.objects.get(codename="delete_owner"))
    actions = client.get(url("owner", "changelist")).context["action_form"]
    assert [name for name, _ in actions.fields["action"].choices] == [
        "",
        "forget_owners",
        "drop_cached_copy",
        "export_memory",
    ]


# Forget leaves no trace in the admin log


def _log_naming(owner_id: str, row_ids: dict[type, list[int]]) -> list[LogEntry]:
    """Admin log entries that name ``owner_id`` or one of the rows it had."""
    named = []
    for entry in LogEntry.objects.all():
        model = entry.content_type.model_class()
        by_name = owner_id in entry.object_repr or owner_id in entry.change_message
        by_row = entry.object_id is not None and int(entry.object_id) in row_ids.get(model, [])
        if by_name or by_row:
            named.append(entry)
    return named


def _row_ids(owner: Owner) -> dict[type, list[int]]:
    return {
        model: list(model.objects.filter(owner=owner).values_list("pk", flat=True))
        for model in (Session, Turn, Fact, FactVersion)
    } | {Owner: [owner.pk]}


def _operate_on_wang(admin_client, chat, write) -> None:
    """An operator edits, adds and deletes through the admin: each logged, most naming wang."""
    name = Fact.objects.get(owner=chat, key="name")
    with write():
        admin_client.post(
            url("fact", "change", name.pk), {"value": '"王小明"', "expected_version": "1"}
        )
        admin_client.post(
            url("fact", "add"), {"user_id": "wang", "key": "location", "value": '"上海"'}
        )
        admin_client.post(
            url("turn", "delete", Turn.objects.get(owner=chat, seq=6).pk), {"post": "yes"}
        )
        li_fact = services.fact_put(owner_id="li", key="name", value="Li")[0]
        admin_client.post(
            url("fact", "change", li_fact.pk), {"value": '"Li Lei"', "expected_version": "1"}
        )
    # NOTE: an entry of an earlier owner of the same id (forgotten outside the admin), and the
    # ones Django wrote for wang's rows, by pk and by name.
    LogEntry.objects.create(
        user_id=User.objects.get(username="admin").pk,
        content_type=ContentType.objects.get_for_model(Owner),
        object_id="999999",
        object_repr="wang",
        action_flag=CHANGE,
        change_message="[]",
    )
    # NOTE: the fact changed, the fact added, the earlier owner (the deleted turn's entry names
    # neither wang nor a row he still has).
    assert len(_log_naming("wang", _row_ids(chat))) == 3


def test_forgetting_an_owner_in_the_admin_leaves_no_entry_naming_it(admin_client, chat, write):
    _operate_on_wang(admin_client, chat, write)
    rows = _row_ids(Owner.objects.get(pk=chat.pk))
    with write():
        response = admin_client.post(url("owner", "delete", chat.pk), {"post": "yes"})
    assert response.status_code == 302
    assert not Owner.objects.filter(external_id="wang").exists()
    assert _log_naming("wang", rows) == []
    recorded = LogEntry.objects.get(action_flag=DELETION, content_type__model="owner")
    assert (recorded.object_id, recorded.object_repr) == (None, "1 memory owner (ids not kept)")
    assert recorded.user.username == "admin"
    # NOTE: what the operator did to another owner stays on record.
    assert LogEntry.objects.filter(object_repr="name v2", action_flag=CHANGE).count() == 1


def test_the_bulk_forget_action_is_recorded_with_a_count_only(admin_client, chat, write):
    _operate_on_wang(admin_client, chat, write)
    li = Owner.objects.get(external_id="li")
    rows = _row_ids(Owner.objects.get(pk=chat.pk))
    li_rows = _row_ids(li)
    selected = {"action": "forget_owners", ACTION_CHECKBOX_NAME: [chat.pk, li.pk], "post": "yes"}
    with write():
        response = admin_client.post(url("owner", "changelist"), selected)
    assert response.status_code == 302
    assert _log_naming("wang", rows) == [] and _log_naming("li", li_rows) == []
    recorded = LogEntry.objects.get(action_flag=DELETION, content_type__model="owner")
    assert recorded.object_repr == "2 memory owners (ids not kept)"
    assert recorded.change_message == (
        "Forgot 2 memory owners: turns, facts, sessions and cached copy."
    )


def test_a_forget_through_the_api_scrubs_the_admin_log_too(admin_client, chat, write):
    _operate_on_wang(admin_client, chat, write)
    rows = _row_ids(Owner.objects.get(pk=chat.pk))
    with write():
        assert services.memory_forget(owner_id="wang") is True
    assert _log_naming("wang", rows) == []
    assert LogEntry.objects.filter(object_repr="name v2").count() == 1


def test_turn_search_ranks_best_match_first_in_english_and_chinese(admin_client, write):
    with write():
        for text in ("I like golf", "basketball basketball basketball", "I played basketball"):
            services.turn_append(owner_id="zhao", session_id="s", role="user", content=text)
        services.turn_append(owner_id="zhao", session_id="s", role="user", content="我喜欢打篮球")
    changelist = url("turn", "changelist")
    found = results(admin_client.get(changelist, {"q": "basketball"}))
    assert [t.content for t in found] == ["basketball basketball basketball", "I played basketball"]
    assert [t.content for t in results(admin_client.get(changelist, {"q": "篮球"}))] == [
        "我喜欢打篮球"
    ]
