"""The demo's DATABASE_URL in libpq's multi-host form (memoryproj/databases.py): HOST and PORT
become libpq's lists, the query its OPTIONS; one host is dj-database-url's as before."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from memoryproj.databases import database_parse


def test_several_hosts_become_libpqs_lists_with_the_options():
    config = database_parse(
        "postgres://memory:s3cret@db1.internal:5432,db2.internal:5433/memory"
        "?target_session_attrs=read-write&connect_timeout=2"
    )
    assert config["ENGINE"] == "django.db.backends.postgresql"
    assert (config["HOST"], config["PORT"]) == ("db1.internal,db2.internal", "5432,5433")
    assert (config["USER"], config["PASSWORD"], config["NAME"]) == ("memory", "s3cret", "memory")
    assert config["OPTIONS"] == {"target_session_attrs": "read-write", "connect_timeout": 2}


def test_one_host_is_parsed_as_before():
    config = database_parse("postgres://memory@db1.internal:5432/memory", conn_health_checks=True)
    assert (config["HOST"], config["PORT"], config["CONN_HEALTH_CHECKS"]) == (
        "db1.internal",
        5432,
        True,
    )


@pytest.mark.parametrize(
    "url",
    [
        "postgres://memory@db1.internal,db2.internal:5432/memory",
        "mysql://memory@db1.internal:3306,db2.internal:3306/memory",
    ],
)
def test_several_hosts_without_ports_or_not_on_postgres_are_refused(url):
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL"):
        database_parse(url)
