"""``airflow-kafka-events dlq ls|show|replay``: dead letters, and their replay.

Reads the dead-letter topic (``--topic``, else ``[kafka_events] dlq_topic``) through
:mod:`airflow_kafka_events.ui.inspection`.  ``replay`` publishes the original record (key, value,
original headers: its idempotency key unchanged) to its source topic or ``--to``, after a
confirmation (``--yes`` skips it), and prints the receipt.  Where it may publish is decided by the
configuration, as in the view (:mod:`airflow_kafka_events.ui.inspection.replay_targets`): the CLI knows
the sources ``[kafka_events] dlq_topic`` / ``asset_events_topic`` name and the topics
``replay_extra_target_topics`` lists (environment or airflow.cfg); an asset watcher's topics, which
only Airflow's metadata database holds, are replayed to from the view, or listed in that option.
Imports no Airflow module.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Callable
from typing import Any, TextIO

from airflow_kafka_events.cli.inspection import (
    add_command,
    add_command_group,
    add_common_args,
    add_ls_command,
    configured_topic,
    emit_json,
    kafka_config,
    role_topic,
    run_command,
)
from airflow_kafka_events.errors import ConfigurationError

__all__ = [
    "add_dlq_group",
]

ROLE = "dead-letters"


def _line(r: Any) -> str:
    when = "-" if r.timestamp is None else r.timestamp.isoformat(timespec="seconds")
    ref = " (reference)" if r.is_reference else ""
    return (
        f"{r.partition}@{r.offset:<8} {when:<25} {r.reason:<22} {r.source_topic}[{r.source_partition}]@"
        f"{r.source_offset}{ref}  {r.consumer or '-'}\n    {r.error_type}: {r.error_message[:200]}"
    )


def _print_record(record: Any, file: TextIO | None = None) -> None:
    out = file or sys.stdout
    print(_line(record), file=out)
    print(
        f"    event {record.event_id or '-'} asset {record.asset_uri or '-'} key {record.key!r} "
        f"{record.size}B",
        file=out,
    )
    for name, value in record.headers:
        print(f"    header {name}: {value}", file=out)
    print(f"    payload ({record.payload_format}): {record.payload_preview}", file=out)


def _show(args: argparse.Namespace) -> int:
    from airflow_kafka_events.ui.inspection.dead_letters import get_dead_letter

    def command() -> int:
        record = get_dead_letter(
            kafka_config(args), role_topic(args, ROLE), args.partition, args.offset, timeout=args.timeout
        )
        if args.json:
            emit_json(record.to_dict())
        else:
            _print_record(record)
        return 0

    return run_command(args, command)


def _targets(topic: str) -> Any:
    """Where replays of ``topic``'s dead letters may go, by the configuration this CLI reads."""
    from airflow_kafka_events.airflow_config import airflow_option
    from airflow_kafka_events.kafka.topic_plan import SECTION
    from airflow_kafka_events.ui.inspection.replay_targets import (
        EXTRA_TARGETS_OPTION,
        ReplayTargets,
        topic_list,
    )

    return ReplayTargets.of(
        topic,
        configured_dlq_topic=configured_topic(ROLE),
        asset_events_topic=configured_topic("asset-events"),
        extra=topic_list(airflow_option(SECTION, EXTRA_TARGETS_OPTION)),
    )


def _confirm(args: argparse.Namespace, record: Any, target: str) -> bool:
    if args.yes:
        return True
    if not sys.stdin.isatty():
        raise ConfigurationError(
            "dlq replay asks for confirmation on a terminal: pass --yes to replay without it"
        )
    _print_record(record, sys.stderr)  # stdout stays the receipt's (--json)
    sys.stderr.write(f"Replay {record.topic}[{record.partition}]@{record.offset} to topic {target!r}? [y/N] ")
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in {"y", "yes"}


def _actor(args: argparse.Namespace) -> str:
    if args.actor:
        return str(args.actor)
    try:
        return f"{getpass.getuser()} (cli)"
    except (KeyError, OSError):  # no user name in this environment
        return "unknown (cli)"


def _replay(args: argparse.Namespace) -> int:
    from airflow_kafka_events.ui.inspection.dead_letters import load_dead_letter
    from airflow_kafka_events.ui.inspection.replay import replay_dead_letter

    def command() -> int:
        config, topic = kafka_config(args), role_topic(args, ROLE)
        targets = _targets(topic)
        loaded = load_dead_letter(config, topic, args.partition, args.offset, timeout=args.timeout)
        target = targets.target_for(loaded.record.source_topic, args.to)  # refused before asking
        if not _confirm(args, loaded.record, target):
            print("not replayed", file=sys.stderr)
            return 1
        receipt = replay_dead_letter(
            config,
            topic,
            args.partition,
            args.offset,
            targets=targets,
            target_topic=target,
            actor=_actor(args),
            timeout=args.timeout,
            loaded=loaded,
        )
        if args.json:
            emit_json(receipt.to_dict())
        else:
            print(
                f"replayed {receipt.dlq_topic}[{receipt.dlq_partition}]@{receipt.dlq_offset} "
                f"(from {receipt.source_topic}[{receipt.source_partition}]@{receipt.source_offset}"
                f"{', a reference: original re-read' if receipt.from_reference else ''}) to "
                f"{receipt.target_topic}[{receipt.target_partition}]@{receipt.target_offset}; "
                f"event {receipt.event_id or '-'}, idempotency key {receipt.idempotency_key or '-'}"
            )
        return 0

    return run_command(args, command)


def _coordinates(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "partition", type=int, metavar="PARTITION", help="partition of the dead letter (dlq ls)"
    )
    parser.add_argument("offset", type=int, metavar="OFFSET", help="offset of the dead letter (dlq ls)")


def _count(listing: Any) -> str:
    text = f"{len(listing.records)} dead letter(s)"
    if listing.not_dead_letters:
        text += f"; {listing.not_dead_letters} record(s) without the dead-letter headers skipped"
    return text


def _dead_letter_lister() -> Callable[..., Any]:
    """``list_dead_letters``, imported when ``ls`` runs."""
    from airflow_kafka_events.ui.inspection.dead_letters import list_dead_letters

    return list_dead_letters


def add_dlq_group(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    commands = add_command_group(
        subparsers,
        "dlq",
        help="list, show and replay dead letters",
        description="Dead letters in the dead-letter topic: list (a bounded window), show, replay.",
    )
    add_ls_command(
        commands,
        ROLE,
        _dead_letter_lister,
        what="dead letters",
        lines=lambda listing: map(_line, listing.records),
        count=_count,
        help="dead letters of a bounded window, by reason / source topic / consumer",
        description="Dead letters found in the window (filters apply to the window: it is what is scanned).",
        filters=[
            ("--reason", "x-reason, e.g. undecodable, not-allowed, unknown-asset"),
            ("--source-topic", None),
            ("--consumer", "a part of x-consumer (e.g. the group)"),
        ],
    )

    show = add_command(
        commands, "show", _show, help="one dead letter: headers and a redacted payload preview"
    )
    _coordinates(show)
    add_common_args(show, topic_role=ROLE)

    replay = add_command(
        commands,
        "replay",
        _replay,
        help="publish a dead letter's original record again (key, value, headers, idempotency key kept)",
        description="Publish the original record of a dead letter to its source topic (or --to) and print "
        "the receipt. A reference dead letter's original is re-read from its source coordinates. Asks for "
        "confirmation unless --yes.",
    )
    _coordinates(replay)
    replay.add_argument(
        "--to",
        default=None,
        metavar="TOPIC",
        help="publish to TOPIC instead of the source topic (one [kafka_events] replay_extra_target_topics "
        "lists)",
    )
    replay.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    replay.add_argument(
        "--actor", default=None, help="who replays, for the audit line (default: the OS user)"
    )
    add_common_args(replay, topic_role=ROLE)
