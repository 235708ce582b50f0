"""Records written the way a service in another language writes them: confluent-kafka's own
``AvroSerializer`` against a schema registry, not this project's codec."""

from __future__ import annotations

import json

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from airflow_kafka_events.envelopes import schemas
from airflow_kafka_events.envelopes.model import AssetEventEnvelope

__all__ = ["confluent_serialized"]


def confluent_serialized(registry_url: str, topic: str, envelope: AssetEventEnvelope) -> bytes:
    """``envelope`` in the registry's wire format, its schema registered by confluent-kafka."""
    serializer = AvroSerializer(
        SchemaRegistryClient({"url": registry_url}),
        json.dumps(schemas.raw_schema(schemas.ASSET_EVENT_ENVELOPE)),
        conf={"auto.register.schemas": True},
    )
    data = serializer(envelope.to_avro(), SerializationContext(topic, MessageField.VALUE))
    assert data is not None
    return data
