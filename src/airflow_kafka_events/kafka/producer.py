"""The process-wide envelope producers, one per configuration and role.

librdkafka producers are heavyweight, thread-safe and meant to be shared, but two of their
settings are per producer, not per call: ``message.timeout.ms`` (when librdkafka gives up on a
message) and ``purge()`` (which empties the whole producer).  So :func:`get_producer` keeps one
:class:`EnvelopeProducer` per process, configuration and *role* (``"emit"``, ``"stream"`` ...),
and a caller that waits ``T`` seconds asks for ``message_timeout=T``: librdkafka itself drops
(and reports) the message by the caller's deadline (``message.timeout.ms`` is ``T`` minus the
second librdkafka may take to notice), and nothing is published after the caller was told it
failed.

A background thread serves delivery reports, so callers get a
:class:`concurrent.futures.Future` (``send``), block for a receipt (``send_and_wait``) or
await one (``send_async``) — the latter without blocking an asyncio loop such as the
triggerer's.  A send costs one object until its report: its future (a
:class:`~airflow_kafka_events.kafka.delivery.DeliveryFuture`, whose lock is made only when
someone waits) is also librdkafka's delivery callback.  A receipt means the record is durable
(``acks=all``).  A failure is one of

* :class:`~airflow_kafka_events.errors.NotSentError` — not sent, nothing will be published;
* :class:`~airflow_kafka_events.errors.DeliveryOutcomeUnknownError` — it may have been written:
  retry with the same idempotency key.

confluent-kafka does not expose librdkafka's per-message persistence status
(``rd_kafka_message_status``), so it is derived: every broker connection's count of fully
transmitted Produce requests comes with the statistics (``statistics.interval.ms``).  A failed
message is *not sent* when its error means the broker refused it outright (unknown topic,
authorization, size) or when no Produce request at all left this producer between the last
statistics report before the send and the first one after the failure; otherwise the outcome
is unknown.  This is conservative: a producer busy with other messages reports "unknown".

Fork safety: librdkafka handles must not be used across ``fork()``. The registry is keyed
by pid and cleared in the child, so a forked child creates its own producer and never
touches (or closes) its parent's. At interpreter exit every producer is flushed for at most
its message timeout (capped, see :data:`EXIT_FLUSH_CAP`); what is still queued is purged.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from airflow_kafka_events import metrics
from airflow_kafka_events.errors import (
    ConfigurationError,
    DeliveryError,
    DeliveryOutcomeUnknownError,
    KafkaOperationError,
    NotSentError,
)
from airflow_kafka_events.kafka.client_log import (
    BrokerSnapshot,
    Cause,
    ClientHealth,
    SeenError,
    refusal_error,
)
from airflow_kafka_events.kafka.delivery import (
    REFUSAL_MEMORY,
    REFUSED_CODES,
    DeliveryFuture,
    DeliveryReceipt,
    caller_gave_up,
    classify_failure,
    delivery_failure,
    receipt_of,
    record_size,
    too_large_for_producer,
)

__all__ = [
    "DEFAULT_MESSAGE_MAX_BYTES",
    "DEFAULT_MESSAGE_TIMEOUT",
    "DEFAULT_ROLE",
    "EXIT_FLUSH_CAP",
    "REFUSAL_MEMORY",
    "STATS_INTERVAL",
    "TIMEOUT_SCAN",
    "DeliveryReceipt",
    "EnvelopeProducer",
    "Headers",
    "classify_failure",
    "close_all_producers",
    "get_producer",
    "record_size",
    "role_config",
]

log = logging.getLogger(__name__)

Headers = Sequence[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None]

#: Role of producers asked for without one.
DEFAULT_ROLE = "default"
#: librdkafka's defaults.
DEFAULT_MESSAGE_TIMEOUT = 300.0
DEFAULT_MESSAGE_MAX_BYTES = 1_000_000
#: Longest wait, per process exit, for messages still queued (then they are purged).
EXIT_FLUSH_CAP = 30.0
#: librdkafka's period of looking for timed-out messages (seconds).
TIMEOUT_SCAN = 1.0
#: Seconds between statistics reports: a failure is classified by the first report after it, and
#: Produce requests sent between the last report before a send and the send itself count
#: against it, so a short interval keeps the classification both quick and tight.
STATS_INTERVAL = 0.1


def _encode_key(key: bytes | str | None) -> bytes | None:
    if key is None or isinstance(key, bytes):
        return key
    return key.encode("utf-8")


def _header_list(headers: Headers | None) -> list[tuple[str, bytes | str | None]] | None:
    """The headers as librdkafka takes them; ``None`` when there are none."""
    if not headers:
        return None
    return list(headers.items()) if isinstance(headers, Mapping) else list(headers)


def _ms_setting(config: Mapping[str, Any], *keys: str, default: float) -> float:
    for key in keys:
        if config.get(key) not in (None, ""):
            return float(config[key]) / 1000
    return default


class _Pending(DeliveryFuture):
    """A message waiting for its delivery report: the future its sender gets, and the callable
    librdkafka reports to (one object per send: no closure, no separate future)."""

    __slots__ = ("before", "error", "failed_at", "key", "producer", "sent_at", "size", "topic")

    def __init__(self, producer: EnvelopeProducer, topic: str, size: int, key: bytes | None) -> None:
        super().__init__()
        self.producer, self.topic, self.size, self.key = producer, topic, size, key
        self.sent_at, self.before = time.monotonic(), producer.health.snapshot
        self.error: KafkaError | None = None
        self.failed_at = 0.0

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        self.producer._report(self, err, msg)


class EnvelopeProducer:
    """A thread-safe idempotent producer with delivery reports turned into futures.

    :param role: shown in log lines and errors (see :func:`get_producer`).
    """

    def __init__(self, config: Mapping[str, Any], *, poll_interval: float = 0.05, role: str = DEFAULT_ROLE):
        if not config.get("enable.idempotence") or str(config.get("acks")) not in {"all", "-1"}:
            raise ConfigurationError(
                "EnvelopeProducer needs enable.idempotence=true and acks=all; "
                "build its config with KafkaSettings.producer_config()"
            )
        self.config = dict(config)
        self.role = role
        self._pid = os.getpid()
        self.message_timeout = _ms_setting(
            config, "message.timeout.ms", "delivery.timeout.ms", default=DEFAULT_MESSAGE_TIMEOUT
        )
        self.max_message_bytes = int(config.get("message.max.bytes") or DEFAULT_MESSAGE_MAX_BYTES)
        self.health = ClientHealth.for_config(
            config,
            name=f"producer {role!r}",
            stats_interval=STATS_INTERVAL,
        )
        self._awaiting: list[_Pending] = []  # failed, waiting for the next statistics report
        self._awaiting_lock = threading.Lock()
        self._outstanding = 0  # messages produced whose delivery report has not come yet
        self._outstanding_by_key: dict[tuple[str, bytes | None], int] = {}
        self._count_lock = threading.Lock()
        self.health.add_snapshot_listener(self._on_snapshot)
        self.health.add_refusal_listener(self._on_refused)
        #: the brokers refused the credentials / TLS and nothing was delivered since: sends fail at once
        self._refused: SeenError | None = None
        self._purge_due = threading.Event()
        try:
            self._producer = Producer(self.health.wire(self.config))
        except KafkaException as exc:
            raise KafkaOperationError.from_exception("cannot create Kafka producer", exc) from exc
        self._poll_interval = poll_interval
        self._closed = threading.Event()
        self._poller = threading.Thread(target=self._poll_loop, name="kafka-events-producer", daemon=True)
        self._poller.start()

    @property
    def bootstrap_servers(self) -> str:
        return self.health.bootstrap_servers

    @property
    def report_grace(self) -> float:
        """How long after the message timeout a delivery report and its classification may take
        (librdkafka scans for timed-out messages once a second; then one statistics report)."""
        return 1.5 + 3 * self.health.stats_interval

    # ------------------------------------------------------------------ delivery reports
    def _poll_loop(self) -> None:
        while not self._closed.is_set():
            try:
                self._producer.poll(self._poll_interval)
            except Exception as exc:  # a fatal client error is raised from poll()
                self.health.logger.log(logging.ERROR, "Kafka producer %r: %s", self.role, exc)
                self._closed.wait(self._poll_interval)
            if self._purge_due.is_set():
                self._purge_due.clear()
                # refused credentials / TLS: what waits in the queue would never go; drop it now
                # (each gets a delivery report, answered with the refusal) rather than at its timeout
                self._producer.purge(in_queue=True, in_flight=False)
            self._expire_awaiting(time.monotonic())

    def _check_refused(self) -> None:
        """Fail at once while the brokers keep refusing this producer's credentials / TLS
        (librdkafka retries the handshake every few seconds: a refusal older than
        :data:`REFUSAL_MEMORY` seconds no longer counts, so a fix on the brokers' side is seen)."""
        seen = self._refused
        if seen is not None and time.monotonic() - seen.at < REFUSAL_MEMORY:
            raise refusal_error(self.health, seen, producing=True)

    def _on_refused(self, seen: SeenError) -> None:
        self._refused = seen
        self._purge_due.set()

    def _report(self, pending: _Pending, err: KafkaError | None, msg: Message) -> None:
        """A message's delivery report (librdkafka calls its :class:`_Pending`)."""
        self._settled(pending.topic, pending.key)
        if not pending.outstanding():  # cancelled by its caller
            return
        if err is None:
            receipt = receipt_of(msg)
            if self.health.down_since is not None:
                self.health.mark_up()
            self._refused = None
            if pending.settle(receipt):
                metrics.delivered(self.role, pending.topic, time.monotonic() - pending.sent_at)
            return
        pending.error, pending.failed_at = err, time.monotonic()
        if err.code() in REFUSED_CODES or (
            self._refused is not None and err.code() == KafkaError._PURGE_QUEUE
        ):
            self._fail(pending, produce_sent=None)
        else:
            with self._awaiting_lock:  # decided by the next statistics report
                self._awaiting.append(pending)

    def _on_snapshot(self, snapshot: BrokerSnapshot) -> None:
        with self._awaiting_lock:
            ready = [p for p in self._awaiting if snapshot.ts >= p.failed_at]
            self._awaiting = [p for p in self._awaiting if snapshot.ts < p.failed_at]
        for pending in ready:
            self._fail(pending, produce_sent=snapshot.produce_sent_since(pending.before))

    def _expire_awaiting(self, now: float, *, everything: bool = False) -> None:
        if not self._awaiting:
            return
        limit = 3 * self.health.stats_interval
        with self._awaiting_lock:
            expired = [p for p in self._awaiting if everything or now - p.failed_at > limit]
            self._awaiting = [p for p in self._awaiting if p not in expired]
        for pending in expired:  # no statistics report came: cannot tell
            self._fail(pending, produce_sent=None)

    def _fail(self, pending: _Pending, *, produce_sent: bool | None) -> None:
        err = pending.error
        assert err is not None
        if not pending.outstanding():
            return
        try:
            error = self.failure(pending.topic, err, pending.sent_at, pending.size, produce_sent)
        except Exception:  # never leave a caller without an answer
            log.exception("Kafka producer %r: describing a failed delivery failed", self.role)
            error = DeliveryOutcomeUnknownError(f"message to topic {pending.topic!r} failed", kafka_error=err)
        if pending.settle(exception=error):
            metrics.delivery_failed(self.role, pending.topic, error)

    def failure(
        self, topic: str, err: KafkaError, since: float, size: int, produce_sent: bool | None
    ) -> DeliveryError:
        """The typed error of a failed message, naming the brokers, the topic and the cause."""
        return delivery_failure(
            self.health, self._refused, topic, err, since=since, size=size, produce_sent=produce_sent
        )

    def _caller_gave_up(self, topic: str, waited: float) -> DeliveryOutcomeUnknownError:
        return caller_gave_up(
            self.health, topic, waited, role=self.role, message_timeout=self.message_timeout
        )

    def _wait_for(self, timeout: float) -> float:
        """How long a caller that gives a message ``timeout`` seconds waits for its report."""
        return timeout + self.report_grace if timeout >= self.message_timeout else timeout

    # ------------------------------------------------------------------ API
    def _check_size(self, topic: str, size: int) -> None:
        if size > self.max_message_bytes:
            raise too_large_for_producer(topic, size, self.max_message_bytes)

    def send(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | str | None = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timeout: float = 30.0,
    ) -> concurrent.futures.Future[DeliveryReceipt]:
        """Queue one message; the future resolves with its receipt or a :class:`DeliveryError`.

        A record larger than ``message.max.bytes`` raises :class:`RecordTooLargeError` before
        anything is queued.  A full local queue is waited out (up to ``timeout``), never silently
        dropped.
        """
        if self._closed.is_set():
            raise KafkaOperationError("producer is closed")
        if _pid != self._pid:
            raise KafkaOperationError("producer used across fork(); call get_producer() in the child")
        if self._refused is not None:
            self._check_refused()
        raw_key = _encode_key(key)
        header_list = _header_list(headers)
        size = record_size(value, raw_key, header_list or ())
        if size > self.max_message_bytes:
            raise too_large_for_producer(topic, size, self.max_message_bytes)
        pending = _Pending(self, topic, size, raw_key)
        self._produce(pending, value, header_list, -1 if partition is None else partition, timeout)
        return pending

    def _produce(
        self,
        pending: _Pending,
        value: bytes | None,
        headers: list[tuple[str, bytes | str | None]] | None,
        partition: int,
        timeout: float,
    ) -> None:
        topic, key = pending.topic, pending.key
        while True:
            self._count(topic, key)
            try:
                self._producer.produce(
                    topic, value=value, key=key, partition=partition, on_delivery=pending, headers=headers
                )
                return
            except BufferError as exc:
                self._settled(topic, key)
                self._queue_full(exc, pending.sent_at + timeout, timeout)
            except KafkaException as exc:
                self._settled(topic, key)
                self._produce_failed(topic, pending.size, exc)
            except BaseException:
                self._settled(topic, key)
                raise

    def _queue_full(self, exc: BufferError, deadline: float, timeout: float) -> None:
        """The local queue is full: serve delivery reports for a moment, or give up at ``deadline``."""
        if time.monotonic() >= deadline:
            raise NotSentError(
                f"not sent — nothing will be published: the local producer queue stayed full for "
                f"{timeout}s (brokers at {self.bootstrap_servers}); fix: "
                f"{self.health.fix_for(Cause.TIMED_OUT)}",
                kafka_error=KafkaError(KafkaError._QUEUE_FULL),
            ) from exc
        self._producer.poll(0.05)

    def _produce_failed(self, topic: str, size: int, exc: KafkaException) -> None:
        err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        if err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
            self.max_message_bytes = min(self.max_message_bytes, size - 1)
            self._check_size(topic, size)
        raise KafkaOperationError.from_exception(f"cannot produce to {topic!r}", exc) from exc

    def _count(self, topic: str, key: bytes | None) -> None:
        with self._count_lock:
            self._outstanding += 1
            self._outstanding_by_key[(topic, key)] = self._outstanding_by_key.get((topic, key), 0) + 1

    def _settled(self, topic: str, key: bytes | None) -> None:
        with self._count_lock:
            self._outstanding -= 1
            left = self._outstanding_by_key.get((topic, key), 0) - 1
            if left > 0:
                self._outstanding_by_key[(topic, key)] = left
            else:
                self._outstanding_by_key.pop((topic, key), None)

    def outstanding_for(self, topic: str, key: bytes | str | None) -> int:
        """Messages to ``topic`` with ``key`` that have no delivery report yet (queued or in flight)."""
        with self._count_lock:
            return self._outstanding_by_key.get((topic, _encode_key(key)), 0)

    def send_and_wait(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | str | None = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timeout: float = 30.0,
    ) -> DeliveryReceipt:
        """Produce and block until the broker acknowledged the message (acks=all)."""
        future = self.send(topic, value, key=key, headers=headers, partition=partition, timeout=timeout)
        waited = self._wait_for(timeout)
        try:
            return future.result(timeout=waited)
        except concurrent.futures.TimeoutError as exc:
            raise self._caller_gave_up(topic, waited) from exc

    async def send_async(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | str | None = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timeout: float = 30.0,
    ) -> DeliveryReceipt:
        """Produce and await the delivery report without blocking the event loop."""
        future = self.send(topic, value, key=key, headers=headers, partition=partition, timeout=timeout)
        waited = self._wait_for(timeout)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), waited)
        except asyncio.TimeoutError as exc:
            raise self._caller_gave_up(topic, waited) from exc

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until every queued message is delivered; raise if some are still pending."""
        remaining = self._drain(timeout)
        if remaining:
            raise DeliveryOutcomeUnknownError(
                f"{remaining} message(s) still undelivered after {timeout}s (brokers at "
                f"{self.bootstrap_servers}); they stay queued and may still be published",
                kafka_error=KafkaError(KafkaError._MSG_TIMED_OUT),
            )

    def close(self, timeout: float | None = None) -> None:
        """Flush for at most ``timeout`` (default: the message timeout), purge what is left, close.

        Never waits longer than ``timeout`` plus a moment: messages still queued are purged (their
        futures fail) and the librdkafka handle is released.  Raises
        :class:`DeliveryOutcomeUnknownError` after closing when messages had to be purged.
        Idempotent.
        """
        if self._closed.is_set():
            return
        wait = self.message_timeout if timeout is None else max(0.0, timeout)
        purged = 0
        try:
            if os.getpid() == self._pid:
                purged = self._flush_then_purge(wait)
        finally:
            self._closed.set()
            if self._poller.is_alive() and threading.current_thread() is not self._poller:
                self._poller.join(timeout=5)
            if os.getpid() == self._pid:
                self._expire_awaiting(time.monotonic(), everything=True)
                self.health.logger.flush()
                if not self._poller.is_alive():
                    # release the librdkafka handle (connections, threads) now, not at garbage collection
                    self._producer.close()
        if purged:
            raise DeliveryOutcomeUnknownError(
                f"{purged} message(s) to {self.bootstrap_servers} were still undelivered after {wait:g}s and "
                "were purged at close; some may have been written: retry them with the same idempotency keys",
                kafka_error=KafkaError(KafkaError._PURGE_QUEUE),
            )

    def _flush_then_purge(self, wait: float) -> int:
        remaining = self._drain(wait)
        if not remaining:
            return 0
        log.warning(
            "Kafka producer %r: %d message(s) undelivered after %gs at close; purging them",
            self.role,
            remaining,
            wait,
        )
        self._producer.purge(in_queue=True, in_flight=True, blocking=True)
        self._drain(1.0)  # serve the purged messages' reports
        return remaining

    def _drain(self, timeout: float) -> int:
        """Serve delivery reports until none is outstanding or ``timeout``; how many are left.

        (``len()`` of a librdkafka producer also counts queued log and statistics events.)
        """
        deadline = time.monotonic() + timeout
        while self._outstanding > 0:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._producer.flush(min(left, 0.1))
        return self._outstanding

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def __len__(self) -> int:
        """Messages queued locally or in flight (produced, no delivery report yet)."""
        return self._outstanding


# ---------------------------------------------------------------------- process-wide registry
_RegistryKey = tuple[int, str, tuple[tuple[str, str], ...]]
#: This process's id, set again in a forked child (sends compare it instead of a getpid() call each).
_pid = os.getpid()
_registry_lock = threading.Lock()
_registry: dict[_RegistryKey, EnvelopeProducer] = {}


def _config_key(config: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(k), repr(v)) for k, v in config.items()))


def role_config(config: Mapping[str, Any], message_timeout: float | None) -> dict[str, Any]:
    """``config`` whose ``message.timeout.ms`` ends by ``message_timeout`` seconds (when given).

    librdkafka looks for timed-out messages once a second (:data:`TIMEOUT_SCAN`), so a message
    is reported up to a second after its ``message.timeout.ms``: the setting is the caller's
    wait minus that second (at least half the wait), and the report arrives by the caller's
    deadline.
    """
    out = dict(config)
    if message_timeout is not None:
        if not message_timeout > 0:
            raise ConfigurationError(f"message_timeout must be > 0 seconds, got {message_timeout!r}")
        out.pop("delivery.timeout.ms", None)  # an alias of message.timeout.ms
        seconds = max(message_timeout - TIMEOUT_SCAN, message_timeout / 2)
        out["message.timeout.ms"] = max(1, round(seconds * 1000))
    return out


def get_producer(
    config: Mapping[str, Any], *, role: str = DEFAULT_ROLE, message_timeout: float | None = None
) -> EnvelopeProducer:
    """This process's producer for ``config``, ``role`` and ``message_timeout`` (created on first use).

    ``message_timeout`` (seconds): how long you wait for a receipt; the producer's
    ``message.timeout.ms`` is set so that librdkafka drops the message, and reports it, by then
    (:func:`role_config`).  Callers
    with the same role and timeout share one producer; ``purge()`` and ``close()`` of one role do
    not touch the others.
    """
    wired = role_config(config, message_timeout)
    key = (os.getpid(), role, _config_key(wired))
    with _registry_lock:
        producer = _registry.get(key)
        if producer is None or producer.closed:
            producer = _registry[key] = EnvelopeProducer(wired, role=role)
        return producer


def close_all_producers(timeout: float | None = None) -> None:
    """Flush, purge what is left, and close every producer this process created. Never raises.

    All producers together wait at most ``timeout`` seconds (default: the longest message
    timeout among them, capped at :data:`EXIT_FLUSH_CAP`), each at most its own message timeout.
    """
    with _registry_lock:
        mine = [p for (pid, _, _), p in _registry.items() if pid == os.getpid()]
        _registry.clear()
    budget = timeout
    if budget is None:
        budget = min(EXIT_FLUSH_CAP, max((p.message_timeout for p in mine), default=0.0))
    deadline = time.monotonic() + max(0.0, budget)
    for producer in mine:
        try:
            producer.close(min(producer.message_timeout, max(0.0, deadline - time.monotonic())))
        except Exception as exc:  # shutdown must not raise
            log.warning("closing Kafka producer failed: %s", exc)


def _forget_in_child() -> None:
    # The parent's producers are unusable here; drop them without closing (closing would
    # touch librdkafka state that belongs to the parent).
    global _pid
    _pid = os.getpid()
    _registry.clear()


os.register_at_fork(after_in_child=_forget_in_child)
atexit.register(close_all_producers)
