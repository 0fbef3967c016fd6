# vLLM Fleet Audit: two commands. `make demo` (embedded SQLite, no broker) and `make test`
# (real PostgreSQL and Redis). Benchmarks stay out of `make test`: `make bench`.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_ENV := DEBUG=true
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/fleet_audit
TEST_REDIS_URL ?= redis://127.0.0.1:6379/15
TEST_ENV := DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) \
	SECRET_KEY=test-only-not-secret DEBUG=false

.PHONY: demo demo-reset test lint services bench install

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[server,test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	mkdir -p var
	$(DEMO_ENV) $(BIN)/python manage.py migrate --noinput -v0
	$(DEMO_ENV) $(BIN)/python manage.py demo_seed
	@echo ""
	@echo "  vLLM Fleet Audit demo: http://127.0.0.1:8000/   login: demo / demo"
	@echo ""
	$(DEMO_ENV) $(BIN)/python manage.py runserver 127.0.0.1:8000

demo-reset:
	rm -rf var

services:
	@.ci/ensure-services "$(TEST_DATABASE_URL)" "$(TEST_REDIS_URL)"

lint: $(STAMP)
	$(BIN)/ruff check .

test: $(STAMP) services lint
	$(TEST_ENV) $(BIN)/pytest

bench: $(STAMP)
	@set -e; for script in bench/*.py; do \
		[ -e "$$script" ] || { echo "no benchmarks yet (bench/*.py)"; exit 0; }; \
		echo "== $$script"; $(DEMO_ENV) $(BIN)/python "$$script"; \
	done
