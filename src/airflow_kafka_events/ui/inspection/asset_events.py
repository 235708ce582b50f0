"""Asset event envelopes as an operator sees them.

:func:`list_asset_events` reads a window of the asset events topic and describes each
:class:`~airflow_kafka_events.envelopes.model.AssetEventEnvelope` in it (asset, partition key, source,
idempotency key, causation chain, a redacted bounded preview of ``extra``);
:func:`scan_asset_events` hands over the envelopes themselves (e.g. to post them to an Airflow
again).  This module imports no Airflow module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from confluent_kafka import Message

from airflow_kafka_events.envelopes.codec import EnvelopeCodec
from airflow_kafka_events.envelopes.framing import CONFLUENT_MAGIC, SINGLE_OBJECT_MAGIC
from airflow_kafka_events.envelopes.model import AssetEventEnvelope
from airflow_kafka_events.errors import EnvelopeDecodeError, ValidationError
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.ui.inspection.listing import Listing, record_dict
from airflow_kafka_events.ui.inspection.reader import DEFAULT_TIMEOUT, Progress, message_timestamp_ms, scan
from airflow_kafka_events.ui.inspection.redact import PREVIEW_LIMIT, preview, redact, redact_text
from airflow_kafka_events.ui.inspection.window import ScannedWindow, ScanWindow, from_ms

__all__ = [
    "AssetEventListing",
    "AssetEventRecord",
    "AssetEventScan",
    "list_asset_events",
    "scan_asset_events",
]


@dataclass(frozen=True)
class AssetEventRecord:
    """One asset event envelope and where it is in Kafka."""

    topic: str
    partition: int
    offset: int
    timestamp: datetime | None
    asset_uri: str
    asset_name: str
    event_id: str
    partition_key: str | None
    source: dict[str, Any]
    idempotency_key: str | None
    causation: list[str]
    emitted_at: datetime
    extra_preview: str
    signed: bool

    @classmethod
    def of(
        cls, msg: Message, envelope: AssetEventEnvelope, preview_limit: int = PREVIEW_LIMIT
    ) -> AssetEventRecord:
        return cls(
            topic=str(msg.topic()),
            partition=int(msg.partition() or 0),
            offset=int(msg.offset() or 0),
            timestamp=from_ms(message_timestamp_ms(msg)),
            asset_uri=redact_text(envelope.asset.uri),
            asset_name=redact_text(envelope.asset.name),
            event_id=envelope.event_id,
            partition_key=None if envelope.partition_key is None else redact_text(envelope.partition_key),
            source=redact({k: v for k, v in envelope.source.to_avro().items() if v is not None}),
            idempotency_key=envelope.idempotency_key,
            causation=list(envelope.causation),
            emitted_at=envelope.emitted_at,
            extra_preview=preview(dict(envelope.extra), preview_limit),
            signed=envelope.signature is not None,
        )

    def to_dict(self) -> dict[str, Any]:
        return record_dict(self)


@dataclass(frozen=True)
class AssetEventListing(Listing[AssetEventRecord]):
    #: Records in the window that are no asset event envelope (skipped).
    undecodable: int = 0
    #: Matches in the window (``records`` holds the newest ``limit`` of them).  Without a filter
    #: and with a ``limit``, only the newest ``limit`` are decoded: the others are counted by
    #: their framing, so an undecodable one among them counts here, not in ``undecodable``.
    matched: int = 0


@dataclass(frozen=True)
class AssetEventScan:
    """What :func:`scan_asset_events` read: the window, and how many records did not decode."""

    window: ScannedWindow
    undecodable: int
    matched: int


def _selected(envelope: AssetEventEnvelope, asset: str | None) -> bool:
    return asset is None or asset in (envelope.asset.uri, envelope.asset.name)


def scan_asset_events(
    config: Mapping[str, Any],
    topic: str,
    handle: Callable[[Message, AssetEventEnvelope], None],
    *,
    window: ScanWindow,
    asset: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    progress: Progress | None = None,
) -> AssetEventScan:
    """``handle(record, envelope)`` for each asset event of ``window`` (of ``asset``: URI or name)."""
    counts = {"undecodable": 0, "matched": 0}
    codec = KafkaSettings(config).codecs.asset

    def on_record(msg: Message) -> None:
        value = msg.value()
        try:
            envelope = codec.decode(value) if value is not None else None
        except (EnvelopeDecodeError, ValidationError):
            envelope = None
        if envelope is None:
            counts["undecodable"] += 1
        elif _selected(envelope, asset):
            counts["matched"] += 1
            handle(msg, envelope)

    scanned = scan(config, topic, window, on_record, timeout=timeout, progress=progress, name="asset events")
    return AssetEventScan(scanned, counts["undecodable"], counts["matched"])


_CONFLUENT_BYTE = bytes([CONFLUENT_MAGIC])


def _framed(value: bytes | None) -> bool:
    """Whether ``value`` starts like an envelope (either framing), without decoding it."""
    return value is not None and (value[:2] == SINGLE_OBJECT_MAGIC or value[:1] == _CONFLUENT_BYTE)


def _decoded(msg: Message, codec: EnvelopeCodec[AssetEventEnvelope]) -> AssetEventEnvelope | None:
    try:
        return codec.decode(msg.value() or b"")
    except (EnvelopeDecodeError, ValidationError):
        return None


@dataclass
class _Newest:
    """The framed records of a window that may match, decoded newest first only as far as needed."""

    asset: str | None
    event_id: str | None
    candidates: list[tuple[tuple[int, int, int], Message]]
    codec: EnvelopeCodec[AssetEventEnvelope]
    undecodable: int = 0

    def offer(self, msg: Message) -> None:
        value = msg.value()
        if value is None or not _framed(value):
            self.undecodable += 1
            return
        # a filter's text is in the Avro body as it is (strings are written as UTF-8): a cheap test first
        if any(n is not None and n.encode("utf-8") not in value for n in (self.asset, self.event_id)):
            return
        order = (message_timestamp_ms(msg) or 0, int(msg.partition() or 0), int(msg.offset() or 0))
        self.candidates.append((order, msg))

    def _matches(self, envelope: AssetEventEnvelope) -> bool:
        return _selected(envelope, self.asset) and self.event_id in (None, envelope.event_id)

    def records(self, limit: int, preview_limit: int) -> tuple[list[AssetEventRecord], int]:
        """The newest ``limit`` matches as records, and the count of all matches."""
        self.candidates.sort(key=lambda c: c[0], reverse=True)
        exact = self.asset is not None or self.event_id is not None  # else counted by framing
        matched = 0 if exact else len(self.candidates)
        records: list[AssetEventRecord] = []
        for _, msg in self.candidates:
            if not exact and len(records) >= limit:
                break
            envelope = _decoded(msg, self.codec)
            if envelope is None:
                self.undecodable += 1
                matched -= 0 if exact else 1
            elif self._matches(envelope):
                matched += 1 if exact else 0
                if len(records) < limit:
                    records.append(AssetEventRecord.of(msg, envelope, preview_limit))
        return records, matched


def list_asset_events(
    config: Mapping[str, Any],
    topic: str,
    *,
    window: ScanWindow,
    asset: str | None = None,
    event_id: str | None = None,
    limit: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    progress: Progress | None = None,
    preview_limit: int = PREVIEW_LIMIT,
) -> AssetEventListing:
    """The asset events of ``window`` (of ``asset``: its URI or name; the one ``event_id``), newest first.

    With ``limit`` only the newest ``limit`` matches are built (and, without a filter, decoded);
    ``matched`` counts them all.
    """
    if limit is not None and limit < 1:
        raise ValidationError(f"limit is an int >= 1 or None, got {limit!r}")
    if limit is not None:
        newest = _Newest(asset, event_id, [], KafkaSettings(config).codecs.asset)
        scanned = scan(
            config, topic, window, newest.offer, timeout=timeout, progress=progress, name="asset events"
        )
        records, matched = newest.records(limit, preview_limit)
        return AssetEventListing(records, scanned, newest.undecodable, matched)
    found: list[AssetEventRecord] = []

    def handle(msg: Message, envelope: AssetEventEnvelope) -> None:
        if event_id is None or envelope.event_id == event_id:
            found.append(AssetEventRecord.of(msg, envelope, preview_limit))

    result = scan_asset_events(
        config, topic, handle, window=window, asset=asset, timeout=timeout, progress=progress
    )
    found.sort(key=lambda r: (r.timestamp is not None, r.timestamp, r.partition, r.offset), reverse=True)
    return AssetEventListing(found, result.window, result.undecodable, len(found))
