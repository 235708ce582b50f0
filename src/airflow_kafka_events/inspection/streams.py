"""Trigger event streams as an operator sees them: which ones, how far, in what state.

* :func:`list_streams`: every stream with envelopes in a window of the trigger events topic, one
  :class:`StreamSummary` each (its highest attempt, pages, state, the producer's error, pages/s);
* :func:`show_stream`: one stream -- at a listing's location hint, else in the time it was written
  (:class:`WrittenSpan`, read forward), else by the per-key lookup of
  :mod:`airflow_kafka_events.kafka.progress` (backwards) -- and its latest attempt's envelopes;
* :func:`tail_stream`: the envelopes of one stream as they are written.

States follow the epoch rules of :mod:`airflow_kafka_events.streams`: the highest attempt counts;
it is ``complete`` or ``failed`` once its terminal marker is written, else ``running``.  Page
counts come from sequence numbers, so a window that starts inside an attempt still counts it
right.

This module imports no Airflow module.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from confluent_kafka import Message

from airflow_kafka_events.codec import TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes import TriggerEventEnvelope
from airflow_kafka_events.errors import EnvelopeDecodeError, ValidationError
from airflow_kafka_events.inspection.errors import InspectionError, InvalidWindowError, StreamNotFoundError
from airflow_kafka_events.inspection.reader import DEFAULT_TIMEOUT, Progress, TopicReader, scan
from airflow_kafka_events.inspection.redact import preview
from airflow_kafka_events.inspection.window import PartitionWindow, ScannedWindow, ScanWindow, to_ms
from airflow_kafka_events.kafka.partitioner import partition_for_key
from airflow_kafka_events.kafka.progress import lookup_stream, metadata_first_offset, metadata_generation
from airflow_kafka_events.streams import parse_stream_id

__all__ = [
    "PageInfo",
    "StreamDetail",
    "StreamListing",
    "StreamSummary",
    "WrittenSpan",
    "list_streams",
    "show_stream",
    "tail_stream",
]

#: Characters of a page's payload preview.
PAGE_PREVIEW_LIMIT = 200


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


@dataclass(frozen=True)
class StreamSummary:
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "trigger_run_id": self.trigger_run_id,
            "dag_id": self.dag_id,
            "run_id": self.run_id,
            "task_id": self.task_id,
            "map_index": self.map_index,
            "attempt": self.attempt,
            "generation": self.generation,
            "pages": self.pages,
            "last_sequence": self.last_sequence,
            "state": self.state,
            "error": self.error,
            "first_at": _iso(self.first_at),
            "last_at": _iso(self.last_at),
            "pages_per_second": self.pages_per_second,
            "topic": self.topic,
            "partition": self.partition,
            "last_offset": self.last_offset,
        }


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
            error=None if error is None else f"{error.type}: {error.message}",
            payload_preview=None
            if envelope.payload is None
            else preview(envelope.payload, PAGE_PREVIEW_LIMIT),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "offset": self.offset,
            "attempt": self.attempt,
            "sequence_index": self.sequence_index,
            "is_last": self.is_last,
            "emitted_at": _iso(self.emitted_at),
            "record_bytes": self.record_bytes,
            "error": self.error,
            "payload_preview": self.payload_preview,
        }


@dataclass(frozen=True)
class StreamListing:
    streams: list[StreamSummary]
    window: ScannedWindow
    #: Records in the window that are no trigger event envelope (skipped).
    undecodable: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "streams": [s.to_dict() for s in self.streams],
            "window": self.window.to_dict(),
            "undecodable": self.undecodable,
        }


@dataclass(frozen=True)
class WrittenSpan:
    """When a stream was written: ``since <= CreateTime < until`` (``None``: up to the partition's end).

    The view takes it from the stream's task instance in Airflow (its first try's start to its last
    try's end, widened by a slack for clock skew); the CLI from ``--since`` / ``--until``.
    """

    since: datetime
    until: datetime | None = None

    def __post_init__(self) -> None:
        if self.since is None:
            raise InvalidWindowError("WrittenSpan.since is required (a timezone-aware datetime)")
        checked = ScanWindow(since=self.since, until=self.until)  # aware, in UTC, until after since
        object.__setattr__(self, "since", checked.since)
        object.__setattr__(self, "until", checked.until)

    def describe(self) -> str:
        return f"{self.since.isoformat()} .. {'now' if self.until is None else self.until.isoformat()}"


@dataclass(frozen=True)
class StreamDetail:
    summary: StreamSummary
    #: The latest attempt's envelopes read (bounded by the window's ``max_records``), in order.
    pages: list[PageInfo]
    window: ScannedWindow
    #: How the stream was found: "hint" (a listing's location), "span" (read forward in the time it
    #: was written: ``window.window.since/until``) or "lookup" (per-key, backwards from the end).
    found_by: str = "lookup"
    #: With "span": the end offset (exclusive) of the span's range on the partition.
    span_end: int | None = None

    def describe(self) -> str:
        """One line for a page: what was read to find and show the stream."""
        if self.span_end is None:
            how = "per-key lookup" if self.found_by == "lookup" else "location hint"
            return f"{self.window.describe()}; found by the {how}"
        (part,) = self.window.partitions
        asked = self.window.window
        text = (
            f"scanned {part.records_scanned} record(s) of topic {self.window.topic!r} partition "
            f"{part.partition} forward from offset {part.start_offset}: the time the stream was written "
            f"({_iso(asked.since)} .. {_iso(asked.until) or 'now'}) holds offsets "
            f"{part.start_offset}..{self.span_end - 1}"
        )
        if part.truncated:
            text += (
                f"; TRUNCATED at {asked.max_records} records: offsets {part.end_offset}..{self.span_end - 1} "
                "were not read (raise max records)"
            )
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "summary": self.summary.to_dict(),
            "pages": [p.to_dict() for p in self.pages],
            "window": self.window.to_dict(),
            "found_by": self.found_by,
            "span_end": self.span_end,
        }


@dataclass
class _Stream:
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
    data_first: datetime | None = None
    data_last: datetime | None = None
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
        self.data_first = stamp if self.data_first is None else min(self.data_first, stamp)
        self.data_last = stamp if self.data_last is None else max(self.data_last, stamp)

    def rate(self) -> float | None:
        """Data pages per second between the first and the last data page seen."""
        if self.data_seen < 2 or self.data_first is None or self.data_last is None:
            return None
        seconds = (self.data_last - self.data_first).total_seconds()
        return round((self.data_seen - 1) / seconds, 3) if seconds > 0 else None

    def summary(self) -> StreamSummary:
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
        return StreamSummary(
            self.key,
            **parts,
            attempt=self.attempt,
            generation=self.generation,
            pages=pages,
            last_sequence=last,
            state=state,
            error=None if error is None else f"{error.type}: {error.message}",
            first_at=self.first_at,
            last_at=self.last_at,
            pages_per_second=self.rate(),
            topic=self.topic,
            partition=self.partition,
            last_offset=self.last_offset,
        )


def _decode(msg: Message) -> TriggerEventEnvelope | None:
    value = msg.value()
    if value is None:
        return None
    try:
        return TRIGGER_EVENT_CODEC.decode(value)
    except EnvelopeDecodeError:
        return None


def _matches(summary: StreamSummary, dag_id: str | None, run_id: str | None, task_id: str | None) -> bool:
    return all(
        wanted is None or wanted == have
        for wanted, have in ((dag_id, summary.dag_id), (run_id, summary.run_id), (task_id, summary.task_id))
    )


def list_streams(
    config: Mapping[str, Any],
    topic: str,
    *,
    window: ScanWindow,
    dag_id: str | None = None,
    run_id: str | None = None,
    task_id: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    progress: Progress | None = None,
) -> StreamListing:
    """Every stream with an envelope in ``window`` of ``topic`` (newest activity first), filtered."""
    streams: dict[str, _Stream] = {}
    skipped = 0

    def handle(msg: Message) -> None:
        nonlocal skipped
        envelope = _decode(msg)
        if envelope is None:
            skipped += 1
            return
        key = envelope.trigger_run_id
        stream = streams.get(key)
        if stream is None:
            stream = streams[key] = _Stream(key, topic, int(msg.partition() or 0))
        stream.add(envelope, int(msg.offset() or 0))

    scanned = scan(config, topic, window, handle, timeout=timeout, progress=progress, name="stream listing")
    summaries = [s.summary() for s in streams.values()]
    found = [s for s in summaries if _matches(s, dag_id, run_id, task_id)]
    found.sort(key=lambda s: (s.last_at is not None, s.last_at), reverse=True)
    return StreamListing(found, scanned, skipped)


@dataclass(frozen=True)
class _Span:
    """The latest attempt of a stream in one partition: where its envelopes are read."""

    partition: int
    start: int  # the attempt's first offset as far as known (the lowest offset worth reading)
    end: int  # exclusive: one past the latest envelope
    attempt: int
    low: int
    high: int


def _check_hint(partition: int | None, last_offset: int | None) -> None:
    for name, value in (("partition", partition), ("last_offset", last_offset)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise InspectionError(f"a stream's {name} hint is an int >= 0 or None, got {value!r}")
    if (partition is None) != (last_offset is None):
        raise InspectionError(
            "a stream's location hint needs both partition and last_offset (as a listing's StreamSummary "
            f"has them), got partition={partition!r}, last_offset={last_offset!r}"
        )


def _looked_up(
    reader: TopicReader, config: Mapping[str, Any], trigger_run_id: str, window: ScanWindow
) -> _Span:
    """The span found by the per-key progress lookup (backwards from the partition's end)."""
    not_before = None if window.since is None else to_ms(window.since)
    location, latest = lookup_stream(
        config,
        reader.topic,
        trigger_run_id,
        timeout=max(0.1, reader.deadline - time.monotonic()),
        not_before_ms=not_before,
    )
    if latest is None:
        raise StreamNotFoundError(
            f"stream {trigger_run_id!r} has no envelope in topic {reader.topic!r} partition "
            f"{location.partition} (offsets {location.scan_start}..{location.high - 1}); fix: check the "
            "stream id (`streams ls`), the topic (--topic) or an earlier --since"
        )
    start = latest.first_offset if latest.first_offset is not None else location.scan_start
    return _Span(location.partition, start, latest.offset + 1, latest.attempt, location.low, location.high)


def _hinted(
    reader: TopicReader, trigger_run_id: str, partition: int, last_offset: int, window: ScanWindow
) -> _Span | None:
    """The span from a listing's location hint, or ``None`` when the hint does not hold (any more).

    The record at ``last_offset`` must be an envelope of the stream; envelopes written after
    the listing are found in the ``window.max_records`` offsets that follow it.
    """
    if partition not in reader.partitions():
        return None
    low, high = reader.watermarks(partition)
    if not low <= last_offset < high:
        return None
    key = trigger_run_id.encode("utf-8")
    best: tuple[int, int, TriggerEventEnvelope] | None = None
    for msg in reader.read(partition, last_offset, min(high, last_offset + 1 + window.max_records)):
        offset = int(msg.offset() or 0)
        envelope = _decode(msg) if msg.key() == key else None
        if envelope is None or envelope.trigger_run_id != trigger_run_id:
            if offset == last_offset:
                return None  # the hint names another record: not this stream's
            continue
        if best is None or (envelope.attempt, offset) >= (best[2].attempt, best[0]):
            best = (offset, envelope.attempt, envelope)
    if best is None:
        return None
    offset, attempt, envelope = best
    start = metadata_first_offset(envelope)
    if start is None or not low <= start <= offset:
        start = low if window.since is None else reader.offsets([partition], to_ms(window.since))[partition]
        start = offset if start < 0 else min(max(start, low), offset)
    return _Span(partition, start, offset + 1, attempt, low, high)


_FIX_TRUNCATED = "raise max records (?max_records= / --max-records) or narrow the time window"
_FIX_MISSED = (
    "check the stream id and the topic (--topic); when the times are off (record timestamps are the "
    "producer's CreateTime: clock skew), widen the time window (--since/--until), or open the stream "
    "from a listing (`streams ls`, the view's Streams page: its link carries the stream's location)"
)


def _offset_at(reader: TopicReader, partition: int, when: datetime, low: int, high: int) -> int:
    """The first offset of ``partition`` with a timestamp at or after ``when`` (``high``: none)."""
    found = reader.offsets([partition], to_ms(when))[partition]
    return high if found < 0 else min(max(found, low), high)


def _in_span(
    reader: TopicReader, trigger_run_id: str, written: WrittenSpan, window: ScanWindow
) -> StreamDetail:
    """The stream read forward in the offsets of its key's partition written during ``written``.

    At most ``window.max_records`` records from the span's first offset; a span holding more is
    said truncated.  :class:`StreamNotFoundError` when no envelope of the stream was read.
    """
    key = trigger_run_id.encode("utf-8")
    partition = partition_for_key(key, len(reader.partitions()))
    low, high = reader.watermarks(partition)
    start = _offset_at(reader, partition, written.since, low, high)
    until = written.until
    end = high if until is None else max(start, _offset_at(reader, partition, until, low, high))
    stop = min(end, start + window.max_records)
    stream = _Stream(trigger_run_id, reader.topic, partition)
    pages: list[PageInfo] = []
    scanned = 0
    for msg in reader.read(partition, start, stop):
        scanned += 1
        envelope = _decode(msg) if msg.key() == key else None
        if envelope is None or envelope.trigger_run_id != trigger_run_id or envelope.attempt < stream.attempt:
            continue
        if envelope.attempt > stream.attempt:
            pages = []  # a later attempt: only the latest one is shown
        stream.add(envelope, int(msg.offset() or 0))
        pages.append(PageInfo.of(envelope, msg))
    part = PartitionWindow(partition, start, stop, scanned, stop < end, low, high)
    if not pages:
        cut = f", TRUNCATED: offsets {stop}..{end - 1} not read" if stop < end else ""
        raise StreamNotFoundError(
            f"stream {trigger_run_id!r} has no envelope in topic {reader.topic!r} partition {partition} "
            f"written {written.describe()} ({f'offsets {start}..{end - 1}' if end > start else 'no record'}, "
            f"{scanned} read{cut}); fix: " + (_FIX_TRUNCATED if stop < end else _FIX_MISSED)
        )
    asked = ScanWindow(since=written.since, max_records=window.max_records, until=written.until)
    window_read = ScannedWindow(reader.topic, asked, (part,))
    return StreamDetail(stream.summary(), pages, window_read, found_by="span", span_end=end)


def _read_attempt(
    reader: TopicReader, trigger_run_id: str, span: _Span, window: ScanWindow, found_by: str
) -> StreamDetail:
    """The envelopes of ``span``'s attempt (the newest ``window.max_records`` offsets of it)."""
    first = max(span.start, span.end - window.max_records)
    stream = _Stream(trigger_run_id, reader.topic, span.partition)
    pages: list[PageInfo] = []
    scanned = 0
    key = trigger_run_id.encode("utf-8")
    for msg in reader.read(span.partition, first, span.end):
        scanned += 1
        envelope = _decode(msg) if msg.key() == key else None
        if envelope is None or envelope.trigger_run_id != trigger_run_id or envelope.attempt != span.attempt:
            continue
        stream.add(envelope, int(msg.offset() or 0))
        pages.append(PageInfo.of(envelope, msg))
    part = PartitionWindow(span.partition, first, span.end, scanned, first > span.start, span.low, span.high)
    return StreamDetail(
        stream.summary(), pages, ScannedWindow(reader.topic, window, (part,)), found_by=found_by
    )


def show_stream(
    config: Mapping[str, Any],
    topic: str,
    trigger_run_id: str,
    *,
    window: ScanWindow,
    partition: int | None = None,
    last_offset: int | None = None,
    written: WrittenSpan | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> StreamDetail:
    """One stream's latest attempt and its envelopes (the newest ``window.max_records`` offsets of it).

    Found, in this order (:attr:`StreamDetail.found_by` says how):

    * with a location hint (``partition`` and ``last_offset`` of a listing's :class:`StreamSummary`),
      in a bounded range around it: the stream's envelopes from that offset on (at most
      ``window.max_records`` further, written since the listing) and its attempt's from its first
      offset (``first_offset`` metadata, else ``window.since`` or the partition's start);
    * else, with ``written`` (when it was written: its task instance's run), in the offsets of the
      key's partition stamped in that span (``offsets_for_times``), read forward, at most
      ``window.max_records`` of them (a longer span is said truncated);
    * else with the per-key progress lookup, backwards from the partition's end (``window.since``
      bounds how far); its attempt is then read from its first offset to its latest envelope.

    :class:`StreamNotFoundError` when the stream has no envelope there.
    """
    _check_hint(partition, last_offset)
    if written is not None and not isinstance(written, WrittenSpan):
        raise InspectionError(f"written is a WrittenSpan or None, got {type(written).__qualname__}")
    with TopicReader(config, topic, timeout=timeout, name="stream detail") as reader:
        reader.partitions()  # a missing topic, refused credentials or no broker: said here, at once
        span = None
        if partition is not None and last_offset is not None:
            span = _hinted(reader, trigger_run_id, partition, last_offset, window)
        if span is not None:
            return _read_attempt(reader, trigger_run_id, span, window, "hint")
        if written is not None:
            return _in_span(reader, trigger_run_id, written, window)
        span = _looked_up(reader, config, trigger_run_id, window)
        return _read_attempt(reader, trigger_run_id, span, window, "lookup")


def tail_stream(
    config: Mapping[str, Any],
    topic: str,
    trigger_run_id: str,
    *,
    follow: bool,
    from_start: bool,
    timeout: float = DEFAULT_TIMEOUT,
) -> Iterator[PageInfo]:
    """The envelopes of one stream in the order written.

    From the latest attempt's first envelope (``from_start``) or its latest one; without
    ``follow`` up to the partition's end, with ``follow`` on as they are written until a
    terminal marker (``is_last``) arrives or the caller stops iterating.  Without ``follow`` a
    stream with no envelope raises :class:`StreamNotFoundError`; with it, tailing starts at the
    partition's end and waits for the first one.
    """
    key = trigger_run_id.encode("utf-8")
    with TopicReader(config, topic, timeout=timeout, name="stream tail") as reader:
        count = len(reader.partitions())
        location, latest = lookup_stream(
            config, topic, trigger_run_id, timeout=max(0.1, reader.deadline - time.monotonic())
        )
        partition = partition_for_key(key, count)
        if latest is None:
            if not follow:
                raise StreamNotFoundError(
                    f"stream {trigger_run_id!r} has no envelope in topic {topic!r} partition {partition}; "
                    "fix: check the stream id (`streams ls`) and the topic (--topic), or wait with --follow"
                )
            start = location.high
        elif from_start:
            start = latest.first_offset if latest.first_offset is not None else latest.offset
        else:
            start = latest.offset
        end = 2**62 if follow else location.high
        for msg in reader.read(partition, start, max(end, start + 1), follow=follow):
            if msg.key() != key:
                continue
            envelope = _decode(msg)
            if envelope is None or envelope.trigger_run_id != trigger_run_id:
                continue
            yield PageInfo.of(envelope, msg)
            if follow and envelope.is_last:
                return
