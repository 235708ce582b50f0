"""Benchmark B1 DAGs: a paginated source read with one deferral per page vs ONE deferral in all.

``bench_classic_paging``: ``fetch_pages`` defers to a one-page trigger, resumes on a worker in
``execute_complete`` with that page, handles it, and defers again for the next page until the
last (the pattern streaming triggers replace: one defer/resume cycle per page).

``bench_streaming_paging``: ``fetch_pages`` defers ONCE to ``CountingPagesTrigger``, which
writes every page to Kafka; the task resumes once and handles the pages in batches.

``bench_defer_floor``: ``fetch_pages`` defers ONCE to a one-page trigger that fires at once and
resumes with that page: one defer/resume cycle and nothing else, the floor of the streaming
variant (with the pages' own time added, ``pages`` x ``delay``).

Both read ``pages`` and ``delay`` (seconds of simulated latency per page) from the DAG run's
conf; the XCom of both has ``"pages"``, the number of pages handled.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG, BaseOperator

from airflow_kafka_events.streams.producing.demo_trigger import CountingPagesTrigger, OnePageTrigger
from airflow_kafka_events.streams.producing.operator import StreamingOperatorMixin

DEFAULT_PAGES = 100
DEFAULT_DELAY = 0.02


def _conf(context: Any) -> tuple[int, float]:
    conf = context["dag_run"].conf or {}
    return int(conf.get("pages", DEFAULT_PAGES)), float(conf.get("delay", DEFAULT_DELAY))


class ClassicPagingOperator(BaseOperator):
    """One deferral per page: the task resumes with each page and defers again for the next."""

    def execute(self, context: Any) -> None:
        pages, delay = _conf(context)
        self.defer(trigger=OnePageTrigger(page=0, pages=pages, delay=delay), method_name="execute_complete")

    def execute_complete(
        self, context: Any, event: Any = None, handled: int = 0, page_sum: int = 0
    ) -> dict[str, int]:
        handled, page_sum = handled + 1, page_sum + int(event["page"])  # handle the page
        if event["next"] is None:
            return {"pages": handled, "page_sum": page_sum}
        pages, delay = _conf(context)
        self.defer(
            trigger=OnePageTrigger(page=event["next"], pages=pages, delay=delay),
            method_name="execute_complete",
            kwargs={"handled": handled, "page_sum": page_sum},
        )
        raise AssertionError("defer() returned")  # pragma: no cover - defer() always raises


class StreamingPagingOperator(StreamingOperatorMixin, BaseOperator):
    """One deferral: the trigger writes every page to Kafka; the task resumes once."""

    page_sum = 0

    def execute(self, context: Any) -> None:
        pages, delay = _conf(context)
        self.defer_stream(CountingPagesTrigger(pages=pages, delay=delay))

    def handle_trigger_events(self, events: Any, context: Any) -> None:
        self.page_sum += sum(int(e.payload["page"]) for e in events)  # handle the pages


class DeferFloorOperator(BaseOperator):
    """One defer/resume cycle: defers to a trigger that fires at once, resumes with its one page."""

    def execute(self, context: Any) -> None:
        self.defer(trigger=OnePageTrigger(page=0, pages=1, delay=0.0), method_name="execute_complete")

    def execute_complete(self, context: Any, event: Any = None) -> dict[str, int]:
        return {"pages": 1, "page_sum": int(event["page"])}


_DEFAULTS: dict[str, Any] = {
    "schedule": None,
    "start_date": pendulum.datetime(2024, 1, 1, tz="UTC"),
    "catchup": False,
    "max_active_runs": 1,
    "tags": ["benchmark"],
}

with DAG(dag_id="bench_classic_paging", **_DEFAULTS):
    ClassicPagingOperator(task_id="fetch_pages", retries=0)

with DAG(dag_id="bench_streaming_paging", **_DEFAULTS):
    StreamingPagingOperator(task_id="fetch_pages", retries=0)

with DAG(dag_id="bench_defer_floor", **_DEFAULTS):
    DeferFloorOperator(task_id="fetch_pages", retries=0)
