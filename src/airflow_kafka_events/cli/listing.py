"""The ``ls`` commands of the operator CLI (``streams ls``, ``dlq ls``): one way to list a window.

:func:`add_ls_command` declares one -- the common and window flags, its filters, how a listing is
printed -- and runs it: scan the role's topic in the window the flags name (a progress bar on a
terminal), then print the listing as JSON (``--json``) or as lines followed by a count and the
window scanned.  The inspection function is imported when the command runs, not when it is declared:
a command passes a loader (a function that imports it and returns it), so that the CLI imports no
inspection module (nor what it imports) to parse its arguments, and a misspelt name is an import
that ruff and mypy check.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from airflow_kafka_events.cli.inspection import (
    add_common_args,
    add_window_args,
    emit_json,
    kafka_config,
    progress_bar,
    role_topic,
    run_command,
    window_of,
)

__all__ = [
    "add_ls_command",
]


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
    ls = commands.add_parser("ls", help=help, description=description)
    add_common_args(ls, topic_role=role)
    add_window_args(ls)
    group = ls.add_argument_group("filters")
    for flag, text in filters:
        group.add_argument(flag, default=None, help=text)
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

    ls.set_defaults(handler=run, group_parser=ls)
