"""Writers of the records the inspection tests read: stream envelopes, asset events, dead letters."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from airflow_kafka_events.dead_letters.headers import DeadLetterReason
from airflow_kafka_events.dead_letters.letter import DeadLetter
from airflow_kafka_events.dead_letters.writer import DeadLetterWriter
from airflow_kafka_events.envelopes.codec import TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes.model import (
    AssetEventEnvelope,
    AssetRef,
    EventSource,
    SourceKind,
    StreamFailure,
    TriggerEventEnvelope,
)
from airflow_kafka_events.kafka.delivery import DeliveryReceipt
from airflow_kafka_events.kafka.producer import RecordProducer


def write_stream(
    producer: RecordProducer,
    topic: str,
    run: str,
    pages: int,
    *,
    attempt: int = 0,
    end: str | None = "complete",  # complete | failed | None (running)
    generation: int = 0,
) -> list[DeliveryReceipt]:
    envelopes = [
        TriggerEventEnvelope(
            trigger_run_id=run,
            sequence_index=seq,
            is_last=False,
            payload={"page": seq, "token": "s3cr3t-page-token"},
            attempt=attempt,
            resume_cursor=f"c{seq + 1}",
            metadata={"generation": str(generation)},
        )
        for seq in range(pages)
    ]
    if end is not None:
        error = (
            StreamFailure(type="RuntimeError", message="the API answered 500") if end == "failed" else None
        )
        envelopes.append(
            TriggerEventEnvelope(
                trigger_run_id=run,
                sequence_index=pages,
                is_last=True,
                attempt=attempt,
                error=error,
                metadata={"generation": str(generation)},
            )
        )
    return [producer.send_and_wait(topic, TRIGGER_EVENT_CODEC.encode(e), key=run) for e in envelopes]


def asset_event(uri: str = "s3://bucket/table", **fields: Any) -> AssetEventEnvelope:
    fields.setdefault("source", EventSource(SourceKind.TASK, dag_id="producer", task_id="emit"))
    return AssetEventEnvelope(asset=AssetRef(name=uri.rsplit("/", 1)[-1], uri=uri), **fields)


def write_dead_letter(
    producer: RecordProducer,
    dlq_topic: str,
    *,
    value: bytes | None,
    key: bytes | None = None,
    headers: Sequence[tuple[str, bytes | str | None]] = (),
    reason: DeadLetterReason | str = DeadLetterReason.NOT_ALLOWED,
    source: tuple[str, int, int] = ("airflow.asset-events", 0, 0),
    consumer: str = "watcher s3://bucket/table (group=g1)",
    max_message_bytes: int | None = None,
) -> DeliveryReceipt:
    writer = DeadLetterWriter(producer, dlq_topic, timeout=30.0, max_message_bytes=max_message_bytes)
    letter = DeadLetter.from_exception(
        reason,
        ValueError("refused: password=hunter2 in the message"),
        topic=source[0],
        partition=source[1],
        offset=source[2],
        consumer=consumer,
    )
    return writer.write(letter, value=value, key=key, headers=list(headers))


def wait_past(stamp_ms: int) -> datetime:
    """The first instant after ``stamp_ms`` (waited for): records written now have a later timestamp."""
    deadline = time.monotonic() + 5.0
    while time.time() * 1000 <= stamp_ms + 1:
        assert time.monotonic() < deadline, "the clock did not move"
        time.sleep(0.002)
    return datetime.fromtimestamp((stamp_ms + 1) / 1000, tz=timezone.utc)


def write_index(
    producer: RecordProducer,
    index_topic: str,
    run: str,
    receipts: list[DeliveryReceipt],
    *,
    status: str = "finished",
    error: str | None = None,
) -> None:
    """The stream index record a streaming trigger writes at the end of ``run``'s envelopes ``receipts``
    (written by :func:`write_stream`; the last one its terminal marker when finished or failed)."""
    from airflow_kafka_events.streams.index.record import StreamRecord, encode_record, stream_key

    pages = len(receipts) - (0 if status == "running" else 1)
    now = datetime.now(timezone.utc).timestamp()
    record = StreamRecord(
        stream_id=run,
        topic=receipts[-1].topic,
        partition=receipts[-1].partition,
        attempt=0,
        status=status,
        pages=pages,
        updated_at=now,
        started_at=now - 1,
        last_page_at=now,
        last_sequence=len(receipts) - 1,
        first_offset=receipts[0].offset,
        last_offset=receipts[-1].offset,
        error=error,
    )
    producer.send_and_wait(index_topic, encode_record(record), key=stream_key(run))
