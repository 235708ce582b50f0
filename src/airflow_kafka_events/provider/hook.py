"""Airflow hook: an Airflow Kafka connection turned into this package's Kafka clients.

All configuration inside Airflow comes through the apache-kafka provider's connection
(``kafka_config_id``, librdkafka keys in the extras; ``AIRFLOW_CONN_*`` variables work
without a metadata DB). Different roles use different connection ids / consumer groups.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook
from confluent_kafka.admin import AdminClient

from airflow_kafka_events.kafka.clients import new_admin
from airflow_kafka_events.kafka.producer import DEFAULT_ROLE, RecordProducer, get_producer
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.kafka.topics import TopicSpec, client_message_max_bytes, ensure_topics


class KafkaEventsHook(KafkaBaseHook):
    """Builds settings, the process-wide producer and an admin client from a connection.

    :param kafka_config_id: Airflow connection id (type ``kafka``), default ``kafka_default``.
    """

    hook_name = "Kafka Events"

    def __init__(self, kafka_config_id: str = KafkaBaseHook.default_conn_name, **kwargs: Any) -> None:
        super().__init__(kafka_config_id=kafka_config_id, **kwargs)
        self._settings: KafkaSettings | None = None

    def get_settings(self) -> KafkaSettings:
        """The connection's librdkafka configuration (read once per hook)."""
        if self._settings is None:
            self._settings = KafkaSettings(self._build_config())
        return self._settings

    def get_producer(
        self, *, role: str = DEFAULT_ROLE, message_timeout: float | None = None
    ) -> RecordProducer:
        """The process-wide idempotent producer for this connection and role.

        ``message_timeout`` (seconds): how long the caller waits for a receipt; it becomes the
        producer's ``message.timeout.ms`` (see :func:`~airflow_kafka_events.kafka.producer.get_producer`).
        """
        return get_producer(self.get_settings().producer_config(), role=role, message_timeout=message_timeout)

    def get_admin_client(self) -> AdminClient:
        return new_admin(self.get_settings().admin_config(), name=f"hook:{self.kafka_config_id}")

    def ensure_topics(self, specs: Iterable[TopicSpec], *, timeout: float = 30.0) -> list[str]:
        """Create the missing topics, their ``max.message.bytes`` aligned with this connection's
        producers (``message.max.bytes``) unless a spec sets its own."""
        limit = client_message_max_bytes(self.get_settings().producer_config())
        return ensure_topics(self.get_admin_client(), specs, timeout=timeout, message_max_bytes=limit)
