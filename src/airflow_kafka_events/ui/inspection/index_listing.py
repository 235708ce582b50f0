"""Streams as the index shows them: each stream merged with its consumers, filtered, newest first.

:func:`indexed_streams` turns an :class:`~.reader.IndexSnapshot` into :class:`IndexedStream` rows
(O(records), no Kafka read); :class:`StreamFilter` selects them (DAG, run, task, map index, state).
A row's :attr:`IndexedStream.summary` is the :class:`~airflow_kafka_events.ui.inspection.stream_state.
StreamOverview` the pages, the CLI and their JSON have always shown (state ``running`` / ``complete``
/ ``failed``); the index adds the stream's status as written, first offset, times, its
``pages_over_time`` and each consumer's position and ``lag_over_time``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from airflow_kafka_events.errors import ValidationError
from airflow_kafka_events.streams.descriptor import stream_id
from airflow_kafka_events.streams.index.record import MAX_SAMPLES, ConsumerRecord, StreamRecord
from airflow_kafka_events.ui.inspection.redact import redact_text
from airflow_kafka_events.ui.inspection.stream_state import StreamOverview, iso

__all__ = [
    "STATES",
    "IndexedStream",
    "StreamFilter",
    "consumer_row",
    "consumers_of_task",
    "indexed_stream",
    "indexed_streams",
    "lag_series",
    "last_activity",
    "state_of",
]

#: The states a listing shows and filters on (the index's ``finished`` is shown ``complete``).
STATES = ("running", "complete", "failed")
_STATE_OF_STATUS = {"running": "running", "finished": "complete", "failed": "failed"}


def _moment(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, tz=timezone.utc)


def _rate(record: StreamRecord) -> float | None:
    """Pages per second between the attempt's first and latest sample (``None`` with fewer than two)."""
    samples = record.pages_over_time
    if len(samples) < 2:
        return None
    (t0, p0), (t1, p1) = samples[0], samples[-1]
    return round((p1 - p0) / (t1 - t0), 3) if t1 > t0 and p1 > p0 else None


def last_activity(record: StreamRecord) -> float:
    """When the stream last wrote (its latest page, else its latest record): the listing's order."""
    return record.last_page_at if record.last_page_at is not None else record.updated_at


def state_of(record: StreamRecord) -> str:
    """The listing's state of the record's status (``finished`` is shown ``complete``)."""
    return _STATE_OF_STATUS[record.status]


def _summary(record: StreamRecord) -> StreamOverview:
    names = ("dag_id", "run_id", "task_id", "map_index")
    parts: dict[str, Any] = dict(zip(names, record.key_parts, strict=True))  # see StreamRecord.key_parts
    return StreamOverview(
        record.stream_id,
        **parts,
        attempt=record.attempt,
        generation=record.generation,
        pages=record.pages,
        last_sequence=record.last_sequence,
        state=state_of(record),
        error=None if record.error is None else redact_text(record.error),
        first_at=_moment(record.started_at),
        last_at=_moment(last_activity(record)),
        pages_per_second=_rate(record),
        topic=record.topic,
        partition=record.partition,
        last_offset=-1 if record.last_offset is None else record.last_offset,
    )


def _pages_handled(consumer: ConsumerRecord) -> int | None:
    """Pages of the followed attempt handled (a finished position counts the end marker: not a page)."""
    position = consumer.next_sequence_index
    if position is None:
        return None
    return max(0, position - 1) if consumer.finished else position


def _lag(consumer: ConsumerRecord, stream: StreamRecord | None) -> int | None:
    handled = _pages_handled(consumer)
    if stream is None or handled is None or consumer.attempt != stream.attempt:
        return consumer.lag_pages
    return max(0, stream.pages - handled)


def _step(samples: Sequence[tuple[float, int]], at: float) -> int | None:
    """The value of a sampled series at ``at`` (its latest sample at or before it)."""
    value = None
    for t, v in samples:
        if t > at:
            break
        value = v
    return value


def lag_series(consumer: ConsumerRecord, stream: StreamRecord | None) -> list[tuple[float, int]]:
    """The consumer's lag in pages over time: the stream's pages minus its position, at every sample
    time of either (same attempt only; the newest :data:`MAX_SAMPLES`)."""
    if stream is None or consumer.attempt != stream.attempt:
        return []
    written, read = stream.pages_over_time, consumer.positions_over_time
    out = []
    for at in sorted({t for t, _ in written} | {t for t, _ in read}):
        pages, position = _step(written, at), _step(read, at)
        if pages is None or position is None:
            continue
        out.append((at, max(0, pages - position)))
    return out[-MAX_SAMPLES:]


def consumer_row(consumer: ConsumerRecord, stream: StreamRecord | None) -> dict[str, Any]:
    """A consumer as the pages' JSON shows it (the fields of the task-state-store rows, and more)."""
    return {
        "trigger_run_id": consumer.stream_id,
        "consumer_id": consumer.consumer_id,
        "dag_id": consumer.dag_id,
        "run_id": consumer.run_id,
        "task_id": consumer.task_id,
        "map_index": -1 if consumer.map_index is None else consumer.map_index,
        "generation": consumer.generation,
        "attempt": consumer.attempt,
        "next_sequence_index": consumer.next_sequence_index,
        "offset": consumer.offset,
        "finished": consumer.finished,
        "pages_handled": _pages_handled(consumer),
        "lag_pages": _lag(consumer, stream),
        "updated_at": iso(_moment(consumer.updated_at)),
        "problem": None,
        "lag_over_time": [{"at": iso(_moment(t)), "lag": v} for t, v in lag_series(consumer, stream)],
    }


@dataclass(frozen=True)
class IndexedStream:
    """One stream of the index, with its consumers."""

    record: StreamRecord
    summary: StreamOverview
    consumers: tuple[ConsumerRecord, ...] = field(default_factory=tuple)

    @property
    def trigger_run_id(self) -> str:
        return self.record.stream_id

    def consumer_rows(self) -> list[dict[str, Any]]:
        return [consumer_row(c, self.record) for c in self.consumers]

    def to_dict(self) -> dict[str, Any]:
        """The listing's fields (:meth:`StreamOverview.to_dict`) and the index's own."""
        r = self.record
        return {
            **self.summary.to_dict(),
            "status": r.status,
            "first_offset": r.first_offset,
            "started_at": iso(_moment(r.started_at)),
            "ended_at": iso(_moment(r.ended_at)),
            "indexed_at": iso(_moment(r.updated_at)),
            "try_number": r.try_number,
            "pages_over_time": [{"at": iso(_moment(t)), "pages": p} for t, p in r.pages_over_time],
        }


def indexed_stream(record: StreamRecord, consumers: dict[str, list[ConsumerRecord]]) -> IndexedStream:
    """One stream of the index with its consumers (sorted by task)."""
    mine = sorted(consumers.get(record.stream_id, ()), key=lambda c: c.consumer_id)
    return IndexedStream(record, _summary(record), tuple(mine))


def indexed_streams(
    streams: Iterable[StreamRecord], consumers: dict[str, list[ConsumerRecord]]
) -> list[IndexedStream]:
    """Every stream with its consumers (sorted by task), newest activity first."""
    return [indexed_stream(r, consumers) for r in sorted(streams, key=last_activity, reverse=True)]


@dataclass(frozen=True)
class StreamFilter:
    """Which streams a listing shows (``None``: any)."""

    dag_id: str | None = None
    run_id: str | None = None
    task_id: str | None = None
    map_index: int | None = None
    state: str | None = None

    def __post_init__(self) -> None:
        if self.state is not None and self.state not in STATES:
            raise ValidationError(f"a stream state filter is one of {', '.join(STATES)}, got {self.state!r}")

    def matches(self, record: StreamRecord) -> bool:
        """Whether the stream of ``record`` is one the filter selects (no summary is built)."""
        if self.state is not None and self.state != state_of(record):
            return False
        wanted = (self.dag_id, self.run_id, self.task_id, self.map_index)
        if all(w is None for w in wanted):
            return True
        return all(w is None or w == h for w, h in zip(wanted, record.key_parts, strict=True))

    def own_stream_id(self) -> str | None:
        """The stream id of the task instance the filter names (``None`` unless it names one)."""
        if not (self.dag_id and self.run_id and self.task_id):
            return None
        try:
            return stream_id(
                self.dag_id, self.run_id, self.task_id, -1 if self.map_index is None else self.map_index
            )
        except ValidationError:
            return None


def consumers_of_task(
    consumers: dict[str, list[ConsumerRecord]], dag_id: str, run_id: str, task_id: str, map_index: int | None
) -> list[ConsumerRecord]:
    """The consumer records one task instance wrote (any map index when ``map_index`` is ``None``)."""
    return [
        c
        for records in consumers.values()
        for c in records
        if (c.dag_id, c.run_id, c.task_id) == (dag_id, run_id, task_id) and map_index in (None, c.map_index)
    ]
