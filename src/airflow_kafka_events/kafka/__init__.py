"""Kafka access: settings, the process-wide producer, topics and envelope reading.

This layer imports no Airflow module; inside Airflow, :mod:`airflow_kafka_events.provider.hook`
turns an Airflow Kafka connection into the :class:`KafkaSettings` used here.
"""

from __future__ import annotations

from airflow_kafka_events.kafka.delivery import DeliveryReceipt
from airflow_kafka_events.kafka.producer import RecordProducer, get_producer
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.kafka.topics import TopicSpec, delete_topics, ensure_topics

__all__ = [
    "DeliveryReceipt",
    "KafkaSettings",
    "RecordProducer",
    "TopicSpec",
    "delete_topics",
    "ensure_topics",
    "get_producer",
]
