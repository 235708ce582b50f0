"""Waiting stream consumers' triggers through a broker outage (a broker of their own, stopped for
:data:`OUTAGE` seconds and started again on the same address).

Their shared reader rides the outage out: no waiter fires or fails while the broker is down, a
waiter that starts during the outage keeps trying to subscribe instead of failing, and once the
broker is back every waiter fires with its own stream's full batch, through the same shared reader.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid

import pytest

from airflow_kafka_events.streams.consuming import shared_wait
from integration.faults.broker import FaultBroker
from integration.operators.waiters import Sender, first_event, pages, trigger, until, wait_readers

pytestmark = [pytest.mark.integration, pytest.mark.faults]

WAITERS = 5
#: Seconds the broker is down (from the end of its stop to the start of its restart).
OUTAGE = 30.0


@pytest.fixture(autouse=True)
def kafka_connection(monkeypatch: pytest.MonkeyPatch, broker: FaultBroker) -> None:
    extra = {"bootstrap.servers": broker.bootstrap}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": extra}))


def test_waiters_ride_out_a_broker_restart(broker: FaultBroker, caplog: pytest.LogCaptureFixture):
    topic = broker.topic(f"faults-wait-{uuid.uuid4().hex[:8]}", partitions=2)
    runs = [f"outage-{i}-{uuid.uuid4().hex[:8]}" for i in range(WAITERS)]
    late = f"outage-late-{uuid.uuid4().hex[:8]}"
    send = Sender(broker.bootstrap)
    caplog.set_level(logging.WARNING, logger=shared_wait.__name__)

    def subscribe_refused() -> bool:
        lines = [r.getMessage() for r in caplog.records]
        return any(late in line and "cannot subscribe yet" in line for line in lines)

    async def scenario() -> None:
        tasks = {run: asyncio.ensure_future(first_event(trigger(topic, run))) for run in runs}
        try:
            await until(lambda: sum(r.feeds for r in wait_readers()) == WAITERS, "every waiter subscribed")
            send(topic, [page for run in runs for page in pages(run, 1)])  # one page each: no batch yet
            (shared,) = wait_readers()
            await until(lambda: sum(shared.frontier.values()) >= WAITERS, "the first pages read")

            await asyncio.to_thread(broker.stop)
            down_since = time.monotonic()
            tasks[late] = asyncio.ensure_future(first_event(trigger(topic, late)))
            await asyncio.wait(tasks.values(), timeout=max(0.0, OUTAGE - (time.monotonic() - down_since)))
            ended = {run: task.result() for run, task in tasks.items() if task.done()}
            assert not ended, f"waiters ended during the outage: {ended}"
            assert subscribe_refused(), "the late waiter did not try to subscribe during the outage"
            await asyncio.to_thread(broker.start)
            await until(lambda: shared.feeds == WAITERS + 1, "the late waiter subscribed", timeout=120)
            assert wait_readers() == [shared]  # the reader that was there before the outage

            send(topic, [page for run in [*runs, late] for page in pages(run, 2)[1 if run != late else 0 :]])
            payloads = await asyncio.wait_for(asyncio.gather(*tasks.values()), timeout=120)
            for payload in payloads:
                assert payload["status"] == "ready" and payload["reason"] == "full-batch", payload
                assert payload["ready"] == 2
            assert wait_readers() == []
        finally:
            for task in tasks.values():
                task.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)
            send.close()

    asyncio.run(scenario())
