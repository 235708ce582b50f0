"""Item sources and the results stream writer with fake readers, lookups and producers."""

from __future__ import annotations

import asyncio
import concurrent.futures
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_kafka_events.envelopes.codec import TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes.model import StreamFailure, TriggerEventEnvelope
from airflow_kafka_events.errors import ConfigurationError, ValidationError
from airflow_kafka_events.iteration.errors import NonRetryableItemError, SourceRestartedError
from airflow_kafka_events.iteration.items import Item
from airflow_kafka_events.iteration.results import ResultsStreamWriter
from airflow_kafka_events.iteration.sources import (
    ListItems,
    StreamItems,
    StreamItemSource,
    from_stream,
    page_items,
    value_at,
)
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.streams.checkpoint import Checkpoint
from airflow_kafka_events.streams.consuming.operator import StreamRef
from airflow_kafka_events.streams.consuming.sequence import StreamBatch
from airflow_kafka_events.streams.progress import StreamLocation, StreamProgress
from unit.iteration.runners import make_runner

pytestmark = pytest.mark.unit

RUN = "dag/produce/-1/run"


# ====================================================================== lists and pages
def test_list_items_are_the_product_in_expand_order():
    items = ListItems({"a": ["x", "y"], "b": range(3)})
    assert len(items) == 6 and items.key == "list:a*b:6"
    assert [(i.ordinal, i.value) for i in items][:4] == [
        (0, {"a": "x", "b": 0}),
        (1, {"a": "x", "b": 1}),
        (2, {"a": "x", "b": 2}),
        (3, {"a": "y", "b": 0}),
    ]
    with pytest.raises(ConfigurationError, match="must be a list"):
        ListItems({"a": {"k": 1}})


def test_page_items_by_path_and_explode():
    page = {"data": {"items": [1, 2, 3]}, "next": None, "rows": [{"id": 7}]}
    assert page_items(page, from_stream("p", items_path="data.items")) == [1, 2, 3]
    assert page_items(page, from_stream("p", items_path="data.items", explode=False)) == [[1, 2, 3]]
    assert page_items(page, from_stream("p")) == [page]
    assert page_items({"other": 1}, from_stream("p", items_path="data.items")) == []  # nothing on this page
    assert page_items({"data": {"items": None}}, from_stream("p", items_path="data.items")) == []
    assert value_at(page, "rows.0.id") == 7
    with pytest.raises(ValidationError, match="not a list"):
        page_items({"data": {"items": 5}}, from_stream("p", items_path="data.items"))
    with pytest.raises(ValidationError, match="nothing at"):
        page_items({}, from_stream("p", items_path="x", explode=False))
    with pytest.raises(ConfigurationError):
        StreamItems(StreamRef("p"), items_path="a..b")


# ====================================================================== stream source
def envelope(seq: int, payload: Any = None, *, attempt: int = 0, last: bool = False) -> TriggerEventEnvelope:
    return TriggerEventEnvelope(
        trigger_run_id=RUN, sequence_index=seq, is_last=last, payload=payload, attempt=attempt
    )


def batch(
    events: list[TriggerEventEnvelope], *, finished: bool = False, restarted: bool = False
) -> StreamBatch:
    attempt = events[0].attempt if events else 0
    return StreamBatch(
        events=events,
        attempt=attempt,
        restarted=restarted,
        finished=finished,
        rejected=[],
        first_offset=None,
        last_offset=None,
        partition=0,
        checkpoint=Checkpoint(attempt=attempt),
        number=1,
    )


class ListReader:
    def __init__(self, batches: list[StreamBatch]) -> None:
        self.batches = list(batches)
        self.closed = False

    def next_batch(self) -> StreamBatch:
        return self.batches.pop(0)

    def close(self) -> None:
        self.closed = True


def collect(source: StreamItemSource) -> list[tuple[int, Any]]:
    async def run() -> list[tuple[int, Any]]:
        return [(item.ordinal, item.value) async for item in source]

    return asyncio.run(run())


def test_stream_items_get_running_ordinals_across_pages():
    reader = ListReader(
        [
            batch([envelope(0, {"rows": [1, 2]}), envelope(1, {"rows": []})]),
            batch([envelope(2, {"rows": [3]}), envelope(3, last=True)], finished=True),
        ]
    )
    source = StreamItemSource(
        reader, name="row", spec=from_stream("p", items_path="rows"), trigger_run_id=RUN
    )
    assert collect(source) == [(0, {"row": 1}), (1, {"row": 2}), (2, {"row": 3})]
    assert (source.pages, source.items, source.key) == (3, 3, f"stream:{RUN}:attempt=0")
    source.close()
    assert reader.closed


def test_a_stream_that_starts_over_while_iterated_fails_the_try():
    reader = ListReader([batch([envelope(0, 1)]), batch([envelope(0, 1, attempt=1)], restarted=True)])
    source = StreamItemSource(reader, name="x", spec=from_stream("p"), trigger_run_id=RUN)
    with pytest.raises(SourceRestartedError):
        collect(source)
    source.close()


def test_the_runner_consumes_a_stream_source_with_shards():
    pages = [batch([envelope(i, list(range(i * 3, i * 3 + 3))) for i in range(4)])]
    pages.append(batch([envelope(4, last=True)], finished=True))
    seen: list[int] = []

    def handler(value, context):
        seen.append(value["n"])

    for shard in range(2):
        reader = ListReader([batch(list(b.events), finished=b.finished) for b in pages])
        source = StreamItemSource(
            reader, name="n", spec=from_stream("p", items_path=None, explode=True), trigger_run_id=RUN
        )
        make_runner(handler, shard=shard, shards=2).run(source)
        source.close()
    assert sorted(seen) == list(range(12))


# ====================================================================== results writer
class FakeProducer:
    def __init__(self, start_offset: int = 100) -> None:
        self.sent: list[tuple[int, TriggerEventEnvelope]] = []
        self.offset = start_offset

    def send(self, topic, value, *, key, partition, timeout):
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.sent.append((self.offset, TRIGGER_EVENT_CODEC.decode(value)))
        future.set_result(SimpleNamespace(offset=self.offset))
        self.offset += 1
        return future

    def send_and_wait(self, topic, value, *, key, partition, timeout):
        return self.send(topic, value, key=key, partition=partition, timeout=timeout).result()


def writer(
    progress: StreamProgress | None, records: list[tuple[int, TriggerEventEnvelope]], *, generation: int = 0
) -> tuple[ResultsStreamWriter, FakeProducer, list[tuple[int, int]]]:
    scans: list[tuple[int, int]] = []
    location = StreamLocation(topic="t", partition=2, num_partitions=3, low=0, high=50)

    def lookup(*args: Any, **kwargs: Any):
        return location, progress

    def scan(settings, topic, partition, start, end, key, timeout):
        scans.append((start, end))
        return [(o, e) for o, e in records if start <= o < end]

    producer = FakeProducer()
    out = ResultsStreamWriter(
        settings=KafkaSettings({"bootstrap.servers": "unused:9092"}),
        producer=producer,  # type: ignore[arg-type]
        topic="t",
        trigger_run_id=RUN,
        generation=generation,
        lookup=lookup,
        scan=scan,
    )
    return out, producer, scans


def result(seq: int, ordinal: int, *, attempt: int = 0, generation: int = 0) -> TriggerEventEnvelope:
    return TriggerEventEnvelope(
        trigger_run_id=RUN,
        sequence_index=seq,
        is_last=False,
        payload={"ordinal": ordinal, "id": str(ordinal), "result": ordinal},
        attempt=attempt,
        metadata={"generation": str(generation)},
    )


def progress_of(
    seq: int,
    *,
    attempt: int = 0,
    generation: int | None = 0,
    last: bool = False,
    error: StreamFailure | None = None,
) -> StreamProgress:
    return StreamProgress(
        trigger_run_id=RUN,
        topic="t",
        partition=2,
        offset=40 + seq,
        attempt=attempt,
        sequence_index=seq,
        is_last=last,
        error=error,
        resume_cursor=None,
        first_offset=40,
        generation=generation,
    )


def test_a_new_results_stream_is_written_in_order_and_ended():
    out, producer, scans = writer(None, [])
    assert out.open(None, restart=False).recovered == ()
    futures = [out.put(Item(i, None), str(i), {"v": i}) for i in (3, 1, 2)]
    for future in futures:
        out.delivered(future.result())
    assert out.state() == {"attempt": 0, "next_seq": 3, "offset": 103}
    described = out.close()
    assert [e.sequence_index for _, e in producer.sent] == [0, 1, 2, 3]
    assert [e.payload["ordinal"] for _, e in producer.sent[:3]] == [3, 1, 2]
    assert producer.sent[-1][1].is_last and producer.sent[-1][1].payload is None
    assert producer.sent[-1][1].metadata == {"generation": "0", "first_offset": "100"}  # known by then
    assert described["results"] == 3 and described["complete"] and not described["failed"]
    assert scans == []


def test_a_retry_continues_the_attempt_and_recovers_results_written_after_the_checkpoint():
    records = [(40 + i, result(i, ordinal=i * 2)) for i in range(6)]
    out, producer, scans = writer(progress_of(5), records)
    opening = out.open({"attempt": 0, "next_seq": 4, "offset": 44}, restart=False)
    assert scans == [(44, 50)]  # only past the checkpoint's position
    assert opening.recovered == (8, 10) and not opening.restarted
    future = out.put(Item(99, None), "99", 1)
    assert producer.sent[0][1].sequence_index == 6 and future.result()[0] == 6


def test_without_a_checkpoint_the_whole_attempt_is_scanned():
    records = [(40 + i, result(i, ordinal=i)) for i in range(3)]
    out, _, scans = writer(progress_of(2), records)
    assert out.open(None, restart=False).recovered == (0, 1, 2)
    assert scans == [(40, 50)]


@pytest.mark.parametrize(
    ("progress", "saved", "restart"),
    [
        (progress_of(5, generation=0), None, False),  # cleared since: the writer is of generation 1
        (progress_of(5, generation=1, last=True, error=StreamFailure("E", "m")), None, False),  # failed end
        (progress_of(5, generation=1), None, True),  # the iteration starts over
    ],
)
def test_a_new_attempt_is_started_when_needed(progress, saved, restart):
    out, producer, _ = writer(progress, [], generation=1)
    opening = out.open(saved, restart=restart)
    assert opening.restarted and out.attempt == 1
    out.put(Item(0, None), "0", 0)
    assert producer.sent[0][1].sequence_index == 0 and producer.sent[0][1].attempt == 1


def test_a_gap_in_the_results_starts_over():
    records = [(40, result(0, 0)), (42, result(2, 2))]
    out, _, _ = writer(progress_of(2), records)
    assert out.open(None, restart=False).restarted and out.attempt == 1


def test_a_complete_stream_recovers_everything_and_takes_nothing_more():
    records = [(40, result(0, 0)), (41, result(1, 1)), (42, TriggerEventEnvelope(RUN, 2, True))]
    out, producer, _ = writer(progress_of(2, last=True), records)
    assert out.open(None, restart=False).recovered == (0, 1)
    assert out.close()["results"] == 2 and producer.sent == []
    with pytest.raises(RuntimeError):
        out.put(Item(5, None), "5", 5)


def test_a_result_that_is_not_json_fails_its_item_only():
    out, producer, _ = writer(None, [])
    out.open(None, restart=False)
    with pytest.raises(NonRetryableItemError, match="results_stream=False"):
        out.put(Item(0, None), "0", {1, 2})
    out.put(Item(1, None), "1", "fine")
    assert [e.sequence_index for _, e in producer.sent] == [0]


def test_the_last_try_ends_the_stream_with_the_error():
    out, producer, _ = writer(None, [])
    out.open(None, restart=False)
    described = out.close(error=RuntimeError("2 items failed"))
    end = producer.sent[-1][1]
    assert end.is_last and end.error == StreamFailure("RuntimeError", "2 items failed")
    assert described["failed"] and not described["complete"]
