"""The bridge on the admission pipeline: raw records, size limits, dead letters the DLQ cannot carry."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, TopicPartition

from airflow_kafka_events.assets.admission import DEFAULT_MAX_RECORD_BYTES
from airflow_kafka_events.assets.airflow_api import AirflowApiClient
from airflow_kafka_events.assets.authz import Allowlist
from airflow_kafka_events.assets.publish import build_envelope
from airflow_kafka_events.bridge.config import BridgeConfig
from airflow_kafka_events.bridge.service import BridgeService, Outcome
from airflow_kafka_events.dead_letters.letter import REFERENCE_PREFIX_BYTES, DeadLetter
from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC
from airflow_kafka_events.envelopes.model import AssetEventEnvelope, AssetRef, EventSource, SourceKind
from airflow_kafka_events.errors import ConfigurationError, DeliveryError, KafkaOperationError
from airflow_kafka_events.kafka.consumer import ConsumedRecord
from airflow_kafka_events.kafka.delivery import DeliveryReceipt
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.retry import RetryPolicy
from integration.bridge.fake_airflow import FakeAirflow

pytestmark = pytest.mark.unit

TOPIC = "asset-events"
PASSWORD = "bridge-pw"
ASSET = AssetRef(name="batches", uri="s3://lake/batches")


class LimitedProducer:
    """A DLQ producer like librdkafka's: values over ``client_limit`` fail before they are sent,
    values over ``topic_limit`` are refused by the broker."""

    def __init__(self, client_limit: int = 1_000_000, topic_limit: int = 10**9) -> None:
        self.config = {"message.max.bytes": client_limit}
        self.topic_limit = topic_limit
        self.sent: list[dict[str, Any]] = []
        self.tried: list[int] = []

    def send_and_wait(self, topic: str, value: bytes | None, **kwargs: Any) -> DeliveryReceipt:
        size = len(value or b"")
        self.tried.append(size)
        if size > self.config["message.max.bytes"]:
            raise KafkaOperationError("cannot produce", kafka_error=KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
        if size > self.topic_limit:
            raise DeliveryError("not delivered", kafka_error=KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
        self.sent.append({"topic": topic, "value": value, **kwargs})
        return DeliveryReceipt(topic=topic, partition=0, offset=len(self.sent) - 1, timestamp_ms=1, key=None)

    def letters(self) -> list[DeadLetter]:
        return [DeadLetter.from_headers(sent["headers"]) for sent in self.sent]


@pytest.fixture
def fake() -> FakeAirflow:
    api = FakeAirflow(users={"bridge": PASSWORD})
    api.add_asset(ASSET.name, ASSET.uri)
    return api


def make_service(fake: FakeAirflow, producer: LimitedProducer, **options: Any) -> BridgeService:
    config = BridgeConfig(
        kafka=KafkaSettings({"bootstrap.servers": "unused:9092"}),
        api_url="http://airflow.test",
        username="bridge",
        password=PASSWORD,
        topic=TOPIC,
        retry=RetryPolicy(max_attempts=2, initial_backoff=0, max_backoff=0),
        **options,
    )
    api = AirflowApiClient(config.api_url, "bridge", PASSWORD, transport=fake.transport())
    service = BridgeService(config, api=api, producer=producer)  # type: ignore[arg-type]
    service._on_assign(None, [TopicPartition(TOPIC, 0)])
    return service


_offsets = iter(range(10**6))


def raw_record(
    value: bytes | None, headers: tuple[tuple[str, bytes | None], ...] = ()
) -> ConsumedRecord[Any]:
    """A record as the bridge's consumer hands it over: the value's bytes, undecoded."""
    return ConsumedRecord(
        topic=TOPIC,
        partition=0,
        offset=next(_offsets),
        key=b"s3://lake/batches",
        headers=headers,
        timestamp_ms=1_700_000_000_000,
        value=value,
        raw=value,
    )


def envelope(key: str = "batch-1", **kwargs: Any) -> AssetEventEnvelope:
    return build_envelope(
        asset=ASSET, source=EventSource(SourceKind.EXTERNAL, producer="p"), partition_key=key, **kwargs
    )


def test_raw_records_are_decoded_by_the_pipeline_and_posted(fake):
    service = make_service(fake, LimitedProducer())
    assert service.handle(raw_record(ASSET_EVENT_CODEC.encode(envelope()))) is Outcome.POSTED
    assert [e["partition_key"] for e in fake.events] == ["batch-1"]


def test_a_2_mb_record_is_dead_lettered_as_a_reference_and_the_next_event_is_posted(fake):
    producer = LimitedProducer()
    service = make_service(fake, producer)
    big = b"\x07" * 2_000_000
    assert service.handle(raw_record(big, headers=(("trace", b"t-1"),))) is Outcome.DEAD_LETTERED
    assert producer.tried == [REFERENCE_PREFIX_BYTES]  # over message.max.bytes: never tried whole
    (letter,) = producer.letters()
    assert letter.reason == "too-large" and letter.truncated and letter.original_value_bytes == 2_000_000
    assert f"max_record_bytes={DEFAULT_MAX_RECORD_BYTES}" in letter.error_message
    assert producer.sent[0]["value"] == big[:REFERENCE_PREFIX_BYTES]
    assert ("trace", b"t-1") in producer.sent[0]["headers"]
    assert service.handle(raw_record(ASSET_EVENT_CODEC.encode(envelope("batch-2")))) is Outcome.POSTED
    assert [e["partition_key"] for e in fake.events] == ["batch-2"]


def test_a_valid_envelope_with_a_large_extra_never_reaches_airflow(fake):
    producer = LimitedProducer()
    service = make_service(fake, producer, max_record_bytes=4 * 1024 * 1024)
    env = AssetEventEnvelope(asset=ASSET, partition_key="big", extra={"blob": "x" * 2_000_000})
    assert service.handle(raw_record(ASSET_EVENT_CODEC.encode(env))) is Outcome.DEAD_LETTERED
    (letter,) = producer.letters()
    assert letter.reason == "too-large" and letter.error_type.endswith("ExtraTooLargeError")
    assert letter.event_id == env.event_id and letter.asset_uri == ASSET.uri and letter.truncated
    assert fake.events == []


def test_a_record_the_dlq_topic_refuses_becomes_a_reference_instead_of_a_crash(fake):
    producer = LimitedProducer(topic_limit=100_000)
    service = make_service(fake, producer)
    garbage = b"not an envelope " * 10_000  # 160 KB: under the limits of the bridge, over the topic's
    assert service.handle(raw_record(garbage)) is Outcome.DEAD_LETTERED
    assert producer.tried == [160_000, REFERENCE_PREFIX_BYTES]
    (letter,) = producer.letters()
    assert letter.reason == "undecodable" and letter.truncated
    assert "writing the whole record failed" in (letter.truncated_cause or "")


def test_bridge_admission_settings_come_from_its_config():
    config = BridgeConfig(
        kafka=KafkaSettings({"bootstrap.servers": "unused:9092"}),
        api_url="http://airflow.test",
        username="bridge",
        password=PASSWORD,
        allowlist=Allowlist.from_config([{"source_kinds": ["task"]}]),
        signing_keys=(b"k",),
        max_causation_depth=3,
        max_record_bytes=1000,
        max_extra_bytes=500,
    )
    admission = config.admission_config()
    assert (admission.max_record_bytes, admission.max_extra_bytes) == (1000, 500)
    assert admission.signing_keys == (b"k",) and admission.allowlist is config.allowlist
    assert admission.max_causation_depth == 3 and admission.check_partition_key
    assert not admission.remember_on_accept and admission.select is not None
    assert config.describe()["max_record_bytes"] == 1000
    no_keys = BridgeConfig(
        kafka=config.kafka, api_url="http://airflow.test", username="bridge", password=PASSWORD
    )
    assert no_keys.admission_config().signing_keys is None
    with pytest.raises(ConfigurationError, match="max_extra_bytes"):
        BridgeConfig(
            kafka=config.kafka, api_url="http://a.test", username="b", password="p", max_extra_bytes=0
        )


def test_size_limits_from_the_environment():
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": "kafka:9092",
        "AIRFLOW_KAFKA_EVENTS_BRIDGE_API_URL": "http://airflow.test",
        "AIRFLOW_KAFKA_EVENTS_BRIDGE_USERNAME": "bridge",
        "AIRFLOW_KAFKA_EVENTS_BRIDGE_PASSWORD": "pw",
        "AIRFLOW_KAFKA_EVENTS_BRIDGE_MAX_RECORD_BYTES": "1048576",
        "AIRFLOW_KAFKA_EVENTS_BRIDGE_MAX_EXTRA_BYTES": "32768",
    }
    config = BridgeConfig.from_sources(environ=env)
    assert (config.max_record_bytes, config.max_extra_bytes) == (1_048_576, 32_768)
    assert BridgeConfig.from_sources(environ=env, max_extra_bytes=100).max_extra_bytes == 100
    with pytest.raises(ConfigurationError, match="MAX_RECORD_BYTES must be a number of bytes"):
        BridgeConfig.from_sources(environ={**env, "AIRFLOW_KAFKA_EVENTS_BRIDGE_MAX_RECORD_BYTES": "1 MB"})
