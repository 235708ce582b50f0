"""End-to-end DAG: a streaming producer whose topic was never created (a new user's first run)."""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG, BaseOperator

from airflow_kafka_events.streams.producing.demo_trigger import CountingPagesTrigger
from airflow_kafka_events.streams.producing.operator import StreamingOperatorMixin

DAG_ID = "e2e_missing_topic"
MISSING_TOPIC = "e2e.never-created-topic"


class ProduceToMissingTopic(StreamingOperatorMixin, BaseOperator):
    def execute(self, context: Any) -> None:
        self.defer_stream(CountingPagesTrigger(pages=3, topic=MISSING_TOPIC))

    def handle_trigger_events(self, events: Any, context: Any) -> None:  # never reached
        raise AssertionError("the topic does not exist: no page can have been written")


with DAG(
    dag_id=DAG_ID,
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["e2e", "streaming"],
):
    ProduceToMissingTopic(task_id="produce", retries=0)
