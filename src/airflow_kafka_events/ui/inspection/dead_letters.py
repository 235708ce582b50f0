"""Dead letters as an operator sees them.

* :func:`list_dead_letters`: the dead letters in a window of a dead-letter topic, filtered by
  reason, source topic or consumer (the filter runs on the scanned window, which the answer
  states: filtering means scanning);
* :func:`dead_letters_by_source`: where the dead letters of one source topic are, by their
  source coordinates (headers only: what a listing of that topic shows beside each record);
* :func:`get_dead_letter`: one of them, by its coordinates (:func:`load_dead_letter`: that record
  and what a replay of it publishes, read once, so a caller that shows it first replays that read);
* their replay: :mod:`airflow_kafka_events.ui.inspection.replay`.

Headers and payload previews shown are redacted (:mod:`airflow_kafka_events.ui.inspection.redact`)
and bounded.  This module imports no Airflow module.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypedDict, Unpack

from confluent_kafka import Message

from airflow_kafka_events.dead_letters.headers import (
    HEADER_REASON,
    HEADER_SOURCE_OFFSET,
    HEADER_SOURCE_PARTITION,
    HEADER_SOURCE_TOPIC,
)
from airflow_kafka_events.dead_letters.letter import DeadLetter
from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC, TRIGGER_EVENT_CODEC, EnvelopeCodecs
from airflow_kafka_events.errors import EnvelopeDecodeError, ValidationError
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.ui.inspection.errors import (
    NotADeadLetterError,
)
from airflow_kafka_events.ui.inspection.listing import Listing, record_dict
from airflow_kafka_events.ui.inspection.reader import (
    DEFAULT_TIMEOUT,
    Progress,
    TopicReader,
    message_headers,
    message_timestamp_ms,
    scan,
)
from airflow_kafka_events.ui.inspection.redact import (
    MASK,
    PREVIEW_LIMIT,
    clip,
    is_secret_name,
    preview,
    redact_text,
)
from airflow_kafka_events.ui.inspection.window import ScannedWindow, ScanWindow, from_ms

__all__ = [
    "DeadLetterListing",
    "DeadLetterReadOptions",
    "DeadLetterRecord",
    "DeadLetterSource",
    "LoadedDeadLetter",
    "cluster_of",
    "dead_letters_by_source",
    "get_dead_letter",
    "list_dead_letters",
    "load_dead_letter",
]


def _text(value: bytes | None) -> str:
    return "" if value is None else value.decode("utf-8", errors="replace")


def redacted_headers(headers: Sequence[tuple[str, bytes | None]]) -> list[tuple[str, str]]:
    """Headers as text, secret-looking names masked, values bounded."""
    return [
        (name, MASK if is_secret_name(name) else clip(redact_text(_text(value)), 1000))
        for name, value in headers
    ]


def record_fingerprint(msg: Message) -> str:
    """The record's timestamp and a SHA-256 of its key, value and headers, as ``<timestamp ms>-<hex>``.

    Two reads at the same coordinates give the same fingerprint only if they read the same record
    (a topic deleted and re-created holds other records at the same offsets).
    """
    digest = hashlib.sha256()
    for part in (msg.key(), msg.value(), *(item for pair in message_headers(msg) for item in pair)):
        data = part.encode("utf-8") if isinstance(part, str) else part
        # a length before each part: (b"ab", b"c") and (b"a", b"bc") differ; None differs from b""
        digest.update(b"-" if data is None else len(data).to_bytes(8, "big") + data)
    return f"{message_timestamp_ms(msg)}-{digest.hexdigest()[:32]}"


def payload_preview(
    value: bytes | None, limit: int = PREVIEW_LIMIT, codecs: EnvelopeCodecs | None = None
) -> tuple[str, str]:
    """``(format, preview)`` of a record's value: a decoded envelope as JSON (its ``extra`` values and
    payload as the JSON they carry, not JSON text inside JSON), else text, else a size.  ``codecs``:
    the connection's (with its schema registry), else the registry-less ones."""
    if value is None:
        return "none", ""
    asset_codec, trigger_codec = (
        (ASSET_EVENT_CODEC, TRIGGER_EVENT_CODEC) if codecs is None else (codecs.asset, codecs.trigger)
    )
    for name, codec in (("asset-event", asset_codec), ("trigger-event", trigger_codec)):
        try:
            envelope: Any = codec.decode(value)
        except (EnvelopeDecodeError, ValidationError):
            continue
        record = envelope.to_avro()
        for field_name in ("extra", "payload"):  # JSON texts on the wire: shown decoded, once
            if field_name in record:
                record[field_name] = getattr(envelope, field_name)
        return name, preview(record, limit)
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return "binary", f"<{len(value)} bytes, not UTF-8>: {value[:48].hex()}" + (
            "..." if len(value) > 48 else ""
        )
    return "text", preview(text, limit)


@dataclass(frozen=True)
class DeadLetterRecord:
    """One dead-letter record: where it is, why it is there, and a redacted look at it."""

    topic: str
    partition: int
    offset: int
    timestamp: datetime | None
    reason: str
    source_topic: str
    source_partition: int
    source_offset: int
    consumer: str | None
    error_type: str
    error_message: str
    is_reference: bool
    size: int
    headers: list[tuple[str, str]]
    payload_preview: str
    payload_format: str
    event_id: str | None = None
    asset_uri: str | None = None
    dead_lettered_at: datetime | None = None
    key: str | None = None
    #: What a replay's confirmation repeats (:func:`record_fingerprint`): this very record, not another
    #: one at its coordinates.
    fingerprint: str = ""

    @classmethod
    def of(
        cls,
        msg: Message,
        letter: DeadLetter,
        preview_limit: int = PREVIEW_LIMIT,
        codecs: EnvelopeCodecs | None = None,
    ) -> DeadLetterRecord:
        headers = message_headers(msg)
        value = msg.value()
        kind, shown = payload_preview(value, preview_limit, codecs)
        size = len(value or b"") + len(msg.key() or b"") + sum(len(n) + len(v or b"") for n, v in headers)
        return cls(
            topic=str(msg.topic()),
            partition=int(msg.partition() or 0),
            offset=int(msg.offset() or 0),
            timestamp=from_ms(message_timestamp_ms(msg)),
            reason=letter.reason,
            source_topic=letter.source_topic,
            source_partition=letter.source_partition,
            source_offset=letter.source_offset,
            consumer=None if letter.consumer is None else redact_text(letter.consumer),
            error_type=redact_text(letter.error_type),
            error_message=clip(redact_text(letter.error_message), 1000),
            is_reference=letter.truncated,
            size=size,
            headers=redacted_headers(headers),
            payload_preview=shown,
            payload_format=kind,
            event_id=letter.event_id,
            asset_uri=None if letter.asset_uri is None else redact_text(letter.asset_uri),
            dead_lettered_at=letter.dead_lettered_at,
            key=None if msg.key() is None else clip(redact_text(_text(msg.key())), 200),
            fingerprint=record_fingerprint(msg),
        )

    def to_dict(self) -> dict[str, Any]:
        return record_dict(self)


@dataclass(frozen=True)
class DeadLetterListing(Listing[DeadLetterRecord]):
    #: Records in the window without dead-letter headers (skipped).
    not_dead_letters: int = 0
    #: Matches in the window (``records`` holds the newest ``limit`` of them, when a limit was given).
    matched: int = 0


def _letter(msg: Message) -> DeadLetter:
    try:
        return DeadLetter.from_headers(message_headers(msg))
    except ValidationError as exc:
        raise NotADeadLetterError(
            f"{msg.topic()}[{msg.partition()}]@{msg.offset()} is not a dead letter ({exc}); fix: name the "
            "dead-letter topic (--topic, [kafka_events] dlq_topic) and take coordinates from `dlq ls`"
        ) from None


class _Newest:
    """The newest ``limit`` (all without a limit) of the dead letters offered: a bounded heap, so
    records (decoded value, redacted preview, headers) are built for those only."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.matched = 0
        self._heap: list[tuple[tuple[int, int, int], Message, DeadLetter]] = []

    def offer(self, msg: Message, letter: DeadLetter) -> None:
        self.matched += 1
        order = (message_timestamp_ms(msg) or 0, int(msg.partition() or 0), int(msg.offset() or 0))
        entry = (order, msg, letter)
        if self.limit is None or len(self._heap) < self.limit:
            heapq.heappush(self._heap, entry)
        elif order > self._heap[0][0]:
            heapq.heapreplace(self._heap, entry)

    def records(self, preview_limit: int, codecs: EnvelopeCodecs | None = None) -> list[DeadLetterRecord]:
        newest = sorted(self._heap, key=lambda entry: entry[0], reverse=True)
        return [DeadLetterRecord.of(msg, letter, preview_limit, codecs) for _, msg, letter in newest]


def list_dead_letters(
    config: Mapping[str, Any],
    topic: str,
    *,
    window: ScanWindow,
    reason: str | None = None,
    source_topic: str | None = None,
    consumer: str | None = None,
    limit: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    progress: Progress | None = None,
    preview_limit: int = PREVIEW_LIMIT,
) -> DeadLetterListing:
    """The dead letters of ``window`` matching the filters, newest first (``consumer``: a substring).

    With ``limit`` only the newest ``limit`` matches are built; ``matched`` counts them all.
    :class:`NotADeadLetterError` when the window holds records and none of them is a dead letter
    (``topic`` is not a dead-letter topic).
    """
    if limit is not None and limit < 1:
        raise ValidationError(f"limit is an int >= 1 or None, got {limit!r}")
    newest = _Newest(limit)
    others = 0

    def handle(msg: Message) -> None:
        nonlocal others
        try:
            letter = DeadLetter.from_headers(message_headers(msg))
        except ValidationError:
            others += 1
            return
        if reason is not None and letter.reason != reason:
            return
        if source_topic is not None and letter.source_topic != source_topic:
            return
        if consumer is not None and consumer not in (letter.consumer or ""):
            return
        newest.offer(msg, letter)

    scanned = scan(
        config, topic, window, handle, timeout=timeout, progress=progress, name="dead-letter listing"
    )
    if others and others == scanned.records_scanned:
        raise NotADeadLetterError(
            f"topic {topic!r} holds no dead letters: none of the {others} record(s) read has the dead-letter "
            f"headers ({HEADER_REASON}, {HEADER_SOURCE_TOPIC} ...), so it is not a dead-letter topic "
            f"({scanned.describe()}); fix: name the dead-letter topic (--topic, [kafka_events] dlq_topic)"
        )
    codecs = KafkaSettings(config).codecs
    return DeadLetterListing(newest.records(preview_limit, codecs), scanned, others, newest.matched)


@dataclass(frozen=True)
class DeadLetterSource:
    """Where a dead letter is in the dead-letter topic, and why (keyed by its source coordinates)."""

    partition: int
    offset: int
    reason: str


_SOURCE_HEADERS = frozenset(
    {HEADER_REASON, HEADER_SOURCE_TOPIC, HEADER_SOURCE_PARTITION, HEADER_SOURCE_OFFSET}
)


def _source(msg: Message, wanted: bytes) -> tuple[tuple[str, int, int], DeadLetterSource] | None:
    """A dead letter's source coordinates from its headers, if its source topic is ``wanted``."""
    found: dict[str, Any] = {}
    raw = msg.headers() or []
    for name, value in raw.items() if isinstance(raw, dict) else raw:
        if name in _SOURCE_HEADERS:
            found[name] = value.encode("utf-8") if isinstance(value, str) else value
    reason = found.get(HEADER_REASON)
    if found.get(HEADER_SOURCE_TOPIC) != wanted or not reason:
        return None
    try:
        partition, offset = int(found[HEADER_SOURCE_PARTITION]), int(found[HEADER_SOURCE_OFFSET])
    except (KeyError, TypeError, ValueError):
        return None  # no dead letter of ours (DeadLetter.from_headers would refuse it too)
    where = DeadLetterSource(
        int(msg.partition() or 0), int(msg.offset() or 0), reason.decode("utf-8", "replace")
    )
    return (wanted.decode("utf-8"), partition, offset), where


def dead_letters_by_source(
    config: Mapping[str, Any],
    topic: str,
    *,
    window: ScanWindow,
    source_topic: str,
    timeout: float = DEFAULT_TIMEOUT,
) -> tuple[dict[tuple[str, int, int], DeadLetterSource], ScannedWindow]:
    """``{(source topic, partition, offset): dead letter}`` of the dead letters of ``source_topic``.

    Only four headers of each record of ``window`` are read (no value is decoded, no record
    built): cheap enough to show beside every record of a listing of the source topic.
    """
    wanted = source_topic.encode("utf-8")
    found: dict[tuple[str, int, int], DeadLetterSource] = {}

    def handle(msg: Message) -> None:
        item = _source(msg, wanted)
        if item is not None:
            found[item[0]] = item[1]

    scanned = scan(config, topic, window, handle, timeout=timeout, name="dead letters by source")
    return found, scanned


class DeadLetterReadOptions(TypedDict, total=False):
    """The keyword options of :func:`load_dead_letter`, taken by :func:`get_dead_letter` too."""

    timeout: float
    preview_limit: int


def get_dead_letter(
    config: Mapping[str, Any],
    topic: str,
    partition: int,
    offset: int,
    **options: Unpack[DeadLetterReadOptions],
) -> DeadLetterRecord:
    """The dead letter at ``topic[partition]@offset`` (:class:`NotADeadLetterError` if it is none)."""
    return load_dead_letter(config, topic, partition, offset, **options).record


@dataclass(frozen=True)
class LoadedDeadLetter:
    """A dead letter read once: what an operator is shown (``record``) and the record a replay publishes."""

    record: DeadLetterRecord
    message: Message = field(repr=False, compare=False)
    letter: DeadLetter = field(repr=False)
    #: The cluster it was read from (``bootstrap.servers``).
    cluster: str = ""

    @property
    def coordinates(self) -> tuple[str, str, int, int]:
        """``(cluster, topic, partition, offset)``: where it was read."""
        return self.cluster, self.record.topic, self.record.partition, self.record.offset

    @property
    def fingerprint(self) -> str:
        return self.record.fingerprint


def load_dead_letter(
    config: Mapping[str, Any],
    topic: str,
    partition: int,
    offset: int,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    preview_limit: int = PREVIEW_LIMIT,
) -> LoadedDeadLetter:
    """The dead letter at ``topic[partition]@offset``, read once (what
    :func:`~airflow_kafka_events.ui.inspection.replay.replay_dead_letter` publishes)."""
    with TopicReader(config, topic, timeout=timeout, name="dead-letter reader") as reader:
        msg = reader.read_one(partition, offset)
    letter = _letter(msg)
    record = DeadLetterRecord.of(msg, letter, preview_limit, reader.codecs)
    return LoadedDeadLetter(record, msg, letter, cluster_of(config))


def cluster_of(config: Mapping[str, Any]) -> str:
    """The cluster a client of ``config`` reads (its ``bootstrap.servers``)."""
    return str(config.get("bootstrap.servers", ""))
