"""The trigger event envelope's Avro body, written and read without fastavro's per-call work.

fastavro spends most of an envelope's time on per-call work (schema checks, trying union
branches).  Trigger event bodies of the current schema (pinned by :data:`FAST_FINGERPRINT`) are
written and read here, byte for byte as fastavro does (the unit tests compare both); anything
else (a failure, a body truncated, odd or breaking a rule) returns ``None`` / raises so that the
codec (:mod:`airflow_kafka_events.envelopes.codec`) goes the fastavro way, which raises the documented
errors.  A new schema version switches this path off (its fingerprint differs).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_kafka_events.envelopes.json_values import json_from_text, json_to_text
from airflow_kafka_events.envelopes.model import TriggerEventEnvelope
from airflow_kafka_events.errors import EnvelopeDecodeError

__all__ = [
    "FAST_FINGERPRINT",
    "read_trigger",
    "write_trigger",
]
# fastavro spends most of an envelope's time on per-call work (schema checks, trying union
# branches).  Trigger event bodies of the current schema (pinned by fingerprint) are written
# and read here, byte for byte as fastavro does (the unit tests compare both); anything else
# (a failure, a body truncated, odd or breaking a rule) goes the fastavro way, which raises.
#: CRC-64-AVRO fingerprint of the trigger event envelope schema this module writes and reads.
FAST_FINGERPRINT = bytes.fromhex("8e485a47790b7893")
_BYTE = tuple(bytes((i,)) for i in range(256))
_MICROSECOND = timedelta(microseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_U64 = 1 << 64


def _long(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)  # zig-zag, for the int64 range
    if n < 0x80:
        return _BYTE[n]
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _string(text: str) -> bytes:
    data = text.encode()
    size = len(data)
    return (_BYTE[size << 1] if size < 0x40 else _long(size)) + data


def _some(value: Any, write: Callable[[Any], bytes]) -> bytes:
    return b"\x00" if value is None else b"\x02" + write(value)


def write_trigger(envelope: TriggerEventEnvelope) -> bytes:
    producer, error, payload = envelope.producer, envelope.error, envelope.payload
    metadata = envelope.metadata
    if payload is None:
        payload_part = b"\x00"
    elif isinstance(payload, bytes):
        payload_part = b"\x02" + _long(len(payload)) + payload
    else:
        payload_part = b"\x04" + _string(json_to_text(payload, what="payload"))
    parts = [
        _string(envelope.trigger_run_id),
        _long(envelope.attempt),
        _long(envelope.sequence_index),
        b"\x01" if envelope.is_last else b"\x00",
        payload_part,
        _long((envelope.emitted_at - _EPOCH) // _MICROSECOND),
        _some(producer.dag_id, _string),
        _some(producer.run_id, _string),
        _some(producer.task_id, _string),
        _some(producer.map_index, _long),
        _some(producer.try_number, _long),
        _some(envelope.resume_cursor, _string),
        b"\x00" if error is None else b"\x02" + _string(error.type) + _string(error.message),
    ]
    if metadata:
        parts.append(_long(len(metadata)))
        for key, value in metadata.items():
            parts += (_string(key), _string(value))
    parts.append(b"\x00")
    return b"".join(parts)


# (data, position) -> (value, next position); ValueError / IndexError on anything unusual.
def _long_at(data: bytes, pos: int) -> tuple[int, int]:
    byte = data[pos]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    n, shift = byte & 0x7F, 7
    while byte & 0x80:
        if shift > 63:
            raise ValueError("varint too long")
        pos += 1
        byte = data[pos]
        n |= (byte & 0x7F) << shift
        shift += 7
    if n >= _U64:  # beyond an int64's zig-zag
        raise ValueError("varint too long")
    return (n >> 1) ^ -(n & 1), pos + 1


def _bytes_at(data: bytes, pos: int) -> tuple[bytes, int]:
    size, pos = _long_at(data, pos)
    end = pos + size
    if size < 0 or end > len(data):
        raise ValueError("length out of range")
    return data[pos:end], end


def _string_at(data: bytes, pos: int) -> tuple[str, int]:
    raw, pos = _bytes_at(data, pos)
    return raw.decode(), pos


def _some_at(data: bytes, pos: int, read: Callable[[bytes, int], tuple[Any, int]]) -> tuple[Any, int]:
    branch = data[pos]
    if branch == 0:
        return None, pos + 1
    if branch != 2:
        raise ValueError("union branch")
    return read(data, pos + 1)


def _metadata_at(data: bytes, pos: int) -> tuple[dict[str, str], int]:
    result: dict[str, str] = {}
    count, pos = _long_at(data, pos)
    while count:
        if count < 0:
            raise ValueError("sized map block")
        for _ in range(count):
            key, pos = _string_at(data, pos)
            result[key], pos = _string_at(data, pos)
        count, pos = _long_at(data, pos)
    return result, pos


def read_trigger(body: bytes) -> TriggerEventEnvelope | None:
    try:
        run_id, pos = _string_at(body, 0)
        attempt, pos = _long_at(body, pos)
        index, pos = _long_at(body, pos)
        flag, kind = body[pos], body[pos + 1]
        if flag > 1 or kind not in (0, 2, 4):
            return None
        raw, pos = _bytes_at(body, pos + 2) if kind else (b"", pos + 2)
        micros, pos = _long_at(body, pos)
        producer = []  # dag_id, run_id, task_id, map_index, try_number
        for read in (_string_at, _string_at, _string_at, _long_at, _long_at):
            value, pos = _some_at(body, pos, read)
            producer.append(value)
        cursor, pos = _some_at(body, pos, _string_at)
        error, pos = _some_at(body, pos, _error_at)
        metadata, pos = _metadata_at(body, pos)
        if pos != len(body):
            return None
        emitted_at = _EPOCH + timedelta(microseconds=micros)
        payload = None if kind == 0 else raw if kind == 2 else json_from_text(raw.decode(), what="payload")
    except (ValueError, IndexError, OverflowError, EnvelopeDecodeError):
        return None
    fields = {
        "trigger_run_id": run_id,
        "sequence_index": index,
        "is_last": flag == 1,
        "payload": payload,
        "attempt": attempt,
        "emitted_at": emitted_at,
        "producer": producer,
        "resume_cursor": cursor,
        "error": error,
        "metadata": metadata,
    }
    return TriggerEventEnvelope._from_checked(fields)


def _error_at(data: bytes, pos: int) -> tuple[tuple[str, str], int]:
    kind, pos = _string_at(data, pos)
    message, pos = _string_at(data, pos)
    return (kind, message), pos
