"""A streaming producer whose topic does not exist, through a real Airflow and Kafka.

A new user who has not created the topics yet must read in the *task* log what went wrong (the
missing topic, by name) and how to fix it (``airflow-kafka-events topics ensure``), not only
``TaskDeferralError: Trigger failure``.
"""

from __future__ import annotations

import pytest

from harness.airflow_stack import AirflowStack

pytestmark = pytest.mark.e2e

DAG_ID = "e2e_missing_topic"
MISSING_TOPIC = "e2e.never-created-topic"


def test_a_missing_topic_is_named_in_the_task_log_with_the_command_that_creates_it(
    airflow_stack: AirflowStack, kafka_bootstrap: str
):
    stack = airflow_stack
    stack.wait_dag_parsed(DAG_ID)
    run_id = stack.trigger_dag(DAG_ID)
    state = stack.wait_for_dag_run(DAG_ID, run_id, timeout=240)
    assert state == "failed", f"{DAG_ID} run {run_id} is {state}\n{stack.diagnostics()}"

    task_log = stack.task_log(DAG_ID, run_id, "produce")
    trigger_log = stack.trigger_log(DAG_ID, run_id, "produce")
    print(f"\n--- task log ---\n{task_log}\n--- trigger log ---\n{trigger_log[-3000:]}")
    assert MISSING_TOPIC in task_log, task_log
    assert "airflow-kafka-events topics ensure" in task_log, task_log
    assert "UNKNOWN_TOPIC_OR_PART" in task_log, task_log
