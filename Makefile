# Entry points for a fresh machine: `make demo` and `make test` (see README.md).
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup demo test test-unit test-integration test-e2e lint bench kafka-start kafka-stop

setup:
	./scripts/bootstrap.sh

# KEEP=1: leave Airflow and the broker running for a look at the UI (Ctrl-C stops them);
# TOPOLOGY=production: PostgreSQL + CeleryExecutor on Redis, 2 workers, 2 triggerers (docs/production-topology.md)
demo: setup
	$(BIN)/python examples/demo.py $(if $(KEEP),--keep-running) $(if $(TOPOLOGY),--topology $(TOPOLOGY))

test: setup lint
	$(BIN)/pytest --durations=15

test-unit: setup
	$(BIN)/pytest -m unit

test-integration: setup
	$(BIN)/pytest -m integration

test-e2e: setup
	$(BIN)/pytest -m e2e

lint: setup
	$(BIN)/ruff check src tests examples benchmarks
	$(BIN)/ruff format --check src tests examples benchmarks
	$(BIN)/mypy

bench: setup
	$(BIN)/python -m benchmarks

kafka-start: setup
	$(BIN)/airflow-kafka-events kafka start

kafka-stop:
	$(BIN)/airflow-kafka-events kafka stop
