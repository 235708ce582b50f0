"""Asset watchers run in-process: ``KafkaAssetEventTrigger`` driven by Airflow's own
``SharedStreamManager`` (ack mode), with the asset state stores a triggerer's supervisor keeps
held in memory, and the Kafka connection a watcher reads through (wait for what they do with
:func:`harness.waiting.until`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from airflow.triggers.shared_stream import SharedStreamManager

from airflow_kafka_events.watcher.stream import WatcherStream, state_key
from airflow_kafka_events.watcher.trigger import KafkaAssetEventTrigger


def watcher_conn(monkeypatch: pytest.MonkeyPatch, bootstrap: str, conn_id: str, group: str) -> None:
    """The Kafka connection ``conn_id`` (from the environment) of watchers reading ``bootstrap``."""
    extra = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": "false",
        "auto.offset.reset": "earliest",
        "session.timeout.ms": "6000",
        "heartbeat.interval.ms": "500",
    }
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "kafka", "extra": extra}))


class MemoryStores:
    """The ``asset_state_store`` of each asset, as the triggerer's supervisor would keep it."""

    def __init__(self) -> None:
        self.values: dict[tuple[str, str], Any] = {}

    def for_asset(self, asset: str) -> Any:
        stores = self

        class Store:
            async def aget(self, key: str, default: Any = None) -> Any:
                return json.loads(json.dumps(stores.values.get((asset, key), default)))

            async def aset(self, key: str, value: Any) -> None:
                stores.values[(asset, key)] = json.loads(json.dumps(value))

        return Store()

    def positions(self, asset: str, conn_id: str) -> dict[int, int]:
        """The partitions' positions the watcher of ``asset`` through ``conn_id`` stored last."""
        stored = self.values.get((asset, state_key(conn_id))) or {}
        return {
            int(p): o for partitions in stored.get("positions", {}).values() for p, o in partitions.items()
        }


def memory_stores(monkeypatch: pytest.MonkeyPatch) -> MemoryStores:
    """Stores every watcher stream of the test keeps its state in (one per asset, by URI or name)."""
    memory = MemoryStores()
    monkeypatch.setattr(
        WatcherStream,
        "store",
        lambda self: memory.for_asset(self.asset_uri or self.asset_name),
    )
    return memory


class Watchers:
    """Run watchers through Airflow's SharedStreamManager; 'persist' every event they fire."""

    def __init__(self, grace: float = 0.0) -> None:
        self.manager = SharedStreamManager(ack_timeout=60.0, cohort_grace_period=grace)
        self.fired: dict[int, list[dict[str, Any]]] = {}
        self.tasks: list[asyncio.Task] = []

    def start(self, trigger_id: int, trigger: KafkaAssetEventTrigger) -> None:
        key = trigger.shared_stream_key()
        stream = self.manager.subscribe(trigger_id=trigger_id, trigger=trigger, key=key)
        self.fired[trigger_id] = []

        async def run() -> None:
            async for event in trigger.filter_shared_stream(stream):
                seq = self.manager.bind_pending_event(trigger_id=trigger_id, key=key)
                self.fired[trigger_id].append(event.payload)
                if seq is not None:
                    self.manager.confirm_persisted([seq])

        async def guarded() -> None:
            try:
                await run()
            finally:
                await self.manager.unsubscribe(trigger_id, key)

        self.tasks.append(asyncio.create_task(guarded()))

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.manager.stop_all()

    @contextlib.asynccontextmanager
    async def running(self, triggers: Mapping[int, KafkaAssetEventTrigger]) -> AsyncIterator[Watchers]:
        """Each trigger started under its trigger id; every watcher stopped when the block ends."""
        for trigger_id, trigger in triggers.items():
            self.start(trigger_id, trigger)
        try:
            yield self
        finally:
            await self.stop()
