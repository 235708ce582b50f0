"""End-to-end DAG: a task defers ONCE while an HttpPaginationTrigger pages an API into Kafka.

The run's conf names the HTTP connection (``conn_id``, created by the test), the Kafka topic
(``topic``), the page count (``pages``) and a directory (``dir``).  On resume the task reads
the stream back in batches and appends ``<sequence_index> <item ids>`` per page to
``<dir>/pages.txt``.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG, BaseOperator

from airflow_kafka_events.http.trigger import HttpPaginationTrigger
from airflow_kafka_events.streams.producing.operator import StreamingOperatorMixin

DAG_ID = "e2e_http_pagination"
TASK_ID = "fetch_pages"


class PagedApiToKafka(StreamingOperatorMixin, BaseOperator):
    stream_max_events = 4

    def execute(self, context: Any) -> None:
        conf = context["dag_run"].conf
        self.defer_stream(
            HttpPaginationTrigger(
                http_conn_id=conf["conn_id"],
                endpoint="api/items",
                cursor_path="paging.next",
                items_path="items",
                retry_backoff=0.2,
                request_timeout=300,
                topic=conf["topic"],
            )
        )

    def handle_trigger_events(self, events: Any, context: Any) -> None:
        directory = context["dag_run"].conf["dir"]
        lines = "".join(
            f"{event.sequence_index} {' '.join(str(item['id']) for item in event.payload)}\n"
            for event in events
        )
        with open(f"{directory}/pages.txt", "a", encoding="utf-8") as out:
            out.write(lines)


with DAG(
    dag_id=DAG_ID,
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["e2e", "http"],
):
    PagedApiToKafka(task_id=TASK_ID)
