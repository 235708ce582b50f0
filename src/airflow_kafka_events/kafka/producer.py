"""The process-wide envelope producers, one per configuration and role.

librdkafka producers are heavyweight, thread-safe and meant to be shared, but two of their
settings are per producer, not per call: ``message.timeout.ms`` (when librdkafka gives up on a
message) and ``purge()`` (which empties the whole producer).  So :func:`get_producer` keeps one
:class:`RecordProducer` per process, configuration and *role* (``"emit"``, ``"stream"`` ...),
and a caller that waits ``T`` seconds asks for ``message_timeout=T``: librdkafka itself drops
(and reports) the message by the caller's deadline (``message.timeout.ms`` is ``T`` minus the
second librdkafka may take to notice), and nothing is published after the caller was told it
failed.

Callers get a :class:`~airflow_kafka_events.kafka.delivery.DeliveryFuture` (``send``), block
for a receipt (``send_and_wait``) or await one (``send_async``) without blocking an asyncio loop.
The future is also librdkafka's delivery callback.  A background thread serves the reports, and
while a sender is busy (:data:`SERVE_BACKLOG`) the senders and their waiters serve them themselves:
each report one thread hands to another costs a GIL hand-off.  A receipt means the record is
durable (``acks=all``); a failure is *not sent* or of unknown outcome
(:mod:`~airflow_kafka_events.kafka.delivery` tells them apart).

Fork safety: librdkafka handles must not be used across ``fork()``.  The registry is keyed
by pid, so a forked child creates its own producer and never touches (or closes) its
parent's; a producer used in a child that did not make it refuses to send.  At interpreter
exit every producer is flushed for at most its message timeout (capped, see
:data:`EXIT_FLUSH_CAP`); what is still queued is purged.
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
from typing import Any, TypedDict, Unpack

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from airflow_kafka_events import metrics
from airflow_kafka_events.errors import (
    ConfigurationError,
    DeliveryError,
    DeliveryOutcomeUnknownError,
    KafkaOperationError,
    NotSentError,
)
from airflow_kafka_events.kafka.client_log import Cause, ClientHealth, ObservedClientError, refusal_error
from airflow_kafka_events.kafka.delivery import (
    REFUSAL_MEMORY,
    REFUSED_CODES,
    AwaitingStatistics,
    DeliveryFuture,
    DeliveryReceipt,
    caller_gave_up,
    delivery_failure,
    receipt_for,
    too_large_for_producer,
    wire_size,
)
from airflow_kafka_events.kafka.settings import ConfigKey, config_key

__all__ = [
    "DEFAULT_MESSAGE_MAX_BYTES",
    "DEFAULT_MESSAGE_TIMEOUT",
    "DEFAULT_ROLE",
    "EXIT_FLUSH_CAP",
    "SEND_TIMEOUT",
    "STATS_INTERVAL",
    "TIMEOUT_SCAN",
    "Headers",
    "RecordProducer",
    "SendOptions",
    "close_all_producers",
    "get_producer",
    "role_config",
]

log = logging.getLogger(__name__)
_monotonic = time.monotonic
_getpid = os.getpid

Headers = Sequence[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None]

#: Role of producers asked for without one.
DEFAULT_ROLE = "default"
#: librdkafka's defaults.
DEFAULT_MESSAGE_TIMEOUT = 300.0
DEFAULT_MESSAGE_MAX_BYTES = 1_000_000
#: Seconds a send waits out a full local queue, and a waiting send for its report, by default.
SEND_TIMEOUT = 30.0
#: Longest wait, per process exit, for messages still queued (then they are purged).
EXIT_FLUSH_CAP = 30.0
#: librdkafka's period of looking for timed-out messages (seconds).
TIMEOUT_SCAN = 1.0
#: Seconds between statistics reports: a failure is classified by the first report after it, and
#: Produce requests sent between the last report before a send and the send itself count
#: against it, so a short interval keeps the classification both quick and tight.
STATS_INTERVAL = 0.1
#: Messages in flight from which a send also serves the delivery reports that are ready.
SERVE_BACKLOG = 64
#: While busy, every how many sends serve the reports.
SERVE_EVERY = 4
#: Seconds the poller thread keeps out of the way after a caller served the reports.
CALLERS_SERVE = 0.02
#: Seconds between two reports of a producer's delivery metrics (its deliveries are counted meanwhile).
METRICS_INTERVAL = 0.1


def _ms_setting(config: Mapping[str, Any], *keys: str, default: float) -> float:
    for key in keys:
        if config.get(key) not in (None, ""):
            return float(config[key]) / 1000
    return default


class _Pending(DeliveryFuture):
    """A message waiting for its delivery report: the future its sender gets, and the callable
    librdkafka reports to (one object per send: no closure, no separate future)."""

    __slots__ = ("before", "error", "failed_at", "key", "producer", "sent_at", "size", "topic")

    def __init__(self, producer: RecordProducer, topic: str, size: int, key: bytes | None) -> None:
        super().__init__(producer._futures_lock)
        self.producer, self.topic, self.size, self.key = producer, topic, size, key
        self.sent_at, self.before = _monotonic(), producer.health.snapshot
        self.error: KafkaError | None  # and failed_at: set when it fails
        self.failed_at: float

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        """Its delivery report (a delivery is one frame: there is one per message)."""
        producer = self.producer
        producer._in_flight.discard(self)
        if err is not None:
            producer._failed(self, err)
            return
        if producer._refused is not None or producer.health.down_since is not None:
            producer._delivered_again()
        if self.settle(receipt_for(msg, self.topic, self.key)):  # False: cancelled by its caller
            producer._deliveries.add(self.topic, _monotonic() - self.sent_at)

    def _before_wait(self, timeout: float | None) -> float | None:
        return self.producer._serve_for(self, timeout) if self.outstanding() else timeout


class DeliveryTally:
    """The deliveries of one producer since its last report of the delivery metrics: per topic, how many
    and the slowest (seconds from send to acknowledgement).

    A delivery report costs a dictionary update here instead of two metric calls (two StatsD packets
    under Airflow's stats); :meth:`report` sends each topic's count and slowest delivery at most every
    ``interval`` seconds, or whenever ``force``-d.
    """

    def __init__(self, role: str, interval: float = METRICS_INTERVAL) -> None:
        self.role = role
        self.interval = interval
        self._counts: dict[str, list[float]] = {}  # topic -> [deliveries, slowest seconds]
        self._lock = threading.Lock()
        self._reported_at = _monotonic()

    def add(self, topic: str, seconds: float) -> None:
        """One delivery to ``topic``, acknowledged ``seconds`` after its send."""
        with self._lock:
            entry = self._counts.get(topic)
            if entry is None:
                self._counts[topic] = [1, seconds]
            else:
                entry[0] += 1
                if seconds > entry[1]:
                    entry[1] = seconds

    def report(self, *, force: bool = False) -> None:
        """Send what was counted (:func:`metrics.delivered`, one call per topic) when ``interval``
        passed since the last report, or ``force``."""
        if not self._counts:
            return
        now = _monotonic()
        if not force and now - self._reported_at < self.interval:
            return
        with self._lock:
            counts, self._counts = self._counts, {}
            self._reported_at = now
        for topic, (count, slowest) in counts.items():
            metrics.delivered(self.role, topic, slowest, int(count))


class SendOptions(TypedDict, total=False):
    """The keyword arguments of :meth:`RecordProducer.send` and its waiting forms."""

    key: bytes | str | None
    headers: Headers | None
    partition: int | None
    timeout: float


class RecordProducer:
    """A thread-safe idempotent producer with delivery reports turned into futures.

    :param role: shown in log lines and errors (see :func:`get_producer`).
    """

    def __init__(self, config: Mapping[str, Any], *, poll_interval: float = 0.05, role: str = DEFAULT_ROLE):
        if not config.get("enable.idempotence") or str(config.get("acks")) not in {"all", "-1"}:
            raise ConfigurationError(
                "RecordProducer needs enable.idempotence=true and acks=all; "
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
        #: failed messages waiting for the next statistics report to be classified
        self._awaiting = AwaitingStatistics(self._fail, limit=3 * self.health.stats_interval)
        #: messages produced whose delivery report has not come yet (set.add / discard need no lock)
        self._in_flight: set[_Pending] = set()
        #: deliveries not reported to the metrics yet
        self._deliveries = DeliveryTally(role)
        #: guards the state of its futures (held for a few instructions per report or wait)
        self._futures_lock = threading.Lock()
        self.health.add_snapshot_listener(self._awaiting.on_snapshot)
        self.health.add_refusal_listener(self._on_refused)
        #: the brokers refused the credentials / TLS and nothing was delivered since: sends fail at once
        self._refused: ObservedClientError | None = None
        self._purge_due = threading.Event()
        try:
            self._producer = Producer(self.health.wire(self.config))
        except KafkaException as exc:
            raise KafkaOperationError.from_exception("cannot create Kafka producer", exc) from exc
        self._poll_interval = poll_interval
        self._served_at = 0.0  # when a sender or a waiter last served the reports itself
        self._serving: set[int] = set()  # the threads inside poll() (set.add / discard need no lock)
        self._sends = 0  # counts sends while busy (unlocked: a lost count only moves one serving)
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
            quiet = time.monotonic() - self._served_at
            if quiet < CALLERS_SERVE:  # a busy sender or its waiter serves the reports: keep out of the way
                self._closed.wait(CALLERS_SERVE - quiet)
            elif not self._serve(self._poll_interval):
                self._closed.wait(self._poll_interval)
            if self._purge_due.is_set():
                self._purge_due.clear()
                # refused credentials / TLS: what is queued would never go; each gets its report now
                self._producer.purge(in_queue=True, in_flight=False)
            self._awaiting.expire(time.monotonic())
            self._deliveries.report()  # on this thread: never on a sender's (an event loop's)

    def _serve(self, timeout: float, *, caller: bool = False) -> bool:
        """Serve reports, statistics and errors on this thread for up to ``timeout`` (``caller``: not
        the poller, which then keeps out of the way); ``False`` when ``poll()`` raised (logged) or
        this thread is inside a callback of this producer (a nested ``poll()`` breaks confluent-kafka)."""
        thread, serving = threading.get_ident(), self._serving
        if thread in serving:
            return False
        if caller:
            self._served_at = time.monotonic()
        serving.add(thread)
        try:
            self._producer.poll(timeout)
        except Exception as exc:
            self.health.logger.log(logging.ERROR, "Kafka producer %r: %s", self.role, exc)
            return False
        finally:
            serving.discard(thread)
        return True

    def _serve_for(self, pending: _Pending, timeout: float | None) -> float | None:
        """While callers serve the reports (a busy sender did moments ago), one waiting for ``pending``
        serves them until it resolves, as ``flush()`` would; the time left of ``timeout``."""
        if time.monotonic() - self._served_at >= CALLERS_SERVE or self._closed.is_set() or self._forked():
            return timeout  # the poller serves
        deadline = None if timeout is None else time.monotonic() + timeout
        while pending.outstanding():
            left = CALLERS_SERVE if deadline is None else min(CALLERS_SERVE, deadline - time.monotonic())
            if left <= 0 or not self._serve(left, caller=True):
                break
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def _forked(self) -> bool:
        """Whether this is a forked child of the process that made this producer (librdkafka
        handles must not be used across ``fork()``)."""
        return os.getpid() != self._pid

    def _check_refused(self) -> None:
        """Fail at once while the brokers keep refusing this producer's credentials / TLS (a refusal
        older than :data:`REFUSAL_MEMORY` seconds no longer counts: a fix on their side is seen)."""
        seen = self._refused
        if seen is not None and time.monotonic() - seen.at < REFUSAL_MEMORY:
            raise refusal_error(self.health, seen, producing=True)

    def _on_refused(self, seen: ObservedClientError) -> None:
        self._refused = seen
        self._purge_due.set()

    def _delivered_again(self) -> None:
        """A delivery after the brokers were down or refused this producer: both are over."""
        self._refused = None
        if self.health.down_since is not None:
            self.health.mark_up()

    def _failed(self, pending: _Pending, err: KafkaError) -> None:  # answered now or by the next statistics
        if not pending.outstanding():  # cancelled by its caller
            return
        pending.error, pending.failed_at = err, time.monotonic()
        if err.code() in REFUSED_CODES or (
            self._refused is not None and err.code() == KafkaError._PURGE_QUEUE
        ):
            self._fail(pending, None)
        else:
            self._awaiting.add(pending)

    def _fail(self, pending: _Pending, produce_sent: bool | None) -> None:
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

    # ------------------------------------------------------------------ API
    def send(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | str | None = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timeout: float = SEND_TIMEOUT,
        block: bool = True,
    ) -> DeliveryFuture:
        """Queue one message; the future resolves with its receipt or a :class:`DeliveryError`.

        A record larger than ``message.max.bytes`` raises :class:`RecordTooLargeError` before
        anything is queued.  A full local queue (``queue.buffering.max.messages`` /
        ``.kbytes``, shared by every sender of this producer) is waited out, up to ``timeout``, never
        silently dropped; with ``block=False`` it raises librdkafka's ``BufferError`` at once and
        queues nothing, for a caller on an event loop that waits without blocking it (and raises
        :meth:`queue_full_error` when it gives up).
        """
        if self._closed.is_set():
            raise KafkaOperationError("producer is closed")
        if _getpid() != self._pid:  # a forked child: librdkafka handles must not be used across fork()
            raise KafkaOperationError("producer used across fork(); call get_producer() in the child")
        if self._refused is not None:
            self._check_refused()
        raw_key = key.encode("utf-8") if isinstance(key, str) else key
        header_list: list[tuple[str, bytes | str | None]] | None = None
        if headers:  # as librdkafka takes them
            header_list = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
        size = wire_size(value, raw_key, header_list or ())
        if size > self.max_message_bytes:
            raise too_large_for_producer(topic, size, self.max_message_bytes)
        pending = _Pending(self, topic, size, raw_key)
        self._produce(pending, value, header_list, -1 if partition is None else partition, timeout, block)
        if len(self._in_flight) >= SERVE_BACKLOG:  # busy: serve the reports ready (poll(0) never waits)
            self._sends = sends = self._sends + 1
            if not sends % SERVE_EVERY:
                self._serve(0, caller=True)
        return pending

    def _produce(
        self,
        pending: _Pending,
        value: bytes | None,
        headers: list[tuple[str, bytes | str | None]] | None,
        partition: int,
        timeout: float,
        block: bool = True,
    ) -> None:
        produce, in_flight = self._producer.produce, self._in_flight
        while True:
            in_flight.add(pending)  # before produce(): its report may come before produce() returns
            try:
                if headers is None:  # positional: parsing keyword arguments is a fair part of a send
                    produce(pending.topic, value, pending.key, partition, pending)
                else:
                    produce(pending.topic, value, pending.key, partition, pending, headers=headers)
                return
            except BufferError as exc:
                in_flight.discard(pending)
                if not block:
                    raise
                self._queue_full(exc, pending.sent_at + timeout, timeout)
            except KafkaException as exc:
                in_flight.discard(pending)
                self._produce_failed(pending.topic, pending.size, exc)
            except BaseException:
                in_flight.discard(pending)
                raise

    def queue_full_error(self, timeout: float) -> NotSentError:
        """The error of a message given up after the local queue stayed full for ``timeout`` s."""
        return NotSentError(
            f"not sent — nothing will be published: the local producer queue stayed full for "
            f"{timeout}s (brokers at {self.bootstrap_servers}); fix: "
            f"{self.health.fix_for(Cause.TIMED_OUT)}",
            kafka_error=KafkaError(KafkaError._QUEUE_FULL),
        )

    def _queue_full(self, exc: BufferError, deadline: float, timeout: float) -> None:
        """The local queue is full: serve delivery reports for a moment, or give up at ``deadline``."""
        if time.monotonic() >= deadline:
            raise self.queue_full_error(timeout) from exc
        if not self._serve(0.05, caller=True):  # inside a callback of this producer: cannot serve
            time.sleep(0.05)

    def _produce_failed(self, topic: str, size: int, exc: KafkaException) -> None:
        err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        if err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE:  # librdkafka's own count
            self.max_message_bytes = min(self.max_message_bytes, size - 1)
            raise too_large_for_producer(topic, size, self.max_message_bytes) from exc
        raise KafkaOperationError.from_exception(f"cannot produce to {topic!r}", exc) from exc

    def has_topic(self, topic: str, timeout: float = 5.0) -> bool | None:
        """Whether the cluster has ``topic`` (``None``: the brokers did not say within ``timeout``).

        Asks for every topic's metadata: asking for one by name could make a broker that
        auto-creates topics create it.
        """
        try:
            meta = self._producer.list_topics(timeout=timeout)
        except KafkaException:
            return None
        found = meta.topics.get(topic)
        return found is not None and found.error is None

    def outstanding_for(self, topic: str, key: bytes | str | None) -> int:
        """Messages to ``topic`` with ``key`` that have no delivery report yet (queued or in flight)."""
        raw_key = key.encode("utf-8") if isinstance(key, str) else key
        return sum(p.topic == topic and p.key == raw_key for p in list(self._in_flight))

    def send_and_wait(
        self, topic: str, value: bytes | None, **options: Unpack[SendOptions]
    ) -> DeliveryReceipt:
        """Produce and block until the broker acknowledged the message (acks=all); options as :meth:`send`."""
        future, waited = self._send_waiting(topic, value, options)
        try:
            return future.result(timeout=waited)
        except concurrent.futures.TimeoutError as exc:
            raise self._caller_gave_up(topic, waited) from exc

    async def send_async(
        self, topic: str, value: bytes | None, **options: Unpack[SendOptions]
    ) -> DeliveryReceipt:
        """Produce and await the delivery report without blocking the event loop; options as :meth:`send`."""
        future, waited = self._send_waiting(topic, value, options)
        try:
            async with asyncio.timeout(waited):  # not wait_for: it can swallow a cancellation (3.11)
                return await future
        except TimeoutError as exc:
            raise self._caller_gave_up(topic, waited) from exc

    def _send_waiting(
        self, topic: str, value: bytes | None, options: SendOptions
    ) -> tuple[DeliveryFuture, float]:
        """:meth:`send`, and how long a caller that gives the message ``timeout`` waits for its report."""
        timeout = options.get("timeout", SEND_TIMEOUT)
        waited = timeout + self.report_grace if timeout >= self.message_timeout else timeout
        return self.send(topic, value, **options), waited

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
            if not self._forked():
                purged = self._flush_then_purge(wait)
        finally:
            self._closed.set()
            if self._poller.is_alive() and threading.current_thread() is not self._poller:
                self._poller.join(timeout=5)
            if not self._forked():
                self._awaiting.expire(time.monotonic(), everything=True)
                self._deliveries.report(force=True)
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
        while self._in_flight:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._served_at = time.monotonic()  # the poller keeps out of the way
            self._producer.flush(min(left, 0.1))
        return len(self._in_flight)

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def __len__(self) -> int:
        """Messages queued locally or in flight (produced, no delivery report yet)."""
        return len(self._in_flight)


# ---------------------------------------------------------------------- process-wide registry
_RegistryKey = tuple[int, str, ConfigKey]
_registry_lock = threading.Lock()
#: This process's producers by (pid, role, configuration): deliberately process-wide, as librdkafka
#: producers are meant to be shared.
_registry: dict[_RegistryKey, RecordProducer] = {}


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
) -> RecordProducer:
    """This process's producer for ``config``, ``role`` and ``message_timeout`` (created on first use).

    ``message_timeout`` (seconds): how long you wait for a receipt; the producer's
    ``message.timeout.ms`` is set so that librdkafka drops the message, and reports it, by then
    (:func:`role_config`).  Callers
    with the same role and timeout share one producer; ``purge()`` and ``close()`` of one role do
    not touch the others.
    """
    wired = role_config(config, message_timeout)
    key = (os.getpid(), role, config_key(wired))
    with _registry_lock:
        producer = _registry.get(key)
        if producer is None or producer.closed:
            producer = _registry[key] = RecordProducer(wired, role=role)
        return producer


def close_all_producers(timeout: float | None = None) -> None:
    """Flush, purge what is left, and close every producer this process created. Never raises.

    All producers together wait at most ``timeout`` seconds (default: the longest message
    timeout among them, capped at :data:`EXIT_FLUSH_CAP`), each at most its own message timeout.
    """
    with _registry_lock:
        keys = [key for key in _registry if key[0] == os.getpid()]
        mine = [_registry.pop(key) for key in keys]
    budget = timeout
    if budget is None:
        budget = min(EXIT_FLUSH_CAP, max((p.message_timeout for p in mine), default=0.0))
    deadline = time.monotonic() + max(0.0, budget)
    for producer in mine:
        try:
            producer.close(min(producer.message_timeout, max(0.0, deadline - time.monotonic())))
        except Exception as exc:  # shutdown must not raise
            log.warning("closing Kafka producer failed: %s", exc)


def _after_fork_in_child() -> None:
    # The parent's producers stay in the registry: their keys hold the parent's pid, so this
    # process never finds them, and keeping them referenced means their librdkafka handles are
    # never destroyed here (destroying one would wait for threads this process does not have).
    _registry_lock.release()


# Held across fork(): no other thread can hold the registry's lock at that moment, so the
# child's copy of it is free.
os.register_at_fork(
    before=_registry_lock.acquire,
    after_in_parent=_registry_lock.release,
    after_in_child=_after_fork_in_child,
)
atexit.register(close_all_producers)
