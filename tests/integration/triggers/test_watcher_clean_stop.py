"""A watcher's clean stop on a real broker: its last state goes to Kafka, not to the asset state store.

At a triggerer's SIGTERM, Airflow's runner cancels the channel to its supervisor before the shared
streams close, so the asset state store no longer answers a closing watcher: here its store hangs from
the moment the first run opened (the worst case).  The watcher runs through Airflow's own
``SharedStreamManager`` (ack mode); two of its six events are fired but never confirmed (they await
Airflow at the stop): Airflow persisted the fifth (the plugin's listener recorded its number in the
state store, as it does in the transaction persisting the event) and dropped the sixth.  The four
confirmed ones were confirmed after the last store the supervisor answered, so the mark keeps them in
doubt too (a confirmation during a stop may be of an event Airflow dropped,
``test_watcher_stop_unbound_events.py``).  The next run must resume from the mark in Kafka as after a
clean stop: the four confirmed events and the persisted fifth are not fired again (the listener's
record says Airflow has them), the sixth is (nothing lost), nothing is rechecked, no "unclean stop".
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from airflow.triggers.shared_stream import SharedStreamManager

from airflow_kafka_events.assets.publish import build_envelope, publish
from airflow_kafka_events.envelopes.model import AssetRef, EventSource, SourceKind
from airflow_kafka_events.kafka.producer import get_producer
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.watcher import resume as watcher_resume
from airflow_kafka_events.watcher.confirmations import persisted_key
from airflow_kafka_events.watcher.stream import WatcherStream
from airflow_kafka_events.watcher.trigger import KafkaAssetEventTrigger

pytestmark = pytest.mark.integration

ASSET = AssetRef(name="it://clean-stop/a", uri="it://clean-stop/a")


class HangingStore:
    """An asset state store that stops answering once ``hang`` is set (the supervisor gone)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.hang = False

    async def aget(self, key: str, default: Any = None) -> Any:
        if self.hang:
            await asyncio.Event().wait()
        return json.loads(json.dumps(self.values.get(key, default)))

    async def aset(self, key: str, value: Any) -> None:
        if self.hang:
            await asyncio.Event().wait()
        self.values[key] = json.loads(json.dumps(value))


async def _run(
    trigger: KafkaAssetEventTrigger,
    confirm: Callable[[int], bool],
    until: int,
    persisted: Callable[[int, dict[str, Any]], None] = lambda n, payload: None,
) -> list[str]:
    """Run ``trigger`` until it fired ``until`` events, confirming the n-th only when ``confirm(n)``;
    ``persisted(n, payload)`` is told of each (what Airflow's supervisor persists)."""
    manager = SharedStreamManager(ack_timeout=60.0, cohort_grace_period=0.0)
    key = trigger.shared_stream_key()
    stream = manager.subscribe(trigger_id=1, trigger=trigger, key=key)
    fired: list[str] = []

    async def consume() -> None:
        try:
            async for event in trigger.filter_shared_stream(stream):
                seq = manager.bind_pending_event(trigger_id=1, key=key)
                fired.append(event.payload["event_id"])
                persisted(len(fired), event.payload)
                if seq is not None and confirm(len(fired)):
                    manager.confirm_persisted([seq])
        finally:
            await manager.unsubscribe(1, key)

    task = asyncio.create_task(consume())
    deadline = time.monotonic() + 60
    while len(fired) < until:
        assert time.monotonic() < deadline, f"only {len(fired)} of {until} events fired"
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)  # the confirmations reach the stream's advance
    await manager.stop_all()  # what the runner does at a stop, before the trigger tasks end
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return fired


def test_a_clean_stop_is_resumed_from_its_mark_in_kafka(kafka_bootstrap, new_topic, monkeypatch, caplog):
    topic = new_topic(partitions=2, prefix="clean-stop")
    stops = new_topic(partitions=3, prefix="watcher-stops", config={"cleanup.policy": "compact"})
    monkeypatch.setenv("AIRFLOW__KAFKA_EVENTS__WATCHER_STOPS_TOPIC", stops)
    monkeypatch.setenv("AIRFLOW__KAFKA_EVENTS__WATCHER_AIRFLOW_API_CONN_ID", "")
    extra = {"bootstrap.servers": kafka_bootstrap, "group.id": f"clean-{uuid.uuid4().hex[:8]}"}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_WATCHER_CLEAN", json.dumps({"conn_type": "kafka", "extra": extra}))
    store = HangingStore()
    monkeypatch.setattr(WatcherStream, "store", lambda self: store)
    rechecks: list[Any] = []

    async def no_recheck(*args: Any, **kwargs: Any) -> dict[str, float]:
        rechecks.append(args)
        return {}

    monkeypatch.setattr(watcher_resume, "fired_keys", no_recheck)
    producer = get_producer(KafkaSettings({"bootstrap.servers": kafka_bootstrap}).producer_config())
    source = EventSource(SourceKind.EXTERNAL, producer="itest")
    first = [
        publish(build_envelope(asset=ASSET, source=source, extra={"n": n}), producer=producer, topic=topic)
        for n in range(6)
    ]
    ids = [receipt.event_id for receipt in first]

    def trigger() -> KafkaAssetEventTrigger:
        return KafkaAssetEventTrigger(
            asset_uri=ASSET.uri, topics=[topic], kafka_config_id="kafka_watcher_clean"
        )

    def listener(n: int, payload: dict[str, Any]) -> None:
        """The plugin's listener: the supervisor persisted events 1 to 5 (the 6th came after its last
        exchange with the runner)."""
        if n <= 5:
            mark = payload["watcher"]
            store.values[persisted_key(mark["run"])] = {"seq": mark["seq"]}

    async def first_run() -> list[str]:
        runner = asyncio.create_task(_run(trigger(), confirm=lambda n: n <= 4, until=6, persisted=listener))
        deadline = time.monotonic() + 30
        while not store.values:  # the opening store (the start position), then the supervisor is gone
            assert time.monotonic() < deadline, "the watcher never stored its start position"
            await asyncio.sleep(0.05)
        store.hang = True
        return await runner

    caplog.set_level(logging.INFO, logger="airflow_kafka_events")
    fired = asyncio.run(first_run())
    assert sorted(fired) == sorted(ids)
    assert "stops cleanly" in caplog.text
    assert "6 record(s) it fired are in doubt (2 await Airflow's confirmation, 4 confirmed" in caplog.text
    caplog.clear()

    store.hang = False  # a new triggerer: its supervisor answers
    later = [
        publish(build_envelope(asset=ASSET, source=source, extra={"n": n}), producer=producer, topic=topic)
        for n in range(6, 8)
    ]
    again = asyncio.run(_run(trigger(), confirm=lambda n: True, until=3))
    expected = [fired[5]] + [r.event_id for r in later]
    assert sorted(again) == sorted(expected), "persisted events fired again, or some lost"
    assert "of the 6 record(s)" in caplog.text
    assert "Airflow persisted 5 (not fired again) and dropped 1 (fired again)" in caplog.text
    assert "unclean" not in caplog.text and rechecks == []
