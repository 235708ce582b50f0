"""Where this package's Kafka consumers are made: one place, one wiring.

:func:`new_consumer` builds a confluent-kafka ``Consumer`` whose librdkafka log lines go to
Python logging at their real levels, rate-limited (one line per cause per interval, with a count
of the repeats), and whose errors are kept with their cause
(:class:`~airflow_kafka_events.kafka.client_log.ClientHealth`), instead of a stream of raw
``level: error`` stderr lines (measured before: 520 lines in one task log during a 15 s outage).
A creation failure is a :class:`~airflow_kafka_events.errors.KafkaOperationError` (or the
``error_type`` given) naming the bootstrap servers.  Producers are made in
:mod:`airflow_kafka_events.kafka.producer`, which wires the same mechanism; admin clients by
:func:`new_admin`, wired the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import AdminClient

from airflow_kafka_events.errors import KafkaOperationError
from airflow_kafka_events.kafka.client_log import ClientHealth

__all__ = [
    "new_admin",
    "new_consumer",
]

#: Seconds between librdkafka statistics reports of a consumer (only broker up/down is read).
CONSUMER_STATS_INTERVAL = 30.0


def new_consumer(
    config: Mapping[str, Any],
    *,
    name: str,
    what: str = "cannot create a Kafka consumer",
    error_type: type[KafkaOperationError] = KafkaOperationError,
    health: ClientHealth | None = None,
) -> tuple[Consumer, ClientHealth]:
    """A consumer for ``config`` with its logs and errors wired, and its :class:`ClientHealth`
    (``health``, or a new one)."""
    if health is None:
        health = ClientHealth.for_config(config, name=name, stats_interval=CONSUMER_STATS_INTERVAL)
    wired = health.wire(config)
    try:
        return Consumer(wired), health
    except KafkaException as exc:
        servers = config.get("bootstrap.servers", "?")
        raise error_type.from_exception(f"{what} for {servers}", exc) from exc


def new_admin(
    config: Mapping[str, Any],
    *,
    name: str,
    what: str = "cannot create a Kafka admin client",
    error_type: type[KafkaOperationError] = KafkaOperationError,
) -> AdminClient:
    """An admin client for ``config`` (an admin config, e.g. ``KafkaSettings.admin_config()``) with
    its librdkafka log lines and errors wired as a consumer's are."""
    health = ClientHealth.for_config(config, name=name, stats_interval=CONSUMER_STATS_INTERVAL)
    try:
        return AdminClient(health.wire(config))
    except KafkaException as exc:
        servers = config.get("bootstrap.servers", "?")
        raise error_type.from_exception(f"{what} for {servers}", exc) from exc
