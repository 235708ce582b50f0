"""Page a JSON API into Kafka with ONE deferral, and handle the pages in a second task.

``fetch_pages`` starts in the triggerer (``start_from_trigger``: it never takes a worker
slot) and runs an :class:`~airflow_kafka_events.http.trigger.HttpPaginationTrigger`: every
page of ``GET /v1/orders`` is written to Kafka as one envelope as soon as it is fetched,
``429``/``5xx`` answers are retried, and a triggerer restart continues after the last page
in Kafka.  The task ends when the last page is written, with the stream descriptor as XCom.

``handle_pages`` has no dependency on ``fetch_pages``: it reads the stream by reference
(:class:`~airflow_kafka_events.streams.consuming.operator.StreamRef`) while it is written, in order, in
batches of up to 20 pages, and checkpoints its position after every batch.

Setup: an HTTP connection ``paginated_api`` (host ``https://api.example.com``; put the API
token in its extras, e.g. ``{"Authorization": "Bearer ..."}``), a Kafka connection
``kafka_default``, and the topic ``airflow.trigger-events``.  The API answers
``{"orders": [...], "paging": {"next": "<URL of the next page>" | null}}``.  Parsing this
file needs no network.
"""

from __future__ import annotations

import logging
from typing import Any

import pendulum
from airflow.sdk import DAG

from airflow_kafka_events.streams.consuming.decorator import stream_consumer_task
from airflow_kafka_events.streams.consuming.operator import StreamRef
from airflow_kafka_events.streams.producing.operator import StreamingTriggerOperator

log = logging.getLogger(__name__)

with DAG(
    dag_id="paginated_api_streaming",
    schedule=None,
    start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
    catchup=False,
    tags=["example", "airflow-kafka-events", "http"],
    doc_md=__doc__,
):
    StreamingTriggerOperator(
        task_id="fetch_pages",
        trigger_cls="airflow_kafka_events.http.trigger.HttpPaginationTrigger",
        trigger_kwargs={
            "http_conn_id": "paginated_api",
            "endpoint": "v1/orders",
            "params": {"status": "open", "per_page": 100},
            "cursor_path": "paging.next",  # the next page's URL is in the body
            "items_path": "orders",  # a page's payload is its list of orders
            "max_pages": 1000,
            "max_retries": 5,
            "retry_backoff": 1.0,
            "request_timeout": 30,
        },
    )

    @stream_consumer_task(stream=StreamRef("fetch_pages"), max_events=20, max_wait=1.0)
    def handle_pages(events: Any, context: Any) -> int:
        """A batch of pages, in order; each page's payload is a list of orders."""
        orders = [order for event in events for order in event.payload]
        log.info(
            "pages %d..%d: %d orders",
            events[0].sequence_index,
            events[-1].sequence_index,
            len(orders),
        )
        return len(orders)

    handle_pages()
