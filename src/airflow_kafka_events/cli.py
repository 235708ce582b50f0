"""The ``airflow-kafka-events`` command line.

Commands come in groups (``airflow-kafka-events <group> <command> ...``).  A group is a function
that adds its sub-parser to the top-level sub-parsers and sets ``handler`` on each command;
:data:`COMMAND_GROUPS` lists them, so a new group is one function plus one entry there.

Handlers import what they need when they run: importing this module imports no Airflow module.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from airflow_kafka_events.__about__ import __version__
from airflow_kafka_events.errors import AirflowKafkaEventsError

if TYPE_CHECKING:
    from airflow_kafka_events.local_broker import LocalKafkaBroker

#: Exit codes.
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_RUNNING = 3

Handler = Callable[[argparse.Namespace], int]


# --------------------------------------------------------------------------- kafka group
def _broker(args: argparse.Namespace) -> LocalKafkaBroker:
    from airflow_kafka_events.local_broker import LocalKafkaBroker

    return LocalKafkaBroker(
        state_dir=args.state_dir,
        port=getattr(args, "port", None),
        controller_port=getattr(args, "controller_port", None),
        version=args.kafka_version,
        cache_dir=args.cache_dir,
        heap=getattr(args, "heap", "512m"),
    )


def _kafka_start(args: argparse.Namespace) -> int:
    status = _broker(args).start(timeout=args.timeout)
    print(f"bootstrap.servers={status.bootstrap_servers}")
    if args.verbose:
        print(f"pid={status.pid} state_dir={status.state_dir} version={status.version}", file=sys.stderr)
    return EXIT_OK


def _kafka_stop(args: argparse.Namespace) -> int:
    broker = _broker(args)
    before = broker.status()
    broker.stop(timeout=args.timeout)
    print(f"stopped (pid {before.pid})" if before.running else "not running")
    return EXIT_OK


def _kafka_status(args: argparse.Namespace) -> int:
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
    return EXIT_OK


def add_kafka_group(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from airflow_kafka_events.local_broker import DEFAULT_KAFKA_VERSION

    group = subparsers.add_parser(
        "kafka",
        help="run a local single-node Kafka broker (KRaft, no Docker)",
        description="Run a local single-node Apache Kafka broker from jars fetched with Maven.",
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

    start = commands.add_parser(
        "start", parents=[common], help="start the broker and wait until it serves requests"
    )
    start.add_argument(
        "--port", type=int, default=None, help="client port (default: the recorded one, else 39092/free)"
    )
    start.add_argument("--controller-port", type=int, default=None, help="KRaft controller port")
    start.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for readiness")
    start.add_argument("--heap", default="512m", help="JVM max heap (%(default)s)")
    start.set_defaults(handler=_kafka_start)

    stop = commands.add_parser("stop", parents=[common], help="stop the broker (by pid)")
    stop.add_argument("--timeout", type=float, default=30.0, help="seconds before SIGKILL")
    stop.set_defaults(handler=_kafka_stop)

    status = commands.add_parser(
        "status", parents=[common], help="exit 0 when the broker runs, 3 when it does not"
    )
    status.set_defaults(handler=_kafka_status)

    fetch = commands.add_parser("fetch", parents=[common], help="only fetch the broker's jars")
    fetch.set_defaults(handler=_kafka_fetch)

    group.set_defaults(handler=None, group_parser=group)


#: Command groups, in help order.
COMMAND_GROUPS: list[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]] = [
    add_kafka_group,
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
        message = str(exc) if args.verbose else (str(exc).splitlines() or [type(exc).__name__])[0]
        print(f"airflow-kafka-events: error: {message}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("airflow-kafka-events: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
