"""Writing one attempt of a stream: its envelopes, one awaited delivery at a time.

Every envelope of an attempt records its generation (``metadata["generation"]``) and, after
the first page, the offset of the attempt's first page; the terminal marker (``is_last``,
no payload) ends it, with the error that ended the stream if any.  Used by
:class:`~airflow_kafka_events.streams.producing.trigger.StreamingTrigger`.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from datetime import datetime
from typing import Any

from airflow_kafka_events.envelopes.codec import TRIGGER_EVENT_CODEC, EnvelopeCodec
from airflow_kafka_events.envelopes.model import ProducerIdentity, StreamFailure, TriggerEventEnvelope
from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.kafka.producer import RecordProducer
from airflow_kafka_events.streams.descriptor import StreamDescriptor
from airflow_kafka_events.streams.producing.outage import await_delivery
from airflow_kafka_events.streams.progress import FIRST_OFFSET_METADATA_KEY, GENERATION_METADATA_KEY

__all__ = [
    "AttemptWriter",
    "close_iterator",
    "parse_not_before",
]

_log = logging.getLogger(__name__)


class AttemptWriter:
    """Writes the envelopes of one attempt, one awaited delivery at a time."""

    def __init__(
        self,
        producer: RecordProducer,
        *,
        topic: str,
        partition: int,
        trigger_run_id: str,
        attempt: int,
        next_seq: int,
        first_offset: int | None,
        cursor: str | None,
        identity: ProducerIdentity,
        delivery_timeout: float,
        generation: int | None = None,
        log: Any = None,
        codec: EnvelopeCodec[TriggerEventEnvelope] = TRIGGER_EVENT_CODEC,
    ) -> None:
        self.producer = producer
        self.topic = topic
        self.partition = partition
        self.trigger_run_id = trigger_run_id
        self.attempt = attempt
        self.next_seq = next_seq
        self.first_offset = first_offset
        self.cursor = cursor
        self.identity = identity
        self.delivery_timeout = delivery_timeout
        self.generation = generation
        self.written = 0
        self.codec = codec
        self.log = log if log is not None else _log

    def _metadata(self) -> dict[str, str]:
        metadata: dict[str, str] = {}
        if self.generation is not None:
            metadata[GENERATION_METADATA_KEY] = str(self.generation)
        if self.next_seq > 0 and self.first_offset is not None:
            metadata[FIRST_OFFSET_METADATA_KEY] = str(self.first_offset)
        return metadata

    def encode(
        self, *, payload: Any, cursor: str | None, is_last: bool, error: StreamFailure | None
    ) -> bytes:
        envelope = TriggerEventEnvelope(
            trigger_run_id=self.trigger_run_id,
            sequence_index=self.next_seq,
            is_last=is_last,
            payload=payload,
            attempt=self.attempt,
            producer=self.identity,
            resume_cursor=cursor,
            error=error,
            metadata=self._metadata(),
        )
        return self.codec.encode(envelope, topic=self.topic)

    async def send(self, value: bytes, cursor: str | None) -> int:
        delivery = asyncio.ensure_future(
            self.producer.send_async(
                self.topic,
                value,
                key=self.trigger_run_id,
                partition=self.partition,
                timeout=self.delivery_timeout,
            )
        )
        receipt = await await_delivery(
            delivery,
            self.producer,
            self.log,
            stream=self.trigger_run_id,
            page=self.next_seq,
            timeout=self.delivery_timeout,
        )
        if self.next_seq == 0:
            self.first_offset = receipt.offset
        self.next_seq += 1
        self.cursor = cursor
        self.written += 1
        return receipt.offset

    async def finish(self, error: StreamFailure | None) -> StreamDescriptor:
        count = self.next_seq
        value = self.encode(payload=None, cursor=self.cursor, is_last=True, error=error)
        last_offset = await self.send(value, self.cursor)
        return StreamDescriptor(
            topic=self.topic,
            trigger_run_id=self.trigger_run_id,
            attempt=self.attempt,
            count=count,
            first_offset=self.first_offset,
            last_offset=last_offset,
            partition=self.partition,
            error=None if error is None else error.to_avro(),
        )


async def close_iterator(iterator: Any) -> None:
    aclose = getattr(iterator, "aclose", None)
    if aclose is None:
        return
    result = aclose()
    if inspect.isawaitable(result):
        await result


def parse_not_before(value: Any) -> datetime | None:
    """``not_before`` as an aware datetime; ``ConfigurationError`` unless ISO-8601 text with a timezone."""
    if value is None:
        return None
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        text = value.strip()
        if text.endswith("z"):  # fromisoformat() reads "Z", not RFC 3339's lowercase "z"
            text = text[:-1] + "+00:00"
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise ConfigurationError(f"not_before must be an ISO-8601 timestamp, got {value!r}") from None
    else:
        raise ConfigurationError(
            f"not_before must be an ISO-8601 timestamp (str) or None, got {type(value).__qualname__}"
        )
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ConfigurationError(f"not_before must have a timezone (e.g. +00:00), got {value!r}")
    return moment
