"""Trigger event streams as an operator sees them: which ones, how far, in what state.

* :func:`list_streams`: every stream of the stream index (:mod:`airflow_kafka_events.streams.index`),
  filtered: one :class:`~airflow_kafka_events.ui.inspection.index_listing.IndexedStream` each (its highest
  attempt, pages, state, the producer's error, pages/s, its consumers), read from the compacted
  index topic, not from the streams' envelopes;
* :func:`show_stream`: one stream -- at a location hint (the index's), else by the per-key lookup of
  :mod:`airflow_kafka_events.streams.progress` (backwards from its latest envelope), bounded by the
  time it was written (:class:`WrittenSpan`) when that is known -- and its latest attempt's
  envelopes;
* :func:`tail_stream`: the envelopes of one stream as they are written.

States (:mod:`airflow_kafka_events.ui.inspection.stream_state`) follow the epoch rules of
:mod:`airflow_kafka_events.streams.descriptor`: the highest attempt counts; it is ``complete`` or ``failed``
once its terminal marker is written, else ``running``.

This module imports no Airflow module.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from confluent_kafka import Message

from airflow_kafka_events.envelopes.codec import EnvelopeCodec
from airflow_kafka_events.envelopes.model import TriggerEventEnvelope
from airflow_kafka_events.errors import ValidationError
from airflow_kafka_events.kafka.partitioner import partition_for_key
from airflow_kafka_events.streams.descriptor import parse_stream_id
from airflow_kafka_events.streams.progress import StreamLocation, lookup_stream, metadata_first_offset
from airflow_kafka_events.ui.inspection.errors import InspectionError, InvalidWindowError, StreamNotFoundError
from airflow_kafka_events.ui.inspection.reader import DEFAULT_TIMEOUT, TopicReader
from airflow_kafka_events.ui.inspection.stream_state import (
    PageInfo,
    StreamOverview,
    StreamState,
    decode_envelope,
    iso,
)
from airflow_kafka_events.ui.inspection.window import (
    KEPT_OLDEST,
    PartitionWindow,
    ScannedWindow,
    ScanWindow,
    human_time,
    to_ms,
)

if TYPE_CHECKING:  # the stream index reads through this package (its errors, its reader): no cycle
    from airflow_kafka_events.streams.index.record import ConsumerRecord, StreamRecord
    from airflow_kafka_events.ui.inspection.index_listing import IndexedStream, StreamFilter
    from airflow_kafka_events.ui.inspection.index_reader import IndexCache, SkippedRecord

__all__ = [
    "StreamDetail",
    "StreamListing",
    "WrittenSpan",
    "list_streams",
    "show_stream",
    "tail_stream",
]


@dataclass(frozen=True)
class StreamListing:
    """The streams of the stream index that match a filter (all of them: no window, no truncation).

    ``matched`` holds their index records, newest activity first; :meth:`rows` builds the rows of a
    page of them (a listing of 10,000 streams builds the 100 it shows).
    """

    matched: list[StreamRecord]
    #: the index topic read
    index_topic: str
    #: streams in the index (before the filter)
    indexed: int
    #: index records that could not be read (skipped)
    skipped: list[SkippedRecord] = field(default_factory=list)
    #: consumers of each stream in the index, by stream id (those of listed streams and others)
    consumers: dict[str, list[ConsumerRecord]] = field(default_factory=dict)
    #: every stream record of the index (before the filter), by stream id
    records: dict[str, StreamRecord] = field(default_factory=dict)

    def rows(self, offset: int = 0, limit: int | None = None) -> list[IndexedStream]:
        from airflow_kafka_events.ui.inspection.index_listing import indexed_stream

        end = None if limit is None else offset + limit
        return [indexed_stream(r, self.consumers) for r in self.matched[offset:end]]

    @property
    def streams(self) -> list[IndexedStream]:
        """Every matched stream's row."""
        return self.rows()

    def stream(self, stream_id: str) -> IndexedStream | None:
        """The row of any stream of the index (matched or not), ``None`` when it is not there."""
        from airflow_kafka_events.ui.inspection.index_listing import indexed_stream

        record = self.records.get(stream_id)
        return None if record is None else indexed_stream(record, self.consumers)

    def describe(self) -> str:
        text = f"{self.indexed} stream(s) in the stream index (topic {self.index_topic!r})"
        if self.skipped:
            text += f"; {len(self.skipped)} index record(s) that cannot be read were skipped"
        return text

    def index_dict(self) -> dict[str, Any]:
        return {
            "topic": self.index_topic,
            "streams": self.indexed,
            "skipped": [r.to_dict() for r in self.skipped],
        }

    def to_dict(self, offset: int = 0, limit: int | None = None) -> dict[str, Any]:
        return {
            "streams": [{**s.to_dict(), "consumers": s.consumer_rows()} for s in self.rows(offset, limit)],
            "matched": len(self.matched),
            "index": self.index_dict(),
        }


@dataclass(frozen=True)
class WrittenSpan:
    """When a stream was written: ``since <= CreateTime < until`` (``None``: up to the partition's end).

    It bounds the per-key lookup: only offsets stamped in it are read, backwards from its end.
    The view takes it from the stream's task instance in Airflow (its latest try's start to its
    end, widened by a slack for clock skew); the CLI from ``--written-since`` / ``--written-until``.
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
        return f"{human_time(self.since)} .. {'now' if self.until is None else human_time(self.until)}"


@dataclass(frozen=True)
class StreamDetail:
    summary: StreamOverview
    #: The latest attempt's envelopes read (bounded by the window's ``max_records``), in order.
    pages: list[PageInfo]
    window: ScannedWindow
    #: How the stream was found: "hint" (a listing's location), "span" (the per-key lookup bounded
    #: by the time it was written: ``span_start`` .. ``span_end - 1``, its attempt then read forward
    #: from its first offset) or "lookup" (per-key, backwards from the partition's end).
    found_by: str = "lookup"
    #: With "span": the offsets (``span_start`` inclusive, ``span_end`` exclusive) stamped in the time
    #: the stream was written -- the most the lookup may read.
    span_end: int | None = None
    span_start: int | None = None
    written: WrittenSpan | None = None

    def describe(self) -> str:
        """One line for a page: what was read to find and show the stream."""
        if self.found_by != "span" or self.written is None:
            how = "per-key lookup" if self.found_by == "lookup" else "location hint"
            return f"{self.window.describe()}; found by the {how}"
        (part,) = self.window.partitions
        text = (
            f"found by the per-key lookup in the time the stream was written ({self.written.describe()}: "
            f"offsets {self.span_start}..{(self.span_end or 0) - 1} of topic {self.window.topic!r} partition "
            f"{part.partition}, read backwards to its latest envelope at offset {self.summary.last_offset}); "
            f"attempt {self.summary.attempt} read forward from offset {part.start_offset}: "
            f"{part.records_scanned} record(s)"
        )
        since = self.window.window.since
        if since is not None and since > self.written.since:
            text += (
                f"; the lookup read nothing older than {human_time(since)} "
                "(the later start: --since / ?minutes=)"
            )
        if part.truncated:
            text += (
                f"; TRUNCATED at {self.window.window.max_records} records: offsets {part.end_offset}.."
                f"{(part.unread_end or part.end_offset) - 1} of the attempt were not read (its pages "
                f"there are not listed; state and page count are its latest envelope's; raise max records)"
            )
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "summary": self.summary.to_dict(),
            "pages": [p.to_dict() for p in self.pages],
            "window": self.window.to_dict(),
            "found_by": self.found_by,
            "span_start": self.span_start,
            "span_end": self.span_end,
            "written": None
            if self.written is None
            else {"since": iso(self.written.since), "until": iso(self.written.until)},
        }


def list_streams(
    config: Mapping[str, Any],
    index_topic: str,
    *,
    filters: StreamFilter | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    cache: IndexCache | None = None,
) -> StreamListing:
    """Every stream of the stream index that matches ``filters``, newest activity first.

    Reads the index topic (each key's latest record; with ``cache``, only what is new since its last
    read), never the streams' topic: O(streams), whatever the streams wrote.  Raises
    :class:`~airflow_kafka_events.ui.inspection.errors.StreamIndexNotFoundError` when the index topic
    does not exist.
    """
    from airflow_kafka_events.ui.inspection.index_listing import StreamFilter, last_activity
    from airflow_kafka_events.ui.inspection.index_reader import read_index

    snapshot = (
        read_index(config, index_topic, timeout=timeout)
        if cache is None
        else cache.read(config, index_topic, timeout=timeout)
    )
    records = snapshot.streams()
    wanted = filters if filters is not None else StreamFilter()
    matched = sorted((r for r in records.values() if wanted.matches(r)), key=last_activity, reverse=True)
    return StreamListing(
        matched, index_topic, len(records), list(snapshot.skipped.values()), snapshot.consumers(), records
    )


@dataclass(frozen=True)
class _Span:
    """The latest attempt of a stream in one partition: where its envelopes are read."""

    partition: int
    start: int  # the attempt's first offset as far as known (the lowest offset worth reading)
    end: int  # exclusive: one past the latest envelope
    attempt: int
    low: int
    high: int


def _named(trigger_run_id: str) -> str:
    """``stream '<id>'``, saying so when the id is not in the form of a task's stream id."""
    try:
        parse_stream_id(trigger_run_id)
    except ValidationError:
        return (
            f"stream {trigger_run_id!r} (not a task's stream id, which is dag_id/task_id/map_index/run_id, "
            "e.g. 'my_dag/my_task/-1/manual__2026-12-02T03:04:05+00:00'; only a trigger given its own "
            "trigger_run_id writes under another key)"
        )
    return f"stream {trigger_run_id!r}"


def _check_hint(partition: int | None, last_offset: int | None) -> None:
    for name, value in (("partition", partition), ("last_offset", last_offset)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise InspectionError(f"a stream's {name} hint is an int >= 0 or None, got {value!r}")
    if (partition is None) != (last_offset is None):
        raise InspectionError(
            "a stream's location hint needs both partition and last_offset (as a listing's StreamOverview "
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
            f"{_named(trigger_run_id)} has no envelope in topic {reader.topic!r} partition "
            f"{location.partition} (offsets {location.scan_start}..{location.high - 1}); fix: check the "
            "stream id (`streams ls`), the topic (--topic) or an earlier --since"
        )
    start = latest.first_offset if latest.first_offset is not None else location.scan_start
    return _Span(location.partition, start, latest.offset + 1, latest.attempt, location.low, location.high)


def _envelope_of(
    msg: Message, key: bytes, trigger_run_id: str, codec: EnvelopeCodec[TriggerEventEnvelope]
) -> TriggerEventEnvelope | None:
    """The stream's envelope in ``msg`` (``None``: another key's record, or not an envelope of it)."""
    envelope = decode_envelope(msg, codec) if msg.key() == key else None
    return None if envelope is None or envelope.trigger_run_id != trigger_run_id else envelope


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
        envelope = _envelope_of(msg, key, trigger_run_id, reader.codecs.trigger)
        if envelope is None:
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


_FIX_MISSED = (
    "check the stream id and the topic (--topic); when the times are off (record timestamps are the "
    "producer's CreateTime: clock skew), widen the time window (--written-since/--written-until, "
    "--since), or open the stream from a listing (`streams ls`, the view's Streams page: its link "
    "carries the stream's location)"
)


def _attempt_pages(
    reader: TopicReader, trigger_run_id: str, partition: int, start: int, end: int, attempt: int
) -> tuple[StreamState, list[PageInfo], int]:
    """The envelopes of ``attempt`` at offsets ``start`` .. ``end - 1``: their state, pages, and the
    records read (other keys' and earlier attempts' among them)."""
    key = trigger_run_id.encode("utf-8")
    stream = StreamState(trigger_run_id, reader.topic, partition)
    pages: list[PageInfo] = []
    scanned = 0
    for msg in reader.read(partition, start, end):
        scanned += 1
        envelope = _envelope_of(msg, key, trigger_run_id, reader.codecs.trigger)
        if envelope is not None and envelope.attempt == attempt:
            stream.add(envelope, int(msg.offset() or 0))
            pages.append(PageInfo.of(envelope, msg))
    return stream, pages, scanned


def _not_found_in(trigger_run_id: str, location: StreamLocation, written: WrittenSpan) -> StreamNotFoundError:
    start, end = location.scan_start, location.end
    offsets = f"offsets {start}..{end - 1}" if end > start else "no record"
    return StreamNotFoundError(
        f"{_named(trigger_run_id)} has no envelope in topic {location.topic!r} partition "
        f"{location.partition} written {written.describe()} ({offsets}); fix: {_FIX_MISSED}"
    )


def _in_span(
    reader: TopicReader,
    config: Mapping[str, Any],
    trigger_run_id: str,
    written: WrittenSpan,
    window: ScanWindow,
) -> StreamDetail:
    """The stream found by the per-key lookup bounded by ``written``, its attempt read forward.

    The lookup reads the key's partition backwards from the first offset stamped at or after
    ``written.until`` down to the first one at or after ``written.since`` (or ``window.since``,
    the later of the two), so its cost is bounded by that time, not by the partition.  The latest
    attempt is then read from its first offset, at most ``window.max_records`` records; when it
    holds more, the read is said truncated and its latest envelope (read on its own) gives the
    state and page count.
    """
    since = written.since if window.since is None else max(written.since, window.since)
    location, latest = lookup_stream(
        config,
        reader.topic,
        trigger_run_id,
        timeout=max(0.1, reader.deadline - time.monotonic()),
        not_before_ms=to_ms(since),
        not_after_ms=None if written.until is None else to_ms(written.until),
    )
    if latest is None:
        raise _not_found_in(trigger_run_id, location, written)
    first, end = latest.first_offset, latest.offset + 1
    start = first if first is not None and location.low <= first <= latest.offset else location.scan_start
    stop = min(end, start + window.max_records)
    stream, pages, scanned = _attempt_pages(
        reader, trigger_run_id, location.partition, start, stop, latest.attempt
    )
    if stop < end:  # truncated: the state is the latest envelope's, not the last one read
        key = trigger_run_id.encode("utf-8")
        for msg in reader.read(location.partition, latest.offset, end):
            envelope = _envelope_of(msg, key, trigger_run_id, reader.codecs.trigger)
            if envelope is not None:
                stream.add(envelope, int(msg.offset() or 0))
    part = PartitionWindow(
        location.partition, start, stop, scanned, stop < end, location.low, location.high, KEPT_OLDEST, end
    )
    asked = ScanWindow(since=since, max_records=window.max_records, until=written.until)
    return StreamDetail(
        stream.summary(),
        pages,
        ScannedWindow(reader.topic, asked, (part,)),
        found_by="span",
        span_end=location.end,
        span_start=location.scan_start,
        written=written,
    )


def _read_attempt(
    reader: TopicReader, trigger_run_id: str, span: _Span, window: ScanWindow, found_by: str
) -> StreamDetail:
    """The envelopes of ``span``'s attempt (the newest ``window.max_records`` offsets of it)."""
    first = max(span.start, span.end - window.max_records)
    stream, pages, scanned = _attempt_pages(
        reader, trigger_run_id, span.partition, first, span.end, span.attempt
    )
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

    * with a location hint (``partition`` and ``last_offset`` of a listing's :class:`StreamOverview`),
      in a bounded range around it: the stream's envelopes from that offset on (at most
      ``window.max_records`` further, written since the listing) and its attempt's from its first
      offset (``first_offset`` metadata, else ``window.since`` or the partition's start);
    * else, with ``written`` (when it was written: its task instance's latest try), by the per-key
      lookup bounded to the offsets stamped in that span (``offsets_for_times``; ``window.since``
      still bounds how far back when it is later), backwards from the span's end to the stream's
      latest envelope; its attempt is then read forward from its first offset, at most
      ``window.max_records`` records (a longer attempt is said truncated: newer pages not listed,
      the state taken from its latest envelope);
    * else with the per-key progress lookup, backwards from the partition's end (``window.since``
      bounds how far); the newest ``window.max_records`` offsets of its attempt are then read.

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
            return _in_span(reader, config, trigger_run_id, written, window)
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
                    f"{_named(trigger_run_id)} has no envelope in topic {topic!r} partition {partition}; "
                    "fix: check the stream id (`streams ls`) and the topic (--topic), or wait with --follow"
                )
            start = location.high
        elif from_start:
            start = latest.first_offset if latest.first_offset is not None else latest.offset
        else:
            start = latest.offset
        end = 2**62 if follow else location.high
        for msg in reader.read(partition, start, max(end, start + 1), follow=follow):
            envelope = _envelope_of(msg, key, trigger_run_id, reader.codecs.trigger)
            if envelope is None:
                continue
            yield PageInfo.of(envelope, msg)
            if follow and envelope.is_last:
                return
