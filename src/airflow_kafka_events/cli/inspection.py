"""What the inspection commands (``streams``, ``dlq``, ``replay-assets``) share: flags and output.

* the Kafka flags (:func:`~airflow_kafka_events.cli.topics.add_kafka_connection_args`), ``--timeout``,
  ``--json`` and the window flags (``--since`` / ``--until``: ISO-8601, or ``15m`` / ``2h`` / ``7d``
  ago; ``--max-records``);
* the topic of a role from ``--topic``, else ``[kafka_events] <role>_topic`` (``AIRFLOW__KAFKA_EVENTS__*``
  or airflow.cfg, read without importing Airflow), else the default name;
* output: JSON with sorted keys on stdout (``--json``), or text; a progress bar (``rich``) on stderr
  only when stderr is a terminal and ``--json`` is off; with ``--json`` an error is also printed
  as ``{"error": {"type", "message"}}`` on stdout before the command exits non-zero.

Imports no Airflow module.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_kafka_events.cli.terminal import terminal_stream
from airflow_kafka_events.cli.topics import add_kafka_connection_args
from airflow_kafka_events.errors import AirflowKafkaEventsError

__all__ = [
    "add_command",
    "add_command_group",
    "add_common_args",
    "add_ls_command",
    "add_window_args",
    "emit_json",
    "kafka_config",
    "parse_time",
    "progress_bar",
    "role_topic",
    "run_command",
    "window_of",
]

_RELATIVE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_time(text: str) -> datetime:
    """``--since`` / ``--until``: ISO-8601 (no offset: UTC), or a duration ago (``90s``, ``15m``, ``7d``)."""
    match = _RELATIVE.match(text)
    if match:
        amount, unit = float(match.group(1)), match.group(2)
        return datetime.now(timezone.utc) - timedelta(**{_UNITS[unit]: amount})
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            "expected an ISO-8601 time (2026-12-01T10:00:00+00:00) or a duration ago (15m, 2h, 7d), "
            f"got {text!r}"
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


def add_command_group(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser], name: str, *, help: str, description: str
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    """Command group ``name`` (its help printed when no command is given); the subparsers of its commands."""
    group = subparsers.add_parser(name, help=help, description=description)
    group.set_defaults(handler=None, group_parser=group)
    return group.add_subparsers(title="commands", dest=f"{name}_command", metavar="COMMAND")


def add_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    handler: Callable[[argparse.Namespace], int],
    *,
    help: str,
    description: str | None = None,
) -> argparse.ArgumentParser:
    """Command ``name`` of a group, run by ``handler(args)``; its parser, for its arguments."""
    parser = commands.add_parser(name, help=help, description=description)
    parser.set_defaults(handler=handler, group_parser=parser)
    return parser


def add_common_args(parser: argparse.ArgumentParser, *, topic_role: str | None) -> None:
    """Kafka settings, ``--topic`` (for ``topic_role``), ``--timeout`` and ``--json``."""
    kafka = parser.add_argument_group("Kafka")
    add_kafka_connection_args(kafka)
    if topic_role is not None:
        option, default = _OPTIONS[topic_role]
        kafka.add_argument(
            "--topic", default=None, help=f"topic to read (default: [kafka_events] {option}, else {default})"
        )
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="seconds the command may wait for the brokers in all (%(default)s); unreachable brokers "
        "or refused credentials end it with an error",
    )
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON on stdout")


def add_window_args(
    parser: argparse.ArgumentParser,
    *,
    max_records: int = 1000,
    since_help: str = "records at or after TIME",
    until: bool = True,
    max_records_help: str = "read at most the newest N records of the window per partition (%(default)s)",
) -> None:
    """``--since`` [``--until``] ``--max-records``; a command whose window means more says how."""
    window = parser.add_argument_group("window (every command reads a bounded window)")
    window.add_argument("--since", type=parse_time, default=None, metavar="TIME", help=since_help)
    if until:
        window.add_argument(
            "--until", type=parse_time, default=None, metavar="TIME", help="records before TIME"
        )
    window.add_argument("--max-records", type=int, default=max_records, metavar="N", help=max_records_help)


#: role -> (option, default topic)
_OPTIONS = {
    "trigger-events": ("trigger_events_topic", "airflow.trigger-events"),
    "asset-events": ("asset_events_topic", "airflow.asset-events"),
    "dead-letters": ("dlq_topic", "airflow.kafka-events.dlq"),
    "stream-index": ("stream_index_topic", "airflow.kafka-events.stream-index"),
}


def configured_topic(role: str) -> str:
    """The configured topic of ``role`` (``[kafka_events]``), else its default name."""
    from airflow_kafka_events.kafka.topic_plan import configured_topic as configured

    return configured(*_OPTIONS[role])


def role_topic(args: argparse.Namespace, role: str) -> str:
    """``--topic``, else the configured topic of ``role``, else its default name."""
    if getattr(args, "topic", None):
        return str(args.topic)
    return configured_topic(role)


def kafka_config(args: argparse.Namespace) -> dict[str, Any]:
    """The librdkafka config of ``--bootstrap-servers`` / ``--properties`` / ``--property`` (and env)."""
    from airflow_kafka_events.kafka.settings import KafkaSettings

    settings = KafkaSettings.from_sources(
        bootstrap_servers=args.bootstrap_servers,
        properties_file=args.properties,
        overrides=dict(args.property) if args.property else None,
    )
    return dict(settings.config)


def window_of(args: argparse.Namespace) -> Any:
    from airflow_kafka_events.ui.inspection.window import ScanWindow

    return ScanWindow(since=args.since, until=getattr(args, "until", None), max_records=args.max_records)


def emit_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True, default=str))


@contextmanager
def progress_bar(args: argparse.Namespace, description: str) -> Iterator[Callable[[int, int], None] | None]:
    """A ``progress(done, total)`` callback drawing a bar on stderr, or ``None`` (``--json``, no terminal)."""
    if getattr(args, "json", False) or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(file=terminal_stream(sys.stderr)),
        transient=True,
        # what is printed meanwhile goes through the escaping streams, not the bar's raw console
        redirect_stdout=False,
        redirect_stderr=False,
    ) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def run_command(args: argparse.Namespace, command: Callable[[], int]) -> int:
    """``command()``; with ``--json`` a package error is also printed as JSON on stdout, then re-raised.

    Without ``--verbose`` the package's log lines (the Kafka client's retries) stay quiet: the
    error that ends a command says what they would.
    """
    if not getattr(args, "verbose", False):
        logging.getLogger("airflow_kafka_events").setLevel(logging.CRITICAL)
    try:
        return command()
    except AirflowKafkaEventsError as exc:
        if getattr(args, "json", False):
            from airflow_kafka_events.ui.inspection.redact import redact_text

            emit_json({"error": {"type": type(exc).__name__, "message": redact_text(str(exc))}})
        raise


# ----------------------------------------------------------------- ls commands
# The ``ls`` commands of the operator CLI (``streams ls``, ``dlq ls``): one way to list a window.
#
# :func:`add_ls_command` declares one -- the common and window flags, its filters, how a listing is
# printed -- and runs it: scan the role's topic in the window the flags name (a progress bar on a
# terminal), then print the listing as JSON (``--json``) or as lines followed by a count and the
# window scanned.  The inspection function is imported when the command runs, not when it is declared:
# a command passes a loader (a function that imports it and returns it), so that the CLI imports no
# inspection module (nor what it imports) to parse its arguments, and a misspelt name is an import
# that ruff and mypy check.
def add_ls_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    role: str,
    lister: Callable[[], Callable[..., Any]],
    *,
    what: str,
    help: str,
    description: str,
    filters: Sequence[tuple[str, str | None]],
    lines: Callable[[Any], Iterable[str]],
    count: Callable[[Any], str],
) -> None:
    """The ``ls`` command of a group, listing ``what`` in the topic of ``role``.

    ``lister`` imports and returns the :mod:`airflow_kafka_events.ui.inspection` function, called as
    ``function(config, topic, window=, timeout=, progress=, **filters)``; ``filters`` are its
    ``(flag, help)`` options (``--source-topic`` passes ``source_topic``).  ``lines`` gives the
    printed lines of a listing, ``count`` its summary (e.g. ``"3 stream(s)"``).
    """
    names = [flag.lstrip("-").replace("-", "_") for flag, _ in filters]

    def run(args: argparse.Namespace) -> int:
        list_window = lister()

        def command() -> int:
            with progress_bar(args, f"scanning {what}") as progress:
                listing = list_window(
                    kafka_config(args),
                    role_topic(args, role),
                    window=window_of(args),
                    timeout=args.timeout,
                    progress=progress,
                    **{name: getattr(args, name) for name in names},
                )
            if args.json:
                emit_json(listing.to_dict())
                return 0
            for line in lines(listing):
                print(line)
            print(f"\n{count(listing)}; {listing.window.describe()}")
            return 0

        return run_command(args, command)

    ls = add_command(commands, "ls", run, help=help, description=description)
    add_common_args(ls, topic_role=role)
    add_window_args(ls)
    group = ls.add_argument_group("filters")
    for flag, text in filters:
        group.add_argument(flag, default=None, help=text)
