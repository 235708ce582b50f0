"""Delivery outcomes of a produced record: its receipt, or a typed failure naming brokers, topic and cause.

* :class:`DeliveryReceipt` -- where the broker stored it (``acks=all``: durable);
* :class:`~airflow_kafka_events.errors.NotSentError` -- not sent, nothing will be published;
* :class:`~airflow_kafka_events.errors.DeliveryOutcomeUnknownError` -- it may have been
  written: retry with the same idempotency key.

:func:`classify_failure` tells the two apart (see :mod:`airflow_kafka_events.kafka.producer`
for how ``produce_sent`` is derived from the statistics).  A send's outcome arrives in a
:class:`DeliveryFuture`.  This module imports no Airflow module.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

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

__all__ = [
    "FUTURE_PENDING",
    "LAZY_FUTURES",
    "REFUSAL_MEMORY",
    "REFUSED_CODES",
    "AwaitingStatistics",
    "DeliveryFuture",
    "DeliveryReceipt",
    "caller_gave_up",
    "classify_failure",
    "delivery_failure",
    "receipt_for",
    "receipt_of",
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


@dataclass(frozen=True)
class DeliveryReceipt:
    """Where the broker stored a message: acknowledges persistence in Kafka (acks=all)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    key: bytes | None


def receipt_of(msg: Message) -> DeliveryReceipt:
    """The receipt of a delivered message."""
    key = msg.key()
    return receipt_for(msg, msg.topic() or "", key if isinstance(key, bytes) else None)


def receipt_for(msg: Message, topic: str, key: bytes | None) -> DeliveryReceipt:
    """The receipt of a delivered message sent to ``topic`` with ``key`` (as its sender knows them:
    asking ``msg`` would copy both).

    Made once per delivery report, so it skips the frozen dataclass's ``__init__`` (one
    ``object.__setattr__`` call per field, most of a report's cost): the fields go straight into the
    instance's ``__dict__``; the result is an ordinary, equal, frozen :class:`DeliveryReceipt`.
    """
    ts_type, ts = msg.timestamp()
    offset = msg.offset()
    receipt = _new(DeliveryReceipt)
    receipt.__dict__.update(
        topic=topic,
        partition=msg.partition() or 0,
        offset=-1 if offset is None else offset,
        timestamp_ms=ts if ts_type != 0 else None,
        key=key,
    )
    return receipt


_new = object.__new__


# --------------------------------------------------------------------------- the future of a send
#: The state of a future not resolved yet (a subclass setting the fields itself starts there).
FUTURE_PENDING = concurrent.futures._base.PENDING
_FINISHED = concurrent.futures._base.FINISHED
#: The attributes a ``concurrent.futures.Future`` keeps (the same from Python 3.10 to 3.13).
_FUTURE_FIELDS = frozenset({"_condition", "_state", "_result", "_exception", "_waiters", "_done_callbacks"})


def _lazy_layout() -> bool:
    try:
        return set(vars(concurrent.futures.Future())) == _FUTURE_FIELDS
    except TypeError:  # a Future with __slots__: unknown layout
        return False


#: Whether :class:`DeliveryFuture` may make its condition on demand (else it is a plain Future).
LAZY_FUTURES = _lazy_layout()
#: Guards the making of a future's condition against its resolution on another thread.
_MAKING = threading.Lock()
# Held across fork(), so that a forked child never inherits it taken by a thread it does not have.
os.register_at_fork(before=_MAKING.acquire, after_in_parent=_MAKING.release, after_in_child=_MAKING.release)


class DeliveryFuture(concurrent.futures.Future[DeliveryReceipt]):
    """A ``concurrent.futures.Future`` whose lock and lists are made only when they are needed.

    A plain Future makes a condition (an ``RLock``, a deque, bound methods) and two lists up front:
    a dozen objects the garbage collector walks while thousands of sends are outstanding.  This
    one makes them at the first use of its condition -- a wait (``result``, ``exception``,
    ``concurrent.futures.wait``), a callback (``add_done_callback``, ``asyncio.wrap_future``),
    ``cancel``, or a question to a future not finished yet -- and :meth:`settle` finishes a future
    nobody touched yet without them (nobody waits, nobody is to be called back).  A finished future
    is read without a lock (it never changes again).  Everything else is ``concurrent.futures.Future``.
    """

    __slots__ = ("_cond", "_done_callbacks", "_exception", "_result", "_state", "_waiters")

    def __init__(self) -> None:
        if not LAZY_FUTURES:
            super().__init__()
            return
        self._cond: threading.Condition | None = None
        self._state = FUTURE_PENDING
        self._result: Any = None
        self._exception: BaseException | None = None
        self._waiters: Any = ()
        self._done_callbacks: Any = ()

    @property  # type: ignore[override]
    def _condition(self) -> threading.Condition:
        cond = self._cond
        if cond is None:
            with _MAKING:
                cond = self._cond
                if cond is None:
                    self._waiters, self._done_callbacks = [], []
                    cond = self._cond = threading.Condition()
        return cond

    @_condition.setter
    def _condition(self, cond: threading.Condition) -> None:
        self._cond = cond

    def done(self) -> bool:
        return self._state == _FINISHED or super().done()

    def cancelled(self) -> bool:
        return self._state != _FINISHED and super().cancelled()

    def running(self) -> bool:
        return self._state != _FINISHED and super().running()

    def result(self, timeout: float | None = None) -> DeliveryReceipt:
        if self._state == _FINISHED and self._exception is None:
            return self._result  # type: ignore[no-any-return]
        return super().result(self._before_wait(timeout))

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self._state == _FINISHED:
            return self._exception
        return super().exception(self._before_wait(timeout))

    def _before_wait(self, timeout: float | None) -> float | None:
        """Called before ``result`` / ``exception`` may wait; the time left of ``timeout`` (a subclass
        may serve the reports on the waiting thread meanwhile)."""
        return timeout

    def outstanding(self) -> bool:
        """Neither resolved nor cancelled (without making the condition)."""
        if self._cond is None:  # never cancelled (cancelling makes the condition); resolved only by settle
            return self._state == FUTURE_PENDING
        return not self.done()

    def settle(self, result: DeliveryReceipt | None = None, exception: BaseException | None = None) -> bool:
        """Resolve with ``result``, or fail with ``exception``; ``False`` if it was already
        resolved or cancelled."""
        if self._cond is None:
            with _MAKING:
                if self._cond is None:  # nobody waits or is to be called back: no notification due
                    if self._state != FUTURE_PENDING:
                        return False
                    self._result, self._exception = result, exception
                    self._state = _FINISHED
                    return True
        try:
            if exception is None:
                self.set_result(result)  # type: ignore[arg-type]
            else:
                self.set_exception(exception)
        except concurrent.futures.InvalidStateError:
            return False
        return True


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
    if own is Cause.TIMED_OUT and not health.down and snapshot and topic in snapshot.unknown_topics:
        return Cause.UNKNOWN_TOPIC, f"the brokers know no topic {topic!r}"
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
