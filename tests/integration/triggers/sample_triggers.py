"""Triggers used by the streaming trigger tests, importable by classpath.

Module-level registries let a test observe and steer trigger instances that it does not
hold (the triggerer, or a wrapper, builds them from their classpath):

* ``FETCHES[stream][page]``: how many times :class:`PagedTrigger` fetched a page;
* ``PAUSE_BEFORE[stream] = n``: :class:`PagedTrigger` blocks before fetching page ``n``;
* ``HOLD_BEFORE[stream] = (n, event)``: :class:`PagedTrigger` waits for ``event`` before fetching page ``n``;
* ``FAILURES_LEFT[stream]``: how many more times ``fail_at`` raises;
* ``CLEANUPS[name]`` / ``KILLS[name]``: ``cleanup()`` / ``on_kill()`` calls of the plain
  triggers, by their ``name`` kwarg.

Also small functions that read topics and drive triggers, shared by the trigger tests.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from airflow.triggers.base import (
    BaseTrigger,
    TaskFailedEvent,
    TaskSkippedEvent,
    TaskSuccessEvent,
    TriggerEvent,
)
from confluent_kafka import Consumer, KafkaError, TopicPartition

from airflow_kafka_events.envelopes.codec import TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes.model import TriggerEventEnvelope
from airflow_kafka_events.streams.producing.trigger import Page, StreamingTrigger

MODULE = __name__

FETCHES: defaultdict[str, defaultdict[int, int]] = defaultdict(lambda: defaultdict(int))
PAUSE_BEFORE: dict[str, int] = {}
HOLD_BEFORE: dict[str, tuple[int, asyncio.Event]] = {}
FAILURES_LEFT: dict[str, int] = {}
CLEANUPS: defaultdict[str, int] = defaultdict(int)
KILLS: defaultdict[str, int] = defaultdict(int)


class PageFetchError(Exception):
    """Raised by PagedTrigger's page source at ``fail_at``."""


def page_payload(index: int) -> dict[str, Any]:
    return {"page": index, "items": [index * 10 + j for j in range(3)], "text": f"page-{index}"}


class PagedTrigger(StreamingTrigger):
    """``total`` pages; page ``i`` has cursor ``str(i + 1)`` (or none with ``cursors=False``).

    ``fail_at``: fetching that page raises :class:`PageFetchError` while
    ``FAILURES_LEFT[stream]`` (default ``fail_times``) is positive.  ``bad_payload_at``:
    that page's payload is a set (not JSON).
    """

    def __init__(
        self,
        *,
        total: int,
        fail_at: int | None = None,
        fail_times: int = 1,
        bad_payload_at: int | None = None,
        cursors: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.total = total
        self.fail_at = fail_at
        self.fail_times = fail_times
        self.bad_payload_at = bad_payload_at
        self.cursors = cursors

    def trigger_kwargs(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "fail_at": self.fail_at,
            "fail_times": self.fail_times,
            "bad_payload_at": self.bad_payload_at,
            "cursors": self.cursors,
        }

    async def pages(self, cursor: str | None) -> AsyncIterator[Page]:
        stream = self.resolve_trigger_run_id()
        start = 0 if cursor is None else int(cursor)
        for index in range(start, self.total):
            if PAUSE_BEFORE.get(stream) == index:
                await asyncio.get_running_loop().create_future()  # until cancelled
            hold = HOLD_BEFORE.get(stream)
            if hold is not None and hold[0] == index:
                await hold[1].wait()
            if index == self.fail_at:
                left = FAILURES_LEFT.setdefault(stream, self.fail_times)
                if left > 0:
                    FAILURES_LEFT[stream] = left - 1
                    raise PageFetchError(f"page {index} is unavailable")
            FETCHES[stream][index] += 1
            payload: Any = {"not", "json"} if index == self.bad_payload_at else page_payload(index)
            yield Page(payload=payload, cursor=str(index + 1) if self.cursors else None)


class BytesTrigger(StreamingTrigger):
    """Pages with raw ``bytes`` payloads."""

    def __init__(self, *, chunks: list[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.chunks = list(chunks)

    def trigger_kwargs(self) -> dict[str, Any]:
        return {"chunks": list(self.chunks)}

    async def pages(self, cursor: str | None) -> AsyncIterator[Page]:
        start = 0 if cursor is None else int(cursor)
        for index in range(start, len(self.chunks)):
            yield Page(payload=self.chunks[index].encode("utf-8"), cursor=str(index + 1))


# --------------------------------------------------------------------------- plain triggers to wrap
class _Recording(BaseTrigger):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    async def cleanup(self) -> None:
        CLEANUPS[self.name] += 1

    async def on_kill(self) -> None:
        KILLS[self.name] += 1


class MultiEventTrigger(_Recording):
    """Yields ``count`` events ``{"n": i, ...}`` ``interval`` seconds apart; raises at ``fail_after``."""

    def __init__(self, name: str, count: int, interval: float = 0.0, fail_after: int | None = None) -> None:
        super().__init__(name)
        self.count = count
        self.interval = interval
        self.fail_after = fail_after

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{MODULE}.MultiEventTrigger",
            {
                "name": self.name,
                "count": self.count,
                "interval": self.interval,
                "fail_after": self.fail_after,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        for n in range(self.count):
            if self.fail_after is not None and n >= self.fail_after:
                raise PageFetchError(f"event source broke after {n} events")
            if self.interval:
                await asyncio.sleep(self.interval)
            yield TriggerEvent({"n": n, "name": self.name})


class EndTaskTrigger(_Recording):
    """Yields one ``TriggerEvent`` then a task-ending event of ``state``, then (never seen) another."""

    def __init__(self, name: str, state: str = "success") -> None:
        super().__init__(name)
        self.state = state

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{MODULE}.EndTaskTrigger", {"name": self.name, "state": self.state})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        yield TriggerEvent({"before": True})
        end = {"success": TaskSuccessEvent, "failed": TaskFailedEvent, "skipped": TaskSkippedEvent}[
            self.state
        ]
        yield end(xcoms={"answer": 42, "name": self.name})
        yield TriggerEvent({"after": True})


class ForeverTrigger(_Recording):
    """Yields ``before`` events, then never returns."""

    def __init__(self, name: str, before: int = 0) -> None:
        super().__init__(name)
        self.before = before

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{MODULE}.ForeverTrigger", {"name": self.name, "before": self.before})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        for n in range(self.before):
            yield TriggerEvent({"n": n})
        await asyncio.get_running_loop().create_future()
        yield TriggerEvent("unreachable")  # pragma: no cover


# --------------------------------------------------------------------------- reading topics, driving triggers
@dataclass(frozen=True)
class Stored:
    """An envelope as stored in Kafka."""

    partition: int
    offset: int
    envelope: TriggerEventEnvelope


def read_topic(bootstrap: str, topic: str, key: str | None = None, timeout: float = 30.0) -> list[Stored]:
    """Every envelope of ``topic`` (with ``key``, if given), per partition in offset order."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-{topic}-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        partitions = sorted(meta.partitions)
        pending: set[int] = set()
        assignment = []
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
            if high > low:
                pending.add(p)
                assignment.append(TopicPartition(topic, p, low))
        out: list[Stored] = []
        if not pending:
            return out
        consumer.assign(assignment)
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic} took longer than {timeout}s")
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard(msg.partition())
                        continue
                    raise RuntimeError(str(err))
                if key is not None and msg.key() != key.encode():
                    continue
                partition, offset, value = msg.partition(), msg.offset(), msg.value()
                assert partition is not None and offset is not None and value is not None
                out.append(Stored(partition, offset, TRIGGER_EVENT_CODEC.decode(value)))
        return sorted(out, key=lambda s: (s.partition, s.offset))
    finally:
        consumer.close()


async def wait_for(condition: Callable[[], bool], *, timeout: float = 30.0, what: str = "condition") -> None:
    """Poll ``condition`` (run in a thread) until it holds; ``TimeoutError`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(condition):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout}s")
        await asyncio.sleep(0.05)


async def collect(trigger: BaseTrigger) -> list[TriggerEvent]:
    """Drive ``trigger.run()`` to its end as the triggerer would; ``cleanup()`` afterwards."""
    events: list[TriggerEvent] = []
    try:
        async for event in trigger.run():
            events.append(event)
    finally:
        await trigger.cleanup()
    return events
