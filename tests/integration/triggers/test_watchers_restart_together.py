"""Many watchers of one topic stopping and starting together, on a real broker (a triggerer's restart).

* a clean stop writes, as the watcher's position, how far the shared reader read past other
  assets' records, even when the watcher's own wait for a record has not ended since: watchers
  stopping together write the same position;
* their next start, all at once: every mark read (in a few reads, not one per watcher), the
  topic's metadata asked once or so (not once per watcher), none behind the shared reader (no
  catch-up client), and each watcher fires its next own record once.

Asset state stores are in memory (what the triggerer's supervisor would keep): a real one would take
a real triggerer; the marks, the reads and the records are Kafka's.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from airflow.triggers.shared_stream import SharedStreamManager

from airflow_kafka_events.assets.publish import build_envelope, publish, record_key
from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC
from airflow_kafka_events.envelopes.model import AssetRef, EventSource, SourceKind
from airflow_kafka_events.kafka.positions import positions_from_json
from airflow_kafka_events.kafka.producer import get_producer
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.kafka.shared_reader import SHARED_READERS
from airflow_kafka_events.watcher import resume as watcher_resume
from airflow_kafka_events.watcher.stops import MARK_READS, decode_mark, mark_key, read_marks
from airflow_kafka_events.watcher.stream import WatcherStream
from airflow_kafka_events.watcher.trigger import KafkaAssetEventTrigger
from harness.waiting import until

pytestmark = pytest.mark.integration

CONN_ID = "kafka_watchers_together"
WATCHERS = 40


class MemoryStore:
    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.writes = 0

    async def aget(self, key: str, default: Any = None) -> Any:
        return json.loads(json.dumps(self.values.get(key, default)))

    async def aset(self, key: str, value: Any) -> None:
        self.values[key] = json.loads(json.dumps(value))
        self.writes += 1

    async def adelete(self, key: str) -> None:
        self.values.pop(key, None)


class Watchers:
    """The watchers of ``assets`` run as a triggerer's runner runs them (events confirmed at once)."""

    def __init__(self, topic: str, assets: list[AssetRef]) -> None:
        self.topic, self.assets = topic, assets
        self.manager = SharedStreamManager(ack_timeout=60.0, cohort_grace_period=0.0)
        self.fired: dict[str, list[Any]] = {asset.uri: [] for asset in assets}
        self.tasks: list[asyncio.Task[None]] = []

    async def _run(self, trigger_id: int, asset: AssetRef) -> None:
        trigger = KafkaAssetEventTrigger(asset_uri=asset.uri, topics=[self.topic], kafka_config_id=CONN_ID)
        key = trigger.shared_stream_key()
        stream = self.manager.subscribe(trigger_id=trigger_id, trigger=trigger, key=key)
        try:
            async for event in trigger.filter_shared_stream(stream):
                seq = self.manager.bind_pending_event(trigger_id=trigger_id, key=key)
                self.fired[asset.uri].append(event.payload["extra"]["n"])
                if seq is not None:
                    self.manager.confirm_persisted([seq])
        finally:
            await self.manager.unsubscribe(trigger_id, key)

    def start(self) -> None:
        for i, asset in enumerate(self.assets):
            self.tasks.append(asyncio.create_task(self._run(i + 1, asset)))

    async def stop(self) -> None:
        await self.manager.stop_all()  # what the runner does at a stop, before the trigger tasks end
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def test_watchers_stopping_together_start_together_with_few_requests_and_none_behind(
    kafka_bootstrap, new_topic, monkeypatch
):
    topic = new_topic(partitions=3, prefix="together")
    stops = new_topic(partitions=1, prefix="watcher-stops", config={"cleanup.policy": "compact"})
    monkeypatch.setenv("AIRFLOW__KAFKA_EVENTS__WATCHER_STOPS_TOPIC", stops)
    monkeypatch.setenv("AIRFLOW__KAFKA_EVENTS__WATCHER_AIRFLOW_API_CONN_ID", "")
    extra = {"bootstrap.servers": kafka_bootstrap, "auto.offset.reset": "earliest"}
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps({"conn_type": "kafka", "extra": extra}))
    stores: dict[str, MemoryStore] = {}
    monkeypatch.setattr(
        WatcherStream, "store", lambda self: stores.setdefault(str(self.asset_uri), MemoryStore())
    )

    async def no_recheck(*args: Any, **kwargs: Any) -> dict[str, float]:
        raise AssertionError("a clean stop needs no recheck")

    monkeypatch.setattr(watcher_resume, "fired_keys", no_recheck)
    run = uuid.uuid4().hex[:8]
    assets = [AssetRef(name=f"together-{run}-{i}", uri=f"it://together/{run}/{i}") for i in range(WATCHERS)]
    other = AssetRef(name=f"together-{run}-other", uri=f"it://together/{run}/other")  # nobody watches it
    producer = get_producer(KafkaSettings({"bootstrap.servers": kafka_bootstrap}).producer_config())
    source = EventSource(SourceKind.EXTERNAL, producer="itest")

    def envelope(asset: AssetRef, n: int) -> Any:
        return build_envelope(asset=asset, source=source, extra={"n": n})

    def send(asset: AssetRef, n: int) -> None:
        publish(envelope(asset, n), producer=producer, topic=topic)

    async def first_run() -> dict[tuple[str, int], int]:
        watchers = Watchers(topic, assets)
        watchers.start()
        await until(
            lambda: sum(1 for s in stores.values() if s.writes) == WATCHERS, 60, "every watcher's start"
        )
        await asyncio.sleep(1.5)  # every watcher waits for its own records (at most 1 s a wait)
        sent = [  # other assets' records only, at once: the watchers read past them
            producer.send(
                topic, ASSET_EVENT_CODEC.encode(envelope(other, n), topic=topic), key=record_key(other)
            )
            for n in range(60)
        ]
        receipts = [future.result(timeout=30) for future in sent]
        ends = {(topic, p): 0 for p in range(3)}
        for receipt in receipts:
            ends[(topic, receipt.partition)] = max(ends[(topic, receipt.partition)], receipt.offset + 1)
        (reader,) = [r for r in SHARED_READERS.readers() if topic in r.topics]
        await until(
            lambda: all(reader.frontier.get(tp, 0) >= o for tp, o in ends.items()),
            30,
            "the shared reader",
            0.01,
        )
        await watchers.stop()  # at once: most watchers' own waits have not ended since
        return ends

    ends = asyncio.run(first_run())
    settings = KafkaSettings({"bootstrap.servers": kafka_bootstrap})
    keys = [mark_key(CONN_ID, asset.uri, None) for asset in assets]
    marks = read_marks(settings, stops, keys)
    positions = [positions_from_json(decode_mark(marks[key])["positions"]) for key in keys if marks[key]]
    assert len(positions) == WATCHERS, "a watcher wrote no clean-stop mark"
    behind = [p for p in positions if p != ends]
    assert behind == [], (
        f"{len(behind)} of {WATCHERS} marks are not at the end of the topic {ends}: {behind[:3]}"
    )

    async def second_run() -> tuple[Watchers, Any, int]:
        reads_before = MARK_READS.reads
        watchers = Watchers(topic, assets)
        writes = {uri: s.writes for uri, s in stores.items()}
        watchers.start()
        await until(
            lambda: all(stores[a.uri].writes > writes[a.uri] for a in assets), 60, "every watcher's new start"
        )
        (reader,) = [r for r in SHARED_READERS.readers() if topic in r.topics]
        for i, asset in enumerate(assets):
            send(asset, 1000 + i)
        await until(lambda: all(watchers.fired[a.uri] for a in assets), 60, "each watcher's own record")
        await asyncio.sleep(1.5)  # a record fired twice would show by now
        stats = (reader.catch_up_readers, reader.start_requests)
        await watchers.stop()
        return watchers, stats, MARK_READS.reads - reads_before

    watchers, (catch_ups, start_requests), mark_reads = asyncio.run(second_run())
    assert {a.uri: watchers.fired[a.uri] for a in assets} == {a.uri: [1000 + i] for i, a in enumerate(assets)}
    assert catch_ups == 0, f"{catch_ups} watchers started behind the shared reader"
    assert start_requests <= 6, f"{start_requests} metadata/offset requests for {WATCHERS} starting watchers"
    assert 1 <= mark_reads <= 6, f"{mark_reads} reads of the marks for {WATCHERS} starting watchers"
