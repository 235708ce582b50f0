"""The dead-letter record's ``x-*`` header names and the reasons (``x-reason``) it gives.

What each header holds is the record format of :mod:`airflow_kafka_events.dead_letters.letter`
(its module doc).  This module imports no Airflow module.
"""

from __future__ import annotations

from enum import Enum

__all__ = [
    "DEAD_LETTER_HEADERS",
    "HEADER_ASSET_URI",
    "HEADER_CONSUMER",
    "HEADER_DEAD_LETTERED_AT",
    "HEADER_ERROR_MESSAGE",
    "HEADER_ERROR_TYPE",
    "HEADER_EVENT_ID",
    "HEADER_ORIGINAL_HEADERS_DROPPED",
    "HEADER_ORIGINAL_VALUE_BYTES",
    "HEADER_REASON",
    "HEADER_SOURCE_OFFSET",
    "HEADER_SOURCE_PARTITION",
    "HEADER_SOURCE_TIMESTAMP",
    "HEADER_SOURCE_TOPIC",
    "HEADER_TRUNCATED",
    "HEADER_TRUNCATED_CAUSE",
    "REFERENCE_HEADERS",
    "WRITTEN_HEADERS",
    "DeadLetterReason",
]

HEADER_REASON = "x-reason"
HEADER_ERROR_TYPE = "x-error-type"
HEADER_ERROR_MESSAGE = "x-error-message"
HEADER_SOURCE_TOPIC = "x-source-topic"
HEADER_SOURCE_PARTITION = "x-source-partition"
HEADER_SOURCE_OFFSET = "x-source-offset"
HEADER_SOURCE_TIMESTAMP = "x-source-timestamp"
HEADER_CONSUMER = "x-consumer"
HEADER_EVENT_ID = "x-event-id"
HEADER_ASSET_URI = "x-asset-uri"
HEADER_DEAD_LETTERED_AT = "x-dead-lettered-at"
HEADER_TRUNCATED = "x-truncated"
HEADER_TRUNCATED_CAUSE = "x-truncated-cause"
HEADER_ORIGINAL_VALUE_BYTES = "x-original-value-bytes"
HEADER_ORIGINAL_HEADERS_DROPPED = "x-original-headers-dropped"

#: Every header name a dead letter carries (original headers with these names are dropped).
DEAD_LETTER_HEADERS: frozenset[str] = frozenset(
    {
        HEADER_REASON,
        HEADER_ERROR_TYPE,
        HEADER_ERROR_MESSAGE,
        HEADER_SOURCE_TOPIC,
        HEADER_SOURCE_PARTITION,
        HEADER_SOURCE_OFFSET,
        HEADER_SOURCE_TIMESTAMP,
        HEADER_CONSUMER,
        HEADER_EVENT_ID,
        HEADER_ASSET_URI,
        HEADER_DEAD_LETTERED_AT,
    }
)
#: The further headers of a reference dead letter (original headers with these names are dropped too).
REFERENCE_HEADERS: frozenset[str] = frozenset(
    {HEADER_TRUNCATED, HEADER_TRUNCATED_CAUSE, HEADER_ORIGINAL_VALUE_BYTES, HEADER_ORIGINAL_HEADERS_DROPPED}
)
#: Every header a dead letter writes itself: an original header with one of these names is dropped
#: (a record dead-lettered twice carries only the latest reason).
WRITTEN_HEADERS: frozenset[str] = DEAD_LETTER_HEADERS | REFERENCE_HEADERS


class DeadLetterReason(str, Enum):
    """Why a record was dead-lettered (the ``x-reason`` header)."""

    #: The bytes are not an asset event envelope: unknown framing, truncated, invalid Avro.
    UNDECODABLE = "undecodable"
    #: Well framed, but written with a schema this consumer does not know (another envelope type,
    #: a newer version).
    UNKNOWN_SCHEMA = "unknown-schema"
    #: Decoded, but the envelope's fields are invalid.
    INVALID_ENVELOPE = "invalid-envelope"
    #: The consumer requires signed events and the event has no signature.
    SIGNATURE_MISSING = "signature-missing"
    #: The signature matches no accepted key.
    SIGNATURE_INVALID = "signature-invalid"
    #: The consumer could not load its signing key, so it could not verify the event.
    SIGNING_KEY_UNAVAILABLE = "signing-key-unavailable"
    #: The event's source matches no rule of the consumer's allowlist.
    NOT_ALLOWED = "not-allowed"
    #: The event's causation chain is longer than the consumer accepts (feedback loop).
    CAUSATION_TOO_DEEP = "causation-too-deep"
    #: The record, or its envelope's ``extra``, is larger than the consumer accepts.
    TOO_LARGE = "too-large"
    #: The consumer failed while checking the record (a bug); the record is kept for replay.
    INTERNAL_ERROR = "internal-error"
