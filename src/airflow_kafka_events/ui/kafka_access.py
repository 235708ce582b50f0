"""The view's Kafka side: the connection's client config, and partition offsets for the Health page.

Records are read by :mod:`airflow_kafka_events.ui.inspection` (bounded windows); this module only
turns the view's Airflow connection into the plain librdkafka config those functions take
(:func:`client_config`, through :class:`~airflow_kafka_events.provider.hook.KafkaEventsHook`) and reads
offsets, never records: the high watermark of each partition (:func:`end_offsets`), what a
consumer group committed (:func:`committed_offsets`) and how many members it has now
(:func:`group_members`).  Consumers are made by
:func:`~airflow_kafka_events.kafka.clients.new_consumer`; each call closes its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from airflow_kafka_events.errors import KafkaOperationError
from airflow_kafka_events.kafka.clients import new_admin, new_consumer
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.ui.inspection.reader import LATEST, TopicReader

__all__ = [
    "client_config",
    "committed_offsets",
    "end_offsets",
    "group_members",
]

#: Seconds an offsets request may take before the page says the brokers did not answer.
OFFSETS_TIMEOUT = 5.0


def client_config(kafka_config_id: str) -> tuple[dict[str, Any], list[str]]:
    """The librdkafka config of Airflow connection ``kafka_config_id`` (kept server-side), and the
    connection's password (a Kafka connection does not use it, but it must never be shown)."""
    from airflow_kafka_events.provider.hook import KafkaEventsHook

    hook = KafkaEventsHook(kafka_config_id=kafka_config_id)
    config = dict(hook.get_settings().config)
    password = hook.get_connection(kafka_config_id).password
    return config, [password] if password else []


def _partitions(consumer: Consumer, topic: str) -> list[int]:
    try:
        meta = consumer.list_topics(topic, timeout=OFFSETS_TIMEOUT)
    except KafkaException as exc:
        raise KafkaOperationError.from_exception(f"cannot read the partitions of {topic!r}", exc) from exc
    info = meta.topics.get(topic)
    if info is None or info.error is not None:
        raise KafkaOperationError(
            f"topic {topic!r} is not available ({info.error if info else 'unknown'}); "
            "create it with 'airflow-kafka-events topics ensure'",
            kafka_error=info.error if info else None,
        )
    return sorted(info.partitions)


def end_offsets(config: Mapping[str, Any], topic: str) -> dict[int, int]:
    """``{partition: high watermark}`` of ``topic`` (the offset the next record will get): one
    ListOffsets request for all partitions, through the inspection layer's reader."""
    with TopicReader(config, topic, timeout=OFFSETS_TIMEOUT, name="health offsets") as reader:
        return reader.offsets(reader.partitions(), LATEST)


def committed_offsets(config: Mapping[str, Any], group_id: str, topic: str) -> dict[int, int | None]:
    """``{partition: committed offset or None}`` of consumer group ``group_id`` on ``topic``."""
    wired = {**config, "group.id": group_id, "enable.auto.commit": False}
    consumer, _health = new_consumer(wired, name="kafka-events-ui", what="cannot read offsets")
    with contextlib.closing(consumer):
        partitions = [TopicPartition(topic, p) for p in _partitions(consumer, topic)]
        try:
            committed = consumer.committed(partitions, timeout=OFFSETS_TIMEOUT)
        except KafkaException as exc:
            raise KafkaOperationError.from_exception(
                f"cannot read the offsets group {group_id!r} committed on {topic!r}", exc
            ) from exc
        out: dict[int, int | None] = {}
        for tp in committed:
            if tp.error is not None:
                raise KafkaOperationError(
                    f"cannot read the offset group {group_id!r} committed on {topic}[{tp.partition}]: "
                    f"{tp.error}",
                    kafka_error=tp.error,
                )
            out[tp.partition] = tp.offset if tp.offset >= 0 else None
        return out


def group_members(config: Mapping[str, Any], group_id: str) -> tuple[str, int]:
    """``(state, members)`` of consumer group ``group_id`` now: its state as the group coordinator
    names it (``STABLE``, ``EMPTY``, ``DEAD`` for a group never seen, ...) and its member count."""
    try:
        admin = new_admin(KafkaSettings(config).admin_config(), name="kafka-events-view")
        future = admin.describe_consumer_groups([group_id], request_timeout=OFFSETS_TIMEOUT)[group_id]
        description = future.result(timeout=OFFSETS_TIMEOUT + 1)
    except KafkaException as exc:
        raise KafkaOperationError.from_exception(f"cannot describe consumer group {group_id!r}", exc) from exc
    except TimeoutError as exc:
        raise KafkaOperationError(
            f"no answer within {OFFSETS_TIMEOUT}s describing consumer group {group_id!r}"
        ) from exc
    return description.state.name, len(description.members)
