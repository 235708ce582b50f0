"""The ``ls`` commands of the operator CLI (``streams ls``, ``dlq ls``): one way to list a window.

:func:`add_ls_command` declares one (the common and window flags, its filters); :func:`run_listing`
runs it: scan the role's topic in the window the flags name (a progress bar on a terminal), then
print the listing as JSON (``--json``) or as lines followed by a count and the window scanned.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from airflow_kafka_events.cli_inspection import (
    add_common_args,
    add_window_args,
    emit_json,
    kafka_config,
    progress_bar,
    role_topic,
    run_command,
    window_of,
)

__all__ = ["add_ls_command", "run_listing"]


def add_ls_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    role: str,
    handler: Callable[[argparse.Namespace], int],
    *,
    help: str,
    description: str,
    filters: Sequence[tuple[str, str | None]],
) -> None:
    """The ``ls`` command of a group: the topic of ``role``, a window, and ``filters`` (flag, help)."""
    ls = commands.add_parser("ls", help=help, description=description)
    add_common_args(ls, topic_role=role)
    add_window_args(ls)
    group = ls.add_argument_group("filters")
    for flag, text in filters:
        group.add_argument(flag, default=None, help=text)
    ls.set_defaults(handler=handler, group_parser=ls)


def run_listing(
    args: argparse.Namespace,
    role: str,
    what: str,
    list_window: Callable[..., Any],
    filters: Mapping[str, Any],
    lines: Callable[[Any], Iterable[str]],
    count: Callable[[Any], str],
) -> int:
    """List ``what`` with ``list_window(config, topic, window=, timeout=, progress=, **filters)``.

    ``lines`` gives the printed lines of a listing, ``count`` its summary (e.g. ``"3 stream(s)"``).
    """

    def command() -> int:
        with progress_bar(args, f"scanning {what}") as progress:
            listing = list_window(
                kafka_config(args),
                role_topic(args, role),
                window=window_of(args),
                timeout=args.timeout,
                progress=progress,
                **filters,
            )
        if args.json:
            emit_json(listing.to_dict())
            return 0
        for line in lines(listing):
            print(line)
        print(f"\n{count(listing)}; {listing.window.describe()}")
        return 0

    return run_command(args, command)
