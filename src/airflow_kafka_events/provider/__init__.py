"""Provider metadata, read by Airflow's ProvidersManager through the ``apache_airflow_provider`` entry point.

Kept free of Airflow imports: ProvidersManager calls it while it is still discovering providers.
"""

from __future__ import annotations

from typing import Any

from airflow_kafka_events.__about__ import __version__

INTEGRATION = "Kafka Events"


def _option(kind: str, default: str | None, description: str, example: str | None = None) -> dict[str, Any]:
    """One ``[kafka_events]`` option as Airflow's provider schema describes it."""
    return {
        "description": f"{description}\n",
        "version_added": "0.1.0",
        "type": kind,
        "example": example,
        "default": default,
    }


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
                "options": _config_options(),
            }
        },
    }


def _config_options() -> dict[str, Any]:
    """The ``[kafka_events]`` options (``airflow config list`` shows them)."""
    return {
        "kafka_config_id": _option(
            "string",
            "kafka_default",
            "Default Airflow connection (type kafka) used by producers.",
            example="kafka_default",
        ),
        "trigger_events_topic": _option(
            "string", "airflow.trigger-events", "Default topic that streaming triggers write envelopes to."
        ),
        "stream_outage_timeout": _option(
            "float",
            "300",
            "Seconds a streaming trigger's page waits for unreachable Kafka brokers before the "
            "trigger fails (its producer's message.timeout.ms).",
        ),
        "stream_read_gc_threshold": _option(
            "integer",
            "50000",
            "While a task reads a stream (a consumer task, a producer's resume, @task.iterable over a "
            "stream), Python's first garbage-collector threshold is at "
            "least this many allocations (put back after), so a batch's decoded pages die young "
            "instead of being walked by collections of the whole process. 0: Python's own (700).",
        ),
        "stream_write_window": _option(
            "integer",
            "1024",
            "Pages a streaming trigger keeps in flight: it fetches and sends the next pages while "
            "the receipts of up to this many are outstanding (and at most 8 MiB of them), and takes "
            "the receipts in batches. 1: each page is acknowledged before the next is fetched. "
            "While the triggerer's producer queue for the connection is full "
            "(queue.buffering.max.messages / .kbytes), a page waits for room without blocking the "
            "event loop, and fails unsent after stream_outage_timeout.",
        ),
        "triggerer_freeze_heap": _option(
            "boolean",
            "true",
            "When a triggerer forks its runner (the process its triggers run in), collect the "
            "supervisor's garbage just before and gc.freeze() what the runner inherits, so the "
            "runner's full collections walk only its own objects (not ~275,000 inherited ones, "
            "0.3 s with the GIL held, which blocks its event loop); inherited objects that later "
            "die in a reference cycle are not reclaimed. false leaves the runner's collector alone.",
        ),
        "watcher_airflow_api_conn_id": _option(
            "string",
            "",
            "Airflow connection to the api-server (host: its base URL; login / password: a user "
            "allowed to read assets and asset events). Set, a watcher resuming after an unclean "
            "stop asks it which of its asset's events exist and does not fire them again. Empty: "
            "off (duplicates after a crash stay bounded by one position store interval).",
            example="airflow_api",
        ),
        "asset_events_topic": _option(
            "string", "airflow.asset-events", "Default topic for explicit asset events."
        ),
        "dlq_topic": _option(
            "string", "airflow.kafka-events.dlq", "Dead-letter topic (made by `topics ensure`)."
        ),
        "results_topic": _option(
            "string", "airflow.trigger-events", "Iteration results topic that `topics ensure` creates."
        ),
        "watcher_stops_topic": _option(
            "string",
            "airflow.kafka-events.watcher-stops",
            "Compacted topic of the asset watchers' clean-stop marks (made by `topics ensure`).",
        ),
        "asset_event_max_extra_bytes": _option(
            "integer", "65536", "Bound on an emitted asset event's extra, as compact UTF-8 JSON."
        ),
        "stream_index_topic": _option(
            "string",
            "airflow.kafka-events.stream-index",
            "Compacted topic of the stream index: a state record per stream and per consumer, read "
            "by the Streams page, the task-instance tabs, Health and `streams ls` (made by `topics "
            "ensure`; docs/stream-index.md).",
        ),
        "stream_index_every_pages": _option(
            "integer", "100", "A streaming trigger writes its index record every N pages."
        ),
        "stream_index_every_seconds": _option(
            "float",
            "10",
            "... or every S seconds (at its next page), whichever comes first; a consumer writes "
            "its position on the same cadence.",
        ),
        "stream_index_retention_ms": _option(
            "integer",
            "604800000",
            "retention.ms of the stream index topic (`topics ensure`): a stream leaves the index "
            "this long after its last record.",
        ),
        "topic_partitions": _option("integer", "3", "Partitions of the topics `topics ensure` creates."),
        "topic_replication_factor": _option(
            "integer", None, "Replication factor of new topics (unset: min(3, brokers))."
        ),
        "topic_retention_ms": _option(
            "integer", None, "retention.ms of new topics (unset: the broker's default)."
        ),
        "topic_max_message_bytes": _option(
            "integer", None, "max.message.bytes of new topics (unset: message.max.bytes)."
        ),
        "ui_kafka_config_id": _option(
            "string", "kafka_default", "The Airflow Kafka connection the Kafka Events view reads with."
        ),
        "ui_window_minutes": _option(
            "integer", "1440", "How far back a page of the view scans by default (at most 31 days)."
        ),
        "ui_max_records": _option(
            "integer",
            "1000",
            "The newest records per partition a page of the view reads by default (at most 20000).",
        ),
        "ui_stuck_after_seconds": _option(
            "integer", "600", "A running stream silent this long is listed as stuck on Health."
        ),
        "ui_bridge_group_ids": _option(
            "string",
            "airflow-kafka-events.bridge",
            "The partition bridges' consumer groups Health shows (commas).",
        ),
        "ui_freeze_heap": _option(
            "boolean",
            "true",
            "At the view's first request, collect garbage once and gc.freeze() the api-server's "
            "heap, so later full collections walk only what was made since (milliseconds, not "
            "0.4-1.6 s in some request); objects already alive then that later die in a reference "
            "cycle are not reclaimed. false leaves the api-server's collector alone.",
        ),
        "replay_extra_target_topics": _option(
            "string",
            "",
            "Topics (commas) a dead-letter replay from the view may publish to besides the dead "
            "letter's source topic. Empty: the source topic only.",
        ),
    }
