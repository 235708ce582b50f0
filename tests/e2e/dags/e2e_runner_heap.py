"""End-to-end DAG: one task that defers to a trigger reporting its process's collector state (the
triggerer's runner) and returns that report."""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import BaseOperator, dag

from harness.heap_probe import HeapProbeTrigger

DAG_ID = "e2e_runner_heap"
TASK_ID = "probe_runner_heap"


class ProbeRunnerHeapOperator(BaseOperator):
    def execute(self, context: Any) -> None:
        self.defer(trigger=HeapProbeTrigger(), method_name="resume")

    def resume(self, context: Any, event: Any = None) -> Any:
        return event


@dag(schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC"), catchup=False, tags=["e2e"])
def e2e_runner_heap() -> None:
    ProbeRunnerHeapOperator(task_id=TASK_ID)


e2e_runner_heap()
