"""The harness runs a real Airflow: scheduler -> worker -> triggerer -> worker for a deferring task."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from harness.airflow_stack import AirflowStack

pytestmark = pytest.mark.e2e

DAG_ID = "e2e_deferral"
TASK_ID = "defer_then_resume"


def _is_subsequence(wanted: list[str], seen: list[str]) -> bool:
    it = iter(seen)
    return all(event in it for event in wanted)


def test_components_healthy_and_users_authenticate(airflow_stack: AirflowStack) -> None:
    health = airflow_stack.wait_healthy(timeout=60)
    assert health["metadatabase"]["status"] == "healthy"
    for key in ("scheduler", "triggerer", "dag_processor"):
        assert health[key]["status"] == "healthy", health

    # Both configured users get real tokens from POST /auth/token; the op user can read DAGs.
    for user in airflow_stack.users:
        airflow_stack.api("GET", "dags", user=user, expect=200)
    bad = airflow_stack.client.post("/auth/token", json={"username": "bridge", "password": "wrong"})
    assert bad.status_code == 401
    unauthenticated = airflow_stack.client.get("/api/v2/dags")
    assert unauthenticated.status_code in (401, 403)


def test_deferrable_task_runs_through_triggerer(airflow_stack: AirflowStack) -> None:
    started = time.monotonic()
    run_id = airflow_stack.trigger_dag(DAG_ID, conf={"origin": "test_stack"})

    state = airflow_stack.wait_for_dag_run(DAG_ID, run_id, timeout=180)
    elapsed = time.monotonic() - started
    assert state == "success", airflow_stack.diagnostics()

    # The execution API logs every state change: the worker started, deferred, then resumed the task.
    rows = airflow_stack.state_change_log(DAG_ID, run_id=run_id, task_id=TASK_ID)
    events = [row["event"] for row in rows]
    assert _is_subsequence(["running", "deferred", "running", "success"], events), events

    # Deferral does not consume a try: one try, successful, resumed by the method given to defer().
    tries = airflow_stack.task_instance_tries(DAG_ID, run_id, TASK_ID)
    assert [(t["try_number"], t["state"]) for t in tries] == [(1, "success")], tries
    value = airflow_stack.xcom(DAG_ID, run_id, TASK_ID)
    assert value["resumed"] is True, value

    # The trigger really ran in the triggerer process and fired.
    trigger_log = airflow_stack.trigger_log(DAG_ID, run_id, TASK_ID)
    assert "Trigger fired event" in trigger_log, trigger_log or airflow_stack.log_tail("triggerer", 80)
    print(f"\ndeferral DAG run took {elapsed:.1f}s; stack timings: {airflow_stack.timings}")


def test_killed_triggerer_hands_its_trigger_to_a_restarted_one(airflow_stack: AirflowStack) -> None:
    with airflow_stack.sole_triggerer("triggerer"):  # the production topology's second one stops
        _kill_and_restart_the_triggerer_of_a_deferred_task(airflow_stack)


def _kill_and_restart_the_triggerer_of_a_deferred_task(airflow_stack: AirflowStack) -> None:
    run_id = airflow_stack.trigger_dag(DAG_ID, conf={"delay_seconds": 15})
    airflow_stack.wait_for_task_state(DAG_ID, run_id, TASK_ID, {"deferred"}, timeout=120)
    airflow_stack.wait_for(
        lambda: "trigger starting" in airflow_stack.trigger_log(DAG_ID, run_id, TASK_ID),
        timeout=60,
        description="the triggerer to start the trigger",
        components=("triggerer",),
    )

    old_pid = airflow_stack.pid("triggerer")
    assert old_pid is not None
    airflow_stack.kill_component("triggerer")
    assert airflow_stack.pid("triggerer") is None
    assert not Path(f"/proc/{old_pid}").exists()
    # Nobody runs the trigger now: the task stays deferred.
    assert airflow_stack.task_instance(DAG_ID, run_id, TASK_ID)["state"] == "deferred"

    airflow_stack.restart_component("triggerer", timeout=120)
    assert airflow_stack.wait_for_dag_run(DAG_ID, run_id, timeout=180) == "success"

    # A second triggerer job ran the same trigger and fired it.
    files = airflow_stack.trigger_log_files(DAG_ID, run_id, TASK_ID)
    assert len(files) == 2, files
    assert "Trigger fired event" in files[-1].read_text(), files[-1].read_text()
    events = [r["event"] for r in airflow_stack.state_change_log(DAG_ID, run_id=run_id, task_id=TASK_ID)]
    assert _is_subsequence(["running", "deferred", "running", "success"], events), events


def test_kafka_connection_reaches_workers(airflow_stack: AirflowStack) -> None:
    assert "AIRFLOW_CONN_KAFKA_DEFAULT" in airflow_stack.extra_env, "the stack must get the session broker"
    conn = json.loads(airflow_stack.extra_env["AIRFLOW_CONN_KAFKA_DEFAULT"])
    bootstrap = conn["extra"]["bootstrap.servers"]

    run_id = airflow_stack.trigger_dag("e2e_connection_probe")
    assert airflow_stack.wait_for_dag_run("e2e_connection_probe", run_id, timeout=180) == "success"
    value = airflow_stack.xcom("e2e_connection_probe", run_id, "read_connection")
    assert value == {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}
