"""``airflow-kafka-events topics ...``: the topics this package's configuration names.

Imports no Airflow module: the configuration comes from flags, ``AIRFLOW__KAFKA_EVENTS__*`` or
airflow.cfg (read as a file), Kafka settings as for ``emit`` (``--bootstrap-servers``,
``--properties``, ``--property``, ``KAFKA_BOOTSTRAP_SERVERS``, ``AIRFLOW_KAFKA_EVENTS_PROPERTIES``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def _topics_ensure(args: argparse.Namespace) -> int:
    from airflow_kafka_events.kafka.clients import new_admin
    from airflow_kafka_events.kafka.settings import KafkaSettings
    from airflow_kafka_events.kafka.topic_plan import TopicSettings, WantedTopic, configured_topics
    from airflow_kafka_events.kafka.topic_plan import ensure_configured_topics as ensure
    from airflow_kafka_events.kafka.topics import client_message_max_bytes

    kafka = KafkaSettings.from_sources(
        bootstrap_servers=args.bootstrap_servers,
        properties_file=args.properties,
        overrides=dict(args.property) if args.property else None,
    )
    settings = TopicSettings.from_sources(
        partitions=args.partitions,
        replication_factor=args.replication_factor,
        retention_ms=args.retention_ms,
        max_message_bytes=args.max_message_bytes,
    )
    wanted = [WantedTopic(name, ("--topic",)) for name in args.topics] or configured_topics()
    admin = new_admin(kafka.admin_config(), name="topics-ensure")
    producer_limit = client_message_max_bytes(kafka.producer_config())
    reports = ensure(
        admin,
        wanted,
        settings,
        apply_configs=args.apply_configs,
        message_max_bytes=producer_limit,
        timeout=args.timeout,
    )
    if args.json:
        print(json.dumps([r.to_dict() for r in reports], indent=2, sort_keys=True))
    else:
        for report in reports:
            print(report.line())
        if any(r.action == "differs" for r in reports) and not args.apply_configs:
            print("(configs are changed only with --apply-configs; partitions and replication never)")
    return 0


def parse_property(text: str) -> tuple[str, str]:
    """A ``--property KEY=VALUE`` argument."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def add_kafka_connection_args(parser: Any) -> None:
    """The Kafka settings flags every CLI command takes (``KafkaSettings.from_sources`` reads them)."""
    parser.add_argument(
        "--bootstrap-servers",
        default=None,
        help="Kafka bootstrap servers (default: $KAFKA_BOOTSTRAP_SERVERS)",
    )
    parser.add_argument(
        "--properties",
        type=Path,
        default=None,
        metavar="FILE",
        help="librdkafka properties file (default: $AIRFLOW_KAFKA_EVENTS_PROPERTIES)",
    )
    parser.add_argument(
        "--property",
        type=parse_property,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra librdkafka setting (repeat); overrides the file and the flags",
    )
    parser.add_argument(
        "--schema-registry-url",
        dest="property",
        type=lambda url: ("schema.registry.url", url),
        action="append",
        metavar="URL",
        help="a Confluent-compatible schema registry: records are written in its wire format (credentials, "
        "TLS and the subject strategy as schema.registry.* keys of --properties / --property)",
    )


def add_topics_group(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = subparsers.add_parser(
        "topics",
        help="create the topics the configuration names (trigger events, asset events, DLQ, results, "
        "watcher stops, stream index)",
        description="Manage the Kafka topics this package uses.",
    )
    commands = group.add_subparsers(title="commands", dest="topics_command", metavar="COMMAND")
    ensure = commands.add_parser(
        "ensure",
        help="create missing topics, report (and with --apply-configs fix) the settings of existing ones",
        description=(
            "Create every topic the configuration names ([kafka_events] trigger_events_topic, "
            "asset_events_topic, dlq_topic, results_topic, watcher_stops_topic and stream_index_topic "
            "(both compacted; the stream index's keys expire after stream_index_retention_ms) from "
            "AIRFLOW__KAFKA_EVENTS__* or airflow.cfg, else their defaults) that does not exist, and print "
            "what differs on the others. Idempotent. "
            "Configs (retention, size limit, min ISR) change only with --apply-configs; partitions are "
            "never added (the topics are keyed) and the replication factor is never changed."
        ),
    )
    kafka = ensure.add_argument_group("Kafka")
    add_kafka_connection_args(kafka)
    wanted = ensure.add_argument_group("topics (default: [kafka_events] topic_* options, else as shown)")
    wanted.add_argument("--partitions", type=int, default=None, help="partitions of new topics (3)")
    wanted.add_argument(
        "--replication-factor", type=int, default=None, help="default: min(3, brokers in the cluster)"
    )
    wanted.add_argument("--retention-ms", type=int, default=None, help="retention.ms (-1: forever)")
    wanted.add_argument(
        "--max-message-bytes",
        type=int,
        default=None,
        help="max.message.bytes (default for new topics: the producer's message.max.bytes)",
    )
    wanted.add_argument(
        "--topic",
        dest="topics",
        action="append",
        default=[],
        metavar="NAME",
        help="ensure this topic instead of the configured ones (repeat)",
    )
    ensure.add_argument(
        "--apply-configs", action="store_true", help="set differing configs of existing topics"
    )
    ensure.add_argument("--json", action="store_true", help="print the reports as JSON")
    ensure.add_argument("--timeout", type=float, default=30.0, help="seconds per admin request (%(default)s)")
    ensure.set_defaults(handler=_topics_ensure, group_parser=ensure)
    group.set_defaults(handler=None, group_parser=group)


__all__ = ["add_topics_group"]
