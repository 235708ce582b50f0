"""SharedReader and its feeds on a real broker.

* many feeds of one topic: one reader, each record fetched once, each feed gets only its records;
* a late joiner behind the shared frontier gets every record from its own position, once, and
  merges into the shared reader;
* a leaving feed does not disturb the others; the last one closes the reader;
* a slow feed's buffer stays bounded (it falls back to its own reader) and it still gets every
  record once, while a fast feed beside it is not held up;
* a feed whose ``match`` raises fails alone; a record ``decode`` raises on reaches the feeds as the
  error and the reader reads on;
* a failure that may pass (injected into the reader's poll) rebuilds the reader, which reads on from
  its frontier: every record once, in order; one that does not (refused credentials) fails every feed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from airflow_kafka_events.errors import KafkaAuthenticationError, KafkaOperationError
from airflow_kafka_events.kafka import shared_feed
from airflow_kafka_events.kafka.producer import get_producer
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.kafka.shared_feed import READ_BATCH, Feed
from airflow_kafka_events.kafka.shared_reader import SharedReaders
from harness.waiting import until

pytestmark = pytest.mark.integration


def _send(bootstrap: str, topic: str, values: list[tuple[str, str]], partition: int = 0) -> None:
    producer = get_producer(KafkaSettings({"bootstrap.servers": bootstrap}).producer_config())
    futures = [producer.send(topic, value.encode(), key=key, partition=partition) for key, value in values]
    for future in futures:
        future.result(timeout=30)


def _config(bootstrap: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "group.id": "shared-reader-it", "auto.offset.reset": "earliest"}


def _decode(message: Any) -> tuple[str, str]:
    return (message.key() or b"").decode(), (message.value() or b"").decode()


def _route(decoded: tuple[str, str]) -> list[str]:
    return [decoded[0]]  # the key says whose record it is


def _acquire(registry: SharedReaders, bootstrap: str, topic: str, make_on_read: Any = None):
    return registry.acquire(
        "test",
        _config(bootstrap),
        [topic],
        name=f"it-{topic}",
        decode=_decode,
        route=_route,
        poll_timeout=0.2,
        make_on_read=make_on_read,
    )


async def _subscribe(
    registry: SharedReaders,
    bootstrap: str,
    topic: str,
    owner: str,
    start: int,
    make_on_read: Any = None,
    **kw: Any,
) -> Feed:
    reader = _acquire(registry, bootstrap, topic, make_on_read)
    return await reader.subscribe(
        {(topic, 0): start}, keys=[owner], match=lambda d, o=owner: d[0] == o, name=owner, **kw
    )


class Taker:
    """Takes a feed's records in a task, like a watcher does, and keeps its frontier."""

    def __init__(self, feed: Feed) -> None:
        self.feed = feed
        self.values: list[str] = []
        self.offsets: list[int] = []
        self.frontier: dict[Any, int] = {}
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            records, frontier = await self.feed.take(100, 0.2)
            self.values.extend(r.decoded[1] for r in records)
            self.offsets.extend(r.offset for r in records)
            self.frontier.update(frontier)

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


def test_many_feeds_share_one_reader_and_each_record_is_fetched_once(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1, prefix="shared-many")
    owners = [f"asset-{i}" for i in range(20)]
    _send(kafka_bootstrap, topic, [(owners[n % 20], f"{owners[n % 20]}:{n}") for n in range(400)])
    registry = SharedReaders()
    made: list[int] = []  # on_read hooks made: one, for the one reader, not one per feed
    last_read: dict[tuple[str, int], int] = {}

    def make_on_read() -> Callable[[Any, str, int, int], None]:
        made.append(1)
        return lambda _client, t, p, offset: last_read.__setitem__((t, p), offset)

    async def scenario() -> None:
        feeds = [
            await _subscribe(registry, kafka_bootstrap, topic, owner, 0, make_on_read) for owner in owners
        ]
        takers = [Taker(feed) for feed in feeds]
        reader = registry.get("test", _config(kafka_bootstrap), [topic])
        assert reader is not None and registry.created == 1 and len(registry) == 1 and reader.feeds == 20
        assert len(made) == 1
        try:
            await until(lambda: all(t.frontier.get((topic, 0)) == 400 for t in takers), 60, "every frontier")
            assert last_read[(topic, 0)] == 399  # the hook saw the last record read
            for owner, taker in zip(owners, takers, strict=True):
                assert taker.values == [f"{owner}:{n}" for n in range(400) if owners[n % 20] == owner]
            assert reader.records_read == 400  # fetched once for 20 feeds
            assert reader.catch_up_readers == 0
        finally:
            for taker in takers:
                await taker.stop()
            for feed in feeds:
                await feed.close()
        assert len(registry) == 0 and reader.reader._executor.closed  # the last feed closed it

    asyncio.run(scenario())


def test_a_late_joiner_behind_the_frontier_gets_every_record_from_its_position(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1, prefix="shared-late")
    _send(kafka_bootstrap, topic, [("late", f"v{n}") for n in range(30)])
    registry = SharedReaders()

    async def scenario() -> None:
        early = await _subscribe(registry, kafka_bootstrap, topic, "late", 0)
        first = Taker(early)
        try:
            await until(lambda: len(first.values) == 30, 60, "the early feed's 30 records")
            late = await _subscribe(registry, kafka_bootstrap, topic, "late", 5)  # behind the frontier (30)
            assert late.catching_up
            second = Taker(late)
            await until(lambda: len(second.values) == 25, 60, "the late feed's catch-up")
            _send(kafka_bootstrap, topic, [("late", f"v{n}") for n in range(30, 40)])
            await until(lambda: len(first.values) == 40 and len(second.values) == 35, 60, "the new records")
            await until(lambda: not late.catching_up, 30, "the late feed to merge")
            _send(kafka_bootstrap, topic, [("late", f"v{n}") for n in range(40, 45)])
            await until(lambda: len(second.values) == 40, 60, "records after the merge")
            assert second.values == [f"v{n}" for n in range(5, 45)]  # all from its position, once
            assert second.offsets == list(range(5, 45))
            assert first.values == [f"v{n}" for n in range(45)]
            reader = registry.get("test", _config(kafka_bootstrap), [topic])
            assert reader is not None and registry.created == 1 and reader.catch_up_readers == 1
            await second.stop()
        finally:
            await first.stop()
            await early.close()
            await late.close()

    asyncio.run(scenario())


def test_a_leaving_feed_does_not_disturb_the_others(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1, prefix="shared-leave")
    registry = SharedReaders()

    async def scenario() -> None:
        stay = await _subscribe(registry, kafka_bootstrap, topic, "a", 0)
        leave = await _subscribe(registry, kafka_bootstrap, topic, "b", 0)
        staying, leaving = Taker(stay), Taker(leave)
        try:
            _send(kafka_bootstrap, topic, [(k, f"{k}{n}") for n in range(10) for k in ("a", "b")])
            await until(lambda: len(staying.values) == 10 and len(leaving.values) == 10, 60, "both feeds")
            await leaving.stop()
            await leave.close()
            reader = registry.get("test", _config(kafka_bootstrap), [topic])
            assert reader is not None and reader.feeds == 1
            _send(kafka_bootstrap, topic, [(k, f"{k}{n}") for n in range(10, 20) for k in ("a", "b")])
            await until(lambda: len(staying.values) == 20, 60, "the staying feed's new records")
            assert staying.values == [f"a{n}" for n in range(20)]
            assert registry.created == 1  # the same reader went on
        finally:
            await staying.stop()
            await stay.close()
        assert len(registry) == 0

    asyncio.run(scenario())


def test_a_slow_feed_stays_bounded_and_still_gets_every_record_once(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1, prefix="shared-slow")
    registry = SharedReaders()
    capacity = 50

    async def scenario() -> None:
        fast = await _subscribe(registry, kafka_bootstrap, topic, "all", 0)
        slow = await _subscribe(registry, kafka_bootstrap, topic, "all", 0, capacity=capacity)
        quick = Taker(fast)
        most_buffered = 0
        try:
            _send(kafka_bootstrap, topic, [("all", f"v{n}") for n in range(2000)])
            deadline = time.monotonic() + 60
            while len(quick.values) < 2000:  # the slow feed takes nothing meanwhile
                assert time.monotonic() < deadline, "the fast feed was held up"
                most_buffered = max(most_buffered, slow.buffered)
                await asyncio.sleep(0.01)
            assert slow.fallbacks >= 1 and slow.catching_up
            assert most_buffered <= capacity + READ_BATCH
            await asyncio.sleep(0.5)  # its own reader waits for room: still bounded
            assert slow.buffered <= capacity
            late = Taker(slow)  # now it takes: every record, in order, once
            await until(lambda: len(late.values) >= 2000, 60, "the slow feed's records")
            await until(lambda: not slow.catching_up, 30, "the slow feed to merge")
            assert late.values == [f"v{n}" for n in range(2000)]
            _send(kafka_bootstrap, topic, [("all", "after")])
            await until(
                lambda: late.values[-1:] == ["after"] and quick.values[-1:] == ["after"], 30, "one more"
            )
            await late.stop()
        finally:
            await quick.stop()
            await fast.close()
            await slow.close()

    asyncio.run(scenario())


class Boom(Exception):
    """A feed's own bug."""


def test_a_feed_whose_match_raises_fails_alone(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1, prefix="shared-match")
    registry = SharedReaders()

    def bad_match(decoded: tuple[str, str]) -> bool:
        if decoded[1] == "bad:1":
            raise Boom("the owner's match broke on bad:1")
        return decoded[0] == "bad"

    async def scenario() -> None:
        good = await _subscribe(registry, kafka_bootstrap, topic, "good", 0)
        reader = _acquire(registry, kafka_bootstrap, topic)
        bad = await reader.subscribe({(topic, 0): 0}, keys=["bad"], match=bad_match, name="bad")
        taker = Taker(good)
        try:
            _send(kafka_bootstrap, topic, [("good", "good:0"), ("bad", "bad:0"), ("bad", "bad:1")])
            _send(kafka_bootstrap, topic, [("good", "good:1")])
            await until(lambda: taker.values == ["good:0", "good:1"], 60, "the good feed's records")
            with pytest.raises(Boom):
                while True:
                    await bad.take(100, 0.2)
            assert reader.feeds == 1 and registry.get("test", _config(kafka_bootstrap), [topic]) is reader
        finally:
            await taker.stop()
            await bad.close()
            await good.close()
        assert len(registry) == 0

    asyncio.run(scenario())


def test_a_record_decode_raises_on_reaches_the_feeds_as_the_error(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1, prefix="shared-decode")
    registry = SharedReaders()
    owners = ["a", "b"]

    def decode(message: Any) -> tuple[str, str]:
        if message.value() == b"poison":
            raise ValueError("cannot decode poison")
        return _decode(message)

    async def scenario() -> None:
        reader = registry.acquire(
            "test",
            _config(kafka_bootstrap),
            [topic],
            name="it",
            decode=decode,
            route=_route,
            poll_timeout=0.2,
        )
        feeds = [
            await reader.subscribe(
                {(topic, 0): 0},
                keys=[owner],
                match=lambda d, o=owner: isinstance(d, ValueError) or d[0] == o,
                name=owner,
            )
            for owner in owners
        ]
        errors: list[list[Any]] = [[], []]
        values: list[list[str]] = [[], []]

        async def take(i: int) -> None:
            while True:
                records, _ = await feeds[i].take(100, 0.2)
                for record in records:
                    if isinstance(record.decoded, ValueError):
                        errors[i].append(record.offset)
                    else:
                        values[i].append(record.decoded[1])

        tasks = [asyncio.create_task(take(i)) for i in range(2)]
        try:
            _send(kafka_bootstrap, topic, [("a", "a:0"), ("b", "poison"), ("b", "b:0"), ("a", "a:1")])
            await until(lambda: values == [["a:0", "a:1"], ["b:0"]], 60, "every feed's records")
            assert errors == [[1], [1]]  # each feed's match judged the undecodable record
            assert reader.feeds == 2 and not reader.rebuilds
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for feed in feeds:
                await feed.close()

    asyncio.run(scenario())


def _fail_next_poll(reader: Any, error: Exception) -> None:
    """The reader's next poll raises ``error`` (the one after reads as before)."""
    client = reader.reader
    original = client.poll_batch

    async def failing(*args: Any, **kwargs: Any) -> Any:
        client.poll_batch = original
        raise error

    client.poll_batch = failing


def test_a_failure_that_may_pass_rebuilds_the_reader_from_its_frontier(
    kafka_bootstrap, new_topic, monkeypatch
):
    monkeypatch.setattr(shared_feed, "REBUILD_BACKOFF", 0.1)
    topic = new_topic(partitions=1, prefix="shared-rebuild")
    registry = SharedReaders()

    async def scenario() -> None:
        feed = await _subscribe(registry, kafka_bootstrap, topic, "a", 0)
        reader = _acquire(registry, kafka_bootstrap, topic)
        await reader.release()  # the feed holds it
        first_client = reader.reader
        taker = Taker(feed)
        try:
            _send(kafka_bootstrap, topic, [("a", f"a:{n}") for n in range(5)])
            await until(lambda: len(taker.values) == 5, 60, "the first records")
            _fail_next_poll(reader, KafkaOperationError("injected: a client call failed"))
            await until(lambda: reader.rebuilds == 1, 30, "the reader rebuilt")
            _send(kafka_bootstrap, topic, [("a", f"a:{n}") for n in range(5, 10)])
            await until(lambda: len(taker.values) >= 10, 60, "the records after the rebuild")
            assert taker.values == [f"a:{n}" for n in range(10)]
            assert taker.offsets == list(range(10))
            assert reader.reader is not first_client and first_client._executor.closed
            assert registry.get("test", _config(kafka_bootstrap), [topic]) is reader
        finally:
            await taker.stop()
            await feed.close()
        assert len(registry) == 0

    asyncio.run(scenario())


def test_a_failure_that_does_not_heal_fails_every_feed(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1, prefix="shared-fatal")
    registry = SharedReaders()

    async def scenario() -> None:
        feeds = [await _subscribe(registry, kafka_bootstrap, topic, owner, 0) for owner in ("a", "b")]
        reader = _acquire(registry, kafka_bootstrap, topic)
        await reader.release()
        refused = KafkaAuthenticationError("the brokers refused the credentials of the reader")
        _fail_next_poll(reader, refused)
        try:
            for feed in feeds:
                with pytest.raises(KafkaAuthenticationError) as info:
                    while True:
                        await feed.take(100, 0.2)
                assert info.value is refused
            assert not reader.rebuilds
            assert registry.get("test", _config(kafka_bootstrap), [topic]) is None  # the next one is new
        finally:
            for feed in feeds:
                await feed.close()

    asyncio.run(scenario())
