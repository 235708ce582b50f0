"""End-to-end DAG: the example pattern -- a fetch-only HTTP stream and a live consumer.

``fetch_pages`` starts in the triggerer (``start_from_trigger``) with an
``HttpPaginationTrigger`` over the connection ``e2e_paged_api_fetch_only`` (created by the
test) and ends with the stream descriptor as XCom.  ``handle_pages`` reads the stream by
reference while it is written and appends ``<sequence_index> <item ids>`` per page to
``<dir>/consumer.txt`` (``dir`` from the run's conf).
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG

from airflow_kafka_events.streams.consuming.decorator import stream_consumer_task
from airflow_kafka_events.streams.consuming.operator import StreamRef
from airflow_kafka_events.streams.producing.operator import StreamingTriggerOperator

DAG_ID = "e2e_http_fetch_only"
CONN_ID = "e2e_paged_api_fetch_only"

with DAG(
    dag_id=DAG_ID,
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["e2e", "http"],
):
    StreamingTriggerOperator(
        task_id="fetch_pages",
        trigger_cls="airflow_kafka_events.http.trigger.HttpPaginationTrigger",
        trigger_kwargs={
            "http_conn_id": CONN_ID,
            "endpoint": "api/items",
            "cursor_path": "paging.next",
            "items_path": "items",
            "retry_backoff": 0.2,
            "request_timeout": 300,
        },
    )

    @stream_consumer_task(
        stream=StreamRef("fetch_pages"), max_events=2, max_wait=0.2, start_timeout=150, gap_timeout=150
    )
    def handle_pages(events: Any, context: Any) -> int:
        directory = context["dag_run"].conf["dir"]
        with open(f"{directory}/consumer.txt", "a", encoding="utf-8") as out:
            out.write(
                "".join(
                    f"{event.sequence_index} {' '.join(str(item['id']) for item in event.payload)}\n"
                    for event in events
                )
            )
        return len(events)

    handle_pages()
