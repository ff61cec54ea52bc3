# Developer entry points of `memory`; `make` alone lists them. Tests need no setup: see
# tests/services.py for how they find (or start) PostgreSQL and Redis. The demo's targets (run,
# run-asgi, superuser, token) install only its runtime (requirements.txt); the others the dev set.
PYTHON ?= python3
VENV = .venv
PY = $(VENV)/bin/python
ADDR ?= 127.0.0.1:8000
PYTEST_ARGS ?=
# Processes the suite runs in (pytest-xdist; 0: one, in pytest's own process), a test module each.
PYTEST_JOBS ?= 2
BENCH_ARGS ?=

.DEFAULT_GOAL := help
SUPERUSER ?= admin
DIST_VENV = .tmp/dist-venv
.PHONY: help install run run-asgi superuser token test fuzz test-faults bench bench-quality lint \
	format docs screenshots dist services-up services-down clean docs-serve

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# NOTE: the dev set includes the runtime (-r requirements.txt): installing it marks both.
$(VENV)/.runtime: requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements.txt
	touch $@

$(VENV)/.installed: requirements.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $@ $(VENV)/.runtime

install: $(VENV)/.installed ## Create .venv with the pinned dev requirements

# NOTE: the demo targets (and lint's system checks) turn DEBUG on, as on a developer's machine;
# the project itself defaults to off.
DJANGO_DEBUG ?= 1
run run-asgi lint: export DJANGO_DEBUG := $(DJANGO_DEBUG)

run: $(VENV)/.runtime ## Serve the demo on ADDR=127.0.0.1:8000, DEBUG on, with a throwaway Redis if redis-server is installed
	PY=$(PY) ADDR=$(ADDR) scripts/run-demo

run-asgi: $(VENV)/.runtime ## The same demo (its Redis, its worker) under uvicorn (ASGI): the chat page streams its replies
	PY=$(PY) ADDR=$(ADDR) SERVER=uvicorn scripts/run-demo

# NOTE: the demo's own targets run with its development settings, as `make run` does.
superuser: export DJANGO_DEBUG ?= 1
superuser: $(VENV)/.runtime ## Create the demo's admin account SUPERUSER=admin (asks for a password) for /admin/
	$(PY) manage.py migrate --noinput -v 0
	$(PY) manage.py createsuperuser --username $(SUPERUSER) --email $(SUPERUSER)@localhost \
		$(if $(DJANGO_SUPERUSER_PASSWORD),--noinput)

# NOTE: USER is also the login name in the environment; only one given on the command line
# counts, so that `make token` alone never hands a token to whoever is logged in.
token: export DJANGO_DEBUG ?= 1
token: $(VENV)/.runtime ## Print the API token of service user USER=... (created, with memory.access_all_memories)
	@test "$(origin USER)" = "command line" || { echo "usage: make token USER=<username>" >&2; exit 2; }
	@$(PY) manage.py migrate --noinput -v 0
	@SERVICE_USER=$(USER) $(PY) manage.py shell -v 0 -c "$$SERVICE_TOKEN"

# NOTE: the ensure-* scripts install, as root with apt-get, what some tests need where it is
# missing (Chromium and fonts, PgBouncer, pg_auto_failover, pgvector built from Debian's source);
# each says so in one line first. SKIP_SYSTEM_INSTALL=1 skips them: those tests then skip, saying why.
test: $(VENV)/.installed ## Run the suite on real PostgreSQL and Redis (PYTEST_ARGS="-k ..." to narrow; SKIP_SYSTEM_INSTALL=1: no apt installs)
	@scripts/ensure-chromium
	@scripts/ensure-pgbouncer
	@scripts/ensure-pg-auto-failover
	@scripts/ensure-pgvector
	$(PY) -m pytest -n $(PYTEST_JOBS) --dist loadfile $(PYTEST_ARGS)

FUZZ_EXAMPLES ?= 100
FUZZ_STEPS ?= 20
fuzz: $(VENV)/.installed ## Schemathesis over the API, longer: FUZZ_EXAMPLES=100 a phase and operation, FUZZ_STEPS=20
	MEMORY_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) MEMORY_FUZZ_STEPS=$(FUZZ_STEPS) \
		$(PY) -m pytest tests/test_api_fuzz.py -p no:cacheprovider $(PYTEST_ARGS)

test-faults: $(VENV)/.installed ## Run only the tests that kill, pause or restart servers
	@scripts/ensure-pgbouncer
	@scripts/ensure-pg-auto-failover
	$(PY) -m pytest -m faults $(PYTEST_ARGS)

bench: $(VENV)/.installed ## Benchmarks on real PostgreSQL and Redis (BENCH_ARGS="--only warm,cold"); see docs/performance.md
	@scripts/ensure-pg-auto-failover
	@scripts/ensure-pgvector
	$(PY) -m bench $(BENCH_ARGS)

bench-quality: $(VENV)/.installed ## Recall of the quality set (bench/quality_set.json) per category and language, each search mode
	@scripts/ensure-pgvector
	$(PY) -m bench.quality $(BENCH_ARGS)

lint: $(VENV)/.installed ## ruff check and format check, migrations up to date, system checks, mypy
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) manage.py makemigrations --check --dry-run
	$(PY) manage.py check
	$(VENV)/bin/mypy

format: $(VENV)/.installed ## Sort imports and format the code with ruff
	$(VENV)/bin/ruff check --select I --fix .
	$(VENV)/bin/ruff format .

.PHONY: prose-stats
prose-stats: $(VENV)/.installed ## Comment and docstring density of memory/ and memoryproj/ (targets: CONTRIBUTING.md)
	$(PY) scripts/prose-stats memory memoryproj

services-up: ## Start PostgreSQL and Redis in docker (docker-compose.yml) and wait until healthy
	docker compose up -d --wait

services-down: ## Stop the docker services (their data volume is kept)
	docker compose down

DOCS_ADDR ?= 127.0.0.1:8001
docs: $(VENV)/.installed ## Build the docs site strictly into site/; `make docs-serve` serves it
	$(VENV)/bin/mkdocs build --strict --site-dir site
	@echo "docs: built into site/; serve it with \`make docs-serve\` (http://$(DOCS_ADDR)/): its search needs a server, not file://"

# NOTE: the built site as it is, over HTTP on the loopback (DOCS_ADDR), until Ctrl-C.
docs-serve: docs ## Build the docs site and serve it on http://DOCS_ADDR=127.0.0.1:8001/
	$(PY) -m http.server --bind $(firstword $(subst :, ,$(DOCS_ADDR))) --directory site $(lastword $(subst :, ,$(DOCS_ADDR)))

screenshots: $(VENV)/.installed ## Retake docs/images/*.png (the chat page and the admin) in headless Chromium
	@scripts/ensure-chromium
	MEMORY_SCREENSHOTS_DIR=docs/images $(PY) -m pytest tests/test_docs.py -m browser -p no:cacheprovider -q

# NOTE: only build and twine (their pins from requirements-dev.txt) in a venv of their own;
# `python -m build` then makes its isolated build environment with setuptools from the index.
$(DIST_VENV)/.installed: requirements-dev.txt
	test -x $(DIST_VENV)/bin/python || $(PYTHON) -m venv $(DIST_VENV)
	$(DIST_VENV)/bin/python -m pip install -q $$(grep -E '^(build|twine)==' requirements-dev.txt)
	touch $@

dist: $(DIST_VENV)/.installed ## Build the sdist and the wheel into dist/ (python -m build) and twine-check them
	rm -rf dist
	$(DIST_VENV)/bin/python -m build --outdir dist .
	$(DIST_VENV)/bin/python -m twine check --strict dist/*

clean: ## Remove caches and build output (keeps .venv and db.sqlite3)
	rm -rf .pytest_cache .ruff_cache .mypy_cache .hypothesis build dist site *.egg-info
	find . -path ./$(VENV) -prune -o -type d -name __pycache__ -prune -exec rm -rf {} +

# The body of `make token`: get or create the user named by the argument, grant it
# memory.access_all_memories, and print its DRF token key.
define SERVICE_TOKEN
import os
from django.contrib.auth.models import Permission, User
from rest_framework.authtoken.models import Token
user, _ = User.objects.get_or_create(username=os.environ["SERVICE_USER"])
user.user_permissions.add(Permission.objects.get(content_type__app_label="memory", codename="access_all_memories"))
print(Token.objects.get_or_create(user=user)[0].key)
endef
export SERVICE_TOKEN
