"""End-to-end DAG that must NOT parse: a lambda in the trigger kwargs of a streaming task.

Not in a ``dags`` directory on purpose: the e2e test copies it into the DAGs folder, waits for
the DAG processor's import error (which names the argument) and removes it again.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_kafka_events.streams.producing.operator import StreamingTriggerOperator

with DAG(
    dag_id="e2e_stream_bad_lambda",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["e2e", "streaming"],
):
    StreamingTriggerOperator(
        task_id="fetch",
        trigger_cls="airflow_kafka_events.streams.producing.demo_trigger.CountingPagesTrigger",
        trigger_kwargs={"pages": 3, "extra": {"page_filter": lambda page: page % 2 == 0}},
    )
