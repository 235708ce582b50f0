"""Dead letters: the dead-letter topic by source topic, consumer and reason; one record; its replay.

Filtering by reason means reading the records, so the listing scans a bounded window (and says
which).  A record shows its headers and a redacted, bounded payload preview.  Replaying it
re-publishes the *original* record (key, value, original headers with its idempotency key, so
downstream dedupe drops a record that had been handled after all) to its source topic or an allowed
one: ``GET /api/.../replay`` is the confirmation's data (the record, the fields to post back, the
user's CSRF token, the topics it may go to, or why none), ``POST /api/.../replay`` does it.  The
POST repeats the record's coordinates and its fingerprint (timestamp and a hash of key, value and
headers): one that reads another record there (the topic re-created) is refused (409) and
publishes nothing.  Both need an asset write (:data:`~airflow_kafka_events.ui.security.REPLAY`);
a viewer sees the button disabled and is refused (403) if they post anyway.  The POST is refused
(403) to another site's page (:func:`~airflow_kafka_events.ui.security.refuse_cross_site`: a
browser's POST carries the confirmation's CSRF token and this site's ``Origin``), and a replay goes
where the configuration allows (:mod:`~airflow_kafka_events.ui.inspection.replay_targets`: the dead
letter's source topic when the configuration names it a source of the dead-letter topic -- the asset
events topic, a watcher's topics -- or a topic ``[kafka_events] replay_extra_target_topics``
lists), else 400 and nothing is published.  Each replay writes one audit line (logger
``airflow_kafka_events.audit``, by the inspection layer) and one entry in Airflow's audit log
(event ``kafka_events.replay``, owner the user).
"""

from __future__ import annotations

import json
import logging
from typing import Annotated, Any

from airflow.api_fastapi.common.db.common import SessionDep
from fastapi import APIRouter, Depends, Form, HTTPException, Query, status
from fastapi.responses import Response

from airflow_kafka_events.errors import AirflowKafkaEventsError
from airflow_kafka_events.ui.airflow_state import watched_sources
from airflow_kafka_events.ui.inspection.dead_letters import (
    DeadLetterRecord,
    LoadedDeadLetter,
    list_dead_letters,
    load_dead_letter,
)
from airflow_kafka_events.ui.inspection.errors import ReplayTargetRefusedError
from airflow_kafka_events.ui.inspection.redact import redact_text
from airflow_kafka_events.ui.inspection.replay import ReplayReceipt, replay_dead_letter
from airflow_kafka_events.ui.inspection.replay_targets import ReplayTargets
from airflow_kafka_events.ui.security import CSRF_FIELD, REPLAY, csrf_token, refuse_cross_site, session_of
from airflow_kafka_events.ui.views.common import LIST_PREVIEW, PageRequest, PageRequestDep

__all__ = [
    "router",
]

log = logging.getLogger(__name__)

router = APIRouter()

AUDIT_EVENT = "kafka_events.replay"


def coords(record: DeadLetterRecord) -> str:
    """``topic:partition:offset`` of a dead letter: what a replay confirmation repeats."""
    return f"{record.topic}:{record.partition}:{record.offset}"


@router.get("/api/dead-letters")
def dead_letters_page(
    page: PageRequestDep,
    reason: Annotated[str | None, Query()] = None,
    source_topic: Annotated[str | None, Query()] = None,
    consumer: Annotated[str | None, Query()] = None,
) -> Response:
    topic = page.settings.dlq_topic
    try:
        listing = list_dead_letters(
            page.config(),
            topic,
            window=page.window(),
            limit=page.limit,
            reason=reason or None,
            source_topic=source_topic or None,
            consumer=consumer or None,
            preview_limit=LIST_PREVIEW,
        )
    except AirflowKafkaEventsError as exc:
        return page.failed(exc)
    payload = {
        "topic": topic,
        "records": [r.to_dict() for r in listing.records],
        "matched": listing.matched,
        "window": listing.window.to_dict(),
        "window_text": listing.window.describe(),
    }
    return page.answer(payload)


def _load(page: PageRequest, partition: int, offset: int) -> LoadedDeadLetter:
    return load_dead_letter(page.config(), page.settings.dlq_topic, partition, offset)


@router.get("/api/dead-letters/{partition}/{offset}")
def dead_letter_page(page: PageRequestDep, partition: int, offset: int) -> Response:
    try:
        record = _load(page, partition, offset).record
    except AirflowKafkaEventsError as exc:
        return page.failed(exc)
    return page.answer(record.to_dict())


def replay_targets(page: PageRequest, session: Any) -> ReplayTargets:
    """Where replays of the view's dead letters may go (the configuration and Airflow's watchers)."""
    settings = page.settings
    return ReplayTargets.of(
        settings.dlq_topic,
        configured_dlq_topic=settings.dlq_topic,
        asset_events_topic=settings.asset_events_topic,
        extra=settings.replay_extra_target_topics,
        watchers=watched_sources(session),
    )


@router.get("/api/dead-letters/{partition}/{offset}/replay", dependencies=[REPLAY])
def confirm_replay_page(page: PageRequestDep, session: SessionDep, partition: int, offset: int) -> Response:
    """The confirmation: the record, the topics it may go to (none: why), the user's CSRF token."""
    try:
        record = _load(page, partition, offset).record
    except AirflowKafkaEventsError as exc:
        return page.failed(exc)
    targets = replay_targets(page, session)
    try:
        targets.target_for(record.source_topic)
        refused = None
    except ReplayTargetRefusedError as exc:
        refused = redact_text(str(exc))
    token = csrf_token(page.user, session_of(page.request))
    payload = {
        "record": record.to_dict(),
        "form": {"confirm": coords(record), "fingerprint": record.fingerprint},
        # not under a key named like a token: Airflow's masker would hide its value
        "csrf": {"field": CSRF_FIELD, "value": token},
        "targets": targets.choices(record.source_topic),
        "refused": refused,
    }
    return page.answer(payload)


def _audit(session: Any, page: PageRequest, record: DeadLetterRecord, receipt: ReplayReceipt) -> None:
    """One entry in Airflow's audit log (Browse > Audit Log) for the replay."""
    from airflow.models.log import Log

    extra = {"dead_letter": coords(record), "receipt": receipt.to_dict()}
    session.add(
        Log(event=AUDIT_EVENT, owner=page.username, extra=json.dumps(extra, default=str, sort_keys=True))
    )


@router.post(
    "/api/dead-letters/{partition}/{offset}/replay", dependencies=[REPLAY, Depends(refuse_cross_site)]
)
def replay_page(
    page: PageRequestDep,
    session: SessionDep,
    partition: int,
    offset: int,
    confirm: Annotated[str, Form(description="the dead letter's topic:partition:offset, repeated")],
    fingerprint: Annotated[str, Form(description="the confirmed record's fingerprint, repeated")],
    target_topic: Annotated[str | None, Form()] = None,
) -> Response:
    try:
        loaded = _load(page, partition, offset)
        record = loaded.record
        if confirm != coords(record):
            raise HTTPException(
                status.HTTP_400_BAD_REQUEST,
                f"confirmation {confirm!r} does not name this dead letter ({coords(record)}); "
                "nothing replayed",
            )
        if fingerprint != loaded.fingerprint:
            raise HTTPException(
                status.HTTP_409_CONFLICT,
                f"the dead letter at {coords(record)} is not the record you confirmed (it changed since the "
                "confirmation was shown: the topic was re-created?); nothing replayed. "
                "Open it again and confirm what it is now.",
            )
        receipt = replay_dead_letter(
            page.config(),
            record.topic,
            record.partition,
            record.offset,
            targets=replay_targets(page, session),
            target_topic=target_topic,
            actor=page.username,
            loaded=loaded,
            fingerprint=fingerprint,
        )
    except AirflowKafkaEventsError as exc:
        return page.failed(exc)
    _audit(session, page, record, receipt)
    return page.answer({"replayed": coords(record), "receipt": receipt.to_dict()})
