"""A triggerer's stop ends while records keep arriving: Airflow's own ``SharedStreamManager.stop_all``
with six watchers of one topic on a real broker, stopped again and again under a steady stream of
records.

``stop_all`` cancels each watcher's poll task in turn and awaits its end without a time limit (what
Airflow's trigger runner does at SIGTERM). A watcher whose wait returned instead of raising the
cancellation (``asyncio.wait_for`` on Python 3.11, when its inner wait ends in the same loop
iteration) kept reading, ``stop_all`` never ended and no later watcher closed; in a triggerer the
supervisor then SIGKILLs the runner (docs/watcher-restarts.md, "A stop that does not end").
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from typing import Any

import pytest
from airflow.triggers.shared_stream import SharedStreamManager

from airflow_kafka_events.assets.publish import build_envelope, publish
from airflow_kafka_events.envelopes.model import AssetRef, EventSource, SourceKind
from airflow_kafka_events.kafka.producer import get_producer
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.watcher.stream import WatcherStream
from airflow_kafka_events.watcher.trigger import KafkaAssetEventTrigger

pytestmark = pytest.mark.integration

ASSETS = [AssetRef(name=f"it://stop-load/{i}", uri=f"it://stop-load/{i}") for i in range(6)]
#: stops of six watchers each; seconds one stop may take before it counts as hung
STOPS, STOP_LIMIT = 12, 10.0


class Store:
    """An asset state store that answers (a triggerer whose supervisor is up)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    async def aget(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    async def aset(self, key: str, value: Any) -> None:
        self.values[key] = value

    async def adelete(self, key: str) -> None:
        self.values.pop(key, None)


async def _one_stop(topic: str, fired: list[int]) -> float | None:
    """Open the six watchers, let them fire, stop them all; the seconds the stop took, ``None`` when it
    did not end within :data:`STOP_LIMIT` (its polls are then cancelled again to clean up)."""
    manager = SharedStreamManager(ack_timeout=60.0, cohort_grace_period=0.0)
    consumers = []
    for trigger_id, asset in enumerate(ASSETS, 1):
        trigger = KafkaAssetEventTrigger(
            asset_uri=asset.uri, topics=[topic], kafka_config_id="kafka_stop_load"
        )
        key = trigger.shared_stream_key()
        stream = manager.subscribe(trigger_id=trigger_id, trigger=trigger, key=key)

        async def consume(
            trigger: KafkaAssetEventTrigger = trigger,
            stream: Any = stream,
            key: Any = key,
            trigger_id: int = trigger_id,
        ) -> None:
            async for _event in trigger.filter_shared_stream(stream):
                seq = manager.bind_pending_event(trigger_id=trigger_id, key=key)
                fired[0] += 1
                if seq is not None:
                    manager.confirm_persisted([seq])

        consumers.append(asyncio.create_task(consume()))
    start = fired[0]
    deadline = time.monotonic() + 60
    while fired[0] < start + 30:  # every watcher open and firing
        assert time.monotonic() < deadline, "the watchers did not fire"
        await asyncio.sleep(0.05)
    groups = list(manager._groups.values())
    began = time.monotonic()
    stopping = asyncio.create_task(manager.stop_all())
    done, _ = await asyncio.wait({stopping}, timeout=STOP_LIMIT)
    took: float | None = time.monotonic() - began if done else None
    while not stopping.done():  # hung: cancel the polls that swallowed their cancellation again
        for group in groups:
            if group._poll_task is not None and not group._poll_task.done():
                group._poll_task.cancel()
        await asyncio.sleep(0.1)
    for task in consumers:
        task.cancel()
    await asyncio.gather(*consumers, return_exceptions=True)
    return took


def test_stops_end_while_records_keep_arriving(kafka_bootstrap, new_topic, monkeypatch):
    topic = new_topic(partitions=3, prefix="stop-load")
    stops = new_topic(partitions=1, prefix="stop-load-stops", config={"cleanup.policy": "compact"})
    monkeypatch.setenv("AIRFLOW__KAFKA_EVENTS__WATCHER_STOPS_TOPIC", stops)
    monkeypatch.setenv("AIRFLOW__KAFKA_EVENTS__WATCHER_AIRFLOW_API_CONN_ID", "")
    extra = {"bootstrap.servers": kafka_bootstrap, "group.id": f"stop-load-{uuid.uuid4().hex[:8]}"}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_STOP_LOAD", json.dumps({"conn_type": "kafka", "extra": extra}))
    stores: dict[str | None, Store] = {}
    monkeypatch.setattr(WatcherStream, "store", lambda self: stores.setdefault(self.asset_uri, Store()))
    producer = get_producer(KafkaSettings({"bootstrap.servers": kafka_bootstrap}).producer_config())
    source = EventSource(SourceKind.EXTERNAL, producer="itest")
    publishing = threading.Event()
    publishing.set()

    def publish_steadily() -> None:
        n = 0
        while publishing.is_set():
            for asset in ASSETS:
                publish(
                    build_envelope(asset=asset, source=source, extra={"n": n}), producer=producer, topic=topic
                )
            n += 1
            time.sleep(0.02)

    publisher = threading.Thread(target=publish_steadily, daemon=True)
    publisher.start()
    fired = [0]
    try:
        took = [asyncio.run(_one_stop(topic, fired)) for _ in range(STOPS)]
    finally:
        publishing.clear()
        publisher.join(timeout=30)
    hung = sum(t is None for t in took)
    print(f"{STOPS} stops of 6 watchers under load, {fired[0]} events fired; seconds each took: {took}")
    assert hung == 0, f"{hung} of {STOPS} stops did not end within {STOP_LIMIT:g}s: {took}"
