"""Waiting stream consumers share one Kafka client per triggerer and topic (real broker).

Fifty :class:`StreamWaitTrigger` s on one event loop (as in one triggerer) add ONE librdkafka client
(one ``rdk:main`` thread) for the shared reader; each fires with its own stream's payload when its
pages arrive, a waiter whose stream got nothing does not fire, a waiter that joins behind what the
shared reader read gets its records (through a catch-up reader), and the last waiter to leave
closes the client (the registry is empty).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_kafka_events.envelopes.codec import TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes.model import TriggerEventEnvelope
from airflow_kafka_events.kafka.producer import RecordProducer
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.kafka.shared_reader import SHARED_READERS, SharedReader
from airflow_kafka_events.streams.consuming.shared_wait import MAX_CATCH_UP, STREAM_WAIT_KIND
from airflow_kafka_events.streams.consuming.wait_trigger import StreamWaitTrigger

pytestmark = pytest.mark.integration

WAITERS = 50
LATE = MAX_CATCH_UP + 2


@pytest.fixture(autouse=True)
def kafka_connection(monkeypatch, kafka_bootstrap):
    extra = {"bootstrap.servers": kafka_bootstrap}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": extra}))


@pytest.fixture
def send(kafka_bootstrap: str) -> Iterator[Callable[[str, list[TriggerEventEnvelope]], None]]:
    settings = KafkaSettings({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random"})
    producer = RecordProducer(settings.producer_config())

    def send(topic: str, envelopes: list[TriggerEventEnvelope]) -> None:
        futures = [
            producer.send(topic, TRIGGER_EVENT_CODEC.encode(e), key=e.trigger_run_id) for e in envelopes
        ]
        producer.flush()
        for future in futures:
            future.result()

    yield send
    producer.close()


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


def test_fifty_waiting_triggers_share_one_kafka_client(new_topic, send):
    topic = new_topic(partitions=3)
    runs = [f"wait-{i}-{uuid.uuid4().hex[:8]}" for i in range(WAITERS)]
    quiet, late = runs[-1], [f"late-{i}-{uuid.uuid4().hex[:8]}" for i in range(LATE)]

    async def scenario() -> None:
        before = kafka_clients()
        tasks = {run: asyncio.ensure_future(first_event(trigger(topic, run))) for run in runs}
        try:
            await until(lambda: sum(r.feeds for r in wait_readers()) == WAITERS, "every waiter subscribed")
            (shared,) = wait_readers()
            assert kafka_clients() == before + 1  # one client for fifty waiters

            # every stream but the quiet one gets a full batch (max_events=2), and the late
            # joiner's stream too, before it waits
            for run in [*runs[:-1], *late]:
                send(topic, pages(run, 2))
            done, _ = await asyncio.wait([tasks[run] for run in runs[:-1]], timeout=60)
            assert len(done) == WAITERS - 1, "a waiter with its pages did not fire"
            for run in runs[:-1]:
                payload = tasks[run].result()
                assert payload["status"] == "ready" and payload["reason"] == "full-batch", payload
                assert payload["ready"] == 2
            assert not tasks[quiet].done()  # nothing came for it: it waits on
            assert shared.catch_up_readers == 0 and kafka_clients() == before + 1

            # waiters from the start of their streams, which the shared reader has read past,
            # each catch up with their own reader; with every slot taken, they wait for one
            await until(lambda: sum(shared.frontier.values()) >= 2 * (WAITERS - 1 + LATE), "the pages read")
            async with contextlib.AsyncExitStack() as slots:
                for _ in range(MAX_CATCH_UP):
                    await slots.enter_async_context(shared.catch_up_slot())
                late_waiters = [asyncio.ensure_future(first_event(trigger(topic, run))) for run in late]
                await until(lambda: shared.feeds == 1 + LATE, "the late waiters subscribed")
                assert shared.catch_up_readers == 0 and not any(w.done() for w in late_waiters)
            for payload in await asyncio.wait_for(asyncio.gather(*late_waiters), timeout=120):
                assert payload["status"] == "ready" and payload["reason"] == "full-batch", payload
            assert shared.catch_up_readers == LATE
            assert shared.catch_ups_peak == MAX_CATCH_UP  # never more at once: the others waited
            assert wait_readers() == [shared] and not tasks[quiet].done()
        finally:
            for task in tasks.values():
                task.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)
        assert wait_readers() == []  # the last waiter closed the shared reader
        await until(lambda: kafka_clients() == before, "the shared client gone", timeout=30)

    asyncio.run(scenario())
