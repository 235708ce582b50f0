"""``airflow-kafka-events bridge``: the partition bridge as a long-running command.

Imports no Airflow module: the bridge talks to Airflow through its REST API
(:mod:`airflow_kafka_events.bridge`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from airflow_kafka_events.cli.topics import add_kafka_connection_args

__all__ = [
    "RefusePassword",
    "add_authorization_args",
    "add_bridge_group",
]


def _bridge(args: argparse.Namespace) -> int:
    import logging

    from airflow_kafka_events.bridge.config import BridgeConfig
    from airflow_kafka_events.bridge.service import BridgeService

    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=args.log_level,
            stream=sys.stderr,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
    else:
        logging.getLogger().setLevel(args.log_level)
    if args.log_level != "DEBUG":  # one line per request is too much for a service log
        logging.getLogger("httpx").setLevel(logging.WARNING)
    config = BridgeConfig.from_args(args)
    service = BridgeService(config)
    service.install_signal_handlers()
    service.run()
    return 0


def add_authorization_args(group: argparse._ArgumentGroup, fate: str) -> None:
    """The bridge's authorization flags (``--allow``, ``--signing-key-file``); ``fate``: what becomes
    of an event they refuse (e.g. ``"dead-lettered"``)."""
    from airflow_kafka_events.bridge import config as bc

    group.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="RULE",
        help='allowlist rule as JSON, e.g. \'{"source_kinds": ["task"], "dag_ids": ["etl_*"]}\' '
        "(fields source_kinds, dag_ids, producers; repeat for more rules, or a JSON list in "
        f"${bc.ENV_ALLOW}); an event whose source matches no rule is {fate} (not-allowed). "
        "Default: any source",
    )
    group.add_argument(
        "--signing-key-file",
        dest="signing_key_files",
        action="append",
        type=Path,
        default=[],
        metavar="FILE",
        help="HMAC-SHA256 keys, one per line, current first (repeat; or os.pathsep-separated in "
        f"${bc.ENV_SIGNING_KEY_FILES}); when set, unsigned or wrongly signed events are {fate}",
    )


class RefusePassword(argparse.Action):
    """``--password`` is refused without echoing its value: command lines are visible to every user."""

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        parser.error(
            "the password is never taken from the command line: use --password-file or "
            "$AIRFLOW_KAFKA_EVENTS_BRIDGE_PASSWORD_FILE / $AIRFLOW_KAFKA_EVENTS_BRIDGE_PASSWORD"
        )


def add_bridge_group(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from airflow_kafka_events.bridge import config as bc

    bridge = subparsers.add_parser(
        "bridge",
        allow_abbrev=False,
        help="post Kafka asset events to Airflow's REST API with their partition key (long-running)",
        description=(
            "Consume asset events in a consumer group and create one Airflow asset event per Kafka "
            "event through POST /api/v2/assets/events, with its partition_key (so DAGs scheduled with "
            "PartitionedAssetTimetable run once per key); partition_date and the event's provenance "
            "travel in extra. Offsets are committed only after Airflow answered 2xx or the event was "
            "dead-lettered. Run more replicas with the same --group to scale. Kafka, topics, group, "
            f"API URL, username, --asset, --allow and signing keys also come from the environment "
            f"({bc.ENV_PREFIX}*, see below); the password comes from a file or the environment, never "
            "from a flag. Exits 0 after SIGTERM/SIGINT, 1 on a fatal error."
        ),
    )
    kafka = bridge.add_argument_group("Kafka")
    add_kafka_connection_args(kafka)
    kafka.add_argument(
        "--topic",
        default=None,
        metavar="T",
        help=f"topic to consume (default: ${bc.ENV_TOPIC}, else ${bc.ENV_ASSET_EVENTS_TOPIC}, "
        f"else {bc.DEFAULT_TOPIC})",
    )
    kafka.add_argument(
        "--group",
        dest="group_id",
        default=None,
        metavar="G",
        help=f"consumer group, shared by the replicas (default: ${bc.ENV_GROUP} or {bc.DEFAULT_GROUP})",
    )
    kafka.add_argument(
        "--dlq-topic",
        default=None,
        metavar="T",
        help=f"dead-letter topic; must exist (default: ${bc.ENV_DLQ_TOPIC} or {bc.DEFAULT_DLQ_TOPIC})",
    )
    kafka.add_argument("--batch-size", type=int, default=50, help="records fetched per poll (%(default)s)")
    api = bridge.add_argument_group("Airflow REST API")
    api.add_argument(
        "--api-url",
        default=None,
        metavar="URL",
        help=f"base URL of the api-server, e.g. http://127.0.0.1:8080 (default: ${bc.ENV_API_URL})",
    )
    api.add_argument(
        "--username",
        default=None,
        help=f"user with a role that may create asset events, e.g. op (default: ${bc.ENV_USERNAME})",
    )
    api.add_argument(
        "--password-file",
        type=Path,
        default=None,
        metavar="FILE",
        help=f"file holding the password, or a simple auth manager passwords JSON file (default: "
        f"${bc.ENV_PASSWORD_FILE}, else the password itself in ${bc.ENV_PASSWORD})",
    )
    api.add_argument("--password", nargs="?", action=RefusePassword, help=argparse.SUPPRESS)
    api.add_argument(
        "--request-timeout", type=float, default=10.0, help="seconds per HTTP request (%(default)s)"
    )
    api.add_argument(
        "--max-attempts",
        type=int,
        default=8,
        help="attempts per call on 5xx/408/425/429/connection errors before stopping (%(default)s)",
    )
    api.add_argument(
        "--backoff-initial", type=float, default=0.5, help="first retry delay in seconds (%(default)s)"
    )
    api.add_argument(
        "--backoff-max", type=float, default=30.0, help="longest retry delay in seconds (%(default)s)"
    )
    policy = bridge.add_argument_group("events")
    policy.add_argument(
        "--asset",
        dest="assets",
        action="append",
        default=[],
        metavar="PATTERN",
        help=f"only events of assets whose URI or name matches this fnmatch pattern (repeat, or "
        f"comma-separated in ${bc.ENV_ASSETS}); others are skipped. Default: every asset",
    )
    add_authorization_args(policy, "dead-lettered")
    policy.add_argument(
        "--max-causation-depth",
        type=int,
        default=bc.DEFAULT_MAX_CAUSATION_DEPTH,
        metavar="N",
        help="dead-letter events with more ancestor events than this (feedback loops) (%(default)s)",
    )
    policy.add_argument(
        "--skip-unpartitioned",
        action="store_true",
        help="commit events without a partition key without posting them (left to an AssetWatcher)",
    )
    policy.add_argument(
        "--recheck-records",
        type=int,
        default=20,
        metavar="N",
        help="first N records of a newly assigned partition are looked up in Airflow before posting "
        "(%(default)s)",
    )
    policy.add_argument(
        "--recent-events-limit",
        type=int,
        default=100,
        metavar="N",
        help="how many of the asset's most recent Airflow events that lookup reads (%(default)s)",
    )
    bridge.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="(%(default)s)",
    )
    bridge.set_defaults(handler=_bridge, group_parser=bridge)
