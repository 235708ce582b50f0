"""The clean-stop marks of watchers starting together are read in one pass, each read begun after
the watchers it answers asked.

A triggerer starting 1,000 watchers after a clean stop made one consumer per watcher, each
reading its key's whole partition of the stops topic (175 s before the last one read, B8's
footprint benchmark with ``--restart``).  Now one read of a topic runs at a time, for every key
asked for before it began; a key asked for while a read runs waits for the next read, so a mark
written before its watcher asked is never missed.  A failed read fails the watchers it answers
(each then starts as after a crash); the next read is tried afresh.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Collection, Mapping

import pytest

from airflow_kafka_events.errors import TopicError
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.watcher.stops import MarkReads

pytestmark = pytest.mark.unit

TOPIC = "airflow.kafka-events.watcher-stops"
CLUSTER = KafkaSettings({"bootstrap.servers": "b:9092"})
OTHER_CLUSTER = KafkaSettings({"bootstrap.servers": "elsewhere:9092"})


class Topic:
    """The stops topic: marks by key; each read blocks until released, and sees the marks as they
    are when it begins."""

    def __init__(self) -> None:
        self.marks: dict[bytes, bytes] = {}
        self.reads: list[tuple[str, frozenset[bytes]]] = []
        self.release = threading.Event()
        self.begun = threading.Event()
        self.error: Exception | None = None

    def read(
        self, settings: KafkaSettings, topic: str, keys: Collection[bytes]
    ) -> Mapping[bytes, bytes | None]:
        seen = dict(self.marks)
        self.reads.append((settings.bootstrap_servers, frozenset(keys)))
        self.begun.set()
        self.release.wait(10)
        if self.error is not None:
            raise self.error
        return {key: seen.get(key) for key in keys}


async def _until(condition, what: str) -> None:
    async with asyncio.timeout(10):
        while not condition():
            await asyncio.sleep(0.005)


def test_watchers_starting_together_share_reads_and_each_gets_its_own_mark():
    topic = Topic()
    topic.marks = {f"w{i}".encode(): f"mark-{i}".encode() for i in range(0, 1000, 2)}  # every other one
    reads = MarkReads(read=topic.read)

    async def scenario() -> list[bytes | None]:
        first = asyncio.create_task(reads.read(CLUSTER, TOPIC, b"w0"))
        await _until(topic.begun.is_set, "the first read")
        # each watcher reads its connection into settings of its own: equal settings share reads
        rest = [
            asyncio.create_task(reads.read(KafkaSettings(dict(CLUSTER.config)), TOPIC, f"w{i}".encode()))
            for i in range(1, 1000)
        ]
        await asyncio.sleep(0.05)
        topic.release.set()
        return await asyncio.gather(first, *rest)

    found = asyncio.run(scenario())
    assert found == [f"mark-{i}".encode() if i % 2 == 0 else None for i in range(1000)]
    assert [len(keys) for _, keys in topic.reads] == [1, 999]  # the first alone, the others in one read
    assert reads.reads == 2


def test_a_mark_written_while_a_read_runs_is_in_the_read_that_answers_a_watcher_asking_after():
    topic = Topic()
    reads = MarkReads(read=topic.read)

    async def scenario() -> tuple[bytes | None, bytes | None]:
        early = asyncio.create_task(reads.read(CLUSTER, TOPIC, b"early"))
        await _until(topic.begun.is_set, "the first read")
        topic.marks[b"late"] = b"written-after-the-first-read-began"  # a clean stop elsewhere, then a move
        late = asyncio.create_task(reads.read(CLUSTER, TOPIC, b"late"))
        await asyncio.sleep(0.05)
        topic.release.set()
        return await early, await late

    early, late = asyncio.run(scenario())
    assert early is None
    assert late == b"written-after-the-first-read-began"


def test_a_failed_read_fails_its_watchers_and_the_next_read_is_tried_afresh():
    topic = Topic()
    topic.error = TopicError(f"the clean-stop topic {TOPIC!r} does not exist: create it")
    topic.release.set()
    reads = MarkReads(read=topic.read)

    async def scenario() -> tuple[list[object], bytes | None]:
        failed = await asyncio.gather(
            *(reads.read(CLUSTER, TOPIC, f"w{i}".encode()) for i in range(3)), return_exceptions=True
        )
        topic.error = None
        topic.marks[b"w0"] = b"mark"
        return failed, await reads.read(CLUSTER, TOPIC, b"w0")

    failed, again = asyncio.run(scenario())
    assert all(isinstance(error, TopicError) and TOPIC in str(error) for error in failed)
    assert again == b"mark"


def test_marks_of_another_cluster_are_read_from_that_cluster():
    topic = Topic()
    topic.release.set()
    reads = MarkReads(read=topic.read)

    async def scenario() -> None:
        await asyncio.gather(reads.read(CLUSTER, TOPIC, b"a"), reads.read(OTHER_CLUSTER, TOPIC, b"b"))

    asyncio.run(scenario())
    assert sorted(topic.reads) == [("b:9092", frozenset({b"a"})), ("elsewhere:9092", frozenset({b"b"}))]


def test_a_watcher_cancelled_while_waiting_leaves_the_read_to_the_others():
    topic = Topic()
    topic.marks = {b"a": b"mark-a", b"b": b"mark-b"}
    reads = MarkReads(read=topic.read)

    async def scenario() -> tuple[bool, bytes | None]:
        a = asyncio.create_task(reads.read(CLUSTER, TOPIC, b"a"))
        b = asyncio.create_task(reads.read(CLUSTER, TOPIC, b"b"))
        await _until(topic.begun.is_set, "the read")
        a.cancel()
        await asyncio.gather(a, return_exceptions=True)
        topic.release.set()
        return a.cancelled(), await b

    cancelled, b = asyncio.run(scenario())
    assert cancelled
    assert b == b"mark-b"
    assert len(topic.reads) == 1
