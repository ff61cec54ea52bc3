# Developer entry points of `memory`; `make` alone lists them. Tests need no setup: see
# tests/services.py for how they find (or start) PostgreSQL and Redis.
PYTHON ?= python3
VENV = .venv
PY = $(VENV)/bin/python
ADDR ?= 127.0.0.1:8000
PYTEST_ARGS ?=
BENCH_ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help install run run-asgi test test-faults bench lint format services-up services-down clean

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(VENV)/.installed: requirements.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $@

install: $(VENV)/.installed ## Create .venv with the pinned dev requirements

# NOTE: the demo targets (and lint's system checks) turn DEBUG on, as on a developer's machine;
# the project itself defaults to off.
DJANGO_DEBUG ?= 1
run run-asgi lint: export DJANGO_DEBUG := $(DJANGO_DEBUG)

run: $(VENV)/.installed ## Migrate and serve the demo on ADDR=127.0.0.1:8000 (SQLite, no cache, unless DATABASE_URL/REDIS_URL)
	$(PY) manage.py migrate --noinput
	$(PY) manage.py runserver $(ADDR)

run-asgi: $(VENV)/.installed ## The same demo under uvicorn (ASGI): the chat page streams its replies
	$(PY) manage.py migrate --noinput
	$(PY) manage.py collectstatic --noinput -v 0
	$(PY) -m uvicorn memoryproj.asgi:application --host $(firstword $(subst :, ,$(ADDR))) --port $(lastword $(subst :, ,$(ADDR)))

test: $(VENV)/.installed ## Run the suite on real PostgreSQL and Redis (PYTEST_ARGS="-k ..." to narrow)
	@scripts/ensure-chromium
	$(PY) -m pytest $(PYTEST_ARGS)

test-faults: $(VENV)/.installed ## Run only the tests that kill, pause or restart servers
	$(PY) -m pytest -m faults $(PYTEST_ARGS)

bench: $(VENV)/.installed ## Benchmarks on real PostgreSQL and Redis (BENCH_ARGS="--only warm,cold"); see docs/performance.md
	$(PY) -m bench $(BENCH_ARGS)

lint: $(VENV)/.installed ## ruff check and format check, migrations up to date, system checks
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) manage.py makemigrations --check --dry-run
	$(PY) manage.py check

format: $(VENV)/.installed ## Sort imports and format the code with ruff
	$(VENV)/bin/ruff check --select I --fix .
	$(VENV)/bin/ruff format .

services-up: ## Start PostgreSQL and Redis in docker (docker-compose.yml) and wait until healthy
	docker compose up -d --wait

services-down: ## Stop the docker services (their data volume is kept)
	docker compose down

.PHONY: dist
dist: $(VENV)/.installed ## Build the app's wheel into dist/ (the package a site pip-installs)
	$(PY) -m pip wheel --no-deps -q -w dist .

clean: ## Remove caches and build output (keeps .venv and db.sqlite3)
	rm -rf .pytest_cache .ruff_cache .mypy_cache .hypothesis build dist *.egg-info
	find . -path ./$(VENV) -prune -o -type d -name __pycache__ -prune -exec rm -rf {} +
