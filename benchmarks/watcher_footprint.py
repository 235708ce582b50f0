"""B8's footprint of N Kafka watchers in one process, without Airflow: memory, threads, Kafka clients, CPU.

N ``KafkaAssetEventTrigger``\\ s (one topic of 3 partitions, N assets) run in this process through
Airflow's own ``SharedStreamManager`` as a triggerer's runner would run them, every fired event
confirmed at once and positions kept in memory (no supervisor, no metadata DB: what the watchers
themselves cost, not what Airflow does with their events).  Reported: resident memory, threads,
Kafka clients (librdkafka ``rdk:main`` threads: one per client) and librdkafka threads of this
process with no watcher, once all N have stored their first position (with the time that took and the
metadata and offsets requests the shared reader made for their starts), after ``--quiet`` seconds
with no records, and after ``--seconds`` of records at ``--rate`` a second round-robin over the
assets; CPU cores and ms per second per watcher while quiet, ms per event while paced; with
``--restart``, the time all N take to start again after a clean stop (stored positions, marks)
and until none reads with a catch-up reader of its own, with how many such readers ran at once.  The
benchmark's own producer is a Kafka client of this process too (counted in the paced figures).
Uses ``KAFKA_BOOTSTRAP_SERVERS`` or starts the local broker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

from airflow_kafka_events.assets.publish import build_envelope, record_key
from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC
from airflow_kafka_events.envelopes.model import AssetRef, EventSource, SourceKind
from airflow_kafka_events.kafka import KafkaSettings, TopicSpec
from airflow_kafka_events.kafka.producer import RecordProducer
from airflow_kafka_events.kafka.shared_reader import SHARED_READERS
from airflow_kafka_events.watcher.stops import stops_topic
from airflow_kafka_events.watcher.stream import WatcherStream
from airflow_kafka_events.watcher.trigger import KafkaAssetEventTrigger
from benchmarks.harness import create_topics, kafka_broker, loadavg, machine_at_start, say, write_results

CONN_ID = "kafka_footprint"


class MemoryStore:
    """An asset's ``asset_state_store`` in memory (what the triggerer's supervisor would keep)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.writes = 0

    async def aget(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    async def aset(self, key: str, value: Any) -> None:
        self.values[key] = json.loads(json.dumps(value))
        self.writes += 1


def sample(label: str, **extra: Any) -> dict[str, Any]:
    """This process's resident memory, threads, Kafka clients and librdkafka threads now."""
    names = []
    for task in Path("/proc/self/task").iterdir():
        try:
            names.append((task / "comm").read_text().strip())
        except OSError:
            continue
    figures = {
        "phase": label,
        "rss_mib": round(psutil.Process().memory_info().rss / 2**20, 1),
        "threads": len(names),
        "kafka_clients": sum(1 for name in names if name == "rdk:main"),
        "librdkafka_threads": sum(1 for name in names if name.startswith("rdk:")),
        **extra,
    }
    say(f"[{label}] {json.dumps(figures)}")
    return figures


def cpu_seconds() -> float:
    times = psutil.Process().cpu_times()
    return times.user + times.system


async def paced(
    bootstrap: str,
    topic: str,
    args: argparse.Namespace,
    assets: list[AssetRef],
    stores: dict[str, MemoryStore],
    fired: list[int],
) -> dict[str, Any]:
    """Records at ``--rate`` a second for ``--seconds``, round-robin over ``assets``; wait until every
    one fired; the process's figures then, with its CPU over that time."""
    producer = RecordProducer(KafkaSettings({"bootstrap.servers": bootstrap}).producer_config())
    source = EventSource(SourceKind.EXTERNAL, producer="b8-footprint")
    events = round(args.rate * args.seconds)
    writes0 = sum(store.writes for store in stores.values())
    fired0, cpu0, wall0 = fired[0], cpu_seconds(), time.monotonic()
    for seq in range(events):
        due = wall0 + seq / args.rate
        if due > time.monotonic():
            await asyncio.sleep(due - time.monotonic())
        asset = assets[seq % len(assets)]
        envelope = build_envelope(asset=asset, source=source, extra={"seq": seq})
        producer.send(topic, ASSET_EVENT_CODEC.encode(envelope, topic=topic), key=record_key(asset))
    while fired[0] - fired0 < events and time.monotonic() - wall0 < args.timeout:
        await asyncio.sleep(0.1)
    seconds = time.monotonic() - wall0
    cores = (cpu_seconds() - cpu0) / seconds
    figures = sample(
        f"paced {args.rate:g}/s",
        events=events,
        fired=fired[0] - fired0,
        cpu_cores=round(cores, 4),
        cpu_ms_per_event=round((cpu_seconds() - cpu0) * 1000 / max(1, fired[0] - fired0), 2),
        position_stores=sum(store.writes for store in stores.values()) - writes0,
    )
    producer.close()
    return figures


class Watchers:
    """N watchers run as a triggerer's runner runs them, through Airflow's ``SharedStreamManager``."""

    def __init__(
        self, topic: str, assets: list[AssetRef], stores: dict[str, MemoryStore], timeout: float
    ) -> None:
        from airflow.triggers.shared_stream import SharedStreamManager

        self.topic, self.assets, self.stores, self.timeout = topic, assets, stores, timeout
        self.manager = SharedStreamManager(ack_timeout=60.0, cohort_grace_period=0.0)
        self.fired = [0]
        self.tasks: list[asyncio.Task[None]] = []
        self.started = 0

    async def _run(self, trigger_id: int, trigger: KafkaAssetEventTrigger) -> None:
        manager, key = self.manager, trigger.shared_stream_key()
        stream = manager.subscribe(trigger_id=trigger_id, trigger=trigger, key=key)
        try:
            async for _event in trigger.filter_shared_stream(stream):
                seq = manager.bind_pending_event(trigger_id=trigger_id, key=key)
                self.fired[0] += 1
                if seq is not None:
                    manager.confirm_persisted([seq])
        finally:
            await manager.unsubscribe(trigger_id, key)

    async def start(self, label: str) -> dict[str, Any]:
        """Start a watcher of every asset; the figures once each stored its start."""
        count = len(self.assets)
        writes0 = {uri: store.writes for uri, store in self.stores.items()}
        requests0 = sum(reader.start_requests for reader in SHARED_READERS.readers())
        t0 = time.monotonic()
        for asset in self.assets:
            self.started += 1
            trigger = KafkaAssetEventTrigger(
                asset_uri=asset.uri, topics=[self.topic], kafka_config_id=CONN_ID
            )
            self.tasks.append(asyncio.create_task(self._run(self.started, trigger)))
        while sum(1 for uri, store in self.stores.items() if store.writes > writes0.get(uri, 0)) < count:
            if time.monotonic() - t0 > self.timeout:
                raise TimeoutError(f"not every one of {count} watchers stored its start in {self.timeout}s")
            await asyncio.sleep(0.2)
        started = time.monotonic() - t0
        while any(reader.feeds_behind for reader in SHARED_READERS.readers()):
            if time.monotonic() - t0 > self.timeout:
                raise TimeoutError(f"watchers still catching up after {self.timeout}s")
            await asyncio.sleep(0.2)
        readers = SHARED_READERS.readers()
        return sample(
            label,
            watchers=count,
            start_s=round(started, 1),
            caught_up_s=round(time.monotonic() - t0, 1),
            start_requests=sum(reader.start_requests for reader in readers) - requests0,
            catch_up_readers=sum(reader.catch_up_readers for reader in readers),
            catch_ups_at_once=max((reader.catch_ups_peak for reader in readers), default=0),
        )

    async def stop(self) -> None:
        """Stop every watcher cleanly (each writes its mark to the stops topic)."""
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks.clear()


async def measure(bootstrap: str, topic: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    count = args.watchers
    stores: dict[str, MemoryStore] = {}
    results = [sample("no watcher")]
    original_store = WatcherStream.store
    WatcherStream.store = lambda self: stores.setdefault(str(self.asset_uri), MemoryStore())  # type: ignore[method-assign,assignment]
    assets = [AssetRef(name=f"fp{i:04d}", uri=f"bench://footprint/{i:04d}") for i in range(count)]
    watchers = Watchers(topic, assets, stores, args.timeout)
    try:
        results.append(await watchers.start("started"))
        cpu0, wall0 = cpu_seconds(), time.monotonic()
        await asyncio.sleep(args.quiet)
        cores = (cpu_seconds() - cpu0) / (time.monotonic() - wall0)
        results.append(
            sample(
                "quiet", cpu_cores=round(cores, 4), cpu_ms_per_s_per_watcher=round(cores * 1000 / count, 4)
            )
        )
        results.append(await paced(bootstrap, topic, args, assets, stores, watchers.fired))
        if args.restart:
            await watchers.stop()
            results.append(await watchers.start("restarted"))
    finally:
        await watchers.stop()
        await watchers.manager.stop_all()
        WatcherStream.store = original_store  # type: ignore[method-assign]
    return results


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--watchers", type=int, default=1000, help="watchers (assets) in this process (1000)")
    parser.add_argument("--quiet", type=float, default=20.0, help="seconds with no records (20)")
    parser.add_argument("--rate", type=float, default=20.0, help="records a second while paced (20)")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds of paced records (20)")
    parser.add_argument(
        "--restart",
        action="store_true",
        help="then stop every watcher cleanly and start them again from their stored state and marks",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="longest wait for a phase (600 s)")
    parser.add_argument("--out", type=Path, help="also write the results as JSON to this file")
    args = parser.parse_args(argv)
    load_start = machine_at_start()
    with kafka_broker() as broker:
        bootstrap = broker.bootstrap
        topic = f"bench.b8.footprint.{uuid.uuid4().hex[:8]}"
        create_topics(bootstrap, [TopicSpec(topic, partitions=3), TopicSpec(stops_topic(), partitions=1)])
        conn = {
            "conn_type": "kafka",
            "extra": {"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"},
        }
        os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = json.dumps(conn)
        results = asyncio.run(measure(bootstrap, topic, args))
    load_end = loadavg()
    say(f"[machine] load average at the end {load_end}")
    if args.out:
        document = {"benchmark": "B8 footprint of Kafka watchers in one process", "results": results}
        write_results(args.out, {**document, "watchers": args.watchers}, load_start, load_end)
    return 0
