"""How a streaming trigger's producer rides out a broker outage.

The trigger's producer has its own role (:data:`STREAM_ROLE`) whose ``message.timeout.ms`` is the
outage timeout, so librdkafka keeps retrying a page (reconnecting with exponential backoff,
``reconnect.backoff.ms`` .. ``reconnect.backoff.max.ms``) for that long.  :func:`await_delivery`
logs one line when a page is held because no broker is reachable and one when it got through.
:func:`wait_for_earlier_sends` keeps a restarted run in the same process from looking up its
progress while a page of an earlier, cancelled run may still be written.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.kafka.producer import RecordProducer

__all__ = [
    "DEFAULT_OUTAGE_TIMEOUT",
    "STREAM_LINGER_MS",
    "STREAM_ROLE",
    "await_delivery",
    "resolve_outage_timeout",
    "wait_for_earlier_sends",
]

#: Producer role of streaming triggers (its message timeout is the outage timeout).
STREAM_ROLE = "stream"
#: ``linger.ms`` of the streaming triggers' producer unless the connection sets one.  Pages are
#: pipelined (a trigger waits only for its first page's receipt, its terminal marker's and a full
#: window's), so the batching delay adds 1 ms to those waits and to when a live consumer can read a
#: page, while at ``linger.ms`` 0 every ``produce()`` wakes librdkafka's broker thread and sends small
#: requests: B12, a trigger writing 30,000 1 KB pages alone, 65-88 µs of CPU a page at 1 ms against
#: 113-115 µs at 0, 1.5-1.9x the pages/s.
STREAM_LINGER_MS = 1
#: Seconds a page may wait for the brokers to come back (``[kafka_events] stream_outage_timeout``).
DEFAULT_OUTAGE_TIMEOUT = 300.0
#: How often a held page checks whether the brokers are down (for its one log line).
HELD_CHECK_INTERVAL = 1.0


def resolve_outage_timeout(value: Any = None) -> float:
    """``value``, else ``[kafka_events] stream_outage_timeout``, else 300 s; a number > 0."""
    if value is None:
        from airflow.configuration import conf

        value = conf.get("kafka_events", "stream_outage_timeout", fallback=str(DEFAULT_OUTAGE_TIMEOUT))
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ConfigurationError(
            f"stream_outage_timeout must be a number of seconds, got {value!r}"
        ) from None
    if not seconds > 0:
        raise ConfigurationError(f"stream_outage_timeout must be > 0 seconds, got {value!r}")
    return seconds


async def await_delivery(
    delivery: asyncio.Future[Any], producer: Any, log: Any, *, stream: str, page: int, timeout: float
) -> Any:
    """The receipt of ``delivery``; one line when the page is held by an outage, one when it is through."""
    held_since: float | None = None
    health = getattr(producer, "health", None)
    try:
        while True:
            done, _ = await asyncio.wait({delivery}, timeout=HELD_CHECK_INTERVAL)
            if done:
                break
            if held_since is None and health is not None and health.down:
                held_since = time.monotonic()
                log.warning(
                    "stream %s: Kafka at %s is unreachable (%s); page %d is held and retried for up to %gs",
                    stream,
                    health.bootstrap_servers,
                    health.describe_unreachable(),
                    page,
                    timeout,
                )
    except asyncio.CancelledError:
        delivery.cancel()
        raise
    receipt = delivery.result()  # raises the delivery error
    if held_since is not None:
        log.info(
            "stream %s: Kafka is back; page %d delivered after being held %.1fs",
            stream,
            page,
            time.monotonic() - held_since,
        )
    return receipt


async def wait_for_earlier_sends(producer: RecordProducer, topic: str, key: str, log: Any) -> None:
    """Let a page an earlier, cancelled run of this stream left in this process's producer settle
    (delivered, or dropped at the message timeout) before the progress lookup: it is then either
    in Kafka, and not written again, or gone."""
    outstanding = getattr(producer, "outstanding_for", None)
    if outstanding is None or not outstanding(topic, key):
        return
    log.info("stream %s: waiting for a page an earlier run left in flight", key)
    deadline = time.monotonic() + producer.message_timeout + producer.report_grace
    while outstanding(topic, key) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
