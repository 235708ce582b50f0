"""Provider metadata, read by Airflow's ProvidersManager through the ``apache_airflow_provider`` entry point.

Kept free of Airflow imports: ProvidersManager calls it while it is still discovering providers.
"""

from __future__ import annotations

from typing import Any

from airflow_kafka_events.__about__ import __version__

INTEGRATION = "Kafka Events"


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-kafka-events",
        "name": "Kafka Events",
        "description": (
            "Stream every event of a deferred task's trigger through Apache Kafka as Avro envelopes, "
            "consume streams in order and in batches, and publish explicit asset events."
        ),
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": "https://kafka.apache.org/",
                "tags": ["apache"],
            }
        ],
        "hooks": [
            {"integration-name": INTEGRATION, "python-modules": ["airflow_kafka_events.hooks"]},
        ],
        "triggers": [
            {"integration-name": INTEGRATION, "python-modules": ["airflow_kafka_events.triggers"]},
        ],
        "operators": [
            {"integration-name": INTEGRATION, "python-modules": ["airflow_kafka_events.operators"]},
        ],
        # needs the messaging extra (apache-airflow-providers-common-messaging); skipped without it
        "queues": ["airflow_kafka_events.triggers.message_queue.KafkaEventsMessageQueueProvider"],
        "task-decorators": [
            {
                "name": "stream_consumer",
                "class-name": "airflow_kafka_events.operators.decorators.stream_consumer_task",
            },
            {"name": "iterable", "class-name": "airflow_kafka_events.iteration.decorator.iterable_task"},
        ],
        "plugins": [
            {
                "name": "airflow_kafka_events",
                "plugin-class": "airflow_kafka_events.plugin.KafkaEventsPlugin",
            }
        ],
        "config": {
            "kafka_events": {
                "description": "Settings of the airflow-kafka-events provider.\n",
                "options": {
                    "kafka_config_id": {
                        "description": "Default Airflow connection (type kafka) used by producers.\n",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "kafka_default",
                        "default": "kafka_default",
                    },
                    "trigger_events_topic": {
                        "description": "Default topic that streaming triggers write envelopes to.\n",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": None,
                        "default": "airflow.trigger-events",
                    },
                    "stream_outage_timeout": {
                        "description": (
                            "Seconds a streaming trigger's page waits for unreachable Kafka brokers "
                            "before the trigger fails (its producer's message.timeout.ms).\n"
                        ),
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": None,
                        "default": "300",
                    },
                    "watcher_airflow_api_conn_id": {
                        "description": (
                            "Airflow connection to the api-server (host: its base URL; login / password: "
                            "a user allowed to read assets and asset events). Set, a watcher resuming "
                            "after an unclean stop asks it which of its asset's events exist and does "
                            "not fire them again. Empty: off (duplicates after a crash stay bounded by "
                            "one position store interval).\n"
                        ),
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "airflow_api",
                        "default": "",
                    },
                    "asset_events_topic": {
                        "description": "Default topic for explicit asset events.\n",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": None,
                        "default": "airflow.asset-events",
                    },
                    "dlq_topic": {
                        "description": "Dead-letter topic (made by `topics ensure`).\n",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": None,
                        "default": "airflow.kafka-events.dlq",
                    },
                    "results_topic": {
                        "description": "Iteration results topic that `topics ensure` creates.\n",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": None,
                        "default": "airflow.trigger-events",
                    },
                    "topic_partitions": {
                        "description": "Partitions of the topics `topics ensure` creates.\n",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": None,
                        "default": "3",
                    },
                    "topic_replication_factor": {
                        "description": "Replication factor of new topics (unset: min(3, brokers)).\n",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": None,
                        "default": None,
                    },
                    "topic_retention_ms": {
                        "description": "retention.ms of new topics (unset: the broker's default).\n",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": None,
                        "default": None,
                    },
                    "topic_max_message_bytes": {
                        "description": "max.message.bytes of new topics (unset: message.max.bytes).\n",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": None,
                        "default": None,
                    },
                },
            }
        },
    }
