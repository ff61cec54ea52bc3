"""Tests of memory.checks: one id per problem with the MEMORY setting or the cache alias."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from django.conf import settings
from django.core.checks import run_checks
from django.db import connection
from django.test import override_settings

REDIS_OPTIONS = {"SOCKET_CONNECT_TIMEOUT": 0.2, "SOCKET_TIMEOUT": 0.2}


def messages(**overrides: Any) -> list[Any]:
    """The memory app's check messages with ``overrides`` applied to the settings."""
    with warnings.catch_warnings():
        # NOTE: Django warns that overriding DATABASES can surprise; the checks only read it.
        warnings.filterwarnings("ignore", "Overriding setting DATABASES", UserWarning)
        with override_settings(**overrides):
            return [m for m in run_checks() if m.id and m.id.startswith("memory.")]


def ids(**overrides: Any) -> list[str]:
    return [m.id for m in messages(**overrides)]


def memory(**keys: Any) -> dict[str, Any]:
    return {**settings.MEMORY, **keys}


def caches(**aliases: Any) -> dict[str, Any]:
    return {**settings.CACHES, **aliases}


def test_the_suites_settings_pass():
    assert ids() == []


def test_no_memory_setting_at_all_passes():
    assert ids(MEMORY=None) == []
    assert ids(MEMORY={}) == []


@pytest.mark.parametrize("value", [["CACHE_TTL", 10], "CACHE_TTL=10", 42])
def test_memory_not_a_dict(value):
    found = messages(MEMORY=value)
    assert [m.id for m in found] == ["memory.E001"]
    assert found[0].msg.startswith("MEMORY must be a dict, not ")


def test_unknown_keys_warn_and_other_checks_still_run():
    found = messages(MEMORY=memory(CONTXT_TURNS=5, CONTEXT_TURNS=300, MAX_CONTEXT_TURNS=250))
    assert [m.id for m in found] == ["memory.W001", "memory.E005", "memory.W002"]
    assert found[0].msg == "MEMORY has unknown keys: CONTXT_TURNS."


@pytest.mark.parametrize(
    "name",
    [
        "CACHE_TTL",
        "CACHE_TURNS",
        "CONTEXT_TURNS",
        "MAX_CONTEXT_TURNS",
        "MAX_TURN_CHARS",
        "MAX_JSON_BYTES",
        "MAX_FACTS",
        "MAX_PAGE_BYTES",
        "HEAVY_READS_PER_CALLER",
        "LINK_BATCH_TURNS",
    ],
)
@pytest.mark.parametrize("value", [0, -5, 1.5, "100", None, True])
def test_counts_must_be_positive_integers(name, value):
    # NOTE: keep the cross-checks between turn counts quiet, to see this one error alone.
    keys = {"CACHE_TURNS": 1000, "CONTEXT_TURNS": 1, "MAX_CONTEXT_TURNS": 1000, name: value}
    assert ids(MEMORY=memory(**keys)) == ["memory.E002"]


def test_a_ttl_that_is_not_positive_says_seconds():
    [found] = messages(MEMORY=memory(CACHE_TTL=0))
    assert found.msg == "MEMORY['CACHE_TTL'] must be a positive integer (seconds), not 0."


@pytest.mark.parametrize(
    "name", ["RECONCILE_INTERVAL", "RECONCILE_GRACE", "SUSPECT_WINDOW", "HISTORY_LEASE"]
)
@pytest.mark.parametrize("value", [-1, "2", None, float("nan"), float("inf"), False])
def test_durations_must_be_numbers_of_seconds(name, value):
    assert ids(MEMORY=memory(**{name: value})) == ["memory.E003"]


@pytest.mark.parametrize("name", ["RECONCILE_GRACE", "SUSPECT_WINDOW"])
@pytest.mark.parametrize("value", [0, 0.0, 0.5, 30])
def test_durations_may_be_zero_or_more(name, value):
    assert ids(MEMORY=memory(**{name: value})) == []


@pytest.mark.parametrize("value", [0, 0.0, -0.0])
def test_the_reconcile_interval_must_be_positive(value):
    """An interval of 0 made every process's repairer sweep the database without pause."""
    [found] = messages(MEMORY=memory(RECONCILE_INTERVAL=value))
    assert found.id == "memory.E003"
    assert found.msg == (
        f"MEMORY['RECONCILE_INTERVAL'] must be a number of seconds > 0, not {value!r}."
    )
    assert ids(MEMORY=memory(RECONCILE_INTERVAL=0.01)) == []


@pytest.mark.parametrize("value", ["", "my app", "{memory}", "mem*", "mem?", "mem[1]", 7, None])
def test_key_prefix_must_be_usable_in_keys_and_scan_patterns(value):
    assert ids(MEMORY=memory(KEY_PREFIX=value)) == ["memory.E004"]


def test_key_prefix_may_have_colons_and_dashes():
    assert ids(MEMORY=memory(KEY_PREFIX="site-1:memory")) == []


def test_context_turns_above_the_maximum():
    found = messages(MEMORY=memory(CONTEXT_TURNS=60, MAX_CONTEXT_TURNS=50, CACHE_TURNS=100))
    assert [m.id for m in found] == ["memory.E005"]
    assert found[0].msg == "MEMORY['CONTEXT_TURNS'] (60) exceeds MEMORY['MAX_CONTEXT_TURNS'] (50)."


def test_cache_turns_below_context_turns_warns():
    assert ids(MEMORY=memory(CACHE_TURNS=10)) == ["memory.W002"]


@pytest.mark.parametrize("value", [-1, 1.5, "200", None, True])
def test_fill_wait_must_be_milliseconds_from_zero(value):
    assert ids(MEMORY=memory(FILL_WAIT_MS=value)) == ["memory.E010"]


def test_fill_wait_may_be_zero():
    assert ids(MEMORY=memory(FILL_WAIT_MS=0)) == []


@pytest.mark.parametrize("value", ["memory.nothing.here", "nodots", 42, None])
def test_owner_resolver_must_import(value):
    assert ids(MEMORY=memory(OWNER_RESOLVER=value)) == ["memory.E006"]


def test_owner_resolver_must_be_callable():
    assert ids(MEMORY=memory(OWNER_RESOLVER="memory.conf.DEFAULTS")) == ["memory.E012"]


@pytest.mark.parametrize("value", [5, ["memory"], True])
def test_cache_alias_must_be_a_string(value):
    assert ids(MEMORY=memory(CACHE_ALIAS=value)) == ["memory.E011"]


def test_cache_alias_missing_from_caches():
    found = messages(MEMORY=memory(CACHE_ALIAS="nope"))
    assert [m.id for m in found] == ["memory.E007"]
    assert found[0].msg == "MEMORY['CACHE_ALIAS'] is 'nope', but CACHES has no such alias."


def test_empty_cache_alias_turns_the_cache_off():
    assert ids(MEMORY=memory(CACHE_ALIAS="")) == []


def test_no_memory_alias_and_no_cache_alias_means_no_cache():
    without = {alias: config for alias, config in settings.CACHES.items() if alias != "memory"}
    assert ids(CACHES=without, MEMORY=memory()) == []


def test_cache_must_be_django_redis():
    local = {"BACKEND": "django.core.cache.backends.dummy.DummyCache"}
    assert ids(CACHES=caches(loc=local), MEMORY=memory(CACHE_ALIAS="loc")) == [
        "memory.E008",
        "memory.W004",
    ]
    django_redis = {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": "redis://127.0.0.1:6379/0",
        "OPTIONS": REDIS_OPTIONS,
    }
    assert ids(CACHES=caches(memory=django_redis), MEMORY=memory()) == ["memory.E008"]


def test_cache_must_not_ignore_exceptions():
    hiding = {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": "redis://127.0.0.1:6379/0",
        "OPTIONS": {**REDIS_OPTIONS, "IGNORE_EXCEPTIONS": True},
    }
    assert ids(CACHES=caches(hiding=hiding), MEMORY=memory(CACHE_ALIAS="hiding")) == ["memory.E009"]
    assert ids(DJANGO_REDIS_IGNORE_EXCEPTIONS=True) == ["memory.E009"]


def test_cache_without_socket_timeouts_warns():
    slow = {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://127.0.0.1:6379/0"}
    assert ids(CACHES=caches(slow=slow), MEMORY=memory(CACHE_ALIAS="slow")) == ["memory.W004"]


@pytest.mark.parametrize("value", ["memory.tokens.no_such_counter", "nowhere.count", 42, None])
def test_token_counter_must_import(value):
    found = messages(MEMORY=memory(TOKEN_COUNTER=value))
    assert [m.id for m in found] == ["memory.E016"]
    assert "MEMORY['TOKEN_COUNTER']" in found[0].msg


def test_token_counter_must_be_callable():
    assert ids(MEMORY=memory(TOKEN_COUNTER="memory.tokens.MAX_TOKENS")) == ["memory.E016"]


def test_token_counter_may_be_any_callable():
    assert ids(MEMORY=memory(TOKEN_COUNTER="builtins.len")) == []


def test_tiktoken_counter_needs_its_encoding_cached(monkeypatch, tmp_path):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    found = messages(MEMORY=memory(TOKEN_COUNTER="memory.tokens.tiktoken_counter"))
    assert [m.id for m in found] == ["memory.E015"]
    assert "o200k_base" in found[0].msg


def test_a_key_prefix_on_the_cache_alias_is_an_error_naming_the_memory_setting():
    prefixed = {**settings.CACHES["memory"], "KEY_PREFIX": "site-a"}
    (found,) = messages(CACHES=caches(memory=prefixed), MEMORY=memory())
    assert found.id == "memory.E017"
    assert "CACHES['memory']['KEY_PREFIX'] is 'site-a'" in found.msg
    assert "MEMORY['KEY_PREFIX']" in found.msg
    assert "MEMORY['KEY_PREFIX'] = 'site-a'" in found.hint


def test_a_key_prefix_on_the_cache_alias_equal_to_the_memory_one_passes():
    prefix = settings.MEMORY["KEY_PREFIX"]
    prefixed = {**settings.CACHES["memory"], "KEY_PREFIX": prefix}
    assert ids(CACHES=caches(memory=prefixed), MEMORY=memory()) == []
    default_prefixed = {**settings.CACHES["memory"], "KEY_PREFIX": "memory"}
    without_prefix = {k: v for k, v in settings.MEMORY.items() if k != "KEY_PREFIX"}
    assert ids(CACHES=caches(memory=default_prefixed), MEMORY=without_prefix) == []


@pytest.mark.parametrize("token", ["", "short", 12345, ["a-token-in-a-list-0123"]])
def test_metrics_token_must_be_a_long_string(token):
    assert ids(MEMORY=memory(METRICS_TOKEN=token)) == ["memory.E018"]


def test_metrics_token_of_16_characters_or_none_passes():
    assert ids(MEMORY=memory(METRICS_TOKEN="0123456789abcdef")) == []
    assert ids(MEMORY=memory(METRICS_TOKEN=None)) == []


@pytest.mark.parametrize(
    "options",
    [
        {"CLIENT_CLASS": "memory.cache.cluster.ClusterClient"},
        {
            "CLIENT_CLASS": "django_redis.client.SentinelClient",
            "CONNECTION_FACTORY": "django_redis.pool.SentinelConnectionFactory",
            "SENTINELS": [("127.0.0.1", 26379)],
        },
    ],
)
def test_cluster_and_sentinel_aliases_pass(options):
    alias = {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": "redis://127.0.0.1:7000",
        "OPTIONS": {**REDIS_OPTIONS, **options},
    }
    assert ids(CACHES=caches(other=alias), MEMORY=memory(CACHE_ALIAS="other")) == []


@pytest.mark.parametrize(
    "cluster", [{"read_from_replicas": True}, {"load_balancing_strategy": "round-robin"}]
)
def test_a_cluster_alias_must_not_read_from_replicas(cluster):
    alias = {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": "redis://127.0.0.1:7000",
        "OPTIONS": {
            **REDIS_OPTIONS,
            "CLIENT_CLASS": "memory.cache.cluster.ClusterClient",
            "CLUSTER_OPTIONS": cluster,
        },
    }
    assert ids(CACHES=caches(other=alias), MEMORY=memory(CACHE_ALIAS="other")) == ["memory.E019"]


@pytest.fixture
def pooled(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The default database as a site behind a transaction pooler configures it: no
    server-side cursors. Returns its settings, to change more for one test."""
    monkeypatch.setitem(connection.settings_dict, "DISABLE_SERVER_SIDE_CURSORS", True)
    options = {**connection.settings_dict["OPTIONS"]}
    monkeypatch.setitem(connection.settings_dict, "OPTIONS", options)
    return connection.settings_dict


@pytest.mark.parametrize("value", ["statement", "pgbouncer", True, 6432])
def test_pooler_must_be_a_pool_mode_that_keeps_transactions(value):
    assert ids(MEMORY=memory(POOLER=value)) == ["memory.E022"]


@pytest.mark.parametrize("value", ["yes", 1, 0])
def test_prepared_statements_must_be_none_or_a_bool(value):
    assert ids(MEMORY=memory(PREPARED_STATEMENTS=value)) == ["memory.E023"]


def test_a_transaction_pooler_with_the_settings_it_needs_passes(pooled):
    assert ids(MEMORY=memory(POOLER="transaction")) == []
    assert ids(MEMORY=memory(POOLER="transaction", PREPARED_STATEMENTS=False)) == []


def test_a_transaction_pooler_needs_server_side_cursors_off():
    found = messages(MEMORY=memory(POOLER="transaction"))
    assert [m.id for m in found] == ["memory.W008"]
    assert "DISABLE_SERVER_SIDE_CURSORS" in found[0].hint


def test_prepared_statements_turned_on_behind_a_transaction_pooler_warn(pooled):
    found = messages(MEMORY=memory(POOLER="transaction", PREPARED_STATEMENTS=True))
    assert [m.id for m in found] == ["memory.W007"]
    assert "max_prepared_statements" in found[0].hint


SESSION_OPTIONS = {"server_side_binding": True, "prepare_threshold": 5, "assume_role": "app"}


@pytest.mark.parametrize("pooler", [None, "session"])
def test_session_state_without_a_transaction_pooler_passes(pooler, monkeypatch):
    monkeypatch.setitem(connection.settings_dict, "OPTIONS", SESSION_OPTIONS)
    assert ids(MEMORY=memory(POOLER=pooler, PREPARED_STATEMENTS=True)) == []


def test_session_state_in_the_database_options_behind_a_transaction_pooler_warns(pooled):
    pooled["OPTIONS"].update(SESSION_OPTIONS)
    found = messages(MEMORY=memory(POOLER="transaction"))
    assert [m.id for m in found] == ["memory.W009"]
    assert (
        ": prepare_threshold with server_side_binding (psycopg's prepared statements), "
        "assume_role (SET ROLE);" in found[0].msg
    )


@pytest.mark.parametrize(
    "options",
    [
        {"prepare_threshold": 5},
        {"server_side_binding": True},
        {"server_side_binding": True, "prepare_threshold": None},
        {"assume_role": ""},
    ],
)
def test_options_that_prepare_nothing_and_set_no_role_are_no_session_state(pooled, options):
    pooled["OPTIONS"].update(options)
    assert ids(MEMORY=memory(POOLER="transaction")) == []


# Facts whose key is made only of dots (issue 23): a database check, as `check --database`.


def database_ids() -> list[str]:
    return [m.id for m in run_checks(databases=["default"]) if m.id and m.id.startswith("memory.")]


@pytest.mark.django_db
def test_facts_keyed_only_by_dots_warn_in_the_database_check():
    from memory import services
    from memory.models import Fact

    services.fact_put(owner_id="wang", key="name", value="Wang")
    assert database_ids() == []
    # NOTE: as stored before such keys were refused: past the services' rule.
    fact = Fact.objects.get(key="name")
    Fact.objects.filter(pk=fact.pk).update(key="..")
    [found] = [m for m in run_checks(databases=["default"]) if m.id == "memory.W010"]
    assert "1." in found.msg and "wang" not in found.msg
    assert "manage.py memory_fact_keys" in found.hint and "--rename" in found.hint
    assert ids() == []  # not without --database


# Persistent connections under ASGI (issue 23): Django keeps one per request thread there.


@pytest.fixture
def conn_max_age(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``conn_max_age(60, pool=None)`` sets the default database's CONN_MAX_AGE and pool."""

    def set_(seconds: int | None, pool: Any = None) -> None:
        monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", seconds)
        options = {**connection.settings_dict["OPTIONS"]}
        options.pop("pool", None)
        if pool is not None:
            options["pool"] = pool
        monkeypatch.setitem(connection.settings_dict, "OPTIONS", options)

    return set_


ASGI = "memoryproj.asgi.application"


@pytest.mark.parametrize("seconds", [60, None])
def test_persistent_connections_under_asgi_warn(conn_max_age, seconds):
    conn_max_age(seconds)
    [found] = messages(ASGI_APPLICATION=ASGI)
    assert found.id == "memory.W011"
    assert "CONN_MAX_AGE" in found.msg and "ASGI" in found.msg
    assert "OPTIONS['pool']" in found.hint


@pytest.mark.parametrize(("seconds", "pool"), [(0, None), (0, {"max_size": 4}), (0, True)])
def test_a_pool_or_no_persistent_connections_under_asgi_pass(conn_max_age, seconds, pool):
    conn_max_age(seconds, pool)
    assert ids(ASGI_APPLICATION=ASGI) == []


def test_persistent_connections_without_asgi_pass(conn_max_age):
    conn_max_age(60)
    assert ids() == []
    assert ids(ASGI_APPLICATION=None) == []


@pytest.mark.parametrize("value", [0, 0.0])
def test_the_history_lease_must_be_positive(value):
    [found] = messages(MEMORY=memory(HISTORY_LEASE=value))
    assert (found.id, found.msg) == (
        "memory.E003",
        f"MEMORY['HISTORY_LEASE'] must be a number of seconds > 0, not {value!r}.",
    )


def replica_databases(**replica: Any) -> dict[str, Any]:
    return {**settings.DATABASES, "replica": {**settings.DATABASES["default"], **replica}}


@pytest.mark.parametrize("value", ["nowhere", 3, "default"])
def test_the_read_database_must_be_a_replica_in_databases(value):
    [found] = messages(MEMORY=memory(READ_DATABASE=value), DATABASES=replica_databases())
    assert found.id == "memory.E031"
    assert "READ_DATABASE" in found.msg
    assert ids(MEMORY=memory(READ_DATABASE="replica"), DATABASES=replica_databases()) == []


def test_several_hosts_without_target_session_attrs_is_an_error():
    primary = settings.DATABASES["default"]
    hosts = {**primary, "HOST": "127.0.0.1,127.0.0.1", "PORT": "5432,5433"}
    [found] = messages(DATABASES={**settings.DATABASES, "default": hosts})
    assert found.id == "memory.E032"
    assert "target_session_attrs" in found.msg and "target_session_attrs" in found.hint
    writable = {
        **hosts,
        "OPTIONS": {**primary.get("OPTIONS", {}), "target_session_attrs": "read-write"},
    }
    assert ids(DATABASES={**settings.DATABASES, "default": writable}) == []


class WritesToTheReplica:
    def db_for_read(self, model: Any, **hints: Any) -> str:
        return "replica"

    def db_for_write(self, model: Any, **hints: Any) -> str:
        return "replica"


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES:UserWarning")
def test_a_router_sending_writes_to_the_read_database_is_an_error():
    from memory.postgres.checks import check_memory_databases

    # NOTE: this check alone: the others open the aliases a router names, and Django's
    # connection handler knows only the databases it was started with.
    with override_settings(
        MEMORY=memory(READ_DATABASE="replica"),
        DATABASES=replica_databases(),
        DATABASE_ROUTERS=[f"{__name__}.WritesToTheReplica"],
    ):
        [found] = check_memory_databases()
    assert found.id == "memory.E033"
    assert "READ_DATABASE" in found.msg


class ReadsFromTheReplica:
    def db_for_read(self, model: Any, **hints: Any) -> str:
        return "replica"


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES:UserWarning")
def test_a_router_sending_reads_to_a_replica_is_an_error():
    from memory.postgres.checks import check_memory_databases

    def found(router: str) -> list[Any]:
        with override_settings(
            DATABASES=replica_databases(), DATABASE_ROUTERS=[f"{__name__}.{router}"]
        ):
            return check_memory_databases()

    [error] = found("ReadsFromTheReplica")
    assert error.id == "memory.E034"
    assert "'replica'" in error.msg and "READ_DATABASE" in error.hint
    # A database of the app's own, read and written (not READ_DATABASE): no replica.
    assert found("WritesToTheReplica") == []
