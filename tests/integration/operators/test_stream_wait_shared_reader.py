"""Waiting stream consumers share one Kafka client per triggerer and topic (real broker).

Fifty :class:`StreamWaitTrigger` s on one event loop (as in one triggerer) add ONE librdkafka client
(one ``rdk:main`` thread) for the shared reader; each fires with its own stream's payload when its
pages arrive, a waiter whose stream got nothing does not fire, a waiter that joins behind what the
shared reader read gets its records (through a catch-up reader), and the last waiter to leave
closes the client (the registry is empty).  Records that are not a waiter's page (undecodable,
keyless, another stream's key, a tombstone) leave every waiter waiting for its own pages; a deleted
topic fails its waiters with a ``TopicError`` event naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient

from airflow_kafka_events.errors import TopicError
from airflow_kafka_events.kafka import shared_reader
from airflow_kafka_events.streams.consuming.shared_wait import MAX_CATCH_UP
from airflow_kafka_events.streams.consuming.wait_trigger import wait_event_error
from integration.operators.waiters import (
    Sender,
    first_event,
    kafka_clients,
    pages,
    trigger,
    until,
    wait_readers,
)

pytestmark = pytest.mark.integration

WAITERS = 50
LATE = MAX_CATCH_UP + 2


@pytest.fixture(autouse=True)
def kafka_connection(monkeypatch, kafka_bootstrap):
    extra = {"bootstrap.servers": kafka_bootstrap}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": extra}))


@pytest.fixture
def send(kafka_bootstrap: str) -> Iterator[Sender]:
    sender = Sender(kafka_bootstrap)
    yield sender
    sender.close()


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


def test_records_that_are_no_waiters_page_leave_every_waiter_waiting(new_topic, send):
    topic = new_topic(partitions=1)  # every record passes every waiter's feed
    runs = [f"poison-{i}-{uuid.uuid4().hex[:8]}" for i in range(3)]

    async def scenario() -> None:
        tasks = {run: asyncio.ensure_future(first_event(trigger(topic, run))) for run in runs}
        try:
            await until(lambda: sum(r.feeds for r in wait_readers()) == len(runs), "every waiter subscribed")
            (shared,) = wait_readers()
            send.raw(
                topic,
                [
                    (runs[0], b"not an envelope"),  # a waiter's key, an undecodable value
                    (runs[1], None),  # a tombstone with a waiter's key
                    (None, b"{}"),  # no key
                    (f"other-{uuid.uuid4().hex[:8]}", b"\x00\xff"),  # another stream's key
                ],
            )
            await until(lambda: shared.frontier.get((topic, 0), 0) >= 4, "the records read")
            assert not any(task.done() for task in tasks.values())
            for run in runs:
                send(topic, pages(run, 2))
            for payload in await asyncio.wait_for(asyncio.gather(*tasks.values()), timeout=60):
                assert payload["status"] == "ready" and payload["reason"] == "full-batch", payload
                assert payload["ready"] == 2
            assert wait_readers() == [] and not shared.rebuilds
        finally:
            for task in tasks.values():
                task.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)

    asyncio.run(scenario())


def test_a_deleted_topic_fails_its_waiters_with_a_topic_error(new_topic, send, kafka_bootstrap, monkeypatch):
    monkeypatch.setattr(shared_reader, "PARTITION_REFRESH_INTERVAL", 0.5)
    monkeypatch.setattr(shared_reader, "TOPIC_GONE_CONFIRM", 1.0)
    topic = new_topic(partitions=1)
    runs = [f"deleted-{i}-{uuid.uuid4().hex[:8]}" for i in range(3)]

    async def scenario() -> None:
        tasks = {run: asyncio.ensure_future(first_event(trigger(topic, run))) for run in runs}
        try:
            await until(lambda: sum(r.feeds for r in wait_readers()) == len(runs), "every waiter subscribed")
            send(topic, pages(runs[0], 1))  # one page: not a batch yet
            (shared,) = wait_readers()
            await until(lambda: shared.frontier.get((topic, 0), 0) >= 1, "the page read")
            admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
            for future in admin.delete_topics([topic], operation_timeout=30).values():
                await asyncio.to_thread(future.result, 30)
            payloads = await asyncio.wait_for(asyncio.gather(*tasks.values()), timeout=120)
        finally:
            for task in tasks.values():
                task.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)
        for run, payload in zip(runs, payloads, strict=True):
            assert payload["status"] == "error" and payload["error_type"] == "TopicError", payload
            assert topic in payload["message"] and "recreate the topic" in payload["message"]
            error = wait_event_error(payload, topic=topic, trigger_run_id=run)
            assert isinstance(error, TopicError) and run in str(error)
        assert wait_readers() == []

    asyncio.run(scenario())
