"""Events a watcher fires while its triggerer stops are fired again by its next run: none is lost.

At a SIGTERM, Airflow's trigger runner leaves its loop (no exchange with its supervisor follows:
nothing fired from then on is persisted, nothing more is confirmed), then
``SharedStreamManager.stop_all()`` evicts every shared-stream group at once and stops them one after
another, while the trigger tasks still run.  A watcher whose group is not stopped yet keeps firing the
records already in its queue: ``bind_pending_event`` finds no group (evicted) and binds nothing, so
when the watcher takes its next record the event counts as acknowledged, and the group's advance pump,
still running, hands the stream an ``acked`` outcome for a record whose asset event Airflow never got.
A watcher that took such an outcome for a confirmation wrote it into its clean-stop mark as done, and
its next run resumed after it: the event was lost (the production e2e with 180 events per stop lost
one that way, ``tests/e2e/faults/test_watcher_graceful_restarts_e2e.py``).

The advance pump hands on a partition's records in order, so only such a record with no unconfirmed
one before it in its partition is advanced (in the e2e: the first record of its partition after the
watcher's last confirmed one).

Here Airflow's own ``SharedStreamManager`` runs two watchers on a real broker, driven the way the
runner drives them: each fired event is bound, queued, persisted at the next exchange (the plugin's
listener records its number) and confirmed at the one after; at the stop the exchanges end, then
``stop_all()``.  The second watcher's first events are all confirmed; its next ones are in its queue
at the stop and it fires them after the exchanges ended, while the first watcher closes (slowed: its
mark takes 0.3 s to write).  Its next run must fire those again; each event is persisted exactly once
over both runs.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from typing import Any

import pytest
from airflow.triggers.shared_stream import SharedStreamManager

from airflow_kafka_events.assets.publish import build_envelope, publish
from airflow_kafka_events.envelopes.model import AssetRef, EventSource, SourceKind
from airflow_kafka_events.kafka.producer import get_producer
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.watcher import stream as asset_stream
from airflow_kafka_events.watcher.confirmations import persisted_key
from airflow_kafka_events.watcher.stream import WatcherStream
from airflow_kafka_events.watcher.trigger import KafkaAssetEventTrigger

pytestmark = pytest.mark.integration

FIRST, SECOND = (AssetRef(name=f"it://stop-unbound/{n}", uri=f"it://stop-unbound/{n}") for n in "ab")
#: events of the second watcher confirmed before the stop, and fired while the triggerer stops
CONFIRMED, AT_STOP = 10, 5
#: seconds between two exchanges of the runner with its supervisor (Airflow: about 1 s)
EXCHANGE = 0.1


class Store:
    """An asset state store that stops answering once ``hang`` is set (the supervisor gone)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.hang = False

    async def _wait(self) -> None:
        if self.hang:
            await asyncio.Event().wait()

    async def aget(self, key: str, default: Any = None) -> Any:
        await self._wait()
        return json.loads(json.dumps(self.values.get(key, default)))

    async def aset(self, key: str, value: Any) -> None:
        await self._wait()
        self.values[key] = json.loads(json.dumps(value))

    async def adelete(self, key: str) -> None:
        await self._wait()
        self.values.pop(key, None)


class Runner:
    """Airflow's trigger runner and its supervisor, as far as events go: a fired event is bound and
    queued; at each exchange the supervisor confirms what it persisted at the previous one, then
    persists the queue (the listener records each event's number, in its asset's store)."""

    def __init__(self, stores: dict[str, Store]) -> None:
        self.manager = SharedStreamManager(ack_timeout=60.0, cohort_grace_period=0.0)
        self.stores = stores
        self.queue: list[tuple[int | None, dict[str, Any]]] = []
        self.persisted: list[dict[str, Any]] = []
        self.fired_after_exchanges: list[str] = []
        self.exchanging = True
        self.exchanges_done = 0
        self.stopping = asyncio.Event()
        self.holding = asyncio.Event()
        self._to_confirm: list[int] = []

    async def consume(
        self, trigger_id: int, trigger: KafkaAssetEventTrigger, held: int | None = None
    ) -> None:
        """Run ``trigger``; its events numbered ``held`` and up are taken on once the stop began (the
        runner's "Trigger fired event" line for them is written while the triggerer stops)."""
        key = trigger.shared_stream_key()
        stream = self.manager.subscribe(trigger_id=trigger_id, trigger=trigger, key=key)
        try:
            async for event in trigger.filter_shared_stream(stream):
                if held is not None and event.payload["extra"]["n"] >= held:
                    self.holding.set()
                    await self.stopping.wait()
                    await asyncio.sleep(0.05)  # stop_all() began: the groups are evicted
                seq = self.manager.bind_pending_event(trigger_id=trigger_id, key=key)
                self.queue.append((seq, event.payload))
                if not self.exchanging:
                    self.fired_after_exchanges.append(event.payload["event_id"])
        finally:
            await self.manager.unsubscribe(trigger_id, key)

    async def exchanges(self) -> None:
        while self.exchanging:
            await asyncio.sleep(EXCHANGE)
            if not self.exchanging:
                break
            confirmed, self._to_confirm = self._to_confirm, []
            self.manager.confirm_persisted(confirmed)
            sent, self.queue = self.queue, []
            for seq, payload in sent:
                self.persisted.append(payload)
                mark = payload["watcher"]
                store = self.stores[payload["asset"]["uri"]]
                store.values[persisted_key(mark["run"])] = {"seq": mark["seq"]}
                if seq is not None:
                    self._to_confirm.append(seq)
            self.exchanges_done += 1

    async def stop(self, consumers: list[asyncio.Task[None]], exchanging: asyncio.Task[None]) -> None:
        """What the runner does at SIGTERM: the exchanges end (the supervisor no longer answers), the
        shared streams stop, then the trigger tasks end."""
        self.exchanging = False
        for store in self.stores.values():
            store.hang = True
        await exchanging
        self.stopping.set()
        await self.manager.stop_all()
        for task in consumers:
            task.cancel()
        await asyncio.gather(*consumers, return_exceptions=True)


class Topic:
    """The topic of the two watchers, what was published to it, and the watchers of one run."""

    def __init__(self, bootstrap: str, topic: str, stores: dict[str, Store]) -> None:
        self.topic = topic
        self.stores = stores
        self.producer = get_producer(KafkaSettings({"bootstrap.servers": bootstrap}).producer_config())
        self.source = EventSource(SourceKind.EXTERNAL, producer="itest")
        self.published: dict[str, list[str]] = {FIRST.uri: [], SECOND.uri: []}

    def publish(self, asset: AssetRef, numbers: range) -> None:
        self.published[asset.uri] += [
            publish(
                build_envelope(asset=asset, source=self.source, extra={"n": n}),
                producer=self.producer,
                topic=self.topic,
            ).event_id
            for n in numbers
        ]

    def triggers(self) -> list[KafkaAssetEventTrigger]:
        return [
            KafkaAssetEventTrigger(
                asset_uri=asset.uri, topics=[self.topic], kafka_config_id="kafka_watcher_unbound"
            )
            for asset in (FIRST, SECOND)
        ]


async def _first_run(topic: Topic) -> Runner:
    """The second watcher's first events persisted and confirmed, its next ones fired at the stop."""
    runner = Runner(topic.stores)
    exchanging = asyncio.create_task(runner.exchanges())
    first, second = topic.triggers()
    consumers = [
        asyncio.create_task(runner.consume(1, first)),
        asyncio.create_task(runner.consume(2, second, held=CONFIRMED)),
    ]
    deadline = time.monotonic() + 60
    while len(runner.persisted) < 3 + CONFIRMED:
        assert time.monotonic() < deadline, f"only {len(runner.persisted)} events persisted"
        await asyncio.sleep(0.05)
    done = runner.exchanges_done
    while runner.exchanges_done < done + 3:  # their confirmations reach the streams
        await asyncio.sleep(0.05)
    await asyncio.to_thread(topic.publish, SECOND, range(CONFIRMED, CONFIRMED + AT_STOP))
    async with asyncio.timeout(30):
        await runner.holding.wait()
    await runner.stop(consumers, exchanging)
    return runner


async def _next_run(topic: Topic, expected: int) -> Runner:
    """A new triggerer runs both watchers until ``expected`` events are persisted (or 20 s), then 1 s."""
    runner = Runner(topic.stores)
    exchanging = asyncio.create_task(runner.exchanges())
    consumers = [
        asyncio.create_task(runner.consume(n, trigger)) for n, trigger in enumerate(topic.triggers(), 1)
    ]
    deadline = time.monotonic() + 20
    while len(runner.persisted) < expected and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    await asyncio.sleep(1.0)  # a repeat would come within this
    await runner.stop(consumers, exchanging)
    return runner


def test_events_fired_while_the_triggerer_stops_are_fired_again_by_the_next_run(
    kafka_bootstrap, new_topic, monkeypatch
):
    stops = new_topic(partitions=3, prefix="watcher-stops", config={"cleanup.policy": "compact"})
    monkeypatch.setenv("AIRFLOW__KAFKA_EVENTS__WATCHER_STOPS_TOPIC", stops)
    monkeypatch.setenv("AIRFLOW__KAFKA_EVENTS__WATCHER_AIRFLOW_API_CONN_ID", "")
    extra = {"bootstrap.servers": kafka_bootstrap, "group.id": f"unbound-{uuid.uuid4().hex[:8]}"}
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_WATCHER_UNBOUND", json.dumps({"conn_type": "kafka", "extra": extra})
    )
    stores = {FIRST.uri: Store(), SECOND.uri: Store()}
    monkeypatch.setattr(WatcherStream, "store", lambda self: stores[self.asset_uri])
    write_mark = asset_stream.write_mark

    async def slow_write_mark(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.3)  # the first watcher's close: the second one fires from its queue meanwhile
        return await write_mark(*args, **kwargs)

    monkeypatch.setattr(asset_stream, "write_mark", slow_write_mark)
    topic = Topic(kafka_bootstrap, new_topic(partitions=2, prefix="stop-unbound"), stores)
    topic.publish(FIRST, range(3))
    topic.publish(SECOND, range(CONFIRMED))

    first = asyncio.run(_first_run(topic))
    assert first.fired_after_exchanges, (
        "no event was fired after the exchanges ended: the stop was not exercised"
    )
    for store in stores.values():
        store.hang = False
    persisted_first = Counter(p["event_id"] for p in first.persisted)
    missing = sum(len(ids) for ids in topic.published.values()) - len(persisted_first)
    second = asyncio.run(_next_run(topic, missing))
    persisted = persisted_first + Counter(p["event_id"] for p in second.persisted)
    for asset, ids in topic.published.items():
        lost = [i for i in ids if persisted[i] == 0]
        twice = [i for i in ids if persisted[i] > 1]
        lost_after_stop = [i for i in lost if i in first.fired_after_exchanges]
        assert lost == [], (
            f"{asset}: {len(lost)} of {len(ids)} events never persisted ({len(lost_after_stop)} of them "
            f"fired after the exchanges ended; {len(first.fired_after_exchanges)} were)"
        )
        assert twice == [], f"{asset}: {len(twice)} events persisted twice"
