"""Task iteration against a real Kafka broker, without Airflow services.

The producer of a stream is a thread writing envelopes as a streaming trigger does (one
key, consecutive ``sequence_index``, an end marker).  Operators run with a fake context
whose ``task_state_store`` keeps JSON values; a "retry" is a second ``execute()`` with the
same store.  Waits are on conditions (events, counts), never sleeps standing in for them.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from airflow_kafka_events.envelopes.codec import TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes.model import TriggerEventEnvelope
from airflow_kafka_events.iteration.operator import IterableOperator
from airflow_kafka_events.iteration.sources import (
    StreamItemSource,
    from_stream,
    locate_stream_start,
    results_of,
)
from airflow_kafka_events.kafka.producer import get_producer
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.streams.consuming.operator import StreamRef
from airflow_kafka_events.streams.consuming.reader import ReadOptions, StreamReader
from airflow_kafka_events.streams.descriptor import stream_id
from harness.task_state import DictStore
from unit.iteration.runners import make_runner
from unit.operators.fakes import context

pytestmark = pytest.mark.integration

DAG_ID = "dag"


@pytest.fixture(autouse=True)
def kafka_connection(monkeypatch, kafka_bootstrap):
    """The default Airflow Kafka connection, from the environment (no metadata DB)."""
    extra = {"bootstrap.servers": kafka_bootstrap}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": extra}))


def settings_of(bootstrap: str) -> KafkaSettings:
    return KafkaSettings({"bootstrap.servers": bootstrap})


class PageWriter(threading.Thread):
    """Writes ``pages`` pages of ``rows_per_page`` rows; page ``gate_page`` waits for ``gate``."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        run: str,
        *,
        pages: int,
        rows_per_page: int,
        gate: threading.Event | None = None,
        gate_page: int = 0,
    ) -> None:
        super().__init__(daemon=True)
        self.producer = get_producer(settings_of(bootstrap).producer_config())
        self.topic, self.run_key = topic, run
        self.pages, self.rows = pages, rows_per_page
        self.gate, self.gate_page = gate, gate_page
        self.gate_opened_at: int | None = None
        self.error: BaseException | None = None

    def send(self, seq: int, payload: Any, *, last: bool = False) -> None:
        envelope = TriggerEventEnvelope(
            trigger_run_id=self.run_key, sequence_index=seq, is_last=last, payload=payload
        )
        self.producer.send_and_wait(
            self.topic, TRIGGER_EVENT_CODEC.encode(envelope, topic=self.topic), key=self.run_key
        )

    def run(self) -> None:
        try:
            for page in range(self.pages):
                if self.gate is not None and page == self.gate_page:
                    if not self.gate.wait(60):
                        raise TimeoutError("nobody handled an item while the producer was paging")
                    self.gate_opened_at = page
                first = page * self.rows
                self.send(page, {"page": page, "rows": list(range(first, first + self.rows))})
            self.send(self.pages, None, last=True)
        except BaseException as exc:
            self.error = exc


def stream_source(
    bootstrap: str, topic: str, producer_task: str, *, items_path: str | None = "rows"
) -> StreamItemSource:
    run = stream_id(DAG_ID, "manual__1", producer_task)
    settings = settings_of(bootstrap)
    start, attempt, _ = locate_stream_start(settings, topic, run)
    reader = StreamReader(
        settings.consumer_config(f"it-{producer_task}-{threading.get_ident()}"),
        topic,
        run,
        options=ReadOptions(max_events=5, max_wait=0.05, gap_timeout=60, start_timeout=60),
        checkpoint=start,
    )
    spec = from_stream(StreamRef(producer_task, topic=topic), items_path=items_path)
    return StreamItemSource(reader, name="row", spec=spec, trigger_run_id=run, attempt=attempt)


def read_stream(bootstrap: str, topic: str, run: str) -> list[TriggerEventEnvelope]:
    settings = settings_of(bootstrap)
    out: list[TriggerEventEnvelope] = []
    with StreamReader(
        settings.consumer_config(f"read-{run}"),
        topic,
        run,
        options=ReadOptions(max_wait=0.05, gap_timeout=30, start_timeout=30),
    ) as reader:
        for batch in reader:
            out.extend(batch.events)
    return out


def test_items_of_a_stream_are_handled_while_its_producer_is_still_writing(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=3)
    first_item_handled = threading.Event()
    writer = PageWriter(
        kafka_bootstrap,
        topic,
        stream_id(DAG_ID, "manual__1", "produce"),
        pages=20,
        rows_per_page=5,
        gate=first_item_handled,
        gate_page=4,
    )
    writer.start()
    handled: list[tuple[int, int]] = []
    lock = threading.Lock()

    def handler(value: dict[str, Any], context: dict[str, Any]) -> int:
        with lock:
            handled.append((context["iteration_item"].ordinal, value["row"]))
        first_item_handled.set()  # the producer writes page 4 and later only after this
        return value["row"]

    source = stream_source(kafka_bootstrap, topic, "produce")
    try:
        summary = make_runner(handler, concurrency=3).run(source)
    finally:
        source.close()
    writer.join(30)

    assert writer.error is None, writer.error
    assert writer.gate_opened_at == 4  # pages 4..19 were written after an item had been handled
    assert sorted(handled) == [(n, n) for n in range(100)]  # ordinal == row number: each row once
    assert summary.items == summary.succeeded == 100 and source.pages == 20


def test_batch_shards_over_a_real_stream_cover_every_item_exactly_once(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=3)
    writer = PageWriter(
        kafka_bootstrap, topic, stream_id(DAG_ID, "manual__1", "produce"), pages=12, rows_per_page=7
    )
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def shard_runner(shard: int) -> None:
        def handler(value: dict[str, Any], context: dict[str, Any]) -> None:
            with lock:
                seen.append((shard, value["row"]))

        source = stream_source(kafka_bootstrap, topic, "produce")
        try:
            make_runner(handler, shard=shard, shards=3, concurrency=2).run(source)
        except BaseException as exc:
            errors.append(exc)
        finally:
            source.close()

    threads = [threading.Thread(target=shard_runner, args=(k,)) for k in range(3)]
    for thread in threads:  # the instances start before the producer and read while it writes
        thread.start()
    writer.start()
    for thread in threads:
        thread.join(120)
    writer.join(30)

    assert not errors and writer.error is None, (errors, writer.error)
    rows = sorted(row for _, row in seen)
    assert rows == list(range(84))  # none twice, none skipped
    assert all(row % 3 == shard for shard, row in seen)


def run_operator(
    fn: Callable[..., Any],
    iterate_kwargs: dict[str, Any],
    *,
    task_id: str,
    topic: str,
    store: DictStore,
    try_number: int = 1,
    **kwargs: Any,
) -> dict[str, Any]:
    kwargs.setdefault("reschedule", False)  # read in the worker: nothing here reruns a reschedule
    operator = IterableOperator(
        task_id=task_id,
        python_callable=fn,
        iterate_kwargs=iterate_kwargs,
        results_topic=topic,
        **kwargs,
    )
    ctx = context(dag_id=DAG_ID, task_id=task_id, store=store, try_number=try_number)
    return operator.execute(ctx)


def test_results_stream_is_written_in_order_and_a_further_stage_iterates_it(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=3)

    def square(n: int) -> int:
        return n * n

    summary = run_operator(
        square, {"n": list(range(40))}, task_id="square", topic=topic, store=DictStore(), concurrency=4
    )
    run = stream_id(DAG_ID, "manual__1", "square")
    assert summary["results"]["trigger_run_id"] == run and summary["results"]["complete"]
    assert summary["results"]["results"] == 40

    envelopes = read_stream(kafka_bootstrap, topic, run)
    assert [e.sequence_index for e in envelopes] == list(range(41))  # in order, then the end marker
    assert envelopes[-1].is_last and envelopes[-1].payload is None
    payloads = [e.payload for e in envelopes[:-1]]
    assert sorted(p["ordinal"] for p in payloads) == list(range(40))
    assert all(p["result"] == p["ordinal"] ** 2 and p["id"] == str(p["ordinal"]) for p in payloads)

    # a further stage iterates the results lazily, by reference
    got: list[int] = []
    lock = threading.Lock()

    def collect(value: int) -> None:
        with lock:
            got.append(value)

    later = run_operator(
        collect,
        {"value": results_of("square", topic=topic)},
        task_id="collect",
        topic=topic,
        store=DictStore(),
        results_stream=False,
        stream_max_wait=0.05,
    )
    assert sorted(got) == sorted(n * n for n in range(40)) and later["succeeded"] == 40


def test_a_retry_after_worker_death_skips_items_whose_results_were_delivered(kafka_bootstrap, new_topic):
    """The checkpoint lags (every 10 items); the results stream fills the gap: nothing runs twice."""
    topic = new_topic(partitions=3)
    store = DictStore()
    calls: list[int] = []

    class WorkerDied(BaseException):
        pass

    def first_try(n: int) -> int:
        if n == 25:
            # die once the checkpoint covers 20 items (the results of 20..24 are sent, maybe not saved)
            deadline = time.monotonic() + 60
            while (store.get("iteration:progress") or {}).get("watermark", 0) < 20:
                assert time.monotonic() < deadline, "no checkpoint was saved"
                time.sleep(0.01)
            store.set = lambda key, value: None  # type: ignore[method-assign]  # the process is gone
            raise WorkerDied
        calls.append(n)
        return n

    with pytest.raises(WorkerDied):
        run_operator(
            first_try,
            {"n": list(range(40))},
            task_id="work",
            topic=topic,
            store=store,
            concurrency=1,
            checkpoint_every=10,
            retries=1,
        )
    get_producer(settings_of(kafka_bootstrap).producer_config()).flush(30)  # what was sent is in Kafka
    del store.set  # a new worker process: the store works again
    saved = store.get("iteration:progress")
    assert 20 <= saved["watermark"] <= 25, saved  # saved every 10 completions: may lag the last item

    def second_try(n: int) -> int:
        calls.append(n)
        return n

    summary = run_operator(
        second_try,
        {"n": list(range(40))},
        task_id="work",
        topic=topic,
        store=store,
        concurrency=1,
        checkpoint_every=10,
        retries=1,
        try_number=2,
    )
    assert calls == list(range(40))  # 0..24 once by the first try, 25..39 by the second
    assert summary["skipped"] == 25 and summary["recovered"] == 25 - saved["watermark"]
    envelopes = read_stream(kafka_bootstrap, topic, stream_id(DAG_ID, "manual__1", "work"))
    assert [e.payload["ordinal"] for e in envelopes[:-1]] == list(range(40))  # each result once, in order


def test_each_item_publishes_its_partitioned_asset_event(kafka_bootstrap, new_topic, monkeypatch):
    from airflow.sdk import Asset
    from confluent_kafka import Consumer, TopicPartition

    from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC

    events_topic = new_topic(partitions=1)
    monkeypatch.setenv("AIRFLOW__KAFKA_EVENTS__ASSET_EVENTS_TOPIC", events_topic)
    asset = Asset(f"s3://lake/days-{threading.get_ident()}")

    def load_day(day: str) -> int:
        return len(day)

    days = [f"2025-01-{d:02d}" for d in range(1, 6)]
    summary = run_operator(
        load_day,
        {"day": days},
        task_id="load",
        topic=events_topic,
        store=DictStore(),
        concurrency=2,
        results_stream=False,
        emit_partitions=asset,
        partition_key=lambda item, result: item["day"],
    )
    assert summary["succeeded"] == 5

    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": f"read-{events_topic}",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(events_topic, 0, 0)])
        envelopes = []
        while True:
            msg = consumer.poll(10)
            assert msg is not None, "the asset events topic did not reach its end"
            if msg.error() is not None:
                break  # end of the partition
            envelopes.append(ASSET_EVENT_CODEC.decode(msg.value()))
    finally:
        consumer.close()
    assert sorted(e.partition_key for e in envelopes) == days  # one event per item, keyed by its day
    assert {e.asset.uri for e in envelopes} == {asset.uri}
    assert all(e.source.task_id == "load" and e.extra["item"] == str(e.extra["ordinal"]) for e in envelopes)
