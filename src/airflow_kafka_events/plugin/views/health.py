"""Health: watchers (triggerer, lag per partition), bridges (lag, last post), streams stuck too long.

* a watcher's lag on a partition is the partition's end offset minus the position it stored in
  its asset's state store (the first record whose asset event Airflow has not confirmed);
* a bridge's lag is the end offset minus what its consumer group committed
  (``[kafka_events] ui_bridge_group_ids``); its last post is the newest Airflow asset event
  carrying a bridge's provenance;
* a stream is stuck when it is still running and wrote nothing for
  ``[kafka_events] ui_stuck_after_seconds`` (in the scanned window).

Only offsets are read for the lags (no records); the stuck streams come from the bounded window.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.api_fastapi.common.db.common import SessionDep
from fastapi import APIRouter
from fastapi.responses import Response

from airflow_kafka_events.errors import AirflowKafkaEventsError
from airflow_kafka_events.inspection.streams import list_streams
from airflow_kafka_events.plugin.airflow_state import WatcherState, last_bridge_post, watchers
from airflow_kafka_events.plugin.kafka_access import committed_offsets, end_offsets
from airflow_kafka_events.plugin.views.common import Page, PageDep

__all__ = ["router"]

router = APIRouter()


class _Ends:
    """End offsets per topic, read once per page."""

    def __init__(self, page: Page) -> None:
        self._page = page
        self._ends: dict[str, dict[int, int] | str] = {}

    def of(self, topic: str) -> dict[int, int] | str:
        """``{partition: end}``, or the error text when they cannot be read."""
        if topic not in self._ends:
            try:
                self._ends[topic] = end_offsets(self._page.config(), topic)
            except AirflowKafkaEventsError as exc:
                self._ends[topic] = f"{type(exc).__name__}: {exc}"
        return self._ends[topic]


def _lags(ends: dict[int, int] | str, positions: dict[int, int | None]) -> list[dict[str, Any]] | str:
    if isinstance(ends, str):
        return ends
    return [
        {
            "partition": p,
            "end": end,
            "position": positions.get(p),
            "lag": None if positions.get(p) is None else max(0, end - int(positions[p] or 0)),
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


def _bridge_row(page: Page, group_id: str, ends: _Ends) -> dict[str, Any]:
    topic = page.settings.asset_events_topic
    try:
        committed: dict[int, int | None] | str = committed_offsets(page.config(), group_id, topic)
    except AirflowKafkaEventsError as exc:
        committed = f"{type(exc).__name__}: {exc}"
    lags = committed if isinstance(committed, str) else _lags(ends.of(topic), committed)
    return {"group_id": group_id, "topic": topic, "partitions": lags}


@router.get("/health")
@router.get("/api/health")
def health_page(page: PageDep, session: SessionDep) -> Response:
    settings = page.settings
    ends = _Ends(page)
    watcher_rows = [_watcher_row(w, ends) for w in watchers(session)]
    bridge_rows = [_bridge_row(page, g, ends) for g in settings.bridge_group_ids]
    last_post = last_bridge_post(session)
    threshold = datetime.now(timezone.utc) - timedelta(seconds=settings.stuck_after_seconds)
    # the watchers and bridges are shown even when the streams topic cannot be read (e.g. not created)
    listing, streams_error = None, None
    try:
        listing = list_streams(page.config(), settings.trigger_events_topic, window=page.window())
    except AirflowKafkaEventsError as exc:
        streams_error = f"{type(exc).__name__}: {exc}"
    stuck = [
        s
        for s in (listing.streams if listing is not None else [])
        if s.state == "running" and s.last_at is not None and s.last_at < threshold
    ]
    payload = {
        "watchers": watcher_rows,
        "bridges": bridge_rows,
        "last_bridge_post": None
        if last_post is None
        else {"id": last_post.id, "asset": last_post.asset_name, "timestamp": last_post.timestamp},
        "stuck_after_seconds": settings.stuck_after_seconds,
        "stuck_streams": [s.to_dict() for s in stuck],
        "streams_error": streams_error,
        "window": None if listing is None else listing.window.to_dict(),
        "window_text": streams_error if listing is None else listing.window.describe(),
    }
    context = {
        "watchers": watcher_rows,
        "bridges": bridge_rows,
        "last_post": last_post,
        "stuck": stuck,
        "streams_error": streams_error,
        "scanned": None if listing is None else listing.window,
    }
    return page.answer("health", "health.html", context, payload)
