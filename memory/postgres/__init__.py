"""The Postgres fast paths: each the twin of a plain-Django specification that sits beside its
caller, and proven to answer and store the same by a property test on real Postgres
(tests/test_postgres.py). A fast path without such a test does not belong here. ``sql/`` holds
the SQL of the database functions and tables that the migrations create, one file each."""
