"""AttemptWriter's window: pages in flight, receipts taken in batches, the frontier, a failed receipt."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Coroutine
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_kafka_events.envelopes.codec import TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes.model import ProducerIdentity
from airflow_kafka_events.errors import ConfigurationError, DeliveryOutcomeUnknownError, NotSentError
from airflow_kafka_events.kafka.delivery import DeliveryFuture, DeliveryReceipt
from airflow_kafka_events.streams.producing.writer import AttemptWriter, resolve_write_window

pytestmark = pytest.mark.unit

#: What the fake broker does with a send: deliver it, fail it, or leave it to the test.
DELIVER, FAIL, HOLD = "deliver", "fail", "hold"


class FakeBroker:
    """A producer whose sends are delivered, failed or held as ``outcome(n)`` says (n: the send's
    number, from 0); the log is what reached Kafka, in order."""

    def __init__(self, outcome: Callable[[int], str] = lambda n: DELIVER) -> None:
        self.outcome = outcome
        self.sends: list[tuple[bytes, DeliveryFuture]] = []
        self.log: list[bytes] = []
        self.in_flight_at_send: list[int] = []
        self.health = SimpleNamespace(down=False, bootstrap_servers="fake:9092")
        self.role = "stream"
        self.message_timeout = 5.0
        self.report_grace = 0.0
        self.writer: AttemptWriter | None = None
        #: the local queue is full (``BufferError``) while this returns True for the send attempt
        self.queue_full: Callable[[], bool] = lambda: False
        self.full_attempts = 0

    def send(
        self, topic: str, value: bytes, *, key: Any, partition: int, timeout: float, block: bool = True
    ) -> DeliveryFuture:
        if self.queue_full():
            assert not block, "a streaming trigger's send must not block its event loop on a full queue"
            self.full_attempts += 1
            raise BufferError("Local: Queue full")
        if self.writer is not None:
            self.in_flight_at_send.append(self.writer.in_flight)
        future = DeliveryFuture()
        self.sends.append((value, future))
        what = self.outcome(len(self.sends) - 1)
        if what == DELIVER:
            self.deliver(len(self.sends) - 1)
        elif what == FAIL:
            future.settle(exception=NotSentError("not sent — nothing will be published: refused"))
        return future

    def queue_full_error(self, timeout: float) -> NotSentError:
        return NotSentError(
            f"not sent — nothing will be published: the local producer queue stayed full for {timeout}s"
        )

    def deliver(self, n: int) -> None:
        value, future = self.sends[n]
        self.log.append(value)
        future.settle(DeliveryReceipt("t", 0, len(self.log) - 1, None, b"k"))

    def sequences(self) -> list[int]:
        return [TRIGGER_EVENT_CODEC.decode(value).sequence_index for value in self.log]


def _writer(
    broker: FakeBroker,
    *,
    window: int,
    next_seq: int = 0,
    first_offset: int | None = None,
    delivery_timeout: float = 5.0,
) -> AttemptWriter:
    writer = AttemptWriter(
        broker,  # type: ignore[arg-type]
        topic="t",
        partition=0,
        trigger_run_id="k",
        attempt=0,
        next_seq=next_seq,
        first_offset=first_offset,
        cursor=None,
        identity=ProducerIdentity(),
        delivery_timeout=delivery_timeout,
        window=window,
    )
    broker.writer = writer
    return writer


def _page(writer: AttemptWriter) -> tuple[bytes, str]:
    cursor = f"after-{writer.next_seq}"
    return writer.encode(payload={"n": writer.next_seq}, cursor=cursor, is_last=False, error=None), cursor


def _run(coro: Coroutine[Any, Any, Any]) -> Any:
    async def bounded() -> Any:
        async with asyncio.timeout(10):  # a writer that waits for a receipt nobody gives fails the test
            return await coro

    return asyncio.run(bounded())


def test_pages_are_in_flight_up_to_the_window_and_receipts_are_taken_by_half_windows():
    broker = FakeBroker(lambda n: DELIVER if n == 0 else HOLD)
    writer = _writer(broker, window=4)

    async def scenario() -> None:
        assert await writer.send(*_page(writer)) == 1  # page 0 alone: the others carry its offset
        assert (writer.acked, writer.in_flight, writer.first_offset) == (1, 0, 0)
        for _ in range(3):  # pages 1..3 go out without a receipt
            assert await writer.send(*_page(writer)) == 0
        assert (writer.next_seq, writer.acked, writer.in_flight) == (4, 1, 3)
        value, cursor = _page(writer)
        fifth = asyncio.ensure_future(writer.send(value, cursor))  # the window (4) is full: it waits
        while len(broker.sends) < 5:
            await asyncio.sleep(0)
        broker.deliver(1)
        broker.deliver(2)  # the older half of the window
        assert await fifth == 2
        assert (writer.acked, writer.cursor, writer.in_flight) == (3, "after-2", 2)
        for n in (3, 4):
            broker.deliver(n)
        assert await writer.drain() == 2
        assert (writer.acked, writer.cursor, writer.last_offset, writer.written) == (5, "after-4", 4, 5)

    _run(scenario())
    assert max(broker.in_flight_at_send) < 4
    assert broker.sequences() == [0, 1, 2, 3, 4]


def test_a_full_producer_queue_is_waited_out_with_the_event_loop_free():
    broker = FakeBroker()
    writer = _writer(broker, window=64)
    ticks = 0
    ticks_at_full: list[int] = []

    def full() -> bool:  # sends 3..5 meet a full queue, five attempts in all
        if len(broker.sends) == 3 and broker.full_attempts < 5:
            ticks_at_full.append(ticks)
            return True
        return False

    broker.queue_full = full

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    async def scenario() -> None:
        running = asyncio.ensure_future(ticker())
        for _ in range(6):
            await writer.send(*_page(writer))
        await writer.drain()
        running.cancel()

    _run(scenario())
    assert broker.full_attempts == 5
    # between two attempts the loop ran other tasks: the wait did not block it
    assert all(later > earlier for earlier, later in itertools.pairwise(ticks_at_full)), ticks_at_full
    assert broker.sequences() == [0, 1, 2, 3, 4, 5]  # every page once, in order


def test_a_producer_queue_full_past_the_delivery_timeout_fails_the_page_unsent():
    broker = FakeBroker()
    writer = _writer(broker, window=64, delivery_timeout=0.05)
    broker.queue_full = lambda: len(broker.sends) == 2

    async def scenario() -> None:
        for _ in range(2):
            await writer.send(*_page(writer))
        with pytest.raises(NotSentError, match="queue stayed full"):
            await writer.send(*_page(writer))

    _run(scenario())
    assert broker.full_attempts >= 2 and broker.sequences() == [0, 1]


def test_the_frontier_moves_only_over_contiguous_receipts():
    broker = FakeBroker(lambda n: DELIVER if n == 0 else HOLD)
    writer = _writer(broker, window=8)

    async def scenario() -> None:
        for _ in range(4):
            await writer.send(*_page(writer))
        _, later = broker.sends[2]
        later.settle(DeliveryReceipt("t", 0, 7, None, b"k"))  # page 2's report before page 1's
        draining = asyncio.ensure_future(writer.drain())
        await asyncio.sleep(0)  # the drain runs up to its wait for page 3
        assert (writer.acked, writer.cursor) == (1, "after-0")  # page 1 has no receipt yet
        broker.deliver(1)
        broker.deliver(3)
        assert await draining == 3
        assert writer.acked == 4

    _run(scenario())


def test_a_window_of_one_acknowledges_each_page_before_the_next_is_sent():
    broker = FakeBroker()
    writer = _writer(broker, window=1)

    async def scenario() -> None:
        for _ in range(5):
            assert await writer.send(*_page(writer)) == 1

    _run(scenario())
    assert broker.in_flight_at_send == [0, 0, 0, 0, 0]


def test_large_pages_fill_the_window_by_bytes(monkeypatch):
    monkeypatch.setattr("airflow_kafka_events.streams.producing.writer.WINDOW_BYTES", 3000)
    broker = FakeBroker()
    writer = _writer(broker, window=100)

    async def scenario() -> None:
        for _ in range(10):
            value = writer.encode(payload="x" * 1000, cursor=None, is_last=False, error=None)
            await writer.send(value, None)

    _run(scenario())
    assert max(broker.in_flight_at_send) <= 2  # 3 pages of ~1 KB are 3000 bytes: the window is full


def test_a_failed_page_with_later_pages_delivered_is_sent_again_with_them_in_order(caplog):
    # sends 0-2: pages 0-2 delivered; send 3 (page 3) fails; sends 4-5 (pages 4-5) reach Kafka: strays
    broker = FakeBroker(lambda n: FAIL if n == 3 else DELIVER)
    writer = _writer(broker, window=8)

    async def scenario() -> None:
        for _ in range(6):
            await writer.send(*_page(writer))
        await writer.drain()

    with caplog.at_level(logging.WARNING), pytest.raises(NotSentError):
        _run(scenario())
    assert broker.sequences() == [0, 1, 2, 4, 5, 3, 4, 5]  # the hole is followed by every page from it
    first = {}
    for value in broker.log:  # a copy is the very bytes of the page: a consumer keeps either
        envelope = TRIGGER_EVENT_CODEC.decode(value)
        assert first.setdefault(envelope.sequence_index, value) == value
    assert (writer.acked, writer.cursor, writer.in_flight) == (6, "after-5", 0)
    assert "page 3 was not delivered" in caplog.text


def test_a_failed_page_with_nothing_after_it_delivered_is_not_sent_again():
    broker = FakeBroker(lambda n: FAIL if n >= 3 else DELIVER)
    writer = _writer(broker, window=8)

    async def scenario() -> None:
        for _ in range(6):
            await writer.send(*_page(writer))
        await writer.drain()

    with pytest.raises(NotSentError):
        _run(scenario())
    assert broker.sequences() == [0, 1, 2]
    assert len(broker.sends) == 6
    assert (writer.acked, writer.cursor, writer.in_flight) == (3, "after-2", 0)


def test_when_sending_again_fails_the_frontier_stays_before_the_hole(caplog):
    broker = FakeBroker(lambda n: FAIL if n in (3, 6) else DELIVER)  # send 6: page 3 again
    writer = _writer(broker, window=8)

    async def scenario() -> None:
        for _ in range(6):
            await writer.send(*_page(writer))
        await writer.drain()

    with caplog.at_level(logging.ERROR), pytest.raises(NotSentError):
        _run(scenario())
    assert (writer.acked, writer.cursor) == (3, "after-2")
    assert "Kafka holds page(s) after missing page 3" in caplog.text


def test_finish_takes_every_receipt_before_the_terminal_marker():
    broker = FakeBroker()
    writer = _writer(broker, window=8)

    async def scenario() -> Any:
        for _ in range(5):
            await writer.send(*_page(writer))
        return await writer.finish(None)

    descriptor = _run(scenario())
    assert broker.sequences() == [0, 1, 2, 3, 4, 5]
    last = TRIGGER_EVENT_CODEC.decode(broker.log[-1])
    assert last.is_last and last.resume_cursor == "after-4" and last.metadata == {"first_offset": "0"}
    assert (descriptor.count, descriptor.first_offset, descriptor.last_offset) == (5, 0, 5)


def test_a_resumed_attempt_does_not_wait_for_each_page():
    broker = FakeBroker(lambda n: HOLD)
    writer = _writer(broker, window=4, next_seq=10, first_offset=3)

    async def scenario() -> None:
        for _ in range(3):
            assert await writer.send(*_page(writer)) == 0

    _run(scenario())
    assert writer.in_flight == 3
    assert TRIGGER_EVENT_CODEC.decode(broker.sends[0][0]).metadata == {"first_offset": "3"}


def test_no_receipt_within_the_message_timeout_fails_as_outcome_unknown():
    broker = FakeBroker(lambda n: DELIVER if n == 0 else HOLD)
    broker.message_timeout = 0.05
    writer = _writer(broker, window=2)
    writer.delivery_timeout = 0.05

    async def scenario() -> None:
        for _ in range(3):
            await writer.send(*_page(writer))

    with pytest.raises(DeliveryOutcomeUnknownError, match="no delivery report"):
        _run(scenario())
    assert writer.acked == 1


@pytest.mark.parametrize(("value", "pages"), [(None, 1024), ("64", 64), (1, 1), (" 8 ", 8)])
def test_the_window_comes_from_the_trigger_or_the_provider_config(value, pages):
    assert resolve_write_window(value) == pages


@pytest.mark.parametrize("bad", ["0", "-3", "many", "1.5"])
def test_a_bad_window_is_refused(bad):
    with pytest.raises(ConfigurationError, match="stream_write_window"):
        resolve_write_window(bad)


def test_the_configured_window_is_read_from_airflow(monkeypatch):
    monkeypatch.setenv("AIRFLOW__KAFKA_EVENTS__STREAM_WRITE_WINDOW", "32")
    assert resolve_write_window() == 32
