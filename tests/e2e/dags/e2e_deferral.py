"""End-to-end DAG: one task that always defers to a timer trigger and resumes on a worker.

Its path is scheduler -> worker (execute, defer) -> triggerer (timer fires) -> worker (resume) -> success.
The timer length is ``delay_seconds`` of the run's conf (default 2).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.providers.standard.triggers.temporal import TimeDeltaTrigger
from airflow.sdk import DAG, BaseOperator

DAG_ID = "e2e_deferral"
TASK_ID = "defer_then_resume"


class DeferOnceOperator(BaseOperator):
    """Defers unconditionally (unlike ``TimeDeltaSensor``, which skips deferral once its target passed)."""

    def __init__(self, *, default_delay: timedelta, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.default_delay = default_delay

    def execute(self, context: Any) -> None:
        conf = context["dag_run"].conf or {}
        delay = timedelta(seconds=float(conf.get("delay_seconds", self.default_delay.total_seconds())))
        self.defer(trigger=TimeDeltaTrigger(delay), method_name="resume")

    def resume(self, context: Any, event: Any = None) -> dict[str, Any]:
        return {"resumed": True, "event": str(event)}


with DAG(
    dag_id=DAG_ID,
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["e2e"],
):
    DeferOnceOperator(task_id=TASK_ID, default_delay=timedelta(seconds=2))
