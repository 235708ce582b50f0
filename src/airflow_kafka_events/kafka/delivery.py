"""Delivery outcomes of a produced record: its receipt, or a typed failure naming brokers, topic and cause.

* :class:`DeliveryReceipt` -- where the broker stored it (``acks=all``: durable);
* :class:`~airflow_kafka_events.errors.NotSentError` -- not sent, nothing will be published;
* :class:`~airflow_kafka_events.errors.DeliveryOutcomeUnknownError` -- it may have been
  written: retry with the same idempotency key.

:func:`classify_failure` tells the two apart.  confluent-kafka does not expose librdkafka's
per-message persistence status (``rd_kafka_message_status``), so it is derived: every broker
connection's count of fully transmitted Produce requests comes with the statistics
(``statistics.interval.ms``).  A failed message is *not sent* when its error means the broker
refused it outright (unknown topic, authorization, size) or when no Produce request at all left
the producer between the last statistics report before the send and the first one after the
failure (:class:`AwaitingStatistics`); otherwise the outcome is unknown.  This is conservative: a
producer busy with other messages reports "unknown".

A send's outcome arrives in a :class:`DeliveryFuture`.  This module imports no Airflow module.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Generator, Sequence
from typing import Any, NamedTuple

from confluent_kafka import KafkaError, Message

from airflow_kafka_events.errors import (
    DeliveryError,
    DeliveryOutcomeUnknownError,
    NotSentError,
    RecordTooLargeError,
)
from airflow_kafka_events.kafka.client_log import (
    BrokerSnapshot,
    Cause,
    ClientHealth,
    ObservedClientError,
    cause_of,
    refusal_error,
)

log = logging.getLogger(__name__)

__all__ = [
    "REFUSAL_MEMORY",
    "REFUSED_CODES",
    "AwaitingStatistics",
    "DeliveryFuture",
    "DeliveryReceipt",
    "caller_gave_up",
    "classify_failure",
    "delivery_failure",
    "receipt_for",
    "too_large_for_producer",
    "wire_size",
]

#: Per-record overhead librdkafka adds before comparing with message.max.bytes (v2 record).
_RECORD_OVERHEAD = 36

#: Errors by which the broker (or the client, before sending) refuses every attempt of a
#: message the same way: it was never written, whatever happened before.
REFUSED_CODES = frozenset(
    {
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError._AUTHENTICATION,
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.INVALID_RECORD,
        KafkaError.INVALID_REQUIRED_ACKS,
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError._INVALID_ARG,
    }
)


class DeliveryReceipt(NamedTuple):
    """Where the broker stored a message: acknowledges persistence in Kafka (acks=all)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    key: bytes | None


def receipt_for(msg: Message, topic: str, key: bytes | None) -> DeliveryReceipt:
    """The receipt of a delivered message sent to ``topic`` with ``key`` (as its sender knows them:
    asking ``msg`` would copy both)."""
    ts_type, ts = msg.timestamp()
    offset = msg.offset()
    return DeliveryReceipt(
        topic, msg.partition() or 0, -1 if offset is None else offset, ts if ts_type != 0 else None, key
    )


# --------------------------------------------------------------------------- the future of a send
_PENDING, _CANCELLED, _FINISHED = "pending", "cancelled", "finished"


class DeliveryFuture:
    """The outcome of one send: a :class:`DeliveryReceipt`, or the :class:`DeliveryError` it failed with.

    Waited on with :meth:`result` / :meth:`exception` (``timeout`` in seconds, as a
    ``concurrent.futures.Future``), awaited (``await future``: the settling thread wakes the loop
    with ``call_soon_threadsafe``), or called back (:meth:`add_done_callback`); :meth:`as_future`
    gives a ``concurrent.futures.Future`` for ``concurrent.futures.wait`` and the like.

    Thousands are outstanding while a producer is busy, so one costs little until somebody waits:
    its condition and callback list are made (under ``lock``) only when a waiter or a callback
    comes, and a future settled before anybody asked never makes them.  ``lock`` guards its
    state: its own by default; the futures of one producer share the producer's, so an
    outstanding send is one object.  A finished future is read without the lock (it never
    changes again).
    """

    __slots__ = ("_callbacks", "_cond", "_exception", "_lock", "_result", "_state")

    def __init__(self, lock: threading.Lock | None = None) -> None:
        self._lock = threading.Lock() if lock is None else lock
        self._cond: threading.Condition | None = None
        self._state = _PENDING
        self._result: DeliveryReceipt | None = None
        self._exception: BaseException | None = None
        self._callbacks: list[Callable[[Any], object]] | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._state}>"

    # ------------------------------------------------------------------ reading
    def done(self) -> bool:
        """Resolved or cancelled."""
        return self._state != _PENDING

    def cancelled(self) -> bool:
        return self._state == _CANCELLED

    def outstanding(self) -> bool:
        """Neither resolved nor cancelled."""
        return self._state == _PENDING

    def result(self, timeout: float | None = None) -> DeliveryReceipt:
        """The receipt; raises the delivery's error, ``concurrent.futures.CancelledError`` when
        cancelled, or ``TimeoutError`` when not resolved within ``timeout`` seconds."""
        if self._state == _FINISHED and self._exception is None:
            return self._result  # type: ignore[return-value]
        self._wait(timeout)
        if self._exception is not None:
            raise self._exception
        return self._result  # type: ignore[return-value]

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The delivery's error (``None``: delivered); raises as :meth:`result` does when cancelled or
        not resolved within ``timeout`` seconds."""
        if self._state == _FINISHED:
            return self._exception
        self._wait(timeout)
        return self._exception

    def _wait(self, timeout: float | None) -> None:
        if self._state == _PENDING:
            timeout = self._before_wait(timeout)
            with self._lock:
                if self._state == _PENDING:
                    cond = self._cond
                    if cond is None:
                        cond = self._cond = threading.Condition(self._lock)
                    cond.wait_for(self.done, timeout)
        state = self._state
        if state == _CANCELLED:
            raise concurrent.futures.CancelledError()
        if state == _PENDING:
            raise TimeoutError(f"no delivery report within {timeout}s")

    def _before_wait(self, timeout: float | None) -> float | None:
        """Called before ``result`` / ``exception`` may wait; the time left of ``timeout`` (a subclass
        may serve the reports on the waiting thread meanwhile)."""
        return timeout

    # ------------------------------------------------------------------ resolving
    def settle(self, result: DeliveryReceipt | None = None, exception: BaseException | None = None) -> bool:
        """Resolve with ``result``, or fail with ``exception``; ``False`` if it was already
        resolved or cancelled."""
        return self._finish(_FINISHED, result, exception)

    def cancel(self) -> bool:
        """Cancel a future not resolved yet (its outcome is dropped when it comes); whether it is
        cancelled."""
        return self._finish(_CANCELLED) or self._state == _CANCELLED

    def _finish(
        self, state: str, result: DeliveryReceipt | None = None, exception: BaseException | None = None
    ) -> bool:
        """Leave the pending state for ``state``, waking waiters and calling callbacks; ``False`` if
        it was no longer pending."""
        with self._lock:
            if self._state != _PENDING:
                return False
            self._result, self._exception, self._state = result, exception, state
            if self._cond is not None:
                self._cond.notify_all()
            callbacks = self._callbacks
        if callbacks:
            self._call(callbacks)
        return True

    def add_done_callback(self, fn: Callable[[Any], object]) -> None:
        """Call ``fn(self)`` once it is resolved or cancelled (at once when it is), on the thread that
        resolves it; an exception ``fn`` raises is logged."""
        if self._state == _PENDING:
            with self._lock:
                if self._state == _PENDING:
                    if self._callbacks is None:
                        self._callbacks = []
                    self._callbacks.append(fn)
                    return
        self._call((fn,))

    def _call(self, callbacks: Sequence[Callable[[Any], object]]) -> None:
        for fn in callbacks:
            try:
                fn(self)
            except Exception:
                log.exception("exception calling callback for %r", self)

    # ------------------------------------------------------------------ other kinds of future
    def __await__(self) -> Generator[Any, None, DeliveryReceipt]:
        """``await future``: the receipt, without blocking the loop; cancelling the awaiting task
        cancels the future."""
        if self._state == _PENDING:
            loop = asyncio.get_running_loop()
            woken = loop.create_future()
            self.add_done_callback(lambda _: _wake(loop, woken))
            try:
                yield from woken
            except asyncio.CancelledError:
                self.cancel()
                raise
        return self.result(0)

    def as_future(self) -> concurrent.futures.Future[DeliveryReceipt]:
        """A ``concurrent.futures.Future`` with this one's outcome (cancelling either cancels both)."""
        out: concurrent.futures.Future[DeliveryReceipt] = concurrent.futures.Future()
        self.add_done_callback(lambda _: _copy(self, out))
        out.add_done_callback(lambda f: f.cancelled() and self.cancel())
        return out


def _wake(loop: asyncio.AbstractEventLoop, woken: asyncio.Future[None]) -> None:
    if loop.is_closed():  # the awaiting task is gone with its loop
        return
    try:
        loop.call_soon_threadsafe(_set_done, woken)
    except RuntimeError:  # the loop closed meanwhile
        pass


def _set_done(woken: asyncio.Future[None]) -> None:
    if not woken.done():
        woken.set_result(None)


def _copy(source: DeliveryFuture, out: concurrent.futures.Future[DeliveryReceipt]) -> None:
    try:
        if source.cancelled():
            out.cancel()
        elif source._exception is not None:
            out.set_exception(source._exception)
        else:
            out.set_result(source._result)  # type: ignore[arg-type]
    except concurrent.futures.InvalidStateError:  # ``out`` was cancelled meanwhile
        pass


#: Seconds a refusal of the credentials / TLS makes new sends fail at once (librdkafka retries the
#: handshake at most every ``reconnect.backoff.max.ms``, 10 s by default, refreshing it).
REFUSAL_MEMORY = 30.0
#: The client gave the message up (purged, timed out): after a refusal, because of it.
_GIVEN_UP = frozenset({KafkaError._PURGE_QUEUE, KafkaError._MSG_TIMED_OUT})


def classify_failure(code: int | None, produce_sent: bool | None) -> type[DeliveryError]:
    """:class:`NotSentError` or :class:`DeliveryOutcomeUnknownError` for a failed message.

    ``produce_sent``: whether any Produce request left the producer during the message's life
    (``None``: not known).
    """
    if code in REFUSED_CODES or produce_sent is False:
        return NotSentError
    return DeliveryOutcomeUnknownError


class AwaitingStatistics:
    """Failed messages waiting for the first statistics report after their failure, which tells
    whether a Produce request left the producer during their life (``produce_sent``).

    ``fail(message, produce_sent)`` answers each: with the report's evidence, or with ``None``
    (cannot tell) when no report came within ``limit`` seconds.  A message is anything with the
    ``failed_at`` (monotonic seconds) and ``before`` (the last report before its send) it got.
    """

    def __init__(self, fail: Callable[[Any, bool | None], None], *, limit: float) -> None:
        self._fail, self._limit = fail, limit
        self._waiting: list[Any] = []
        self._lock = threading.Lock()

    def add(self, message: Any) -> None:
        with self._lock:
            self._waiting.append(message)

    def on_snapshot(self, snapshot: BrokerSnapshot) -> None:
        with self._lock:
            ready = [m for m in self._waiting if snapshot.ts >= m.failed_at]
            self._waiting = [m for m in self._waiting if snapshot.ts < m.failed_at]
        for message in ready:
            self._fail(message, snapshot.produce_sent_since(message.before))

    def expire(self, now: float, *, everything: bool = False) -> None:
        if not self._waiting:
            return
        with self._lock:
            expired = [m for m in self._waiting if everything or now - m.failed_at > self._limit]
            self._waiting = [m for m in self._waiting if m not in expired]
        for message in expired:  # no statistics report came: cannot tell
            self._fail(message, None)


def wire_size(
    value: bytes | None, key: bytes | None, headers: Sequence[tuple[str, bytes | str | None]] = ()
) -> int:
    """A record's size as librdkafka compares it with ``message.max.bytes`` (an upper bound)."""
    size = _RECORD_OVERHEAD + len(value or b"") + len(key or b"")
    for name, header in headers:
        data = header.encode("utf-8") if isinstance(header, str) else (header or b"")
        size += 10 + len(name.encode("utf-8")) + len(data)
    return size


def too_large_for_producer(topic: str, size: int, limit: int) -> RecordTooLargeError:
    """A record over the producer's ``message.max.bytes``: refused before anything is produced."""
    return RecordTooLargeError(
        f"not sent — nothing will be published: a record of {size} bytes for topic {topic!r} is "
        f"larger than the producer's message.max.bytes={limit}; send less (a "
        "smaller payload or extra) or raise message.max.bytes in the Kafka connection's extras or "
        "properties file (and the topic's max.message.bytes, which the broker enforces)",
        size=size,
        limit=limit,
        limit_name="message.max.bytes",
        kafka_error=KafkaError(KafkaError.MSG_SIZE_TOO_LARGE),
    )


def _too_large_for_topic(health: ClientHealth, topic: str, size: int, err: KafkaError) -> RecordTooLargeError:
    return RecordTooLargeError(
        f"not sent — nothing will be published: the broker at {health.bootstrap_servers} refused a "
        f"record of about {size} bytes for topic {topic!r}: larger than the topic's "
        "max.message.bytes; send a smaller record or raise the topic's max.message.bytes",
        size=size,
        limit=None,
        limit_name="max.message.bytes",
        kafka_error=err,
    )


def delivery_failure(
    health: ClientHealth,
    refused: ObservedClientError | None,
    topic: str,
    err: KafkaError,
    *,
    since: float,
    size: int,
    produce_sent: bool | None,
) -> DeliveryError:
    """The typed error of a failed message, naming the brokers, the topic and the cause.

    ``refused``: a refusal of the credentials / TLS the producer remembers; ``since``: when the
    message was sent (causes reported since then count).
    """
    code = err.code()
    refused = health.refusal(since=since) or refused
    if refused is not None and (code in REFUSED_CODES or code in _GIVEN_UP):
        error = refusal_error(health, refused, producing=True)
        assert isinstance(error, DeliveryError)
        return error
    if code == KafkaError.MSG_SIZE_TOO_LARGE:
        return _too_large_for_topic(health, topic, size, err)
    cls = classify_failure(code, produce_sent)
    cause, detail = _cause(health, topic, err, since)
    if cls is NotSentError:
        head = "not sent — nothing will be published"
        tail = "a retry cannot publish it twice"
    else:
        head = "outcome unknown — retry with the same idempotency key"
        tail = "it may have been written"
    return cls(
        f"{head}: message to topic {topic!r} at {health.bootstrap_servers}: {cause.value} ({detail}); "
        f"{tail}; fix: {health.fix_for(cause)}",
        kafka_error=err,
    )


def _cause(health: ClientHealth, topic: str, err: KafkaError, since: float) -> tuple[Cause, str]:
    """The cause to name: the error's own when it says more (unknown topic, authorization), a
    topic the brokers' metadata does not know, else the most telling one ``error_cb`` reported
    during the message's life."""
    own = cause_of(err.code())
    snapshot = health.snapshot
    if own is Cause.TIMED_OUT and not health.down and health.topic_unknown(topic):
        return Cause.UNKNOWN_TOPIC, f"the brokers know no topic {topic!r}"
    if own is Cause.TIMED_OUT and health.down and health.refusal() is None:
        # every broker is still down: librdkafka reported it once, maybe before this message was
        # sent, and reports no repeat while the outage lasts
        return Cause.UNREACHABLE, health.describe_unreachable()
    seen = health.last_error(since)
    if seen is None or own in (Cause.UNKNOWN_TOPIC, Cause.AUTHORIZATION):
        return own, health.redact(err.str())
    if seen.cause is Cause.UNREACHABLE and snapshot is not None and snapshot.any_up:
        up = sum(state == "UP" for state in snapshot.states.values())
        return Cause.LEADER_UNAVAILABLE, f"{up} broker connection(s) up, but: {seen.text}"
    return seen.cause, seen.text


def caller_gave_up(
    health: ClientHealth, topic: str, waited: float, *, role: str, message_timeout: float
) -> DeliveryOutcomeUnknownError:
    """No delivery report within the caller's wait: the producer may still publish the message."""
    return DeliveryOutcomeUnknownError(
        f"outcome unknown — retry with the same idempotency key: no delivery report for a message to "
        f"topic {topic!r} at {health.bootstrap_servers} within {waited:g}s; the producer (role "
        f"{role!r}, message.timeout.ms={message_timeout * 1000:.0f}) may still publish it. "
        "Fix: ask get_producer(config, role=..., message_timeout=<your timeout>) for a producer that "
        "gives up when you do",
        kafka_error=KafkaError(KafkaError._MSG_TIMED_OUT),
    )
