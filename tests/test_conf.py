"""Tests of memory.conf: defaults, overrides, and values kept until a setting changes."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from memory.conf import DEFAULTS, conf

# NOTE: the keys whose default None stands for a value derived from other settings.
DERIVED = ("CACHE_ALIAS", "PREPARED_STATEMENTS")
SIMPLE = [name for name in DEFAULTS if name not in DERIVED]


@pytest.mark.parametrize("name", SIMPLE)
def test_defaults_apply_to_keys_not_set(name):
    with override_settings(MEMORY={}):
        assert getattr(conf, name) == DEFAULTS[name]


def test_defaults_apply_without_a_memory_setting(settings):
    del settings.MEMORY
    assert conf.CACHE_TTL == 3600
    assert conf.CONTEXT_TURNS == 20
    assert conf.KEY_PREFIX == "memory"


def test_a_memory_setting_of_none_means_defaults():
    with override_settings(MEMORY=None):
        assert conf.MAX_TURN_CHARS == 32768


def test_overrides_are_read_on_every_access():
    with override_settings(MEMORY={"CACHE_TTL": 10, "CONTEXT_TURNS": 5}):
        assert (conf.CACHE_TTL, conf.CONTEXT_TURNS) == (10, 5)
        with override_settings(MEMORY={"CACHE_TTL": 20}):
            assert (conf.CACHE_TTL, conf.CONTEXT_TURNS) == (20, 20)
        assert conf.CACHE_TTL == 10


def test_durations_are_floats():
    with override_settings(MEMORY={"RECONCILE_GRACE": 0, "RECONCILE_INTERVAL": 2}):
        assert conf.RECONCILE_GRACE == 0.0
        assert isinstance(conf.RECONCILE_GRACE, float)
        assert isinstance(conf.RECONCILE_INTERVAL, float)
        assert isinstance(conf.SUSPECT_WINDOW, float)


@pytest.mark.parametrize("value", [0, 0.0, -1])
def test_the_reconcile_interval_must_be_positive(value):
    with (
        override_settings(MEMORY={"RECONCILE_INTERVAL": value}),
        pytest.raises(ImproperlyConfigured, match=r"RECONCILE_INTERVAL'\] must be .* > 0"),
    ):
        assert conf.RECONCILE_INTERVAL


def test_cache_alias_defaults_to_the_memory_alias_when_there_is_one():
    assert "memory" in settings.CACHES
    with override_settings(MEMORY={}):
        assert conf.CACHE_ALIAS == "memory"


def test_cache_alias_defaults_to_no_cache_without_a_memory_alias():
    without = {alias: config for alias, config in settings.CACHES.items() if alias != "memory"}
    with override_settings(CACHES=without, MEMORY={}):
        assert conf.CACHE_ALIAS is None


def test_cache_alias_names_any_alias():
    with override_settings(MEMORY={"CACHE_ALIAS": "dead"}):
        assert conf.CACHE_ALIAS == "dead"


def test_empty_cache_alias_turns_the_cache_off():
    with override_settings(MEMORY={"CACHE_ALIAS": ""}):
        assert conf.CACHE_ALIAS is None


def test_owner_resolver_is_a_dotted_path():
    assert conf.OWNER_RESOLVER == "memory.permissions.default_owner_id"
    with override_settings(MEMORY={"OWNER_RESOLVER": "myapp.owners.resolve"}):
        assert conf.OWNER_RESOLVER == "myapp.owners.resolve"


def test_metrics_token_is_none_unless_a_nonempty_string():
    for value, expected in [(None, None), ("", None), (123, None), ("t" * 20, "t" * 20)]:
        with override_settings(MEMORY={"METRICS_TOKEN": value}):
            assert expected == conf.METRICS_TOKEN


@pytest.mark.parametrize("value", [None, "session", "transaction"])
def test_pooler_is_none_or_a_pool_mode_that_keeps_transactions(value):
    with override_settings(MEMORY={"POOLER": value}):
        assert value == conf.POOLER


@pytest.mark.parametrize("value", ["statement", "Transaction", "pgbouncer", True, 6432, ["x"]])
def test_pooler_refuses_anything_else(value):
    with (
        override_settings(MEMORY={"POOLER": value}),
        pytest.raises(ImproperlyConfigured, match=r"MEMORY\['POOLER'\] must be None, "),
    ):
        assert conf.POOLER


@pytest.mark.parametrize(
    ("pooler", "expected"), [(None, True), ("session", True), ("transaction", False)]
)
def test_prepared_statements_default_to_off_behind_a_transaction_pooler(pooler, expected):
    with override_settings(MEMORY={"POOLER": pooler}):
        assert conf.PREPARED_STATEMENTS is expected


@pytest.mark.parametrize("pooler", [None, "transaction"])
@pytest.mark.parametrize("value", [True, False])
def test_prepared_statements_set_win_over_the_pooler(pooler, value):
    with override_settings(MEMORY={"POOLER": pooler, "PREPARED_STATEMENTS": value}):
        assert conf.PREPARED_STATEMENTS is value


def test_prepared_statements_with_a_bad_pooler_do_not_raise_its_error():
    with override_settings(MEMORY={"POOLER": "statement"}):
        assert conf.PREPARED_STATEMENTS is True
        assert list(conf.problems()) == ["POOLER"]


def test_heavy_reads_per_caller_is_a_positive_integer():
    assert conf.HEAVY_READS_PER_CALLER == 1
    with override_settings(MEMORY={"HEAVY_READS_PER_CALLER": 8.0}):
        assert conf.HEAVY_READS_PER_CALLER == 8
    for value in (0, -1, 1.5, "2", None, True):
        with (
            override_settings(MEMORY={"HEAVY_READS_PER_CALLER": value}),
            pytest.raises(ImproperlyConfigured, match="HEAVY_READS_PER_CALLER"),
        ):
            conf.HEAVY_READS_PER_CALLER  # noqa: B018


def test_a_checked_value_is_kept_until_a_setting_changes():
    with override_settings(MEMORY={"CACHE_TTL": 10}):
        assert conf.CACHE_TTL == 10
        assert conf.values["CACHE_TTL"] == (conf.generation, 10)
        # NOTE: CACHE_ALIAS reads CACHES too: a change of any setting makes every value stale.
        with override_settings(CACHES={"memory": settings.CACHES["default"]}):
            assert "CACHE_ALIAS" not in conf.values
            assert conf.CACHE_ALIAS == "memory"
    assert settings.MEMORY.get("CACHE_TTL", DEFAULTS["CACHE_TTL"]) == conf.CACHE_TTL


def test_a_bad_value_is_not_kept():
    with override_settings(MEMORY={"CACHE_TTL": "soon"}):
        for _ in range(2):
            with pytest.raises(ImproperlyConfigured, match="CACHE_TTL"):
                assert conf.CACHE_TTL
        assert "CACHE_TTL" not in conf.values


def test_a_value_read_across_a_change_is_not_kept():
    generation = conf.generation
    conf.forget()
    assert conf.generation == generation + 1
    conf.values["CACHE_TTL"] = (generation, 7)
    assert conf.CACHE_TTL != 7


def test_memory_assigned_anew_without_the_signal_is_seen():
    # NOTE: as a script does after django.setup(): no override_settings, no setting_changed.
    from django.conf import settings as live

    kept = live.MEMORY
    try:
        live.MEMORY = {**kept, "CACHE_TTL": 11}
        assert conf.CACHE_TTL == 11
        live.MEMORY = {**kept, "CACHE_TTL": 12}
        assert conf.CACHE_TTL == 12
    finally:
        live.MEMORY = kept
    assert kept.get("CACHE_TTL", DEFAULTS["CACHE_TTL"]) == conf.CACHE_TTL
