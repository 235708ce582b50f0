"""A stream's records decoded one after another by one reader, sharing what repeats between them.

The elements of one stream share most of their envelope's bytes: the ``trigger_run_id``, the
producer's identity, and (mostly) no cursor, no error and no metadata.  :class:`StreamDecoder`
reads trigger event envelopes of the schema version the codec's own fast path reads, byte for byte
as the codec does, but keeps the last run id's and producer's bytes with the values read from them:
a record whose bytes at that place are the same gets the same (immutable) values without reading
them again.  Anything else -- another framing or schema version, a damaged or unusual body, a
payload that is not strict JSON -- goes to the codec's ``decode``, which decides and words the
error; so the decoder accepts exactly what the codec accepts, into equal envelopes (the unit tests
compare both on random and damaged envelopes).

Around it, which consumed messages a stream reader takes in: on a client error a transient one (a
partition's end, a broker gone for a moment, a leader moving) is skipped and any other raises
(:func:`usable_message`); a record with the stream's key that cannot be decoded (a tombstone, bytes
that are not an envelope, an envelope naming another ``trigger_run_id``) comes back as a rejected
record for the caller to dead-letter, and never stops the reader (:func:`decode_stream_record`).

One decoder per reader (it is not thread-safe); this module imports no Airflow module.
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import Message

from airflow_kafka_events.envelopes.codec import (
    EnvelopeCodec,
    bytes_at,
    long_at,
    metadata_at,
    some_at,
    string_at,
    trigger_fields,
)
from airflow_kafka_events.envelopes.framing import SINGLE_OBJECT_MAGIC
from airflow_kafka_events.envelopes.model import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    ProducerIdentity,
    StreamFailure,
    TriggerEventEnvelope,
)
from airflow_kafka_events.errors import EnvelopeDecodeError, KafkaOperationError
from airflow_kafka_events.kafka.consumer import ConsumedRecord, RecordDecoder
from airflow_kafka_events.streams.consuming.partition import TRANSIENT_CODES, rejected_record

log = logging.getLogger(__name__)

__all__ = ["READ_FINGERPRINT", "StreamDecoder", "decode_stream_record", "usable_message"]

#: CRC-64-AVRO fingerprint of the trigger event envelope schema version this decoder reads; a codec
#: whose current schema differs (a new version) decodes every record itself.
READ_FINGERPRINT = bytes.fromhex("8e485a47790b7893")
_HEADER = SINGLE_OBJECT_MAGIC + READ_FINGERPRINT
_HEADER_SIZE = len(_HEADER)
_NOTHING_MORE = b"\x00\x00\x00"  # no resume cursor, no error, an empty metadata map
_PRODUCER_FIELDS = ("dag_id", "run_id", "task_id", "map_index", "try_number")


class _Odd(Exception):
    """The bytes are not the common case: the codec decides."""


def _unchecked(cls: type[Any], fields: dict[str, Any]) -> Any:
    # A frozen dataclass instance from values checked against its rules here.
    obj = object.__new__(cls)
    obj.__dict__.update(fields)
    return obj


class StreamDecoder:
    """Decodes the values of one stream's records like ``codec.decode`` (see the module doc)."""

    def __init__(self, codec: RecordDecoder[TriggerEventEnvelope]) -> None:
        self._codec = codec
        self._fast = (
            type(codec) is EnvelopeCodec
            and codec.envelope_type is TriggerEventEnvelope
            and codec.fingerprint == READ_FINGERPRINT
        )
        self._run_bytes = b""  # the last run id's bytes (length prefix included) and value
        self._run_id = ""
        self._producer_bytes = b""  # the last producer identity's bytes and value
        self._producer: ProducerIdentity | None = None

    def decode(self, data: bytes) -> TriggerEventEnvelope:
        """The envelope in ``data``; the codec's ``EnvelopeDecodeError`` when it is not one."""
        if self._fast and type(data) is bytes and data.startswith(_HEADER):
            try:
                return self._read(data)
            except (_Odd, ValueError, IndexError, OverflowError, EnvelopeDecodeError):
                pass  # the codec decides, and words the error
        return self._codec.decode(data)

    def _read(self, data: bytes) -> TriggerEventEnvelope:
        pos = _HEADER_SIZE
        known = self._run_bytes
        if known and data.startswith(known, pos):
            run_id, pos = self._run_id, pos + len(known)
        else:
            run_id, end = string_at(data, pos)
            if not run_id:
                raise _Odd
            self._run_bytes, self._run_id, pos = data[pos:end], run_id, end
        attempt, pos = long_at(data, pos)
        index, pos = long_at(data, pos)
        if not (0 <= attempt <= INT32_MAX and 0 <= index <= INT64_MAX):
            raise _Odd
        flag, kind = data[pos], data[pos + 1]
        if flag > 1:
            raise _Odd
        if kind == 0:
            raw, pos = b"", pos + 2
        elif kind == 2 or kind == 4:
            raw, pos = bytes_at(data, pos + 2)
        else:
            raise _Odd
        micros, pos = long_at(data, pos)
        producer, pos = self._producer_at(data, pos)
        if pos + 3 == len(data) and data.endswith(_NOTHING_MORE):
            cursor = error = None
            metadata: dict[str, str] = {}
        else:
            cursor, pos = some_at(data, pos, string_at)
            error, pos = self._error_at(data, pos, is_last=flag == 1)
            metadata, pos = metadata_at(data, pos)
            if pos != len(data):
                raise _Odd
        fields = trigger_fields(
            run_id, attempt, index, flag, kind, raw, micros, producer, cursor, error, metadata
        )
        return _unchecked(TriggerEventEnvelope, fields)

    def _producer_at(self, data: bytes, pos: int) -> tuple[ProducerIdentity, int]:
        known = self._producer_bytes
        if known and self._producer is not None and data.startswith(known, pos):
            return self._producer, pos + len(known)
        start = pos
        dag_id, pos = some_at(data, pos, string_at)
        run_id, pos = some_at(data, pos, string_at)
        task_id, pos = some_at(data, pos, string_at)
        map_index, pos = some_at(data, pos, long_at)
        try_number, pos = some_at(data, pos, long_at)
        for number in (map_index, try_number):
            if number is not None and not INT32_MIN <= number <= INT32_MAX:
                raise _Odd
        producer = _unchecked(
            ProducerIdentity,
            dict(zip(_PRODUCER_FIELDS, (dag_id, run_id, task_id, map_index, try_number), strict=True)),
        )
        self._producer_bytes, self._producer = data[start:pos], producer
        return producer, pos

    @staticmethod
    def _error_at(data: bytes, pos: int, *, is_last: bool) -> tuple[StreamFailure | None, int]:
        branch = data[pos]
        if branch == 0:
            return None, pos + 1
        if branch != 2:
            raise _Odd
        kind, pos = string_at(data, pos + 1)
        message, pos = string_at(data, pos)
        if not (is_last and kind):
            raise _Odd
        return _unchecked(StreamFailure, {"type": kind, "message": message}), pos


def usable_message(msg: Message, *, where: str) -> bool:
    """Whether ``msg`` is a record (``False``: a transient client error, skipped).

    Raises :class:`KafkaOperationError` for a client error that does not heal.
    """
    error = msg.error()
    if error is None:
        return True
    if error.code() in TRANSIENT_CODES or error.retriable():
        log.debug("%s: transient consumer error %s", where, error)
        return False
    raise KafkaOperationError(f"consuming {where} failed", kafka_error=error)


def decode_stream_record(
    msg: Message,
    codec: RecordDecoder[TriggerEventEnvelope],
    *,
    trigger_run_id: str,
    topic: str,
    where: str,
) -> TriggerEventEnvelope | ConsumedRecord[TriggerEventEnvelope]:
    """The envelope of a record with the stream's key, or the rejected record when it is poison."""
    raw = msg.value()
    try:
        if raw is None:
            raise EnvelopeDecodeError("message has no value (tombstone)")
        envelope = codec.decode(raw)
        if envelope.trigger_run_id != trigger_run_id:
            raise EnvelopeDecodeError(
                f"record key {trigger_run_id!r} but the envelope names trigger_run_id "
                f"{envelope.trigger_run_id!r}"
            )
    except EnvelopeDecodeError as exc:
        log.warning("%s: rejecting undecodable record at offset %s: %s", where, msg.offset(), exc)
        return rejected_record(msg, topic, trigger_run_id.encode("utf-8"), exc)
    return envelope
