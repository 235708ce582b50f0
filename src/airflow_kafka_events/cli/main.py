"""The ``airflow-kafka-events`` command line.

Commands come in groups (``airflow-kafka-events <group> <command> ...``).  A group is a function
that adds its sub-parser to the top-level sub-parsers and sets ``handler`` on each command;
:data:`COMMAND_GROUPS` lists them, so a new group is one function plus one entry there.

Handlers import what they need when they run: importing this module imports no Airflow module.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_kafka_events.__about__ import __version__
from airflow_kafka_events.cli.bridge import add_bridge_group
from airflow_kafka_events.cli.dlq import add_dlq_group
from airflow_kafka_events.cli.replay import add_replay_group
from airflow_kafka_events.cli.schemas import add_schemas_group
from airflow_kafka_events.cli.streams import add_streams_group
from airflow_kafka_events.cli.terminal import escaped_output
from airflow_kafka_events.cli.topics import add_kafka_connection_args, add_topics_group
from airflow_kafka_events.errors import AirflowKafkaEventsError

if TYPE_CHECKING:
    from airflow_kafka_events.local_broker.broker import LocalKafkaBroker
    from airflow_kafka_events.local_broker.cluster import LocalKafkaCluster

#: Exit codes.
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_RUNNING = 3

Handler = Callable[[argparse.Namespace], int]


# --------------------------------------------------------------------------- kafka group
def _broker(args: argparse.Namespace) -> LocalKafkaBroker:
    from airflow_kafka_events.local_broker.broker import LocalKafkaBroker

    return LocalKafkaBroker(
        state_dir=args.state_dir,
        port=getattr(args, "port", None),
        controller_port=getattr(args, "controller_port", None),
        version=args.kafka_version,
        cache_dir=args.cache_dir,
        heap=getattr(args, "heap", None) or "512m",
    )


def _cluster(args: argparse.Namespace) -> LocalKafkaCluster | None:
    """The cluster of ``--state-dir`` (or the one ``--brokers``/``--security`` ask for); else ``None``."""
    from airflow_kafka_events.local_broker.cluster import LocalKafkaCluster, wants_cluster

    brokers, security = getattr(args, "brokers", None), getattr(args, "security", None)
    if not wants_cluster(args.state_dir, brokers, security):
        return None
    heap = getattr(args, "heap", None)
    return LocalKafkaCluster(
        state_dir=args.state_dir,
        brokers=brokers,
        security=security,
        version=args.kafka_version,
        cache_dir=args.cache_dir,
        **({"heap": heap} if heap else {}),
    )


def _cluster_report(cluster: LocalKafkaCluster, args: argparse.Namespace) -> None:
    print("\n".join(cluster.report(conn_id=args.conn_id, show_password=args.show_password)))


def _kafka_start(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    if cluster is not None:
        cluster.start(timeout=args.timeout)
        _cluster_report(cluster, args)
        return EXIT_OK
    status = _broker(args).start(timeout=args.timeout)
    print(f"bootstrap.servers={status.bootstrap_servers}")
    if args.verbose:
        print(f"pid={status.pid} state_dir={status.state_dir} version={status.version}", file=sys.stderr)
    return EXIT_OK


def _kafka_stop(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    if cluster is not None:
        pids = cluster.stop(timeout=args.timeout)
        print(f"stopped (pids {', '.join(map(str, pids))})" if pids else "not running")
        return EXIT_OK
    broker = _broker(args)
    before = broker.status()
    broker.stop(timeout=args.timeout)
    print(f"stopped (pid {before.pid})" if before.running else "not running")
    return EXIT_OK


def _kafka_status(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    if cluster is not None:
        _cluster_report(cluster, args)
        return EXIT_OK if cluster.status().running else EXIT_NOT_RUNNING
    status = _broker(args).status()
    if status.running:
        print(
            f"running pid={status.pid} bootstrap.servers={status.bootstrap_servers} "
            f"version={status.version} state_dir={status.state_dir}"
        )
        return EXIT_OK
    print(f"stopped state_dir={status.state_dir}")
    return EXIT_NOT_RUNNING


def _kafka_fetch(args: argparse.Namespace) -> int:
    libs = _broker(args).ensure_jars()
    print(f"libs={libs}")
    if args.schema_registry:
        from airflow_kafka_events.local_broker.registry import ensure_registry

        print(f"schema_registry={ensure_registry(args.cache_dir)}")
    return EXIT_OK


def add_kafka_group(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from airflow_kafka_events.local_broker._common import DEFAULT_KAFKA_VERSION
    from airflow_kafka_events.local_broker.security import SECURITY_CHOICES

    group = subparsers.add_parser(
        "kafka",
        help="run a local Kafka broker or cluster (KRaft, no Docker)",
        description="Run a local Apache Kafka broker or cluster from jars fetched with Maven.",
    )
    commands = group.add_subparsers(title="commands", dest="kafka_command", metavar="COMMAND")

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="broker state dir (default: $AIRFLOW_KAFKA_EVENTS_STATE or "
        "~/.local/state/airflow-kafka-events/kafka)",
    )
    common.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="jar cache (default: $AIRFLOW_KAFKA_EVENTS_CACHE or ~/.cache/airflow-kafka-events)",
    )
    common.add_argument("--kafka-version", default=DEFAULT_KAFKA_VERSION, help="Kafka release (%(default)s)")
    connection = argparse.ArgumentParser(add_help=False)
    connection.add_argument("--conn-id", default="kafka_default", help="Airflow connection id to print")
    connection.add_argument(
        "--show-password", action="store_true", help="print the SASL password (masked otherwise)"
    )

    start = commands.add_parser(
        "start", parents=[common, connection], help="start the broker and wait until it serves requests"
    )
    start.add_argument(
        "--brokers", type=int, default=None, help="nodes of a KRaft cluster (default: recorded, else 1)"
    )
    start.add_argument(
        "--security",
        choices=SECURITY_CHOICES,
        default=None,
        help="clients' listener: plaintext or sasl_ssl (SCRAM-SHA-512 over TLS); default: recorded",
    )
    start.add_argument(
        "--port", type=int, default=None, help="client port (default: the recorded one, else 39092/free)"
    )
    start.add_argument("--controller-port", type=int, default=None, help="KRaft controller port")
    start.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for readiness")
    start.add_argument("--heap", default=None, help="JVM max heap per node (512m; 256m in cluster mode)")
    start.set_defaults(handler=_kafka_start)

    stop = commands.add_parser("stop", parents=[common], help="stop the broker (by pid)")
    stop.add_argument("--timeout", type=float, default=30.0, help="seconds before SIGKILL")
    stop.set_defaults(handler=_kafka_stop)

    status = commands.add_parser(
        "status", parents=[common, connection], help="exit 0 when the broker runs, 3 when it does not"
    )
    status.set_defaults(handler=_kafka_status)

    fetch = commands.add_parser("fetch", parents=[common], help="only fetch the broker's jars")
    fetch.add_argument(
        "--schema-registry",
        action="store_true",
        help="also fetch the local schema registry (Apicurio Registry, for the tests; needs Java 21+ to run)",
    )
    fetch.set_defaults(handler=_kafka_fetch)

    group.set_defaults(handler=None, group_parser=group)


# --------------------------------------------------------------------------- emit group
def _iso_datetime(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO-8601 datetime: {text!r}") from exc


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {type(value).__name__}")
    return value


#: Producer name of events emitted by ``airflow-kafka-events emit`` without ``--producer``.
CLI_PRODUCER = "airflow-kafka-events-cli"


def _emit(args: argparse.Namespace) -> int:
    import logging
    import os

    from airflow_kafka_events.assets.publish import ENV_PRODUCER, emit
    from airflow_kafka_events.kafka.producer import close_all_producers

    if not getattr(args, "verbose", False) and not logging.getLogger().handlers:
        # the error line names the broker and the cause; -v shows the Kafka client's own log lines
        logging.getLogger("airflow_kafka_events").addHandler(logging.NullHandler())
    try:
        receipt = emit(
            args.asset,
            name=args.name,
            partition_key=args.partition_key,
            partition_date=args.partition_date,
            extra=args.extra,
            idempotency_key=args.idempotency_key,
            causation=args.causation or None,
            topic=args.topic,
            producer=args.producer or os.environ.get(ENV_PRODUCER) or CLI_PRODUCER,
            bootstrap_servers=args.bootstrap_servers,
            properties_file=args.properties,
            overrides=dict(args.property) if args.property else None,
            timeout=args.timeout,
            max_extra_bytes=args.max_extra_bytes,
        )
    finally:
        # The emit's producer gave up at --timeout: nothing of it is left to wait for, so exit
        # does not wait either (never librdkafka's default 300 s).
        close_all_producers(timeout=min(2.0, args.timeout))
    print(receipt.to_json())
    return EXIT_OK


def add_emit_group(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from airflow_kafka_events.assets.validation import DEFAULT_MAX_EXTRA_BYTES

    emit = subparsers.add_parser(
        "emit",
        help="publish one asset event to Kafka from outside Airflow and print its receipt as JSON",
        description=(
            "Publish one asset event (source kind 'external') and wait until Kafka acknowledged it "
            "(acks=all). The printed receipt acknowledges persistence in Kafka, not in Airflow. "
            "No Airflow module, service or credential is used. Values of extra under sensitive key "
            "names (password, token, api_key, secret, ...) are replaced by '***'."
        ),
    )
    emit.add_argument("--asset", required=True, metavar="URI", help="asset URI (as in Asset(uri=...))")
    emit.add_argument("--name", default=None, help="asset name (default: the URI)")
    emit.add_argument("--partition-key", default=None, metavar="K")
    emit.add_argument(
        "--partition-date",
        type=_iso_datetime,
        default=None,
        metavar="ISO",
        help="timezone-aware ISO-8601 datetime, e.g. 2026-01-31T00:00:00+00:00 (needs --partition-key)",
    )
    emit.add_argument("--extra", type=_json_object, default=None, metavar="JSON", help="a JSON object")
    emit.add_argument(
        "--idempotency-key",
        default=None,
        metavar="K",
        help="default: sha256 of the event's content; pass distinct keys to publish identical events",
    )
    emit.add_argument(
        "--causation", action="append", default=[], metavar="EVENT_ID", help="id of a causing event (repeat)"
    )
    add_kafka_connection_args(emit)
    emit.add_argument(
        "--topic",
        default=None,
        metavar="T",
        help="default: $AIRFLOW__KAFKA_EVENTS__ASSET_EVENTS_TOPIC or airflow.asset-events",
    )
    emit.add_argument(
        "--producer",
        default=None,
        metavar="NAME",
        help=f"name of the producing system (default: $AIRFLOW_KAFKA_EVENTS_PRODUCER or {CLI_PRODUCER})",
    )
    emit.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the broker's ack")
    emit.add_argument(
        "--max-extra-bytes",
        type=int,
        default=DEFAULT_MAX_EXTRA_BYTES,
        help="bound on extra as compact UTF-8 JSON (%(default)s)",
    )
    emit.set_defaults(handler=_emit, group_parser=emit)


#: Command groups, in help order.
COMMAND_GROUPS: list[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]] = [
    add_kafka_group,
    add_emit_group,
    add_bridge_group,
    add_topics_group,
    add_streams_group,
    add_dlq_group,
    add_replay_group,
    add_schemas_group,
]


# --------------------------------------------------------------------------- entry point
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="airflow-kafka-events",
        description="Stream Airflow trigger events and asset events through Apache Kafka.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="full error messages and progress on stderr"
    )
    groups = parser.add_subparsers(title="command groups", dest="group", metavar="GROUP")
    for add_group in COMMAND_GROUPS:
        add_group(groups)
    parser.set_defaults(handler=None, group_parser=parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI; all it prints goes through :func:`~airflow_kafka_events.cli.terminal.escape_controls`."""
    with escaped_output():
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = args.handler
    if handler is None:
        args.group_parser.print_help(sys.stderr)
        return EXIT_USAGE
    if args.verbose:
        import logging

        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
    try:
        return handler(args)
    except AirflowKafkaEventsError as exc:
        from airflow_kafka_events.ui.inspection.redact import redact_text

        text = redact_text(str(exc))  # an error may quote a record's data
        message = text if args.verbose else (text.splitlines() or [type(exc).__name__])[0]
        print(f"airflow-kafka-events: error: {message}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("airflow-kafka-events: interrupted", file=sys.stderr)
        return 130
    except Exception:
        # printed here, inside the escaping streams (a traceback may quote a record's data)
        import traceback

        from airflow_kafka_events.ui.inspection.redact import redact_text

        print(redact_text(traceback.format_exc()), file=sys.stderr, end="")
        return EXIT_ERROR


if __name__ == "__main__":
    raise SystemExit(main())
