"""A real triggerer's runner runs its triggers with the heap it inherited from its supervisor frozen
(the plugin's listener, ``[kafka_events] triggerer_freeze_heap``, default on): its full collections
do not walk Airflow's ~275,000 imported objects with the GIL held while its event loop waits."""

from __future__ import annotations

import pytest

from harness.airflow_stack import AirflowStack
from harness.processes import ancestors

pytestmark = pytest.mark.e2e

DAG_ID = "e2e_runner_heap"
TASK_ID = "probe_runner_heap"


@pytest.mark.compat  # make test-compat: the second supported Airflow
def test_a_triggerers_runner_runs_triggers_with_its_inherited_heap_frozen(
    airflow_stack: AirflowStack,
) -> None:
    run_id = airflow_stack.trigger_dag(DAG_ID)
    state = airflow_stack.wait_for_dag_run(DAG_ID, run_id, timeout=180)
    assert state == "success", airflow_stack.diagnostics()
    report = airflow_stack.xcom(DAG_ID, run_id, TASK_ID)
    # the trigger ran in a child of one of the stack's triggerers (its runner), not in the supervisor
    chain = ancestors(int(report["pid"]))
    assert airflow_stack.component_of(chain[1:]) in ("triggerer", "triggerer-2"), (report, chain)
    assert airflow_stack.component_of(chain[:1]) is None, (report, chain)
    # the runner's inherited heap: Airflow's imports and the supervisor's objects at the fork
    assert report["frozen"] > 50_000, report
    print(f"\nthe runner (pid {report['pid']}) froze {report['frozen']:,} inherited objects")
