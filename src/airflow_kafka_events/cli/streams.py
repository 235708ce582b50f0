"""``airflow-kafka-events streams ls|show|tail``: trigger event streams in Kafka.

``ls`` reads the stream index (``--index-topic``, else ``[kafka_events] stream_index_topic``): every
stream, filtered, no window.  ``show`` and ``tail`` read the trigger events topic (``--topic``, else
``[kafka_events] trigger_events_topic``) through :mod:`airflow_kafka_events.ui.inspection`: ``show`` at
the location the index has for the stream, else by the per-key progress lookup (bounded by
``--since``, and by ``--written-since`` / ``--written-until`` when the time the stream was written
is known).  Imports no Airflow module.
"""

from __future__ import annotations

import argparse
from typing import Any

from airflow_kafka_events.cli.inspection import (
    add_command,
    add_command_group,
    add_common_args,
    add_window_args,
    emit_json,
    kafka_config,
    parse_time,
    role_topic,
    run_command,
    window_of,
)

__all__ = [
    "add_streams_group",
]

ROLE = "trigger-events"
INDEX_ROLE = "stream-index"


def _when(value: Any) -> str:
    return "-" if value is None else value.isoformat(timespec="seconds")


def _summary_line(s: Any) -> str:
    rate = "-" if s.pages_per_second is None else f"{s.pages_per_second:.1f}"
    line = f"{s.state:<9} {s.attempt:>7} {s.pages:>6} {_when(s.last_at):<25} {rate:>7}  {s.trigger_run_id}"
    return line + (f"\n          error: {s.error}" if s.error else "")


_SUMMARY_HEADER = f"{'STATE':<9} {'ATTEMPT':>7} {'PAGES':>6} {'LAST AT':<25} {'PAGES/S':>7}  STREAM"


def _page_line(page: Any) -> str:
    kind = "end" if page.is_last else "page"
    text = f"{page.offset:>8} attempt={page.attempt} {kind}={page.sequence_index} {_when(page.emitted_at)} "
    text += f"{page.record_bytes}B"
    if page.error:
        text += f" error: {page.error}"
    elif page.payload_preview:
        text += f" {page.payload_preview}"
    return text


def _show(args: argparse.Namespace) -> int:
    from airflow_kafka_events.ui.inspection.errors import InvalidWindowError
    from airflow_kafka_events.ui.inspection.streams import WrittenSpan, show_stream

    def command() -> int:
        # --since bounds how far back the per-key lookup reads; --written-since [--written-until]
        # (when the stream was written) bound it on both sides, and its attempt is read forward
        if args.written_until is not None and args.written_since is None:
            raise InvalidWindowError("--written-until needs --written-since (when the stream was written)")
        written = None if args.written_since is None else WrittenSpan(args.written_since, args.written_until)
        partition, last_offset = (None, None) if written is not None else _show_location(args)
        detail = show_stream(
            kafka_config(args),
            role_topic(args, ROLE),
            args.stream_id,
            window=window_of(args),
            partition=partition,
            last_offset=last_offset,
            written=written,
            timeout=args.timeout,
        )
        if args.json:
            emit_json(detail.to_dict())
            return 0
        s = detail.summary
        print(f"stream     {s.trigger_run_id}")
        print(f"dag/run    {s.dag_id} / {s.run_id} / task {s.task_id} (map index {s.map_index})")
        print(f"state      {s.state} (attempt {s.attempt}, generation {s.generation})")
        print(f"pages      {s.pages} (last sequence {s.last_sequence}); {s.pages_per_second or '-'} pages/s")
        print(f"written    {_when(s.first_at)} .. {_when(s.last_at)}")
        print(f"kafka      {s.topic}[{s.partition}] last offset {s.last_offset}")
        if s.error:
            print(f"error      {s.error}")
        for page in detail.pages:
            print(_page_line(page))
        print(detail.describe())
        return 0

    return run_command(args, command)


def _tail(args: argparse.Namespace) -> int:
    import json

    from airflow_kafka_events.ui.inspection.streams import tail_stream

    def command() -> int:
        pages = tail_stream(
            kafka_config(args),
            role_topic(args, ROLE),
            args.stream_id,
            follow=args.follow,
            from_start=args.from_start,
            timeout=args.timeout,
        )
        for page in pages:  # one JSON object per line with --json (a stream has no end to wait for)
            print(json.dumps(page.to_dict(), sort_keys=True) if args.json else _page_line(page), flush=True)
        return 0

    return run_command(args, command)


def _index_topic(args: argparse.Namespace) -> str:
    if getattr(args, "index_topic", None):
        return str(args.index_topic)
    return role_topic(argparse.Namespace(), INDEX_ROLE)


def _ls(args: argparse.Namespace) -> int:
    from airflow_kafka_events.ui.inspection.index_listing import StreamFilter
    from airflow_kafka_events.ui.inspection.streams import list_streams

    def command() -> int:
        filters = StreamFilter(args.dag_id, args.run_id, args.task_id, args.map_index, args.state)
        listing = list_streams(kafka_config(args), _index_topic(args), filters=filters, timeout=args.timeout)
        shown = listing.rows(args.offset, args.limit or None)
        if args.json:
            emit_json({**listing.to_dict(args.offset, args.limit or None), "offset": args.offset})
            return 0
        print(_SUMMARY_HEADER)
        for stream in shown:
            print(_summary_line(stream.summary))
        for skipped in listing.skipped:
            print(f"skipped index record {skipped.key!r}: {skipped.reason}")
        print(f"\n{len(listing.matched)} stream(s) match, {len(shown)} shown; {listing.describe()}")
        return 0

    return run_command(args, command)


def _show_location(args: argparse.Namespace) -> tuple[int | None, int | None]:
    """The stream's partition and latest offset as the stream index has them (``(None, None)``: not
    there, or the index cannot be read -- the per-key lookup finds it then)."""
    from airflow_kafka_events.errors import AirflowKafkaEventsError
    from airflow_kafka_events.streams.index.record import StreamRecord, stream_key
    from airflow_kafka_events.ui.inspection.index_reader import read_index

    try:
        snapshot = read_index(kafka_config(args), _index_topic(args), timeout=args.timeout)
    except AirflowKafkaEventsError:
        return None, None
    record = snapshot.records.get(stream_key(args.stream_id))
    if not isinstance(record, StreamRecord) or record.last_offset is None:
        return None, None
    return record.partition, record.last_offset


def add_streams_group(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    commands = add_command_group(
        subparsers,
        "streams",
        help="list, show and tail trigger event streams in Kafka",
        description="Trigger event streams in the trigger events topic (read-only).",
    )
    ls = add_command(
        commands,
        "ls",
        _ls,
        help="every stream of the stream index: state, attempt, pages, pages/s, error",
        description="One line per stream of the stream index (its latest attempt), newest activity first. "
        "Reads the compacted index topic ([kafka_events] stream_index_topic), not the streams: no window, "
        "nothing left out; index records that cannot be read are skipped and named.",
    )
    add_common_args(ls, topic_role=None)
    ls.add_argument(
        "--index-topic",
        default=None,
        help="the stream index topic (default: [kafka_events] stream_index_topic, else "
        "airflow.kafka-events.stream-index)",
    )
    wanted = ls.add_argument_group("filters")
    wanted.add_argument("--dag-id", default=None)
    wanted.add_argument("--run-id", default=None)
    wanted.add_argument("--task-id", default=None)
    wanted.add_argument("--map-index", type=int, default=None)
    wanted.add_argument("--state", choices=("running", "complete", "failed"), default=None)
    paging = ls.add_argument_group("paging")
    paging.add_argument("--limit", type=int, default=0, help="print at most N streams (0: all)")
    paging.add_argument("--offset", type=int, default=0, help="skip the first N streams")

    show = add_command(
        commands,
        "show",
        _show,
        help="one stream: its latest attempt and its envelopes",
        description="Find a stream by its id (dag_id/task_id/map_index/run_id) and list its latest attempt. "
        "The per-key lookup reads its partition backwards from the end to its latest envelope (--since: no "
        "further back than TIME); with --written-since (and --written-until), when the stream was written, "
        "only the offsets stamped in that time are looked through, and its latest attempt is read forward "
        "from its first offset.",
    )
    show.add_argument(
        "stream_id", metavar="STREAM_ID", help="the stream id (trigger_run_id), see `streams ls`"
    )
    add_common_args(show, topic_role=ROLE)
    show.add_argument(
        "--index-topic",
        default=None,
        help="the stream index topic, where the stream's location is looked up first (default: "
        "[kafka_events] stream_index_topic)",
    )
    add_window_args(
        show,
        since_help="the per-key lookup reads no record older than TIME",
        until=False,
        max_records_help="list at most N offsets of the latest attempt: the newest N, or with "
        "--written-since "
        "the first N from its first offset (more: said truncated; the state is then its latest envelope's) "
        "(%(default)s)",
    )
    written = show.add_argument_group("when the stream was written (bounds the lookup on both sides)")
    written.add_argument(
        "--written-since",
        type=parse_time,
        default=None,
        metavar="TIME",
        help="its records are at or after TIME",
    )
    written.add_argument(
        "--written-until", type=parse_time, default=None, metavar="TIME", help="its records are before TIME"
    )

    tail = add_command(
        commands,
        "tail",
        _tail,
        help="print a stream's envelopes as they are written",
        description="Print a stream's latest envelope (or its whole latest attempt with --from-start) and, "
        "with --follow, the next ones until the stream ends (Ctrl-C stops).",
    )
    tail.add_argument("stream_id", metavar="STREAM_ID")
    tail.add_argument("-f", "--follow", action="store_true", help="wait for new envelopes")
    tail.add_argument("--from-start", action="store_true", help="start at the latest attempt's first page")
    add_common_args(tail, topic_role=ROLE)
