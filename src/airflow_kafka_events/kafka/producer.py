"""The process-wide envelope producer.

One :class:`EnvelopeProducer` per process and configuration (see :func:`get_producer`):
librdkafka producers are heavyweight, thread-safe and meant to be shared. A background
thread serves delivery reports, so callers get a :class:`concurrent.futures.Future`
(``send``), block for a receipt (``send_and_wait``) or await one (``send_async``) —
the latter without blocking an asyncio loop such as the triggerer's.

Fork safety: librdkafka handles must not be used across ``fork()``. The registry is keyed
by pid and cleared in the child, so a forked child creates its own producer and never
touches (or closes) its parent's. Every producer is flushed at interpreter exit.
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
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from airflow_kafka_events.errors import ConfigurationError, DeliveryError, KafkaOperationError

log = logging.getLogger(__name__)

Headers = Sequence[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None]


@dataclass(frozen=True)
class DeliveryReceipt:
    """Where the broker stored a message: acknowledges persistence in Kafka (acks=all)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    key: bytes | None


def _receipt(msg: Message) -> DeliveryReceipt:
    ts_type, ts = msg.timestamp()
    offset = msg.offset()
    return DeliveryReceipt(
        topic=msg.topic() or "",
        partition=msg.partition() or 0,
        offset=-1 if offset is None else offset,
        timestamp_ms=ts if ts_type != 0 else None,
        key=msg.key() if isinstance(msg.key(), bytes) else None,
    )


def _no_report(topic: str, timeout: float) -> DeliveryError:
    return DeliveryError(
        f"no delivery report for a message to {topic!r} within {timeout}s",
        kafka_error=KafkaError(KafkaError._MSG_TIMED_OUT),
    )


def _encode_key(key: bytes | str | None) -> bytes | None:
    if key is None or isinstance(key, bytes):
        return key
    return key.encode("utf-8")


class EnvelopeProducer:
    """A thread-safe idempotent producer with delivery reports turned into futures."""

    def __init__(self, config: Mapping[str, Any], *, poll_interval: float = 0.05) -> None:
        if not config.get("enable.idempotence") or str(config.get("acks")) not in {"all", "-1"}:
            raise ConfigurationError(
                "EnvelopeProducer needs enable.idempotence=true and acks=all; "
                "build its config with KafkaSettings.producer_config()"
            )
        self.config = dict(config)
        self._pid = os.getpid()
        try:
            self._producer = Producer(self.config)
        except KafkaException as exc:
            raise KafkaOperationError.from_exception("cannot create Kafka producer", exc) from exc
        self._poll_interval = poll_interval
        self._closed = threading.Event()
        self._poller = threading.Thread(target=self._poll_loop, name="kafka-events-producer", daemon=True)
        self._poller.start()

    # ------------------------------------------------------------------ internals
    def _poll_loop(self) -> None:
        while not self._closed.is_set():
            self._producer.poll(self._poll_interval)

    @staticmethod
    def _on_delivery(future: concurrent.futures.Future[DeliveryReceipt]):  # type: ignore[no-untyped-def]
        def callback(err: KafkaError | None, msg: Message) -> None:
            if future.done():
                return
            if err is not None:
                future.set_exception(
                    DeliveryError(f"message to topic {msg.topic()!r} was not delivered", kafka_error=err)
                )
            else:
                future.set_result(_receipt(msg))

        return callback

    # ------------------------------------------------------------------ API
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

        A full local queue is waited out (up to ``timeout``), never silently dropped.
        """
        if self._closed.is_set():
            raise KafkaOperationError("producer is closed")
        if os.getpid() != self._pid:
            raise KafkaOperationError("producer used across fork(); call get_producer() in the child")
        future: concurrent.futures.Future[DeliveryReceipt] = concurrent.futures.Future()
        kwargs: dict[str, Any] = {"on_delivery": self._on_delivery(future)}
        if headers:
            kwargs["headers"] = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
        if partition is not None:
            kwargs["partition"] = partition
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._producer.produce(topic, value=value, key=_encode_key(key), **kwargs)
                return future
            except BufferError as exc:
                if time.monotonic() >= deadline:
                    raise KafkaOperationError(
                        f"local producer queue full for {timeout}s",
                        kafka_error=KafkaError(KafkaError._QUEUE_FULL),
                    ) from exc
                self._producer.poll(0.05)
            except KafkaException as exc:
                raise KafkaOperationError.from_exception(f"cannot produce to {topic!r}", exc) from exc

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
        try:
            return future.result(timeout=timeout)
        except concurrent.futures.TimeoutError as exc:
            raise _no_report(topic, timeout) from exc

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
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except asyncio.TimeoutError as exc:
            raise _no_report(topic, timeout) from exc

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until every queued message is delivered; raise if some are still pending."""
        remaining = self._producer.flush(timeout)
        if remaining:
            raise DeliveryError(
                f"{remaining} message(s) still undelivered after {timeout}s",
                kafka_error=KafkaError(KafkaError._MSG_TIMED_OUT),
            )

    def close(self, timeout: float = 30.0) -> None:
        """Flush and stop the delivery-report thread. Idempotent."""
        if self._closed.is_set():
            return
        try:
            if os.getpid() == self._pid:
                self.flush(timeout)
        finally:
            self._closed.set()
            if self._poller.is_alive() and threading.current_thread() is not self._poller:
                self._poller.join(timeout=5)
            if os.getpid() == self._pid and not self._poller.is_alive():
                # release the librdkafka handle (connections, threads) now, not at garbage collection
                self._producer.close()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def __len__(self) -> int:
        """Messages queued locally or in flight."""
        return len(self._producer)


# ---------------------------------------------------------------------- process-wide registry
_registry_lock = threading.Lock()
_registry: dict[tuple[int, tuple[tuple[str, str], ...]], EnvelopeProducer] = {}


def _config_key(config: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(k), repr(v)) for k, v in config.items()))


def get_producer(config: Mapping[str, Any]) -> EnvelopeProducer:
    """Return this process's producer for ``config`` (created on first use)."""
    key = (os.getpid(), _config_key(config))
    with _registry_lock:
        producer = _registry.get(key)
        if producer is None or producer.closed:
            producer = _registry[key] = EnvelopeProducer(config)
        return producer


def close_all_producers(timeout: float = 30.0) -> None:
    """Flush and close every producer this process created. Never raises."""
    with _registry_lock:
        mine = [p for (pid, _), p in _registry.items() if pid == os.getpid()]
        _registry.clear()
    for producer in mine:
        try:
            producer.close(timeout)
        except Exception as exc:  # shutdown must not raise
            log.warning("closing Kafka producer failed: %s", exc)


def _forget_in_child() -> None:
    # The parent's producers are unusable here; drop them without closing (closing would
    # touch librdkafka state that belongs to the parent).
    _registry.clear()


os.register_at_fork(after_in_child=_forget_in_child)
atexit.register(close_all_producers)
