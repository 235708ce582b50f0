"""Streams: per DAG run and task, what each streaming trigger wrote and how far its consumers read.

``GET /api/streams`` lists the streams of the stream index (filters ``dag_id`` / ``run_id`` /
``task_id`` / ``map_index`` / ``state``: the DAG, DAG run and task-instance tabs ask for it
filtered), each with its consumers' positions and their lag in pages.  For a task instance it names
the stream that task instance writes (when the index holds it: no stream that is not there) and the
streams it reads with their lag (the figure each stream's answer gives; unknown only for a stream
the index does not hold).  ``GET /api/streams/{trigger_run_id}`` is one stream: its latest
attempt's envelopes and its consumers; the React page passes ``?partition=&offset=`` (the stream's
partition and latest offset the listing gave), so only a bounded range around that is read,
however old the stream.  Without them (a typed URL) the per-key lookup is bounded by the time its
task instance's latest try ran as Airflow's metadata DB has it (that try's start .. its end,
widened by :data:`SPAN_BEFORE` / :data:`SPAN_AFTER`): it reads backwards from the end of that time
to the stream's latest envelope, and that attempt forward from its first offset.  ``?minutes=``
bounds how far back the lookup reads, inside that time: the later start wins (the answer states
both).  A task instance that never started (skipped, upstream_failed, not yet run) has written no
stream: the answer says so (404).  Only for a task instance Airflow no longer knows (its DAG run
deleted) the per-key lookup reads the partition backwards from its end, and the answer says so.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from airflow.api_fastapi.common.db.common import SessionDep
from fastapi import APIRouter, Query
from fastapi.responses import Response
from sqlalchemy import select

from airflow_kafka_events.errors import AirflowKafkaEventsError, ValidationError
from airflow_kafka_events.streams.descriptor import DEFAULT_NOT_BEFORE_MARGIN, parse_stream_id
from airflow_kafka_events.streams.index.record import StreamRecord, stream_key
from airflow_kafka_events.ui.airflow_state import ConsumerCheckpoint, consumer_checkpoints, task_instance_run
from airflow_kafka_events.ui.inspection.errors import StreamIndexNotFoundError, StreamNotFoundError
from airflow_kafka_events.ui.inspection.index_listing import (
    StreamFilter,
    consumer_row,
    consumers_of_task,
    indexed_streams,
)
from airflow_kafka_events.ui.inspection.stream_state import StreamOverview
from airflow_kafka_events.ui.inspection.streams import StreamListing, WrittenSpan, list_streams, show_stream
from airflow_kafka_events.ui.inspection.window import ScanWindow
from airflow_kafka_events.ui.views.common import PageRequest, PageRequestDep

__all__ = [
    "router",
]

router = APIRouter()

#: How much earlier than its task instance's latest start a stream's envelopes are looked for.
#: Record timestamps are the producer's CreateTime (the worker's or triggerer's clock), the task
#: instance's dates the scheduler's / API server's: this covers their clocks being apart (NTP keeps
#: them within milliseconds; a minute tolerates a host that lost sync).  Each second of it is read
#: before the stream (only when the stream is not found there: the lookup stops at its latest envelope).
SPAN_BEFORE = timedelta(minutes=1)
#: How much later than its task instance's end: the same skew, and a trigger still writing its
#: end marker while it is cancelled after the task instance failed.  The lookup reads backwards from
#: its end: what the partition got in those minutes after the stream is read first.
SPAN_AFTER = timedelta(minutes=5)


#: What a consumer's row shows of its checkpoint (``None`` each without one).
_CHECKPOINT_FIELDS = ("attempt", "next_sequence_index", "offset", "finished")


def _consumer_rows(
    checkpoints: list[ConsumerCheckpoint], summaries: dict[str, StreamOverview]
) -> list[dict[str, Any]]:
    """Consumers known only from the task state store (none in the index): their checkpoints, with
    their lag behind the stream they read when ``summaries`` has it."""
    rows = []
    for cp in checkpoints:
        summary = summaries.get(cp.trigger_run_id)
        lag = None if summary is None else cp.lag(summary.pages, summary.attempt)
        rows.append(
            {
                "trigger_run_id": cp.trigger_run_id,
                "dag_id": cp.dag_id,
                "run_id": cp.run_id,
                "task_id": cp.task_id,
                "map_index": cp.map_index,
                "generation": cp.generation,
                **{name: getattr(cp.checkpoint, name, None) for name in _CHECKPOINT_FIELDS},
                "pages_handled": cp.pages,
                "lag_pages": lag,
                "updated_at": cp.updated_at,
                "problem": cp.problem,
            }
        )
    return rows


def _indexed_summaries(
    listing: StreamListing, checkpoints: list[ConsumerCheckpoint]
) -> dict[str, StreamOverview]:
    """The summaries of the streams ``checkpoints`` read that are in the index (matched or not)."""
    return {
        cp.trigger_run_id: read.summary
        for cp in checkpoints
        if (read := listing.stream(cp.trigger_run_id)) is not None
    }


def _map_index(value: str | None) -> int | None:
    """A map index from the query; the UI leaves ``{MAP_INDEX}`` unreplaced for an unmapped task."""
    try:
        number = int(value) if value is not None else None
    except ValueError:
        return None
    return number if number is None or number >= -1 else None


@router.get("/api/streams")
def streams_page(
    page: PageRequestDep,
    session: SessionDep,
    dag_id: Annotated[str | None, Query()] = None,
    run_id: Annotated[str | None, Query()] = None,
    task_id: Annotated[str | None, Query()] = None,
    map_index: Annotated[str | None, Query(description="a task instance's map index")] = None,
    state: Annotated[str | None, Query(description="running, complete or failed")] = None,
    offset: Annotated[int, Query(ge=0, description="rows of the listing to skip (paging)")] = 0,
) -> Response:
    index = _map_index(map_index)
    # the page's filter form sends an empty field as "": no filter, not "the DAG named ''"
    dag_id, run_id, task_id, state = dag_id or None, run_id or None, task_id or None, state or None
    try:
        filters = StreamFilter(dag_id, run_id, task_id, index, state)
        listing = list_streams(
            page.config(), page.settings.stream_index_topic, filters=filters, cache=page.stream_index()
        )
    except AirflowKafkaEventsError as exc:
        return page.failed(exc)
    task_tab = bool(dag_id and run_id and task_id)
    own_stream = None
    read_by_task: list[dict[str, Any]] = []
    if task_tab:  # the task-instance tab: the stream it writes (if any), those it reads
        assert dag_id is not None and run_id is not None and task_id is not None
        own_id = filters.own_stream_id()
        own_stream = None if own_id is None else listing.stream(own_id)
        for record in consumers_of_task(listing.consumers, dag_id, run_id, task_id, index):
            read_by_task.append(consumer_row(record, listing.records.get(record.stream_id)))
    if task_tab and not read_by_task:  # consumers that wrote no index record: their checkpoints
        stored = consumer_checkpoints(session, dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=index)
        read_by_task = _consumer_rows(stored, _indexed_summaries(listing, stored))
    payload = {
        **listing.to_dict(offset, page.limit),  # its streams (newest activity first), matched, index
        "task_instance_stream": None if own_stream is None else own_stream.trigger_run_id,
        "read_by_task_instance": read_by_task,
        "window": None,
        "window_text": listing.describe(),
        "undecodable": len(listing.skipped),
        "offset": offset,
        "limit": page.limit,
    }
    return page.answer(payload)


def _stream_window(page: PageRequest, session: Any, trigger_run_id: str) -> ScanWindow:
    """The page's window; without ``?minutes=``, from the stream's DAG run on (as the producer's lookup).

    No envelope of a task's stream is older than its DAG run's ``run_after`` minus
    :data:`~airflow_kafka_events.streams.descriptor.DEFAULT_NOT_BEFORE_MARGIN`, so the per-key lookup need not
    read further back (an old stream of a 24-hour window is then found as fast as a new one).
    """
    window = page.window()
    if "minutes" in page.request.query_params:
        return window
    try:
        key = parse_stream_id(trigger_run_id)
    except ValidationError:
        return window
    from airflow.models.dagrun import DagRun

    run_after = session.scalar(
        select(DagRun.run_after).where(DagRun.dag_id == key.dag_id, DagRun.run_id == key.run_id)
    )
    if run_after is None:
        return window
    since = run_after - DEFAULT_NOT_BEFORE_MARGIN
    if window.since is not None and since < window.since:
        return window
    return ScanWindow(since=since, max_records=window.max_records)


def _written_span(
    session: Any, trigger_run_id: str
) -> tuple[WrittenSpan | None, dict[str, Any] | None, str | None]:
    """When the stream was written, from its task instance's latest try in Airflow.

    ``(span, task instance facts, why none)``: span ``None`` when Airflow has no such task instance
    (facts ``None``) or it never started (the reason, naming the task instance and its state).
    """
    try:
        key = parse_stream_id(trigger_run_id)
    except ValidationError:
        return None, None, None
    run = task_instance_run(session, key.dag_id, key.run_id, key.task_id, key.map_index)
    if run is None:
        return None, None, None
    info = {
        "state": run.state,
        "tries": run.tries,
        "started": None if run.started is None else run.started.isoformat(),
        "ended": None if run.ended is None else run.ended.isoformat(),
        "from_history": run.from_history,
        "slack_before_s": SPAN_BEFORE.total_seconds(),
        "slack_after_s": SPAN_AFTER.total_seconds(),
    }
    why = run.never_ran()
    if why is not None or run.started is None:
        name = f"{key.dag_id} / {key.run_id} / {key.task_id} (map index {key.map_index})"
        return None, info, f"task instance {name} {why}; its stream {trigger_run_id!r} has no envelope"
    until = None if run.ended is None else max(run.ended, run.started) + SPAN_AFTER
    return WrittenSpan(run.started - SPAN_BEFORE, until), info, None


@router.get("/api/streams/{trigger_run_id:path}")
def stream_page(
    page: PageRequestDep,
    session: SessionDep,
    trigger_run_id: str,
    partition: Annotated[int | None, Query(ge=0, description="the stream's partition (a listing's)")] = None,
    offset: Annotated[
        int | None, Query(ge=0, description="its latest envelope's offset (a listing's)")
    ] = None,
) -> Response:
    try:
        snapshot = page.stream_index().read(page.config(), page.settings.stream_index_topic)
    except StreamIndexNotFoundError:
        snapshot = None  # the stream is still found by its lookups, below
    except AirflowKafkaEventsError as exc:
        return page.failed(exc)
    record = None if snapshot is None else snapshot.records.get(stream_key(trigger_run_id))
    indexed = None
    if isinstance(record, StreamRecord):
        indexed = indexed_streams([record], snapshot.consumers() if snapshot is not None else {})[0]
        if partition is None and offset is None and record.last_offset is not None:
            partition, offset = record.partition, record.last_offset  # where the index says it is
    try:
        window = _stream_window(page, session, trigger_run_id)
        written, task_instance, never_ran = _written_span(session, trigger_run_id)
        hinted = partition is not None and offset is not None
        if never_ran is not None and not hinted:
            raise StreamNotFoundError(never_ran)
        detail = show_stream(
            page.config(),
            page.settings.trigger_events_topic,
            trigger_run_id,
            window=window,
            partition=None if offset is None else partition,
            last_offset=None if partition is None else offset,
            written=written,
        )
    except AirflowKafkaEventsError as exc:
        return page.failed(exc)
    if indexed is not None and indexed.consumers:
        consumers = indexed.consumer_rows()
    else:  # consumers that wrote no index record: their checkpoints
        summaries = {trigger_run_id: detail.summary}
        consumers = _consumer_rows(consumer_checkpoints(session, [trigger_run_id]), summaries)
    payload = {
        **detail.to_dict(),
        "consumers": consumers,
        "task_instance": task_instance,
        "window_text": detail.describe(),
        "index": None if indexed is None else indexed.to_dict(),
    }
    return page.answer(payload)
