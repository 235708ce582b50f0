"""A stream's records: which consumed messages a stream reader takes in, and decoding them.

* **Client errors** on a consumed message: the transient ones (a partition's end, a broker
  gone for a moment, a leader moving) are skipped, any other raises
  :class:`~airflow_kafka_events.errors.KafkaOperationError`.
* **Poison.** A record with the stream's key that cannot be decoded (a tombstone, bytes that
  are not an envelope, an envelope naming another ``trigger_run_id``) comes back as a
  :class:`~airflow_kafka_events.kafka.consumer.ConsumedRecord` with ``raw`` and ``error``, so
  the reader hands it to its caller to dead-letter; it never stops the reader.

Used by :class:`~airflow_kafka_events.streams.consuming.reader.StreamReader`; this module imports
no Airflow module.
"""

from __future__ import annotations

import logging

from confluent_kafka import Message

from airflow_kafka_events.envelopes.model import TriggerEventEnvelope
from airflow_kafka_events.errors import EnvelopeDecodeError, KafkaOperationError
from airflow_kafka_events.kafka.consumer import ConsumedRecord, Decoder
from airflow_kafka_events.streams.consuming.partition import TRANSIENT_CODES, rejected_record

__all__ = [
    "decode_stream_record",
    "usable_message",
]

log = logging.getLogger(__name__)


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
    codec: Decoder[TriggerEventEnvelope],
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
