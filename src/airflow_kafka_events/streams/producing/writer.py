"""Writing one attempt of a stream: its envelopes, several pages in flight, receipts taken in batches.

Every envelope of an attempt records its generation (``metadata["generation"]``) and, after
the first page, the offset of the attempt's first page; the terminal marker (``is_last``,
no payload) ends it, with the error that ended the stream if any.  Used by
:class:`~airflow_kafka_events.streams.producing.trigger.StreamingTrigger`.

The window
    :meth:`AttemptWriter.send` produces a page and returns at once while fewer than ``window``
    pages (``[kafka_events] stream_write_window``, :data:`DEFAULT_WRITE_WINDOW`) and fewer than
    :data:`WINDOW_BYTES` bytes are in flight; when the window is full it takes the receipts of its
    older half in one wait (one asyncio hand-over for that half, not one a page).  The first page
    of an attempt is awaited alone: every later envelope carries its offset.

Invariant: the acknowledged frontier
    ``acked`` is the number of the attempt's pages (sequence indexes ``0 .. acked - 1``) whose
    receipts (``acks=all``) were taken, in order; ``cursor``, ``last_offset`` and what the caller
    tells the stream index come from the last of them only.  Pages ``acked .. next_seq - 1`` are in
    flight: Kafka may hold any of them or none.  A page is produced only when every page
    ``window`` or more before it is acknowledged, so whatever Kafka holds of this run lies within
    one window past the frontier.

A failed receipt
    The idempotent producer keeps the pages of one partition in order and the broker stores a
    contiguous run of them, but a page librdkafka gives up on (its message timeout, an error the
    broker returns for its batch) leaves a hole: pages queued after it may still be written
    (``enable.gapless.guarantee`` does not cover message timeouts).  So at the first failed
    receipt the writer stops producing, waits for every receipt of the window, and when a later
    page did reach Kafka (a *stray* behind the hole) it sends again, in order, the very bytes of
    every page from the failed one on and takes their receipts: a consumer holds the stray until
    the failed page arrives and then reads the stray and the copy as the same page (same
    ``(attempt, sequence_index)``, same content; the first copy wins).  Then the run fails with the
    first error, as a serial writer's did: the next run resumes after the last page in Kafka,
    which is then preceded by all the others.  If sending again fails too, a hole stays; the next
    run's lookup (``gap_window``: this window) finds it and resumes after the page before it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections import deque
from datetime import datetime
from typing import Any, NamedTuple

from airflow_kafka_events.envelopes.codec import TRIGGER_EVENT_CODEC, AttemptEncoder, EnvelopeCodec
from airflow_kafka_events.envelopes.model import ProducerIdentity, StreamFailure, TriggerEventEnvelope
from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.kafka.delivery import DeliveryFuture, DeliveryReceipt, caller_gave_up
from airflow_kafka_events.kafka.producer import RecordProducer
from airflow_kafka_events.streams.descriptor import StreamDescriptor
from airflow_kafka_events.streams.producing.outage import await_delivery
from airflow_kafka_events.streams.progress import FIRST_OFFSET_METADATA_KEY, GENERATION_METADATA_KEY

__all__ = [
    "DEFAULT_WRITE_WINDOW",
    "QUEUE_FULL_PAUSE",
    "WINDOW_BYTES",
    "AttemptWriter",
    "close_iterator",
    "parse_not_before",
    "resolve_write_window",
]

_log = logging.getLogger(__name__)

#: Pages a streaming trigger keeps in flight by default (``[kafka_events] stream_write_window``):
#: with half a window taken per wait, a trigger writes about half a window per receipt round trip,
#: which bounds its rate (B12, 1 KB pages in a triggerer: 8,300-12,800 pages/s at 256,
#: 13,000-27,500 at 1024); :data:`WINDOW_BYTES` keeps the writer's memory, a restarted consumer's
#: hold-back and a restarted writer's look for a hole small.
DEFAULT_WRITE_WINDOW = 1024
#: Bytes of pages in flight from which the window is full whatever its page count (large pages).
WINDOW_BYTES = 8 * 1024 * 1024
#: Seconds a page first waits before it is queued again when the producer's local queue is full
#: (``queue.buffering.max.messages`` / ``.kbytes``, shared by the process's streams on one
#: connection): the event loop runs meanwhile, where the producer's own blocking wait would stall
#: every trigger of the triggerer.
QUEUE_FULL_PAUSE = 0.01
#: ... doubled after each refusal, up to this many seconds.
QUEUE_FULL_MAX_PAUSE = 0.1
#: Seconds a page waits for room before the writer logs it (once).
QUEUE_FULL_WARN_AFTER = 5.0
#: Pages sent at most between two returns to the event loop (a page source that never awaits would
#: otherwise keep the loop to itself for half a window).
YIELD_EVERY = 32


def resolve_write_window(value: Any = None) -> int:
    """``value``, else ``[kafka_events] stream_write_window``, else 1024; an int >= 1."""
    if value is None:
        from airflow.configuration import conf

        value = conf.get("kafka_events", "stream_write_window", fallback=str(DEFAULT_WRITE_WINDOW))
    try:
        pages = int(str(value).strip())
    except ValueError:
        raise ConfigurationError(f"stream_write_window must be a number of pages, got {value!r}") from None
    if pages < 1:
        raise ConfigurationError(f"stream_write_window must be >= 1 page, got {value!r}")
    return pages


class _InFlight(NamedTuple):
    """A page produced whose receipt was not taken yet (its bytes, to send again after a hole)."""

    seq: int
    future: DeliveryFuture
    value: bytes
    cursor: str | None


class AttemptWriter:
    """Writes the envelopes of one attempt, up to ``window`` pages in flight (see the module)."""

    def __init__(
        self,
        producer: RecordProducer,
        *,
        topic: str,
        partition: int,
        trigger_run_id: str,
        attempt: int,
        next_seq: int,
        first_offset: int | None,
        cursor: str | None,
        identity: ProducerIdentity,
        delivery_timeout: float,
        generation: int | None = None,
        log: Any = None,
        codec: EnvelopeCodec[TriggerEventEnvelope] = TRIGGER_EVENT_CODEC,
        window: int = DEFAULT_WRITE_WINDOW,
    ) -> None:
        if window < 1:
            raise ConfigurationError(f"window must be >= 1 page, got {window!r}")
        self.producer = producer
        self.topic = topic
        self.partition = partition
        self.trigger_run_id = trigger_run_id
        self.attempt = attempt
        #: sequence index of the next page produced
        self.next_seq = next_seq
        #: pages 0 .. acked - 1 are acknowledged (the frontier; see the module)
        self.acked = next_seq
        self.first_offset = first_offset
        #: the cursor of the last acknowledged page (where a resume continues)
        self.cursor = cursor
        #: the offset of the last acknowledged envelope
        self.last_offset: int | None = None
        self.identity = identity
        self.delivery_timeout = delivery_timeout
        self.generation = generation
        #: envelopes of this run acknowledged (pages and the terminal marker)
        self.written = 0
        self.codec = codec
        self.window = window
        self.log = log if log is not None else _log
        self._key = trigger_run_id.encode("utf-8")
        self._in_flight: deque[_InFlight] = deque()
        self._in_flight_bytes = 0
        self._attempt_encoder: AttemptEncoder | None = None
        self._unyielded = 0
        #: offsets of the pages acknowledged since :meth:`take_acknowledged`
        self._acknowledged: list[int] = []

    @property
    def in_flight(self) -> int:
        """Pages produced whose receipts were not taken yet."""
        return len(self._in_flight)

    @property
    def _waited(self) -> float:
        """How long a receipt is waited for: the producer reports a page by its message timeout."""
        return self.delivery_timeout + getattr(self.producer, "report_grace", 0.0)

    def _encoder(self) -> AttemptEncoder:
        """The encoder of this attempt's envelopes; from page 1 on their metadata holds the offset of
        page 0 (acknowledged before page 1 is encoded), and then no longer changes."""
        encoder = self._attempt_encoder
        if encoder is not None:
            return encoder
        metadata: dict[str, str] = {}
        if self.generation is not None:
            metadata[GENERATION_METADATA_KEY] = str(self.generation)
        final = self.next_seq > 0
        if final and self.first_offset is not None:
            metadata[FIRST_OFFSET_METADATA_KEY] = str(self.first_offset)
        encoder = AttemptEncoder(
            self.codec,
            trigger_run_id=self.trigger_run_id,
            attempt=self.attempt,
            producer=self.identity,
            metadata=metadata,
            topic=self.topic,
        )
        if final:
            self._attempt_encoder = encoder  # the same for every later envelope of the attempt
        return encoder

    def encode(
        self, *, payload: Any, cursor: str | None, is_last: bool, error: StreamFailure | None
    ) -> bytes:
        """The bytes of the envelope ``next_seq`` of this attempt."""
        return self._encoder().encode(
            self.next_seq, payload=payload, resume_cursor=cursor, is_last=is_last, error=error
        )

    async def _produce(self, value: bytes) -> DeliveryFuture:
        """Queue ``value`` with the producer; while its local queue is full (the process's streams
        on one connection share it), try again after :data:`QUEUE_FULL_PAUSE` s, doubling up to
        :data:`QUEUE_FULL_MAX_PAUSE`, with the event loop free, up to the delivery timeout (then the
        producer's ``NotSentError``)."""
        refused_at: float | None = None
        pause = QUEUE_FULL_PAUSE
        warned = False
        while True:
            try:
                return self.producer.send(
                    self.topic,
                    value,
                    key=self._key,
                    partition=self.partition,
                    timeout=self.delivery_timeout,
                    block=False,
                )
            except BufferError as exc:
                now = time.monotonic()
                if refused_at is None:
                    refused_at = now
                elif now - refused_at >= self.delivery_timeout:
                    raise self.producer.queue_full_error(self.delivery_timeout) from exc
                elif not warned and now - refused_at >= QUEUE_FULL_WARN_AFTER:
                    warned = True
                    self.log.warning(
                        "stream %s: page %d waits for room in the Kafka producer's local queue "
                        "(queue.buffering.max.messages / .kbytes, shared with this process's other "
                        "streams), full for %.0f s; it fails unsent after %.0f s",
                        self.trigger_run_id,
                        self.next_seq,
                        QUEUE_FULL_WARN_AFTER,
                        self.delivery_timeout,
                    )
                self._unyielded = 0
                await asyncio.sleep(pause)
                pause = min(pause * 2, QUEUE_FULL_MAX_PAUSE)

    async def send(self, value: bytes, cursor: str | None) -> int:
        """Produce the page ``next_seq`` (``value``, resumed after at ``cursor``); while the window is
        full, take receipts.  The number of pages this call acknowledged (the frontier moved by it).

        Raises the first failed receipt's :class:`~airflow_kafka_events.errors.DeliveryError` once
        Kafka holds no page of this run behind a hole (see the module).
        """
        before = self.acked
        future = await self._produce(value)
        self._in_flight.append(_InFlight(self.next_seq, future, value, cursor))
        self._in_flight_bytes += len(value)
        self.next_seq += 1
        if self.next_seq == 1:  # page 0: every later envelope carries its offset
            await self._take(len(self._in_flight))
        while len(self._in_flight) >= self.window or self._in_flight_bytes >= WINDOW_BYTES:
            await self._take(max(1, len(self._in_flight) // 2))
        self._unyielded += 1
        if self._unyielded >= YIELD_EVERY:
            self._unyielded = 0
            await asyncio.sleep(0)
        return self.acked - before

    async def drain(self) -> int:
        """Take every outstanding receipt; the number of pages it acknowledged."""
        before = self.acked
        while self._in_flight:
            await self._take(len(self._in_flight))
        return self.acked - before

    async def _take(self, count: int) -> None:
        """Take the receipts of the oldest ``count`` pages in flight (one wait for the last of them:
        one partition's delivery reports come in order), moving the frontier."""
        last = self._in_flight[count - 1]
        if last.future.outstanding():
            await self._await(last)
        else:
            self._unyielded = 0
            await asyncio.sleep(0)
        while self._in_flight and self._in_flight[0].future.done():
            page = self._in_flight[0]
            try:
                receipt = page.future.result(0)
            except Exception as exc:
                await self._after_failure(exc)
                raise
            self._acknowledge(receipt, page)

    async def _await(self, page: _InFlight) -> None:
        """Wait for ``page``'s delivery report (its outcome is read by the caller)."""
        self._unyielded = 0
        waited = self._waited
        delivery = asyncio.ensure_future(_settled(page.future))
        try:
            async with asyncio.timeout(waited):  # not wait_for: it can swallow a cancellation (3.11)
                await await_delivery(
                    delivery,
                    self.producer,
                    self.log,
                    stream=self.trigger_run_id,
                    page=page.seq,
                    timeout=self.delivery_timeout,
                )
        except TimeoutError as exc:
            error = caller_gave_up(
                self.producer.health,
                self.topic,
                waited,
                role=self.producer.role,
                message_timeout=self.producer.message_timeout,
            )
            await self._after_failure(error)
            raise error from exc

    def _acknowledge(self, receipt: DeliveryReceipt, page: _InFlight) -> None:
        self._in_flight.popleft()
        self._in_flight_bytes -= len(page.value)
        if page.seq == 0:
            self.first_offset = receipt.offset
        self.acked = page.seq + 1
        self.cursor = page.cursor
        self.last_offset = receipt.offset
        self.written += 1
        self._acknowledged.append(receipt.offset)

    def take_acknowledged(self) -> tuple[int, list[int]]:
        """The envelopes acknowledged since the last call: the first one's sequence index, and the
        offset of each, in order."""
        offsets, self._acknowledged = self._acknowledged, []
        return self.acked - len(offsets), offsets

    async def _after_failure(self, error: BaseException) -> None:
        """The receipt of the oldest page in flight failed (or never came): leave no page of this
        run in Kafka behind a hole (see the module), then let the caller raise ``error``."""
        failed = list(self._in_flight)
        self._in_flight.clear()
        self._in_flight_bytes = 0
        if len(failed) < 2:
            return
        strays = await _delivered(failed[1:], self._waited)
        if not strays:
            return
        self.log.warning(
            "stream %s: page %d was not delivered (%s) but %d later page(s) were (up to page %d); "
            "sending pages %d..%d again so that Kafka holds no page after a missing one",
            self.trigger_run_id,
            failed[0].seq,
            error,
            len(strays),
            strays[-1].seq,
            failed[0].seq,
            failed[-1].seq,
        )
        try:
            for page in failed:
                resent = page._replace(future=await self._produce(page.value))
                self._in_flight.append(resent)
                self._in_flight_bytes += len(page.value)
            while self._in_flight:
                page = self._in_flight[0]
                if page.future.outstanding():
                    async with asyncio.timeout(self._waited):
                        await _settled(page.future)
                self._acknowledge(page.future.result(0), page)
        except Exception:
            self.log.error(
                "stream %s: sending pages %d..%d again failed: Kafka holds page(s) after missing page %d "
                "of attempt %d; the next run of this trigger finds the hole and resumes before it",
                self.trigger_run_id,
                failed[0].seq,
                failed[-1].seq,
                self.acked,
                self.attempt,
                exc_info=True,
            )
        finally:
            self._in_flight.clear()
            self._in_flight_bytes = 0

    async def finish(self, error: StreamFailure | None) -> StreamDescriptor:
        """Take every outstanding receipt, then write and await the terminal marker."""
        await self.drain()
        count = self.next_seq
        value = self.encode(payload=None, cursor=self.cursor, is_last=True, error=error)
        await self.send(value, self.cursor)
        await self.drain()
        assert self.last_offset is not None
        return StreamDescriptor(
            topic=self.topic,
            trigger_run_id=self.trigger_run_id,
            attempt=self.attempt,
            count=count,
            first_offset=self.first_offset,
            last_offset=self.last_offset,
            partition=self.partition,
            error=None if error is None else error.to_avro(),
        )


async def _settled(future: DeliveryFuture) -> None:
    """Wait until ``future`` is resolved, without reading its outcome; a cancelled wait leaves
    ``future`` as it is (its outcome still counts: the page may be in Kafka)."""
    if future.done():
        return
    loop = asyncio.get_running_loop()
    woken: asyncio.Future[None] = loop.create_future()

    def wake(_: DeliveryFuture) -> None:
        try:
            loop.call_soon_threadsafe(_set_done, woken)
        except RuntimeError:  # the loop closed meanwhile: nobody waits any more
            pass

    future.add_done_callback(wake)
    await woken


def _set_done(woken: asyncio.Future[None]) -> None:
    if not woken.done():
        woken.set_result(None)


async def _delivered(pages: list[_InFlight], timeout: float) -> list[_InFlight]:
    """The ``pages`` that reached Kafka, once every one of them is resolved (or ``timeout`` passed:
    the unresolved ones count as delivered, which errs on the side of sending again)."""
    try:
        async with asyncio.timeout(timeout):
            for page in pages:
                if page.future.outstanding():
                    await _settled(page.future)
    except TimeoutError:
        pass
    return [page for page in pages if not page.future.done() or page.future.exception(0) is None]


async def close_iterator(iterator: Any) -> None:
    aclose = getattr(iterator, "aclose", None)
    if aclose is None:
        return
    result = aclose()
    if inspect.isawaitable(result):
        await result


def parse_not_before(value: Any) -> datetime | None:
    """``not_before`` as an aware datetime; ``ConfigurationError`` unless ISO-8601 text with a timezone."""
    if value is None:
        return None
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        text = value.strip()
        if text.endswith("z"):  # fromisoformat() reads "Z", not RFC 3339's lowercase "z"
            text = text[:-1] + "+00:00"
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise ConfigurationError(f"not_before must be an ISO-8601 timestamp, got {value!r}") from None
    else:
        raise ConfigurationError(
            f"not_before must be an ISO-8601 timestamp (str) or None, got {type(value).__qualname__}"
        )
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ConfigurationError(f"not_before must have a timezone (e.g. +00:00), got {value!r}")
    return moment
