"""Fixtures of the inspection tests: a Kafka config and a producer of the session broker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from airflow_kafka_events.kafka.producer import RecordProducer
from airflow_kafka_events.kafka.settings import KafkaSettings


@pytest.fixture
def config(kafka_bootstrap: str) -> dict[str, str]:
    return {"bootstrap.servers": kafka_bootstrap}


@pytest.fixture
def producer(config) -> Iterator[RecordProducer]:
    made = RecordProducer(KafkaSettings(config).producer_config())
    yield made
    made.close(5.0)
