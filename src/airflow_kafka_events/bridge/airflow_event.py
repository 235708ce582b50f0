"""What an asset event envelope becomes in Airflow: the ``extra`` of the asset event the bridge posts.

The REST API has no ``partition_date`` field, so it travels in ``extra``; the provenance
(``event_id``, ``idempotency_key``, ``causation``, ``source``, ``emitted_at``, the Kafka
coordinates) goes under ``extra["airflow_kafka_events"]``, where
:func:`~airflow_kafka_events.assets.emit.triggering_causation` reads it to extend causation
chains.  This module imports no Airflow module.
"""

from __future__ import annotations

from typing import Any

from airflow_kafka_events.assets.publish import PROVENANCE_EXTRA_KEY, provenance_extra
from airflow_kafka_events.envelopes.model import AssetEventEnvelope
from airflow_kafka_events.kafka.consumer import ConsumedRecord

__all__ = [
    "event_extra",
]


def event_extra(envelope: AssetEventEnvelope, record: ConsumedRecord[Any] | None = None) -> dict[str, Any]:
    """``extra`` of the Airflow asset event made from ``envelope``.

    The envelope's extra, ``partition_date`` (ISO-8601 in UTC, when the envelope has one; it
    replaces a ``partition_date`` key of the envelope's extra) and, under
    ``"airflow_kafka_events"``, :func:`provenance_extra` plus ``source``, ``emitted_at``,
    ``partition_date`` and the Kafka coordinates of the record.
    """
    extra: dict[str, Any] = dict(envelope.extra)
    info: dict[str, Any] = dict(provenance_extra(envelope)[PROVENANCE_EXTRA_KEY])
    info.setdefault("source", envelope.source.to_avro())
    info.setdefault("emitted_at", envelope.emitted_at.isoformat())
    if envelope.partition_date is not None:
        date = envelope.partition_date.isoformat()
        extra["partition_date"] = date
        info.setdefault("partition_date", date)
    if record is not None:
        info["kafka"] = {"topic": record.topic, "partition": record.partition, "offset": record.offset}
    extra[PROVENANCE_EXTRA_KEY] = info
    return extra
