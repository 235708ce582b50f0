"""Consumers that do not hold a worker slot while they wait, through a real Airflow.

A stack of its own with ``[core] parallelism = 2`` (the shared one has 4): 4 producer/consumer
pairs whose consumers are queued first (higher ``priority_weight``) take both slots. In-worker
consumers would keep the producers from ever starting (all four failed with
``StreamNotStartedError``); deferrable ones give their slots back while idle: every pair
completes, each consumer handles its 60 pages strictly in order and each page once, and the
consumer that fails its first try on page 30 resumes at its checkpoint.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from harness.airflow_stack import AirflowStack

pytestmark = pytest.mark.e2e

DAG_FILE = Path(__file__).parent / "slots_dags" / "e2e_slots.py"
DAG_ID = "e2e_slots_consumers_first"
PAIRS = 4
PAGES = 60


@pytest.fixture(scope="module")
def slots_stack(tmp_path_factory, kafka_bootstrap, trigger_events_topic):
    dags = tmp_path_factory.mktemp("slots-dags")
    shutil.copy2(DAG_FILE, dags / DAG_FILE.name)
    env = {
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(
            {"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap}}
        ),
    }
    stack = AirflowStack(
        home=tmp_path_factory.mktemp("slots-home"), dags_folder=dags, extra_env=env, parallelism=2
    )
    try:
        stack.start(timeout=400.0, dag_ids=[DAG_ID])
        yield stack
    finally:
        stack.stop()


def _lines(path: Path) -> list[int]:
    return [int(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []


def test_consumers_queued_first_on_two_slots_let_every_producer_run(
    slots_stack: AirflowStack, tmp_path: Path
):
    stack = slots_stack
    directory = tmp_path / "run"
    directory.mkdir()
    directory.chmod(0o777)
    started = time.monotonic()
    run_id = stack.trigger_dag(DAG_ID, conf={"dir": str(directory)})
    state = stack.wait_for_dag_run(DAG_ID, run_id, timeout=300)
    elapsed = time.monotonic() - started
    tis = {(t["task_id"], t["try_number"]): t["state"] for t in stack.task_instances(DAG_ID, run_id)}
    assert state == "success", f"run {run_id} is {state}: {tis}\n{stack.diagnostics()}"

    # the consumers were queued first: both slots went to consumers before any producer ran,
    # and every consumer gave its slot back (deferred) at least once
    log = stack.state_change_log(DAG_ID, run_id=run_id)
    running = [row["task_id"] for row in log if row["event"] == "running"]
    assert all(task.startswith("consume_") for task in running[:2]), running
    deferred = {row["task_id"] for row in log if row["event"] == "deferred"}
    assert {f"consume_{i}" for i in range(PAIRS)} <= deferred, (deferred, running)
    print(f"\n{DAG_ID}: {PAIRS} pairs on 2 slots in {elapsed:.1f}s")
    deferrals = {}
    for i in range(PAIRS):
        task_id = f"consume_{i}"
        assert _lines(directory / f"{task_id}.txt") == list(range(PAGES)), task_id  # in order, each once
        summary = stack.xcom(DAG_ID, run_id, task_id)
        assert summary["pages"] == PAGES and summary["finished"], summary
        deferrals[task_id] = summary["deferrals"]
    print(f"defer cycles per consumer (last try): {deferrals}; state changes logged: {len(log)}")
    # at least the two consumers that took the slots first had to give them back
    assert sum(1 for n in deferrals.values() if n >= 1) >= 2, deferrals
    # consume_0 failed its first try on page 30 and the retry resumed at its checkpoint
    retried = stack.xcom(DAG_ID, run_id, "consume_0")
    assert retried["pages_this_try"] < PAGES, retried
    assert stack.task_instance(DAG_ID, run_id, "consume_0")["try_number"] == 2
