# Entry points for a fresh machine: `make demo` and `make test` (see README.md).
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup demo test test-unit test-integration test-e2e test-compat lint docs bench kafka-start kafka-stop ui

setup:
	./scripts/bootstrap.sh

# KEEP=1: leave Airflow and the broker running for a look at the UI (Ctrl-C stops them);
# REGISTRY=1: also asset events in a schema registry's wire format (docs/schema-registry.md);
# TOPOLOGY=production: PostgreSQL + CeleryExecutor on Redis, 2 workers, 2 triggerers (docs/production-topology.md)
demo: setup
	$(BIN)/python examples/demo.py $(if $(KEEP),--keep-running) $(if $(TOPOLOGY),--topology $(TOPOLOGY)) \
		$(if $(REGISTRY),--registry)

# Unit and integration tests run in TEST_WORKERS processes (pytest-xdist; each integration worker has a
# broker of its own and takes whole files); the e2e tests one at a time (one Airflow stack at a time).
TEST_WORKERS ?= 2
UNIT := -m unit -n $(TEST_WORKERS)
INTEGRATION := -n $(TEST_WORKERS) --dist loadfile --durations=15

test: setup lint docs
	$(BIN)/pytest $(UNIT)
	$(BIN)/pytest -m integration $(INTEGRATION)
	$(BIN)/pytest -m e2e --durations=15

test-unit: setup
	$(BIN)/pytest $(UNIT)

test-integration: setup
	$(BIN)/pytest -m integration $(INTEGRATION)

test-e2e: setup
	$(BIN)/pytest -m e2e

# The second supported Airflow (docs/airflow-versions.md): a venv of its own, pinned by its constraints
# (constraints.txt with Airflow's own packages swapped), running the unit and integration suites (but the
# `cluster` and `faults` tests: Kafka clusters, broker outages and oversized records, the broker's
# behaviour, which make test covers) and the `compat` e2e tests (one real-Airflow test per feature).  `make test-compat COMPAT_AIRFLOW=3.4`
COMPAT_AIRFLOW ?= 3.4
COMPAT_VENV := .venv-airflow$(COMPAT_AIRFLOW)
COMPAT_CONSTRAINTS := constraints-airflow$(COMPAT_AIRFLOW).txt
PYTHON ?= python3

# constraints.txt with the packages $(COMPAT_CONSTRAINTS) pins replaced by its pins
$(COMPAT_VENV)/.installed: pyproject.toml constraints.txt $(COMPAT_CONSTRAINTS)
	[ -x $(COMPAT_VENV)/bin/python ] || $(PYTHON) -m venv $(COMPAT_VENV)
	$(COMPAT_VENV)/bin/python -m pip install -q --upgrade pip
	sed -n 's/^\([A-Za-z0-9_.-]*\)==.*/^\1==/p' $(COMPAT_CONSTRAINTS) > $(COMPAT_VENV)/replaced.txt
	{ grep -v -f $(COMPAT_VENV)/replaced.txt constraints.txt; grep -v '^#' $(COMPAT_CONSTRAINTS); } \
		> $(COMPAT_VENV)/constraints.txt
	$(COMPAT_VENV)/bin/python -m pip install -q --pre -c $(COMPAT_VENV)/constraints.txt -e ".[test]"
	touch $@

test-compat: setup $(COMPAT_VENV)/.installed
	$(COMPAT_VENV)/bin/pytest $(UNIT)
	$(COMPAT_VENV)/bin/pytest -m "integration and not cluster and not faults" $(INTEGRATION)
	$(COMPAT_VENV)/bin/pytest -m "e2e and compat" --durations=15

# the Kafka Events view's bundle (ui/src -> src/airflow_kafka_events/ui/static/kafka-events.js): commit it
ui: setup
	cd ui && node build.mjs

lint: setup
	$(BIN)/ruff check src tests examples benchmarks scripts
	$(BIN)/ruff format --check src tests examples benchmarks scripts
	$(BIN)/mypy

# The documentation site (mkdocs.yml) into site/, offline; a warning or a broken link fails it.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

bench: setup
	$(BIN)/python -m benchmarks

kafka-start: setup
	$(BIN)/airflow-kafka-events kafka start

kafka-stop:
	$(BIN)/airflow-kafka-events kafka stop
