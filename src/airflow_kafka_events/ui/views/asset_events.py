"""Asset events: the recent envelopes of the asset events topic and what each became in Airflow.

Each envelope (partition key, source, idempotency key, causation chain -- each id a link to that
event) is matched with the Airflow asset events made from it (by ``event_id`` in their provenance,
``via`` the partition bridge or a watcher) and the DAG runs those created, or with the dead letter
it became (a dead letter's source coordinates are the envelope's).  Both sides are bounded: the
topic's window, the newest Airflow asset events since the window's start, the dead-letter topic's
window.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

from airflow.api_fastapi.common.db.common import SessionDep
from fastapi import APIRouter, Query
from fastapi.responses import Response

from airflow_kafka_events.errors import AirflowKafkaEventsError
from airflow_kafka_events.ui.airflow_state import AirflowEvent, airflow_events_for
from airflow_kafka_events.ui.inspection.asset_events import list_asset_events
from airflow_kafka_events.ui.inspection.dead_letters import dead_letters_by_source
from airflow_kafka_events.ui.views.common import LIST_PREVIEW, PageRequestDep

__all__ = [
    "router",
]

router = APIRouter()


def _event_dict(event: AirflowEvent) -> dict[str, Any]:
    return {
        "id": event.id,
        "asset_id": event.asset_id,
        "asset": event.asset_name,
        "timestamp": event.timestamp,
        "partition_key": event.partition_key,
        "via": event.via,
        "dag_runs": [{"dag_id": d, "run_id": r} for d, r in event.dag_runs],
    }


def _dead_letter_dict(letter: Any) -> dict[str, Any] | None:
    return None if letter is None else dict(vars(letter))


@router.get("/api/asset-events")
def asset_events_page(
    page: PageRequestDep,
    session: SessionDep,
    asset: Annotated[str | None, Query(description="asset name or URI")] = None,
    event_id: Annotated[str | None, Query()] = None,
) -> Response:
    settings = page.settings
    window = page.window()
    try:
        config = page.config()
    except AirflowKafkaEventsError as exc:
        return page.failed(exc)
    # the two topics are read at once (each scan waits on its own consumer's fetches); only the newest
    # ``limit`` envelopes are decoded, and only four headers of each dead letter are read
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafka-events-dlq") as pool:
        dead_future = pool.submit(
            dead_letters_by_source,
            config,
            settings.dlq_topic,
            window=window,
            source_topic=settings.asset_events_topic,
        )
        try:
            listing = list_asset_events(
                config,
                settings.asset_events_topic,
                window=window,
                limit=page.limit,
                asset=asset or None,
                event_id=event_id or None,
                preview_limit=LIST_PREVIEW,
            )
            dead, dead_scanned = dead_future.result()
        except AirflowKafkaEventsError as exc:
            dead_future.cancel()
            return page.failed(exc)
    records = listing.records
    made = airflow_events_for(session, [r.event_id for r in records], since=window.since)
    payload = {
        "topic": settings.asset_events_topic,
        "events": [
            {
                **record.to_dict(),
                "airflow_events": [_event_dict(e) for e in made.get(record.event_id, [])],
                "dead_letter": _dead_letter_dict(dead.get((record.topic, record.partition, record.offset))),
            }
            for record in records
        ],
        "matched": listing.matched,
        "window": listing.window.to_dict(),
        "window_text": listing.window.describe(),
        "dead_letter_window_text": dead_scanned.describe(),
    }
    return page.answer(payload)
