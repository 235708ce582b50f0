"""Helpers for tests of waiting stream consumers' triggers on a real broker (one event loop, as in
one triggerer): their pages, a trigger as the triggerer gets it, its first event, the shared readers
and librdkafka clients of this process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow_kafka_events.envelopes.codec import TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes.model import TriggerEventEnvelope
from airflow_kafka_events.kafka.producer import RecordProducer
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.kafka.shared_reader import SHARED_READERS, SharedReader
from airflow_kafka_events.streams.consuming.shared_wait import STREAM_WAIT_KIND
from airflow_kafka_events.streams.consuming.wait_trigger import StreamWaitTrigger


class Sender:
    """Writes stream pages (keyed by their stream, as a streaming trigger does) and raw records."""

    def __init__(self, bootstrap: str) -> None:
        settings = KafkaSettings({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
        self.producer = RecordProducer(settings.producer_config())

    def __call__(self, topic: str, envelopes: list[TriggerEventEnvelope]) -> None:
        self.raw(topic, [(e.trigger_run_id, TRIGGER_EVENT_CODEC.encode(e)) for e in envelopes])

    def raw(self, topic: str, records: list[tuple[str | None, bytes | None]]) -> None:
        futures = [self.producer.send(topic, value, key=key) for key, value in records]
        self.producer.flush()
        for future in futures:
            future.result()

    def close(self) -> None:
        self.producer.close()


def pages(run: str, n: int) -> list[TriggerEventEnvelope]:
    return [
        TriggerEventEnvelope(
            trigger_run_id=run, sequence_index=i, is_last=False, payload={"run": run, "page": i}
        )
        for i in range(n)
    ]


def kafka_clients() -> int:
    """librdkafka clients of this process: one ``rdk:main`` thread each."""
    count = 0
    for comm in Path("/proc/self/task").glob("*/comm"):
        try:
            count += comm.read_text().strip() == "rdk:main"
        except OSError:  # the thread ended meanwhile
            pass
    return count


def wait_readers() -> list[SharedReader]:
    return [reader for reader in SHARED_READERS.readers() if reader.kind == STREAM_WAIT_KIND]


async def until(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g}s"
        await asyncio.sleep(0.02)


def trigger(topic: str, run: str, **kwargs: Any) -> StreamWaitTrigger:
    kwargs = {
        "max_events": 2,
        "resume_wait": 600.0,
        "start_timeout": 600.0,
        "gap_timeout": 600.0,
        "poll_timeout": 0.1,
        **kwargs,
    }
    serialized = StreamWaitTrigger(topic=topic, trigger_run_id=run, **kwargs).serialize()[1]
    return StreamWaitTrigger(**json.loads(json.dumps(serialized)))  # as the triggerer gets it


async def first_event(waiter: StreamWaitTrigger) -> dict[str, Any]:
    async with contextlib.aclosing(waiter.run()) as events:  # it leaves the shared reader at once
        async for event in events:
            return event.payload
    raise AssertionError("the trigger ended without an event")
