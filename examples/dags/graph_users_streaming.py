"""Every user of a Microsoft Graph tenant through Kafka, a page at a time, with ONE deferral.

``list_users`` defers once to a
:class:`~airflow_kafka_events.http.trigger.GraphPaginationTrigger`: the triggerer follows
``@odata.nextLink`` from page to page and writes each page's ``value`` (a list of users) to
Kafka; Graph throttling (``429`` with ``Retry-After``) is waited out in the triggerer.  When
the last page is in Kafka the task resumes ONCE and :meth:`handle_trigger_events` counts
the users, a batch of pages at a time.  The filter is templated: it is rendered before the
trigger is built.

``sync_users`` reads the same stream by reference while it is written (no dependency on
``list_users``) and hands each batch of users to the sync.

Setup: an HTTP connection ``msgraph`` with host ``https://graph.microsoft.com`` and an
``Authorization: Bearer <token>`` extra (or an authenticating proxy: static tokens expire),
a Kafka connection ``kafka_default`` and the topic ``airflow.trigger-events``.  Parsing
this file needs no network.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pendulum
from airflow.sdk import DAG, BaseOperator

from airflow_kafka_events.http.trigger import GraphPaginationTrigger
from airflow_kafka_events.streams.consuming.consumption import StreamEvent
from airflow_kafka_events.streams.consuming.decorator import stream_consumer_task
from airflow_kafka_events.streams.consuming.operator import StreamRef
from airflow_kafka_events.streams.producing.operator import StreamingOperatorMixin

log = logging.getLogger(__name__)


class GraphUsersToKafka(StreamingOperatorMixin, BaseOperator):
    """Streams ``/users`` (optionally ``$filter``-ed) through Kafka; counts them on resume."""

    template_fields: Sequence[str] = ("odata_filter",)
    stream_max_events = 50

    def __init__(self, *, odata_filter: str | None = None, page_size: int = 999, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.odata_filter = odata_filter
        self.page_size = page_size

    def execute(self, context: Any) -> None:
        params: dict[str, Any] = {"$top": self.page_size, "$select": "id,displayName,mail,accountEnabled"}
        if self.odata_filter:
            params["$filter"] = self.odata_filter
        self.defer_stream(
            GraphPaginationTrigger(http_conn_id="msgraph", endpoint="v1.0/users", params=params)
        )

    def handle_trigger_events(self, events: Sequence[StreamEvent], context: Any) -> None:
        users = sum(len(event.payload) for event in events)
        self.log.info("pages %d..%d: %d users", events[0].sequence_index, events[-1].sequence_index, users)


with DAG(
    dag_id="graph_users_streaming",
    schedule="@daily",
    start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
    catchup=False,
    tags=["example", "airflow-kafka-events", "msgraph"],
    doc_md=__doc__,
):
    GraphUsersToKafka(
        task_id="list_users",
        odata_filter="createdDateTime ge {{ data_interval_start.strftime('%Y-%m-%dT%H:%M:%SZ') }}",
    )

    @stream_consumer_task(stream=StreamRef("list_users"), max_events=10, max_wait=2.0)
    def sync_users(events: Any, context: Any) -> int:
        """A batch of pages in order; each page's payload is a list of Graph users."""
        users = [user for event in events for user in event.payload]
        enabled = [user["id"] for user in users if user.get("accountEnabled")]
        log.info("syncing %d users (%d enabled)", len(users), len(enabled))
        return len(users)

    sync_users()
