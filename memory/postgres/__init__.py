"""The Postgres fast paths: each the twin of a plain-Django specification that sits beside its
caller, proven to answer and store the same by a property test (tests/test_postgres.py).
``sql/`` holds the SQL of the functions and tables the migrations create."""
