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
            {"integration-name": INTEGRATION, "python-modules": ["airflow_kafka_events.provider.hook"]},
        ],
        "triggers": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "airflow_kafka_events.streams.producing.trigger",
                    "airflow_kafka_events.streams.producing.wrapper",
                    "airflow_kafka_events.watcher.trigger",
                ],
            },
        ],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "airflow_kafka_events.streams.producing.operator",
                    "airflow_kafka_events.streams.consuming.operator",
                ],
            },
        ],
        # needs the messaging extra (apache-airflow-providers-common-messaging); skipped without it
        "queues": ["airflow_kafka_events.watcher.message_queue.KafkaEventsMessageQueueProvider"],
        "task-decorators": [
            {
                "name": "stream_consumer",
                "class-name": "airflow_kafka_events.streams.consuming.decorator.stream_consumer_task",
            },
            {"name": "iterable", "class-name": "airflow_kafka_events.iteration.decorator.iterable_task"},
        ],
        "plugins": [
            {
                "name": "airflow_kafka_events",
                "plugin-class": "airflow_kafka_events.ui.plugin.KafkaEventsPlugin",
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
                    "watcher_stops_topic": {
                        "description": (
                            "Compacted topic of the asset watchers' clean-stop marks (made by `topics "
                            "ensure`).\n"
                        ),
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": None,
                        "default": "airflow.kafka-events.watcher-stops",
                    },
                    "asset_event_max_extra_bytes": {
                        "description": "Bound on an emitted asset event's extra, as compact UTF-8 JSON.\n",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": None,
                        "default": "65536",
                    },
                    "stream_index_topic": {
                        "description": (
                            "Compacted topic of the stream index: a state record per stream and per "
                            "consumer, read by the Streams page, the task-instance tabs, Health and "
                            "`streams ls` (made by `topics ensure`; docs/stream-index.md).\n"
                        ),
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": None,
                        "default": "airflow.kafka-events.stream-index",
                    },
                    "stream_index_every_pages": {
                        "description": "A streaming trigger writes its index record every N pages.\n",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": None,
                        "default": "100",
                    },
                    "stream_index_every_seconds": {
                        "description": (
                            "... or every S seconds (at its next page), whichever comes first; a consumer "
                            "writes its position on the same cadence.\n"
                        ),
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": None,
                        "default": "10",
                    },
                    "stream_index_retention_ms": {
                        "description": (
                            "retention.ms of the stream index topic (`topics ensure`): a stream leaves the "
                            "index this long after its last record.\n"
                        ),
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": None,
                        "default": "604800000",
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
                    "ui_kafka_config_id": {
                        "description": "The Airflow Kafka connection the Kafka Events view reads with.\n",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": None,
                        "default": "kafka_default",
                    },
                    "ui_window_minutes": {
                        "description": (
                            "How far back a page of the view scans by default (at most 31 days).\n"
                        ),
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": None,
                        "default": "1440",
                    },
                    "ui_max_records": {
                        "description": (
                            "The newest records per partition a page of the view reads by default "
                            "(at most 20000).\n"
                        ),
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": None,
                        "default": "1000",
                    },
                    "ui_stuck_after_seconds": {
                        "description": "A running stream silent this long is listed as stuck on Health.\n",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": None,
                        "default": "600",
                    },
                    "ui_bridge_group_ids": {
                        "description": "The partition bridges' consumer groups Health shows (commas).\n",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": None,
                        "default": "airflow-kafka-events.bridge",
                    },
                    "ui_freeze_heap": {
                        "description": (
                            "At the view's first request, collect garbage once and gc.freeze() the "
                            "api-server's heap, so later full collections walk only what was made since "
                            "(milliseconds, not 0.4-1.6 s in some request); objects already alive then "
                            "that later die in a reference cycle are not reclaimed. false leaves the "
                            "api-server's collector alone.\n"
                        ),
                        "version_added": "0.1.0",
                        "type": "boolean",
                        "example": None,
                        "default": "true",
                    },
                    "replay_extra_target_topics": {
                        "description": (
                            "Topics (commas) a dead-letter replay from the view may publish to besides "
                            "the dead letter's source topic. Empty: the source topic only.\n"
                        ),
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": None,
                        "default": "",
                    },
                },
            }
        },
    }
