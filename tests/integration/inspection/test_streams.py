"""Streams listed, shown and tailed from a real topic: states, attempts, filters, bounded windows."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from types import SimpleNamespace

import pytest

from airflow_kafka_events.envelopes.codec import TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes.model import TriggerEventEnvelope
from airflow_kafka_events.streams import progress as progress_module
from airflow_kafka_events.streams.descriptor import stream_id
from airflow_kafka_events.ui.inspection import streams as streams_module
from airflow_kafka_events.ui.inspection.errors import (
    BrokerTimeoutError,
    InspectionError,
    InvalidWindowError,
    StreamNotFoundError,
    TopicNotFoundError,
)
from airflow_kafka_events.ui.inspection.streams import WrittenSpan, list_streams, show_stream, tail_stream
from airflow_kafka_events.ui.inspection.window import ScanWindow
from integration.inspection.records import wait_past, write_stream

pytestmark = pytest.mark.integration

RUN = "manual__2026-12-01T10:00:00+00:00"


def test_a_window_is_validated_on_construction():
    with pytest.raises(InvalidWindowError, match="timezone-aware"):
        ScanWindow(since=datetime(2026, 12, 1))
    with pytest.raises(InvalidWindowError, match="max_records"):
        ScanWindow(max_records=0)


def test_show_stream_gives_the_latest_attempt_pages_in_order(config, producer, new_topic):
    topic = new_topic(partitions=3)
    run = stream_id("inspect_dag", RUN, "shown")
    write_stream(producer, topic, run, 3, end="failed")
    write_stream(producer, topic, stream_id("inspect_dag", RUN, "noise"), 20)
    write_stream(producer, topic, run, 4, attempt=1)

    detail = show_stream(config, topic, run, window=ScanWindow())
    assert (detail.summary.attempt, detail.summary.state, detail.summary.pages) == (1, "complete", 4)
    assert [p.sequence_index for p in detail.pages] == [0, 1, 2, 3, 4]
    assert {p.attempt for p in detail.pages} == {1} and detail.pages[-1].is_last
    assert all(p.record_bytes > 0 for p in detail.pages)
    assert "s3cr3t-page-token" not in str([p.to_dict() for p in detail.pages])  # payload previews redacted
    assert detail.pages[0].payload_preview is not None and '"page": 0' in detail.pages[0].payload_preview

    bounded = show_stream(config, topic, run, window=ScanWindow(max_records=2))
    assert [p.sequence_index for p in bounded.pages] == [3, 4] and bounded.window.truncated

    with pytest.raises(StreamNotFoundError, match="streams ls"):
        show_stream(config, topic, stream_id("inspect_dag", RUN, "absent"), window=ScanWindow())


def test_show_stream_with_a_location_hint_reads_around_it_without_the_per_key_lookup(
    config, producer, new_topic, monkeypatch
):
    topic = new_topic(partitions=1)
    old, noise = stream_id("inspect_dag", RUN, "old"), stream_id("inspect_dag", RUN, "noise")
    write_stream(producer, topic, old, 3, end="failed")
    write_stream(producer, topic, old, 4, attempt=1, end=None)  # attempt 1 runs
    write_stream(producer, topic, noise, 30)
    latest = progress_module.lookup_stream(config, topic, old, timeout=10)[1]
    assert latest is not None  # where the stream's index record says it is
    listed = SimpleNamespace(partition=latest.partition, last_offset=latest.offset)
    marker = TriggerEventEnvelope(trigger_run_id=old, sequence_index=4, is_last=True, attempt=1)
    producer.send_and_wait(topic, TRIGGER_EVENT_CODEC.encode(marker), key=old)  # after the listing
    write_stream(producer, topic, noise, 30)
    unhinted = show_stream(config, topic, old, window=ScanWindow())

    def no_lookup(*args: object, **kwargs: object) -> None:
        raise AssertionError("the per-key lookup ran despite a location hint")

    monkeypatch.setattr(streams_module, "lookup_stream", no_lookup)
    hint = {"partition": listed.partition, "last_offset": listed.last_offset}
    detail = show_stream(config, topic, old, window=ScanWindow(), **hint)
    assert (detail.summary.attempt, detail.summary.state) == (1, "complete")  # the marker after the hint
    assert [p.to_dict() for p in detail.pages] == [p.to_dict() for p in unhinted.pages]
    assert [(p.attempt, p.sequence_index) for p in detail.pages] == [(1, i) for i in range(5)]
    part = detail.window.partitions[0]
    assert part.end_offset == detail.pages[-1].offset + 1 < part.high  # not read to the partition's end

    # a window smaller than the distance to the marker: the hint still holds, the marker is not seen
    short = show_stream(config, topic, old, window=ScanWindow(max_records=20), **hint)
    assert (short.summary.state, short.pages[-1].offset) == ("running", listed.last_offset)

    monkeypatch.undo()  # a hint naming another record, or out of range: the lookup answers instead
    for wrong in (listed.last_offset + 5, 10**6):
        again = show_stream(config, topic, old, window=ScanWindow(), partition=0, last_offset=wrong)
        assert [p.to_dict() for p in again.pages] == [p.to_dict() for p in unhinted.pages]
    with pytest.raises(InspectionError, match="both partition and last_offset"):
        show_stream(config, topic, old, window=ScanWindow(), partition=0)
    with pytest.raises(InspectionError, match="int >= 0"):
        show_stream(config, topic, old, window=ScanWindow(), partition=0, last_offset=-1)


def _noise(producer, topic: str, streams: int, pages: int) -> None:
    """``streams`` streams of ``pages`` pages (and an end marker) each, queued together."""
    futures = []
    for n in range(streams):
        run = stream_id("inspect_dag", RUN, f"noise{n}")
        for seq in range(pages + 1):
            envelope = TriggerEventEnvelope(
                trigger_run_id=run, sequence_index=seq, is_last=seq == pages, payload=None
            )
            futures.append(producer.send(topic, TRIGGER_EVENT_CODEC.encode(envelope), key=run))
    for future in futures:
        future.result(60)


def _spy_reads(monkeypatch) -> list[tuple[int, int]]:
    """The offset ranges the per-key lookup reads (its scanner's reads, recorded)."""
    reads: list[tuple[int, int]] = []
    original = progress_module._PartitionScanner.read_range

    def read_range(self, partition: int, start: int, end: int):  # type: ignore[no-untyped-def]
        reads.append((start, end))
        return original(self, partition, start, end)

    monkeypatch.setattr(progress_module._PartitionScanner, "read_range", read_range)
    return reads


def test_show_stream_in_the_time_it_was_written_finds_the_latest_attempt_within_that_time(
    config, producer, new_topic, monkeypatch
):
    topic = new_topic(partitions=1)
    _noise(producer, topic, 10, 9)  # 100 records before the stream
    old = stream_id("inspect_dag", RUN, "old")
    since = wait_past(producer.send_and_wait(topic, b"not an envelope", key=b"junk").timestamp_ms)
    failed = write_stream(producer, topic, old, 3, end="failed")  # attempt 0 failed ...
    _noise(producer, topic, 200, 9)  # ... 2,000 records of other streams while it is retried ...
    done = write_stream(producer, topic, old, 30, attempt=1, generation=1)  # ... attempt 1 complete
    until = wait_past(done[-1].timestamp_ms)
    _noise(producer, topic, 200, 9)  # 2,000 later records of other streams in the same partition
    reads = _spy_reads(monkeypatch)

    # the review's case: the window holds attempt 0, 2,000 other records and attempt 1; 1,000 records
    detail = show_stream(
        config, topic, old, window=ScanWindow(max_records=1000), written=WrittenSpan(since, until)
    )
    s = detail.summary
    assert (s.attempt, s.state, s.pages, s.generation, s.error) == (1, "complete", 30, 1, None)
    assert [(p.attempt, p.sequence_index) for p in detail.pages] == [(1, i) for i in range(31)]
    assert detail.found_by == "span" and (detail.span_start, detail.span_end) == (
        failed[0].offset,
        done[-1].offset + 1,
    )
    (part,) = detail.window.partitions
    # its attempt read forward from its first offset to its latest envelope, nothing else
    assert (part.start_offset, part.end_offset, part.records_scanned) == (
        done[0].offset,
        done[-1].offset + 1,
        31,
    )
    assert not detail.window.truncated and part.kept == "oldest"
    assert part.high == done[-1].offset + 1 + 2000
    # the lookup read backwards from the window's end only: one chunk, none of the 2,000 later records
    assert reads and all(failed[0].offset <= a and b <= done[-1].offset + 1 for a, b in reads), reads
    assert sum(b - a for a, b in reads) <= 500
    assert detail.to_dict()["found_by"] == "span" and "read forward from offset" in detail.describe()

    # more records in the attempt than max records: the first ones listed, said truncated (newer ones
    # not read), and the state and page count are its latest envelope's, not the last one read
    cut = show_stream(
        config, topic, old, window=ScanWindow(max_records=10), written=WrittenSpan(since, until)
    )
    assert [p.sequence_index for p in cut.pages] == list(range(10))
    assert (cut.summary.state, cut.summary.pages, cut.summary.last_offset) == (
        "complete",
        30,
        done[-1].offset,
    )
    (part,) = cut.window.partitions
    assert part.truncated and (part.end_offset, part.unread_end) == (done[10].offset, done[-1].offset + 1)
    assert f"TRUNCATED at 10 records: offsets {done[10].offset}..{done[-1].offset}" in cut.describe()
    assert (
        "newer records" in cut.window.describe() and cut.window.to_dict()["partitions"][0]["kept"] == "oldest"
    )

    # still running (no end): backwards from the partition's end, through the later records
    reads.clear()
    running = show_stream(config, topic, old, window=ScanWindow(max_records=50), written=WrittenSpan(since))
    assert (running.summary.attempt, running.summary.state, running.summary.pages) == (1, "complete", 30)
    assert running.span_end == part.high and not running.window.truncated
    # in chunks that double while they miss the key: 2,000 later records cost 3 reads, not 5
    assert [b - a for a, b in reads] == [500, 1000, 2000], reads

    # a span that misses the stream: a typed error naming the topic, partition, span and the fix
    later = WrittenSpan(until, until + timedelta(minutes=5))
    with pytest.raises(StreamNotFoundError, match=rf"{topic}' partition 0 written .*widen the time window"):
        show_stream(config, topic, old, window=ScanWindow(max_records=5000), written=later)
    with pytest.raises(StreamNotFoundError, match=r"\.\. now \(no record\)"):
        show_stream(config, topic, old, window=ScanWindow(), written=WrittenSpan(until + timedelta(days=1)))
    # the window's own since (--since, ?minutes=) still bounds how far back the lookup reads: the later wins
    with pytest.raises(StreamNotFoundError, match=r"no record"):
        show_stream(config, topic, old, window=ScanWindow(since=until), written=WrittenSpan(since, until))
    mid = show_stream(
        config,
        topic,
        old,
        window=ScanWindow(since=wait_past(failed[-1].timestamp_ms)),
        written=WrittenSpan(since, until),
    )
    assert mid.summary.attempt == 1 and mid.span_start > failed[-1].offset
    assert "nothing older than" in mid.describe()

    with pytest.raises(InvalidWindowError, match="timezone-aware"):
        WrittenSpan(datetime(2026, 12, 1))
    with pytest.raises(InvalidWindowError, match="after since"):
        WrittenSpan(until, since)


def test_tail_reads_to_the_end_and_follows_until_the_terminal_marker(config, producer, new_topic):
    topic = new_topic(partitions=3)
    run = stream_id("inspect_dag", RUN, "tailed")
    write_stream(producer, topic, run, 3, end=None)
    assert [p.sequence_index for p in tail_stream(config, topic, run, follow=False, from_start=True)] == [
        0,
        1,
        2,
    ]
    assert [p.sequence_index for p in tail_stream(config, topic, run, follow=False, from_start=False)] == [2]

    seen: list[int] = []
    finished = threading.Event()

    def follow() -> None:
        for page in tail_stream(config, topic, run, follow=True, from_start=False):
            seen.append(page.sequence_index)
        finished.set()

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not seen:  # the tail has read the latest envelope: new ones come after it
        assert time.monotonic() < deadline, "the tail read nothing"
        time.sleep(0.05)
    for seq in (3, 4):
        envelope = TriggerEventEnvelope(trigger_run_id=run, sequence_index=seq, is_last=seq == 4)
        producer.send_and_wait(topic, TRIGGER_EVENT_CODEC.encode(envelope), key=run)
    assert finished.wait(30), f"the tail did not stop at the terminal marker (saw {seen})"
    assert seen == [2, 3, 4]


def test_a_missing_topic_and_unreachable_brokers_are_typed_errors_within_the_timeout(config):
    with pytest.raises(TopicNotFoundError, match="topics ensure"):
        list_streams(config, "no-such-topic-for-inspection", timeout=10)
    started = time.monotonic()
    with pytest.raises(BrokerTimeoutError, match=r"127\.0\.0\.1:1") as caught:
        list_streams({"bootstrap.servers": "127.0.0.1:1"}, "any", timeout=2.0)
    assert time.monotonic() - started < 2.0 + 1.5
    assert "fix:" in str(caught.value)
