"""Many feeds of one shared reader starting at once, and a batch among many feeds.

* feeds asking for the topics' partitions or their start offsets while a request is in flight
  share its answer (a triggerer starting 1,000 watchers made one metadata request and one offsets
  request per watcher, each queued on the reader's one thread behind its fetches); a failure
  reaches every caller that waited for it, the next caller asks again, a cancelled caller leaves
  the request to the others;
* a batch of the shared reader touches only the feeds it has records for, and every other feed
  still gets the reader's progress when its owner takes.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from airflow_kafka_events.errors import TopicError
from airflow_kafka_events.kafka.shared_feed import Feed
from airflow_kafka_events.kafka.shared_reader import SharedReader
from harness.shared_readers import shared_reader_of

pytestmark = pytest.mark.unit

TOPIC = "assets"
PARTITIONS = [(TOPIC, 0), (TOPIC, 1), (TOPIC, 2)]


class Client:
    """The reader's client side: each metadata or offsets request waits until ``release``d."""

    def __init__(self) -> None:
        self.metadata_requests = 0
        self.offset_requests: list[list[tuple[str, int]]] = []
        self.gate = asyncio.Event()
        self.metadata_error: Exception | None = None
        self.assigned: dict[tuple[str, int], int] = {}

    async def open(self) -> None:
        pass

    async def partitions(self) -> list[tuple[str, int]]:
        self.metadata_requests += 1
        await self.gate.wait()
        if self.metadata_error is not None:
            raise self.metadata_error
        return list(PARTITIONS)

    async def policy_offsets(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        self.offset_requests.append(list(partitions))
        await self.gate.wait()
        return {tp: 7 for tp in partitions}

    async def assign(self, positions: dict[tuple[str, int], int]) -> None:
        self.assigned.update(positions)

    async def poll_batch(self, max_records: int, timeout: float) -> list[Any]:
        await asyncio.sleep(3600)  # the test hands batches to ``_dispatch`` itself
        return []

    async def close(self) -> None:
        pass


def _reader() -> tuple[SharedReader, Client]:
    client = Client()
    shared = shared_reader_of(
        client, TOPIC, name=f"watchers-of-{TOPIC}", decode=lambda message: message.key(), route=lambda d: [d]
    )
    return shared, client


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_feeds_asking_for_the_partitions_at_once_make_one_metadata_request():
    async def scenario() -> tuple[int, list[Any], int]:
        shared, client = _reader()
        asking = [asyncio.create_task(shared.partitions()) for _ in range(1000)]
        await _settle()
        client.gate.set()
        answers = await asyncio.gather(*asking)
        return client.metadata_requests, answers, shared.start_requests

    requests, answers, counted = asyncio.run(scenario())
    assert requests == 1
    assert counted == 1
    assert all(answer == PARTITIONS for answer in answers)
    answers[0].append(("other", 9))  # each caller has its own list
    assert answers[1] == PARTITIONS


def test_a_request_answered_is_not_reused_the_next_caller_asks_again():
    async def scenario() -> int:
        shared, client = _reader()
        client.gate.set()
        await shared.partitions()
        await shared.partitions()
        return client.metadata_requests

    assert asyncio.run(scenario()) == 2


def test_a_failed_request_fails_every_caller_that_waited_and_the_next_asks_again():
    async def scenario() -> tuple[list[Any], int, list[Any]]:
        shared, client = _reader()
        client.metadata_error = TopicError(f"topic {TOPIC!r} is not available on b:9092; create it first")
        asking = [asyncio.create_task(shared.partitions()) for _ in range(5)]
        await _settle()
        client.gate.set()
        failed = await asyncio.gather(*asking, return_exceptions=True)
        client.metadata_error = None
        again = await shared.partitions()
        return failed, client.metadata_requests, again

    failed, requests, again = asyncio.run(scenario())
    assert all(isinstance(error, TopicError) and TOPIC in str(error) for error in failed)
    assert requests == 2
    assert again == PARTITIONS


def test_a_caller_cancelled_leaves_the_request_to_the_others():
    async def scenario() -> tuple[bool, Any, int]:
        shared, client = _reader()
        first = asyncio.create_task(shared.partitions())
        second = asyncio.create_task(shared.partitions())
        await _settle()
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)
        client.gate.set()
        return first.cancelled(), await second, client.metadata_requests

    cancelled, answer, requests = asyncio.run(scenario())
    assert cancelled
    assert answer == PARTITIONS
    assert requests == 1


def test_feeds_asking_for_the_same_start_offsets_at_once_share_one_request():
    async def scenario() -> tuple[list[Any], list[Any]]:
        shared, client = _reader()
        asking = [asyncio.create_task(shared.start_offsets(list(reversed(PARTITIONS)))) for _ in range(500)]
        asking.append(asyncio.create_task(shared.start_offsets([(TOPIC, 1)])))  # another set: its own
        await _settle()
        client.gate.set()
        return await asyncio.gather(*asking), client.offset_requests

    answers, requests = asyncio.run(scenario())
    assert sorted(requests) == sorted([PARTITIONS, [(TOPIC, 1)]])
    assert all(answer == {tp: 7 for tp in PARTITIONS} for answer in answers[:-1])
    assert answers[-1] == {(TOPIC, 1): 7}


class Message:
    def __init__(self, key: str, partition: int, offset: int) -> None:
        self._key, self._partition, self._offset = key, partition, offset

    def key(self) -> str:
        return self._key

    def topic(self) -> str:
        return TOPIC

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset


def test_a_batch_touches_only_the_feeds_it_has_records_for_and_every_feed_gets_the_progress(
    monkeypatch: pytest.MonkeyPatch,
):
    offered: list[str] = []
    original = Feed._offer

    def spy(feed: Feed, records: Any) -> None:
        offered.append(feed.name)
        original(feed, records)

    monkeypatch.setattr(Feed, "_offer", spy)

    async def scenario() -> tuple[Any, Any, Any]:
        shared, _ = _reader()
        feeds = [
            await shared.subscribe(
                {tp: 0 for tp in PARTITIONS}, keys=[f"a{i}"], match=lambda decoded: True, name=f"a{i}"
            )
            for i in range(1000)
        ]
        shared._dispatch([Message("a5", 1, 0), Message("a9", 1, 1), Message("nobody", 2, 0)])
        own = await feeds[5].take(10, timeout=0)
        others = await feeds[700].take(10, timeout=0)
        shared._dispatch([Message("nobody", 0, 0)])
        later = await feeds[5].take(10, timeout=0)
        for feed in feeds:
            await feed.close()
        return own, others, later

    own, others, later = asyncio.run(scenario())
    assert offered == ["a5", "a9"]
    assert [(r.tp, r.offset) for r in own[0]] == [((TOPIC, 1), 0)]
    assert own[1] == {(TOPIC, 1): 2, (TOPIC, 2): 1}
    assert others == ([], {(TOPIC, 1): 2, (TOPIC, 2): 1})
    assert later == ([], {(TOPIC, 0): 1})


def test_a_failed_feed_no_longer_follows_the_shared_reader():
    """A feed failed alone (its ``match`` raised) is detached: the shared reader reads on for the
    others, and its frontier must not become the failed feed's position (a clean stop would write it,
    past the record it failed on)."""

    async def scenario() -> tuple[Any, Any]:
        shared, _ = _reader()
        feed = await shared.subscribe(
            {tp: 0 for tp in PARTITIONS}, keys=["a"], match=lambda d: True, name="a"
        )
        other = await shared.subscribe(
            {tp: 0 for tp in PARTITIONS}, keys=["b"], match=lambda d: True, name="b"
        )
        shared._fail_feed(feed, ValueError("its match raised on offset 0"))
        shared._dispatch([Message("a", 0, 0), Message("b", 0, 1)])
        progress = feed.progress()
        records, frontier = await other.take(10, timeout=0)
        await other.close()
        return progress, ([r.offset for r in records], frontier)

    progress, others = asyncio.run(scenario())
    assert progress == {}
    assert others == ([1], {(TOPIC, 0): 2})


def test_records_below_the_frontier_are_handed_to_no_feed():
    """The shared reader never hands out a record twice, even when its client goes back."""

    async def scenario() -> list[int]:
        shared, _ = _reader()
        feed = await shared.subscribe(
            {tp: 0 for tp in PARTITIONS}, keys=["a"], match=lambda d: True, name="a"
        )
        shared._dispatch([Message("a", 0, 0), Message("a", 0, 1)])
        shared._dispatch([Message("a", 0, 1), Message("a", 0, 2)])  # offset 1 again
        records, _ = await feed.take(10, timeout=0)
        await feed.close()
        return [record.offset for record in records]

    assert asyncio.run(scenario()) == [0, 1, 2]
