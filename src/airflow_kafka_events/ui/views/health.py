"""Health: watchers (triggerer, lag per partition), bridges (lag, last post), streams stuck too long.

* a watcher's lag on a partition is the partition's end offset minus the position it stored in
  its asset's state store (the first record whose asset event Airflow has not confirmed);
* a bridge's lag is the end offset minus what its consumer group committed
  (``[kafka_events] ui_bridge_group_ids``), and it is *running* while its group has a member
  (*not running* when none: stopped, or never started); the last post is the newest Airflow
  asset event carrying a bridge's provenance;
* a stream is stuck when it is still running and wrote nothing for
  ``[kafka_events] ui_stuck_after_seconds`` (as the stream index has it).

Only offsets are read for the lags (no records); the stuck streams come from the stream index.
The Kafka reads of a page run at once (each waits on its own broker round trips), beside the
metadata-DB queries.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

from airflow.api_fastapi.common.db.common import SessionDep
from fastapi import APIRouter
from fastapi.responses import Response

from airflow_kafka_events.errors import AirflowKafkaEventsError
from airflow_kafka_events.ui.airflow_state import WatcherState, last_bridge_post, watchers
from airflow_kafka_events.ui.inspection.index_listing import StreamFilter
from airflow_kafka_events.ui.inspection.streams import StreamListing, list_streams
from airflow_kafka_events.ui.kafka_access import committed_offsets, end_offsets, group_members
from airflow_kafka_events.ui.views.common import PageRequest, PageRequestDep

__all__ = [
    "router",
]

router = APIRouter()


T = TypeVar("T")


def _or_error(call: Callable[[], T]) -> T | str:
    """``call()``, or the text of the package error it raised (each part of the page names its own)."""
    try:
        return call()
    except AirflowKafkaEventsError as exc:
        return f"{type(exc).__name__}: {exc}"


class _Ends:
    """End offsets per topic, read once per page (from the page's thread only)."""

    def __init__(self, page: PageRequest) -> None:
        self._page = page
        self._ends: dict[str, dict[int, int] | str] = {}

    def of(self, topic: str) -> dict[int, int] | str:
        """``{partition: end}``, or the error text when they cannot be read."""
        if topic not in self._ends:
            self._ends[topic] = _or_error(lambda: end_offsets(self._page.config(), topic))
        return self._ends[topic]


def _lags(ends: dict[int, int] | str, positions: dict[int, int | None]) -> list[dict[str, Any]] | str:
    if isinstance(ends, str):
        return ends
    # an empty partition has nothing to read: lag 0 whether or not a position was stored
    return [
        {
            "partition": p,
            "end": end,
            "position": positions.get(p),
            "lag": (0 if end == 0 else None)
            if positions.get(p) is None
            else max(0, end - int(positions[p] or 0)),
        }
        for p, end in sorted(ends.items())
    ]


def _watcher_row(state: WatcherState, ends: _Ends) -> dict[str, Any]:
    topics = {}
    for topic in state.topics:
        mine = {p: o for (t, p), o in state.positions.items() if t == topic}
        topics[topic] = _lags(ends.of(topic), dict(mine))
    return {
        "asset": state.asset_name,
        "asset_id": state.asset_id,
        "asset_uri": state.asset_uri,
        "trigger_id": state.trigger_id,
        "kafka_config_id": state.kafka_config_id,
        "group_id": state.group_id,
        "triggerer_id": state.triggerer_id,
        "triggerer_host": state.triggerer_host,
        "triggerer_heartbeat": state.triggerer_heartbeat,
        "positions_updated_at": state.positions_updated_at,
        "topics": topics,
        "problem": state.problem,
    }


_Group = tuple[dict[int, int | None] | str, tuple[str, int] | str]


def _read_group(page: PageRequest, group_id: str) -> _Group:
    """What the group committed on the asset events topic, and its ``(state, members)`` now."""
    topic = page.settings.asset_events_topic
    committed = _or_error(lambda: committed_offsets(page.config(), group_id, topic))
    return committed, _or_error(lambda: group_members(page.config(), group_id))


def _bridge_row(page: PageRequest, group_id: str, group: _Group, ends: _Ends) -> dict[str, Any]:
    topic = page.settings.asset_events_topic
    committed, members = group
    lags = committed if isinstance(committed, str) else _lags(ends.of(topic), committed)
    row = {"group_id": group_id, "topic": topic, "partitions": lags}
    if isinstance(members, str):
        return {**row, "state": members, "group_state": None, "members": None}
    state = "running" if members[1] > 0 else "not running"
    return {**row, "state": state, "group_state": members[0], "members": members[1]}


def _stream_listing(page: PageRequest) -> tuple[StreamListing | None, str | None]:
    # the watchers and bridges are shown even when the index cannot be read (e.g. not created)
    filters, topic = StreamFilter(state="running"), page.settings.stream_index_topic
    found = _or_error(lambda: list_streams(page.config(), topic, filters=filters, cache=page.stream_index()))
    return (None, found) if isinstance(found, str) else (found, None)


@router.get("/api/health")
def health_page(page: PageRequestDep, session: SessionDep) -> Response:
    settings = page.settings
    ends = _Ends(page)
    with contextlib.suppress(AirflowKafkaEventsError):  # each part below names it in its own place
        page.config()
    with ThreadPoolExecutor(max_workers=3, thread_name_prefix="kafka-events-health") as pool:
        streams_future = pool.submit(_stream_listing, page)
        groups: list[tuple[str, Future[_Group]]] = [
            (g, pool.submit(_read_group, page, g)) for g in settings.bridge_group_ids
        ]
        watcher_rows = [_watcher_row(w, ends) for w in watchers(session)]
        last_post = last_bridge_post(session)
        bridge_rows = [_bridge_row(page, g, future.result(), ends) for g, future in groups]
        listing, streams_error = streams_future.result()
    threshold = datetime.now(timezone.utc) - timedelta(seconds=settings.stuck_after_seconds)
    stuck = [
        s.summary
        for s in (listing.streams if listing is not None else [])
        if s.summary.state == "running" and s.summary.last_at is not None and s.summary.last_at < threshold
    ]
    payload = {
        "watchers": watcher_rows,
        "bridges": bridge_rows,
        "last_bridge_post": None
        if last_post is None
        else {
            "id": last_post.id,
            "asset_id": last_post.asset_id,
            "asset": last_post.asset_name,
            "timestamp": last_post.timestamp,
            "event_id": last_post.event_id,
        },
        "stuck_after_seconds": settings.stuck_after_seconds,
        "stuck_streams": [s.to_dict() for s in stuck],
        "streams_error": streams_error,
        "window": None,
        "window_text": streams_error if listing is None else listing.describe(),
        "index": None if listing is None else listing.index_dict(),
    }
    return page.answer(payload)
