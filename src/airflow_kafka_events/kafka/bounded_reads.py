"""The consumer configuration of a bounded read: offset ranges a client assigns itself, no group.

Inspection readers and the stream progress lookup read ranges of offsets they assign; they join no
group and commit nothing, so their group id is a throwaway one, auto-commit and the offset store are
off, and a partition's end is reported (``enable.partition.eof``) so a read knows it has reached it.
The consumer itself is made by :func:`airflow_kafka_events.kafka.clients.new_consumer`.
"""

from __future__ import annotations

import uuid
from typing import Any

from airflow_kafka_events.kafka.settings import KafkaSettings

__all__ = [
    "bounded_read_config",
]


def bounded_read_config(settings: KafkaSettings, purpose: str, **extra: Any) -> dict[str, Any]:
    """librdkafka configuration of a bounded read named ``purpose`` (in its group id); ``extra`` added."""
    return settings.with_overrides({"enable.auto.commit": False}).consumer_config(
        f"airflow-kafka-events-{purpose}-{uuid.uuid4().hex}",
        **{
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "enable.auto.offset.store": False,
            **extra,
        },
    )
