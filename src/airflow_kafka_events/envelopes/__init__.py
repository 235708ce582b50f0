"""What travels on Kafka: the envelope types, their Avro schemas and codec, JSON values."""

from __future__ import annotations

from airflow_kafka_events.envelopes.codec import EnvelopeCodec
from airflow_kafka_events.envelopes.model import AssetEventEnvelope, StreamFailure, TriggerEventEnvelope

__all__ = [
    "AssetEventEnvelope",
    "EnvelopeCodec",
    "StreamFailure",
    "TriggerEventEnvelope",
]
