"""Catch-up readers under the shared reader's cap: an owner that stops taking gives its slot back.

A catch-up reader whose feed's buffer is full waited for room holding its slot and its client; with
the cap (16 for the watchers, 4 for stream waits) as many owners that stopped taking (awaiting
Airflow's confirmations, a schema registry) left every other feed behind waiting for a slot, with
no record and no error.  Now a reader whose buffer stays full for ``SLOT_HOLD`` closes and gives
the slot up until its owner takes again.
"""

from __future__ import annotations

import asyncio

import pytest

from airflow_kafka_events.kafka import shared_feed
from harness.shared_readers import shared_reader_of

pytestmark = pytest.mark.unit

TOPIC = "assets"
TP = (TOPIC, 0)


class Message:
    def __init__(self, key: str, offset: int) -> None:
        self._key, self._offset = key, offset

    def key(self) -> str:
        return self._key

    def topic(self) -> str:
        return TOPIC

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def error(self) -> None:
        return None


class Log:
    """The partition: one record per offset, of owner ``a`` or ``b`` in turn."""

    def __init__(self, end: int) -> None:
        self.end = end

    def message(self, offset: int) -> Message:
        return Message("a" if offset % 2 == 0 else "b", offset)


class Client:
    """A reader's client over ``log`` (the shared reader's own never returns a record here)."""

    def __init__(self, log: Log, opened: list[str], name: str, shared: bool = False) -> None:
        self.log, self.opened, self.name, self.is_shared = log, opened, name, shared
        self.position = 0

    async def open(self) -> None:
        self.opened.append(self.name)

    async def assign(self, positions: dict[tuple[str, int], int]) -> None:
        self.position = min(positions.values())

    async def poll_batch(self, max_records: int, timeout: float) -> list[Message]:
        if self.is_shared:
            await asyncio.sleep(timeout)
            return []
        upto = min(self.log.end, self.position + max_records)
        found = [self.log.message(o) for o in range(self.position, upto)]
        self.position = upto
        if not found:
            await asyncio.sleep(0.01)
        return found

    async def positions(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return {tp: self.position for tp in partitions}

    async def unassign(self, partitions: list[tuple[str, int]]) -> None:
        pass

    async def close(self) -> None:
        pass


def test_an_owner_that_stopped_taking_does_not_keep_another_feed_behind(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(shared_feed, "SLOT_HOLD", 0.2)
    log = Log(end=100)
    opened: list[str] = []

    async def scenario() -> tuple[list[int], int]:
        shared = shared_reader_of(
            Client(log, opened, "shared", shared=True),
            TOPIC,
            name="watchers",
            decode=lambda message: message.key(),
            route=lambda decoded: [decoded],
            poll_timeout=0.05,
            max_catch_up=1,
        )
        shared._new_reader = lambda name: Client(log, opened, name)  # type: ignore[method-assign,assignment]
        first = await shared.subscribe(
            {TP: 100}, keys=["x"], match=lambda d: True, name="first"
        )  # sets the frontier
        stalled = await shared.subscribe(
            {TP: 0}, keys=["a"], match=lambda d: d == "a", name="stalled", capacity=5
        )
        await asyncio.sleep(0.05)  # the stalled feed's catch-up reader has the one slot, its buffer fills
        behind = await shared.subscribe(
            {TP: 0}, keys=["b"], match=lambda d: d == "b", name="behind", capacity=100
        )
        got: list[int] = []
        async with asyncio.timeout(10):
            while len(got) < 50:  # the stalled feed's owner never takes
                records, _ = await behind.take(100, timeout=0.5)
                got.extend(record.offset for record in records)
        peak = shared.catch_ups_peak
        for feed in (first, stalled, behind):
            await feed.close()
        return got, peak

    got, peak = asyncio.run(scenario())
    assert got == list(range(1, 100, 2))
    assert peak == 1
    assert opened.count("behind-catch-up") >= 1
