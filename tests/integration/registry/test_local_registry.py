"""The session's real schema registry answers confluent-kafka's own client on its Confluent API."""

from __future__ import annotations

import json
import uuid

import pytest

pytestmark = pytest.mark.integration

_RECORD = {
    "type": "record",
    "name": "Probe",
    "namespace": "test.registry",
    "fields": [{"name": "n", "type": "int"}],
}


def test_a_schema_registered_with_confluent_kafkas_client_is_fetched_back(schema_registry_url: str) -> None:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    client = SchemaRegistryClient({"url": schema_registry_url})
    subject = f"probe-{uuid.uuid4().hex[:12]}-value"
    schema_id = client.register_schema(subject, Schema(json.dumps(_RECORD), "AVRO"))

    fetched = client.get_schema(schema_id)
    assert json.loads(fetched.schema_str) == _RECORD
    assert client.get_latest_version(subject).schema_id == schema_id
    assert subject in client.get_subjects()


def test_the_registry_enforces_backward_compatibility(schema_registry_url: str) -> None:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    client = SchemaRegistryClient({"url": schema_registry_url})
    subject = f"probe-{uuid.uuid4().hex[:12]}-value"
    client.register_schema(subject, Schema(json.dumps(_RECORD), "AVRO"))
    client.set_compatibility(subject, "BACKWARD")
    required_field = {**_RECORD, "fields": [*_RECORD["fields"], {"name": "m", "type": "int"}]}
    optional_field = {**_RECORD, "fields": [*_RECORD["fields"], {"name": "m", "type": "int", "default": 0}]}

    assert client.test_compatibility(subject, Schema(json.dumps(optional_field), "AVRO")) is True
    assert client.test_compatibility(subject, Schema(json.dumps(required_field), "AVRO")) is False
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, Schema(json.dumps(required_field), "AVRO"))
    assert refused.value.http_status_code == 409
