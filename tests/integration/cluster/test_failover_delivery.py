"""kill -9 of a partition leader while the package's own paths deliver, on a 3-node cluster.

RF 3, min ISR 2 (the ``ensure_topics`` defaults on 3 nodes).  The leader is found from the
metadata and killed while records are in flight:

* a streaming trigger writing 200 pages, read live by a ``StreamReader``: every page read once,
  in order, the stream complete, the trigger's try not failed;
* a burst of 1,000 ``emit()`` calls on 3 partitions: every receipted event on the topic once, an
  emit that raised is ``NotSentError`` (then absent) or ``DeliveryOutcomeUnknownError``;
* a steady publisher under asset watchers (Airflow's ``SharedStreamManager``, in process) and the
  partition bridge (a fake REST API): every receipted event one asset event and one POST.

Each test then restarts the node, waits for the ISR back at 3 and reads the topic again.  One
cluster for the module; the figures (failover time, stall, losses, repeats, rejoin) are printed
(``pytest -s``).  "Failover" is the time from the SIGKILL to the first acknowledged delivery to a
partition the killed node led.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from airflow_kafka_events.assets.publish import build_envelope, emit, publish
from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC
from airflow_kafka_events.envelopes.model import AssetRef, EventSource, SourceKind
from airflow_kafka_events.errors import DeliveryOutcomeUnknownError, NotSentError
from airflow_kafka_events.kafka.partitioner import partition_for_key
from airflow_kafka_events.kafka.producer import get_producer
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.kafka.topics import TopicSpec, ensure_topics
from airflow_kafka_events.local_broker.cluster import LocalKafkaCluster
from airflow_kafka_events.streams.consuming.reader import ReadOptions, StreamReader
from airflow_kafka_events.streams.producing.trigger import Page, StreamingTrigger
from airflow_kafka_events.watcher.trigger import KafkaAssetEventTrigger
from harness.watchers import MemoryStores, Watchers, memory_stores, watcher_conn
from integration.bridge.fake_airflow import FakeAirflow
from integration.bridge.test_bridge_kafka import PASSWORD, committed, make_config, running
from integration.cluster.support import isr_complete, partitions, wait_until
from integration.faults.broker import read_values
from integration.triggers.sample_triggers import collect, page_payload, read_topic

pytestmark = [pytest.mark.integration, pytest.mark.cluster, pytest.mark.faults, pytest.mark.timeout(300)]

ISR_DEADLINE = 90.0
#: After SIGKILL the controller fences the dead broker (6 s here), then clients refresh their metadata.
FAILOVER_DEADLINE = 60.0


@pytest.fixture(autouse=True)
def close_cluster_producers(cluster3: LocalKafkaCluster) -> Iterator[None]:
    """Producers of one test do not outlive it (nor the cluster at the end of the module)."""
    yield
    from airflow_kafka_events.kafka import producer as producer_module

    for producer in list(producer_module._registry.values()):
        if producer.bootstrap_servers == cluster3.bootstrap_servers:
            producer.close(5.0)


def _leaders(admin: AdminClient, topic: str, count: int = 3) -> dict[int, Any]:
    """``{partition: PartitionMetadata}`` once the metadata lists every partition with a leader."""

    def complete() -> dict[int, Any]:
        parts = partitions(admin, topic)  # {} while a request times out (a node just died or came back)
        return parts if len(parts) == count and all(p.leader >= 0 for p in parts.values()) else {}

    return wait_until(complete, timeout=30, what=f"a leader for each partition of {topic}")


def _topic(cluster: LocalKafkaCluster, prefix: str, count: int = 3) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    admin = AdminClient(cluster.client_config())
    ensure_topics(admin, [TopicSpec(name, partitions=count)])
    parts = _leaders(admin, name, count)
    assert all(len(p.replicas) == 3 for p in parts.values()), parts
    return name


def _led_by(admin: AdminClient, topic: str, node: int) -> set[int]:
    return {p for p, meta in _leaders(admin, topic).items() if meta.leader == node}


@dataclass
class Kill:
    """SIGKILL of ``node`` at a moment another thread chooses (``fire()``), timed."""

    cluster: LocalKafkaCluster
    node: int
    killed_at: float | None = None
    fired: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._run, name=f"kill-node-{self.node}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.fired.wait()
        assert self.cluster.kill_node(self.node) is not None, f"node {self.node} was not running"
        self.killed_at = time.monotonic()
        self.done.set()

    def fire(self) -> None:
        self.fired.set()

    def wait(self) -> float:
        assert self.done.wait(30), f"node {self.node} was not killed"
        assert self.killed_at is not None
        return self.killed_at


def _rejoin(cluster: LocalKafkaCluster, admin: AdminClient, topic: str, node: int) -> tuple[float, float]:
    """Restart ``node``; seconds until it is in the metadata, and until the ISR of ``topic`` is 3."""
    began = time.monotonic()
    listed = cluster.start_node(node)
    wait_until(lambda: isr_complete(admin, topic, 3), timeout=ISR_DEADLINE, what="the ISR back to 3")
    return listed, time.monotonic() - began


# --------------------------------------------------------------------------- (a) streaming trigger
ASKED: dict[str, dict[int, float]] = {}
REACHED: dict[str, threading.Event] = {}


class FailoverTrigger(StreamingTrigger):
    """``total`` pages a few ms apart; records when each page is asked for (the trigger asks for
    the next page once the previous one is acknowledged) and sets ``REACHED`` at ``kill_at``."""

    outage_timeout = 120.0

    def __init__(self, *, total: int, kill_at: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.total, self.kill_at = total, kill_at

    def trigger_kwargs(self) -> dict[str, Any]:
        return {"total": self.total, "kill_at": self.kill_at}

    async def pages(self, cursor: str | None) -> AsyncIterator[Page]:
        run = self.trigger_run_id or ""
        for index in range(int(cursor or 0), self.total):
            ASKED[run][index] = time.monotonic()
            if index == self.kill_at:
                REACHED[run].set()
            await asyncio.sleep(0.01)
            yield Page(payload=page_payload(index), cursor=str(index + 1))


def test_leader_killed_mid_stream_every_page_read_once_in_order(healthy, monkeypatch):
    cluster = healthy
    admin = AdminClient(cluster.client_config())
    conn = {"conn_type": "kafka", "extra": cluster.client_config()}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps(conn))
    topic = _topic(cluster, "failover-stream")
    key = f"failover/stream/-1/{uuid.uuid4().hex}"
    partition = partition_for_key(key.encode(), 3)
    victim = _leaders(admin, topic)[partition].leader
    total, kill_at = 200, 60
    ASKED[key], REACHED[key] = {}, threading.Event()
    kill = Kill(cluster, victim)

    settings = KafkaSettings(cluster.client_config())
    reader = StreamReader(
        settings.consumer_config(f"failover-reader-{uuid.uuid4().hex[:8]}"),
        topic,
        key,
        options=ReadOptions(
            max_wait=0.2, poll_timeout=0.1, start_timeout=60.0, gap_timeout=FAILOVER_DEADLINE
        ),
    )
    read: list[Any] = []
    read_at: list[float] = []
    reader_errors: list[BaseException] = []

    def consume() -> None:
        try:
            for batch in reader:
                read.extend(batch.events)
                read_at.extend([time.monotonic()] * len(batch.events))
                reader.ack(batch)
        except BaseException as exc:  # reported by the test thread
            reader_errors.append(exc)

    consumer = threading.Thread(target=consume, name="stream-reader", daemon=True)
    consumer.start()
    events: list[Any] = []
    trigger_errors: list[BaseException] = []

    def produce() -> None:
        try:
            events.extend(
                asyncio.run(
                    collect(FailoverTrigger(total=total, kill_at=kill_at, trigger_run_id=key, topic=topic))
                )
            )
        except BaseException as exc:
            trigger_errors.append(exc)

    producer = threading.Thread(target=produce, name="failover-trigger", daemon=True)
    producer.start()
    try:
        assert REACHED[key].wait(60), f"the stream never reached page {kill_at}"
        kill.fire()
        killed_at = kill.wait()
        producer.join(FAILOVER_DEADLINE + 60)
        consumer.join(FAILOVER_DEADLINE + 30)
        assert not producer.is_alive() and not consumer.is_alive(), "the stream did not end"
    finally:
        reader.close()
    assert not trigger_errors, trigger_errors
    assert not reader_errors, reader_errors

    # the producer's try did not fail: one event describing a complete stream
    (event,) = events
    assert event.payload["count"] == total and event.payload["error"] is None
    assert event.payload["attempt"] == 0
    # the live reader: every page once, in order, then the end marker
    assert [e.sequence_index for e in read] == list(range(total + 1))
    assert [e.payload for e in read[:-1]] == [page_payload(i) for i in range(total)]
    assert read[-1].is_last and read[-1].payload is None and read[-1].error is None
    # the topic: one record per page, one attempt (nothing written twice by the retries)
    stored = read_topic(cluster.bootstrap_servers, topic, key)
    assert [s.envelope.sequence_index for s in stored] == list(range(total + 1))
    assert {s.envelope.attempt for s in stored} == {0} and {s.partition for s in stored} == {partition}
    new_leader = _leaders(admin, topic)[partition].leader
    assert new_leader not in (victim, -1)

    asked = ASKED[key]
    after = sorted(t for t in asked.values() if t > killed_at)
    assert after, "no page was acknowledged after the kill"
    failover = after[0] - killed_at
    stall = max(asked[i + 1] - asked[i] for i in range(total - 1))
    # the live reader: the first page written after the kill, read how long after the kill
    written_after = {i for i, t in asked.items() if t > killed_at}
    read_after = [t for e, t in zip(read, read_at, strict=True) if e.sequence_index in written_after]
    read_gap = read_after[0] - killed_at if read_after else float("nan")

    listed, isr_back = _rejoin(cluster, admin, topic, victim)
    again = read_topic(cluster.bootstrap_servers, topic, key)
    assert [(s.partition, s.offset) for s in again] == [(s.partition, s.offset) for s in stored]
    print(
        f"\n(a) stream of {total} pages, leader {victim} of partition {partition} killed at page {kill_at}: "
        f"next acknowledged page {failover:.2f}s after the kill (new leader {new_leader}), longest pause "
        f"between pages {stall:.2f}s, first page written after the kill read {read_gap:.2f}s after it; "
        f"read {len(read)} envelopes, lost 0, twice 0, topic records {len(stored)}; node back in the "
        f"metadata {listed:.1f}s after restart, ISR 3 after {isr_back:.1f}s"
    )


# --------------------------------------------------------------------------- (b) emit burst
BURST = 1000
ASSETS = [f"s3://failover/burst/{i}" for i in range(12)]


@pytest.mark.parametrize("timeout", [30.0, 3.0], ids=["timeout-30s", "timeout-3s"])
def test_leader_killed_mid_burst_of_emits_every_receipt_once(healthy, timeout):
    """With the default 30 s every emit rides out the election; with 3 s (shorter than the election)
    the emits caught by it fail, typed."""
    cluster = healthy
    admin = AdminClient(cluster.client_config())
    topic = _topic(cluster, "failover-emit")
    by_partition = Counter(partition_for_key(a.encode(), 3) for a in ASSETS)
    assert set(by_partition) == {0, 1, 2}, by_partition
    victim = _leaders(admin, topic)[0].leader
    victim_partitions = _led_by(admin, topic, victim)
    kill = Kill(cluster, victim)
    settings = KafkaSettings(cluster.client_config())

    receipts: list[tuple[int, float, Any]] = []
    not_sent: list[tuple[int, NotSentError]] = []
    unknown: list[tuple[int, DeliveryOutcomeUnknownError]] = []
    began = time.monotonic()
    for n in range(BURST):
        if n == BURST * 3 // 10:
            kill.fire()  # the kill lands while the next emits are in flight
        asset = ASSETS[n % len(ASSETS)]
        try:
            receipt = emit(
                asset,
                extra={"n": n},
                idempotency_key=f"burst-{n}",
                topic=topic,
                settings=settings,
                timeout=timeout,
            )
        except NotSentError as exc:
            not_sent.append((n, exc))
        except DeliveryOutcomeUnknownError as exc:
            unknown.append((n, exc))
        else:
            receipts.append((n, time.monotonic(), receipt))
    took = time.monotonic() - began
    killed_at = kill.wait()
    # anything else raised would have failed the test above: the errors are the two typed ones

    records = [
        (p, o, ASSET_EVENT_CODEC.decode(v)) for p, o, v in read_values(cluster.bootstrap_servers, topic)
    ]
    on_topic = Counter(env.event_id for _, _, env in records)
    by_key = {env.idempotency_key: (p, o) for p, o, env in records}
    where = {env.event_id: (p, o) for p, o, env in records}
    for _, _, receipt in receipts:
        assert on_topic[receipt.event_id] == 1, receipt
        assert where[receipt.event_id] == (receipt.partition, receipt.offset), receipt
    for n, _exc in not_sent:
        assert f"burst-{n}" not in by_key, f"emit {n} raised NotSentError but is on the topic"
    unknown_written = [(n, by_key[f"burst-{n}"]) for n, _ in unknown if f"burst-{n}" in by_key]
    assert len(records) == len(receipts) + len(unknown_written), "records on the topic that no emit sent"
    assert max(on_topic.values()) == 1
    assert len(receipts) + len(not_sent) + len(unknown) == BURST
    # an event whose outcome was unknown, if written, was written before the failure was reported:
    # never after an event of the same partition receipted later (never published later)
    for n, (partition, offset) in unknown_written:
        later = [r.offset for m, _, r in receipts if m > n and r.partition == partition]
        assert all(o > offset for o in later), (
            f"emit {n} raised DeliveryOutcomeUnknownError and was written at {partition}@{offset}, "
            f"after later emits' receipts {sorted(o for o in later if o < offset)}"
        )

    on_victim = [t for _, t, r in receipts if r.partition in victim_partitions and t > killed_at]
    assert on_victim, "nothing was delivered to the killed leader's partitions after the kill"
    failover = on_victim[0] - killed_at
    done_at = [t for _, t, _ in receipts]
    stall = max(b - a for a, b in pairwise(done_at))
    new_leaders = {p: _leaders(admin, topic)[p].leader for p in victim_partitions}
    assert victim not in new_leaders.values() and -1 not in new_leaders.values()

    listed, isr_back = _rejoin(cluster, admin, topic, victim)
    again = Counter(
        ASSET_EVENT_CODEC.decode(v).event_id for _, _, v in read_values(cluster.bootstrap_servers, topic)
    )
    assert again == on_topic
    print(
        f"\n(b) {BURST} emits (timeout {timeout:g}s) in {took:.1f}s, leader {victim} of partitions "
        f"{sorted(victim_partitions)} "
        f"killed after emit {BURST * 3 // 10}: first receipt on those partitions {failover:.2f}s "
        f"after the kill (new leaders {new_leaders}), longest pause between receipts {stall:.2f}s; "
        f"receipted {len(receipts)}, NotSentError {len(not_sent)}, DeliveryOutcomeUnknownError "
        f"{len(unknown)} ({len(unknown_written)} of them on the topic), lost 0, twice 0; node back in the "
        f"metadata {listed:.1f}s after restart, ISR 3 after {isr_back:.1f}s"
    )
    for n, exc in [*not_sent, *unknown][:3]:
        print(f"    emit {n}: {type(exc).__name__}: {exc}")


# --------------------------------------------------------------------------- (c) watcher and bridge
STEADY = 150
#: Three assets whose records land on partitions 0, 2 and 1 (murmur2 of the URI).
WATCHED = [AssetRef(name=f"failover-{i}", uri=f"s3://failover/watched/{i}") for i in (0, 2, 3)]


def _high_watermarks(config: dict[str, Any], topic: str, count: int) -> dict[int, int]:
    consumer = Consumer({**config, "group.id": f"hw-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
            for p in range(count)
        }
    finally:
        consumer.close()


class SteadyPublisher:
    """Publishes :data:`STEADY` events of the watched assets 20 ms apart, killing the leader after a
    third of them; ``receipts`` are (monotonic time, receipt, asset), ``errors`` what went wrong."""

    def __init__(self, producer: Any, topic: str, kill: Kill) -> None:
        self.producer, self.topic, self.kill = producer, topic, kill
        self.receipts: list[tuple[float, Any, AssetRef]] = []
        self.errors: list[BaseException] = []

    def __call__(self) -> None:
        try:
            for n in range(STEADY):
                if n == STEADY // 3:
                    self.kill.fire()
                asset = WATCHED[n % len(WATCHED)]
                envelope = build_envelope(
                    asset=asset,
                    source=EventSource(SourceKind.EXTERNAL, producer="failover"),
                    partition_key=f"k{n}",
                    extra={"n": n},
                )
                receipt = publish(envelope, producer=self.producer, topic=self.topic, timeout=60)
                self.receipts.append((time.monotonic(), receipt, asset))
                time.sleep(0.02)  # a steady stream, not a burst
        except BaseException as exc:  # reported by the test thread
            self.errors.append(exc)


async def _watch_while_publishing(
    triggers: dict[int, KafkaAssetEventTrigger],
    publish_steadily: SteadyPublisher,
    config: dict[str, Any],
    topic: str,
    stores: MemoryStores,
    conn_id: str,
) -> Watchers:
    """Run the watchers while the events are published, until each fired its asset's events and
    stored its position past the last of them."""
    receipts, publish_errors = publish_steadily.receipts, publish_steadily.errors
    watchers = Watchers()
    for tid, trigger in triggers.items():
        watchers.start(tid, trigger)
    try:
        publisher = threading.Thread(target=publish_steadily, name="steady-publisher", daemon=True)
        publisher.start()
        await asyncio.to_thread(publisher.join, FAILOVER_DEADLINE + 60)
        assert not publisher.is_alive() and not publish_errors, publish_errors
        highs = await asyncio.to_thread(_high_watermarks, config, topic, 3)
        assert sum(highs.values()) == STEADY
        # each watcher has fired its asset's events and stored its position past the last of
        # them (a position moved only past other assets' records is stored far less often)
        for tid, asset in enumerate(WATCHED, start=1):
            own = partition_for_key(asset.uri.encode(), 3)
            count = sum(1 for _, _, a in receipts if a == asset)
            await _until_async(
                lambda a=asset, t=tid, p=own, c=count: (
                    len(watchers.fired[t]) >= c and stores.positions(a.uri, conn_id).get(p) == highs[p]
                ),
                120,
                f"{asset.uri}: {count} asset events and its position at {highs}",
            )
    finally:
        await watchers.stop()
    return watchers


def _wait_for_bridge_commits_at_the_ends(
    cluster: Any, config: dict[str, Any], group_id: str, topic: str
) -> None:
    """Wait until the bridge's group committed the offset after each partition's last record."""
    highs = _high_watermarks(config, topic, 3)
    seen: list[list[int]] = []

    def bridge_done() -> bool:
        seen.append(committed(cluster.bootstrap_servers, group_id, topic, 3))
        return seen[-1] == [highs[p] for p in range(3)]  # the offset after each last record

    try:
        wait_until(bridge_done, timeout=60, interval=0.5, what="the bridge's commits at the ends")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: committed {seen[-1]}, ends {highs}") from None


def test_leader_killed_under_the_watcher_and_the_bridge_each_event_arrives_once(healthy, monkeypatch):
    cluster = healthy
    config = cluster.client_config()
    admin = AdminClient(config)
    topic = _topic(cluster, "failover-watched")
    dlq = _topic(cluster, "failover-watched-dlq", count=1)
    assert {partition_for_key(a.uri.encode(), 3) for a in WATCHED} == {0, 1, 2}
    victim = _leaders(admin, topic)[0].leader
    victim_partitions = _led_by(admin, topic, victim)
    conn_id = "kafka_watcher_failover"
    watcher_conn(monkeypatch, cluster.bootstrap_servers, conn_id, f"failover-{uuid.uuid4().hex[:8]}")
    stores = memory_stores(monkeypatch)
    triggers = {
        i + 1: KafkaAssetEventTrigger(asset_uri=asset.uri, topics=[topic], kafka_config_id=conn_id)
        for i, asset in enumerate(WATCHED)
    }
    kill = Kill(cluster, victim)
    producer = get_producer(KafkaSettings(config).producer_config())
    publisher = SteadyPublisher(producer, topic, kill)

    with FakeAirflow(users={"bridge": PASSWORD}) as fake:
        for asset in WATCHED:
            fake.add_asset(asset.name, asset.uri)
        bridge_config = make_config(cluster.bootstrap_servers, fake, topic, dlq)
        with running(bridge_config) as bridge:
            watchers = asyncio.run(
                _watch_while_publishing(triggers, publisher, config, topic, stores, conn_id)
            )
            _wait_for_bridge_commits_at_the_ends(cluster, config, bridge_config.group_id, topic)
            stats = dict(bridge.service.stats)
        posted = [e["extra"]["airflow_kafka_events"]["event_id"] for e in fake.events]
        posts = fake.count("POST", "/api/v2/assets/events")
    killed_at = kill.wait()
    receipts = publisher.receipts

    receipted = Counter(r.event_id for _, r, _ in receipts)
    assert len(receipted) == STEADY
    # the watcher: each receipted event exactly once, as an asset event of its own asset
    fired = {tid: Counter(p["event_id"] for p in payloads) for tid, payloads in watchers.fired.items()}
    for tid, asset in enumerate(WATCHED, start=1):
        expected = Counter(r.event_id for _, r, a in receipts if a == asset)
        assert fired[tid] == expected, (asset.uri, fired[tid] - expected, expected - fired[tid])
    # the bridge: each receipted event exactly one POST, one Airflow event
    assert Counter(posted) == receipted, (Counter(posted) - receipted, receipted - Counter(posted))
    assert posts == STEADY, f"{posts} POSTs for {STEADY} events ({stats})"

    on_victim = [t for t, r, _ in receipts if r.partition in victim_partitions and t > killed_at]
    assert on_victim, "nothing was delivered to the killed leader's partitions after the kill"
    failover = on_victim[0] - killed_at
    done_at = [t for t, _, _ in receipts]
    stall = max(b - a for a, b in pairwise(done_at))
    watcher_repeats = sum(c - 1 for f in fired.values() for c in f.values())
    bridge_repeats = len(posted) - len(set(posted))

    listed, isr_back = _rejoin(cluster, admin, topic, victim)
    again = Counter(
        ASSET_EVENT_CODEC.decode(v).event_id for _, _, v in read_values(cluster.bootstrap_servers, topic)
    )
    assert again == receipted
    print(
        f"\n(c) {STEADY} events published 20 ms apart under 3 watchers and the bridge, leader {victim} of "
        f"partitions {sorted(victim_partitions)} killed after event {STEADY // 3}: first receipt on those "
        f"partitions {failover:.2f}s after the kill, longest pause between receipts {stall:.2f}s; watcher "
        f"asset events {sum(sum(f.values()) for f in fired.values())} (lost 0, twice {watcher_repeats}), "
        f"bridge POSTs {posts} (lost 0, twice {bridge_repeats}, stats {stats}); node back in the metadata "
        f"{listed:.1f}s after restart, ISR 3 after {isr_back:.1f}s"
    )


async def _until_async(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout}s"
        await asyncio.sleep(0.2)
