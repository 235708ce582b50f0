"""A stream's state as its envelopes show it: :class:`StreamOverview`, :class:`PageInfo`.

:class:`StreamState` aggregates the envelopes of one stream read in any order: the highest
attempt counts; it is ``complete`` or ``failed`` once its terminal marker is seen, else
``running``.  Page counts and rates come from sequence numbers, so a read that starts (or
stops) inside an attempt still counts it right.

This module imports no Airflow module.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from confluent_kafka import Message

from airflow_kafka_events.envelopes.codec import TRIGGER_EVENT_CODEC, EnvelopeCodec
from airflow_kafka_events.envelopes.model import TriggerEventEnvelope
from airflow_kafka_events.errors import EnvelopeDecodeError, ValidationError
from airflow_kafka_events.streams.descriptor import parse_stream_id
from airflow_kafka_events.streams.progress import metadata_generation
from airflow_kafka_events.ui.inspection.listing import record_dict
from airflow_kafka_events.ui.inspection.redact import preview, redact_text

__all__ = [
    "PAGE_PREVIEW_LIMIT",
    "PageInfo",
    "StreamOverview",
    "StreamState",
    "decode_envelope",
    "iso",
]

#: Characters of a page's payload preview.
PAGE_PREVIEW_LIMIT = 200


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


@dataclass(frozen=True)
class StreamOverview:
    """One stream's latest attempt as far as the scanned envelopes show it."""

    trigger_run_id: str
    dag_id: str | None
    run_id: str | None
    task_id: str | None
    map_index: int | None
    attempt: int
    generation: int | None
    pages: int
    last_sequence: int | None
    state: str  # running | complete | failed
    error: str | None
    first_at: datetime | None
    last_at: datetime | None
    pages_per_second: float | None
    topic: str
    partition: int
    last_offset: int

    def matches(
        self, dag_id: str | None = None, run_id: str | None = None, task_id: str | None = None
    ) -> bool:
        """Whether the stream is of that DAG, DAG run and task (``None``: any)."""
        return all(
            wanted is None or wanted == have
            for wanted, have in ((dag_id, self.dag_id), (run_id, self.run_id), (task_id, self.task_id))
        )

    def to_dict(self) -> dict[str, Any]:
        return record_dict(self)


@dataclass(frozen=True)
class PageInfo:
    """One envelope of a stream (a data page, or the terminal marker ``is_last``)."""

    offset: int
    attempt: int
    sequence_index: int
    is_last: bool
    emitted_at: datetime
    record_bytes: int
    error: str | None = None
    payload_preview: str | None = None

    @classmethod
    def of(cls, envelope: TriggerEventEnvelope, msg: Message) -> PageInfo:
        error = envelope.error
        return cls(
            offset=int(msg.offset() or 0),
            attempt=envelope.attempt,
            sequence_index=envelope.sequence_index,
            is_last=envelope.is_last,
            emitted_at=envelope.emitted_at,
            record_bytes=len(msg.value() or b""),
            error=None if error is None else redact_text(f"{error.type}: {error.message}"),
            payload_preview=None
            if envelope.payload is None
            else preview(envelope.payload, PAGE_PREVIEW_LIMIT),
        )

    def to_dict(self) -> dict[str, Any]:
        return record_dict(self)


@dataclass
class StreamState:
    """Running aggregate of one stream's envelopes (the highest attempt wins)."""

    key: str
    topic: str
    partition: int
    attempt: int = -1
    generation: int | None = None
    last_data: int | None = None
    terminal: TriggerEventEnvelope | None = None
    first_at: datetime | None = None
    last_at: datetime | None = None
    data_seen: int = 0
    data_first: tuple[datetime, int] | None = None  # (emitted_at, sequence_index) of the first data page
    data_last: tuple[datetime, int] | None = None
    last_offset: int = -1

    def _restart(self, attempt: int) -> None:
        self.attempt, self.generation, self.last_data, self.terminal = attempt, None, None, None
        self.first_at = self.last_at = self.data_first = self.data_last = None
        self.data_seen, self.last_offset = 0, -1

    def add(self, envelope: TriggerEventEnvelope, offset: int) -> None:
        if envelope.attempt < self.attempt:
            return
        if envelope.attempt > self.attempt:
            self._restart(envelope.attempt)
        stamp = envelope.emitted_at
        self.first_at = stamp if self.first_at is None else min(self.first_at, stamp)
        self.last_at = stamp if self.last_at is None else max(self.last_at, stamp)
        self.last_offset = max(self.last_offset, offset)
        generation = metadata_generation(envelope)
        if generation is not None:
            self.generation = generation
        if envelope.is_last:
            self.terminal = envelope
            return
        index = envelope.sequence_index
        self.last_data = index if self.last_data is None else max(self.last_data, index)
        self.data_seen += 1
        self.data_first = (stamp, index) if self.data_first is None else min(self.data_first, (stamp, index))
        self.data_last = (stamp, index) if self.data_last is None else max(self.data_last, (stamp, index))

    def rate(self) -> float | None:
        """Data pages per second between the first and the last data page seen (by their sequence
        numbers: pages between them that were not read count too)."""
        if self.data_seen < 2 or self.data_first is None or self.data_last is None:
            return None
        seconds = (self.data_last[0] - self.data_first[0]).total_seconds()
        pages = self.data_last[1] - self.data_first[1]
        return round(pages / seconds, 3) if seconds > 0 and pages > 0 else None

    def summary(self) -> StreamOverview:
        try:
            parts: dict[str, Any] = parse_stream_id(self.key)._asdict()
        except ValidationError:
            parts = {"dag_id": None, "run_id": None, "task_id": None, "map_index": None}
        terminal = self.terminal
        last: int | None
        if terminal is not None:
            pages, last, error = terminal.sequence_index, terminal.sequence_index, terminal.error
            state = "failed" if error is not None else "complete"
        else:
            last, error, state = self.last_data, None, "running"
            pages = 0 if last is None else last + 1
        return StreamOverview(
            self.key,
            **parts,
            attempt=self.attempt,
            generation=self.generation,
            pages=pages,
            last_sequence=last,
            state=state,
            error=None if error is None else redact_text(f"{error.type}: {error.message}"),
            first_at=self.first_at,
            last_at=self.last_at,
            pages_per_second=self.rate(),
            topic=self.topic,
            partition=self.partition,
            last_offset=self.last_offset,
        )


def decode_envelope(
    msg: Message, codec: EnvelopeCodec[TriggerEventEnvelope] = TRIGGER_EVENT_CODEC
) -> TriggerEventEnvelope | None:
    value = msg.value()
    if value is None:
        return None
    try:
        return codec.decode(value)
    except EnvelopeDecodeError:
        return None
