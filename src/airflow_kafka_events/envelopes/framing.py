"""The two framings around an Avro body, told apart by their leading bytes.

* **Avro single-object encoding** (no registry): ``C3 01`` + the 8-byte little-endian CRC-64-AVRO
  fingerprint of the writer schema's Parsing Canonical Form + the body.
* **Confluent Schema Registry wire format**: ``00`` + the 4-byte big-endian schema id + the body.
"""

from __future__ import annotations

import struct
from typing import Literal

from airflow_kafka_events.errors import EnvelopeEncodeError, TruncatedMessageError, UnknownFramingError

__all__ = [
    "CONFLUENT_HEADER_SIZE",
    "CONFLUENT_ID",
    "CONFLUENT_MAGIC",
    "FINGERPRINT_SIZE",
    "SINGLE_OBJECT_HEADER_SIZE",
    "SINGLE_OBJECT_MAGIC",
    "Framing",
    "detect_framing",
    "frame_confluent",
    "frame_single_object",
    "parse_confluent",
    "parse_single_object",
]

SINGLE_OBJECT_MAGIC = b"\xc3\x01"
FINGERPRINT_SIZE = 8
SINGLE_OBJECT_HEADER_SIZE = len(SINGLE_OBJECT_MAGIC) + FINGERPRINT_SIZE  # 10
CONFLUENT_MAGIC = 0x00
CONFLUENT_HEADER_SIZE = 5
CONFLUENT_ID = struct.Struct(">I")
_MAX_SCHEMA_ID = 2**31 - 1

Framing = Literal["single-object", "confluent"]


# --------------------------------------------------------------------------- framing
def frame_single_object(fingerprint: bytes, body: bytes) -> bytes:
    """``C3 01`` + 8-byte fingerprint (little-endian CRC-64-AVRO) + body."""
    if len(fingerprint) != FINGERPRINT_SIZE:
        raise EnvelopeEncodeError(
            f"a single-object fingerprint is {FINGERPRINT_SIZE} bytes, got {len(fingerprint)}"
        )
    return b"".join((SINGLE_OBJECT_MAGIC, fingerprint, body))


def parse_single_object(data: bytes) -> tuple[bytes, bytes]:
    """Split single-object encoded bytes into (fingerprint, body)."""
    head = bytes(data[:2])
    if head != SINGLE_OBJECT_MAGIC[: len(head)]:
        raise UnknownFramingError(
            f"not Avro single-object encoding: leading bytes {head.hex(' ')} are not c3 01"
        )
    if len(data) < SINGLE_OBJECT_HEADER_SIZE:
        raise TruncatedMessageError(
            f"Avro single-object message is {len(data)} bytes, shorter than its "
            f"{SINGLE_OBJECT_HEADER_SIZE}-byte header (c3 01 + 8-byte fingerprint)"
        )
    return bytes(data[2:SINGLE_OBJECT_HEADER_SIZE]), bytes(data[SINGLE_OBJECT_HEADER_SIZE:])


def frame_confluent(schema_id: int, body: bytes) -> bytes:
    """``00`` + 4-byte big-endian schema id + body (Confluent wire format)."""
    if isinstance(schema_id, bool) or not isinstance(schema_id, int) or not 0 <= schema_id <= _MAX_SCHEMA_ID:
        raise EnvelopeEncodeError(
            f"a schema registry id is an int from 0 to {_MAX_SCHEMA_ID}, got {schema_id!r}"
        )
    return b"".join((bytes((CONFLUENT_MAGIC,)), CONFLUENT_ID.pack(schema_id), body))


def parse_confluent(data: bytes) -> tuple[int, bytes]:
    """Split Confluent wire-format bytes into (schema id, body)."""
    if not data:
        raise TruncatedMessageError("empty message: no schema registry header")
    if data[0] != CONFLUENT_MAGIC:
        raise UnknownFramingError(
            f"not the schema registry wire format: leading byte {data[0]:02x} is not {CONFLUENT_MAGIC:02x}"
        )
    if len(data) < CONFLUENT_HEADER_SIZE:
        raise TruncatedMessageError(
            f"schema registry message is {len(data)} bytes, shorter than its "
            f"{CONFLUENT_HEADER_SIZE}-byte header (00 + 4-byte schema id)"
        )
    (schema_id,) = CONFLUENT_ID.unpack_from(data, 1)
    return schema_id, bytes(data[CONFLUENT_HEADER_SIZE:])


def detect_framing(data: bytes) -> Framing:
    """Which framing ``data`` uses, from its leading bytes."""
    if not data:
        raise TruncatedMessageError("empty message: no framing header")
    first = data[0]
    if first == SINGLE_OBJECT_MAGIC[0]:
        if len(data) < 2:
            raise TruncatedMessageError(
                "message is 1 byte (c3): too short for the single-object marker c3 01"
            )
        if data[1] == SINGLE_OBJECT_MAGIC[1]:
            return "single-object"
        raise UnknownFramingError(
            f"unknown framing: leading bytes c3 {data[1]:02x} are not the single-object marker c3 01"
        )
    if first == CONFLUENT_MAGIC:
        return "confluent"
    raise UnknownFramingError(
        f"unknown framing: leading byte {first:02x} is neither Avro single-object encoding (c3 01) "
        f"nor the schema registry wire format (00)"
    )
