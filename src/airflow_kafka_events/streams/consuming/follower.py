"""Following one stream through records someone else reads: its order, without a Kafka client.

A deferred consumer's trigger only has to know when its stream is worth resuming for.  The
triggerer reads each topic once for every waiting trigger
(:mod:`~airflow_kafka_events.streams.consuming.shared_wait`); each trigger's
:class:`StreamFollower` takes the records with its stream's key, in offset order, and puts them
in order as a :class:`~airflow_kafka_events.streams.consuming.reader.StreamReader` does: the same
decoder (:class:`~airflow_kafka_events.streams.consuming.decoder.StreamDecoder`), the same
:class:`~airflow_kafka_events.streams.consuming.sequence.SequenceTracker` started from the
consumer's checkpoint, and the same bound on elements held ahead of a missing one
(``max_buffered``: beyond it the gap is reported at once).  A record with the stream's key that
cannot be decoded is counted (:attr:`StreamFollower.rejected`) and left for the consumer, which
dead-letters it when it reads the stream again.

Pure logic: this module imports no Airflow module and opens no client.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from confluent_kafka import Message

from airflow_kafka_events.envelopes.codec import TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes.model import TriggerEventEnvelope
from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.kafka.consumer import ConsumedRecord, RecordDecoder
from airflow_kafka_events.streams.checkpoint import Checkpoint
from airflow_kafka_events.streams.consuming.decoder import StreamDecoder, decode_stream_record
from airflow_kafka_events.streams.consuming.sequence import SequenceTracker, gap_error

__all__ = [
    "MAX_BUFFERED",
    "StreamFollower",
]

log = logging.getLogger(__name__)

#: Elements held ahead of a missing one before the gap is reported (as a StreamReader's default).
MAX_BUFFERED = 10_000


class StreamFollower:
    """One stream's records in, its :attr:`tracker` up to date (see the module doc).

    :param topic: the stream's topic (for messages).
    :param trigger_run_id: the stream's id; records with another key are ignored.
    :param checkpoint: where the consumer is (``None``: the start of the stream).
    :param codec: decodes the records' values.
    :param max_buffered: elements held ahead of a missing one before :meth:`offer` raises.
    """

    def __init__(
        self,
        topic: str,
        trigger_run_id: str,
        *,
        checkpoint: Checkpoint | None = None,
        codec: RecordDecoder[TriggerEventEnvelope] = TRIGGER_EVENT_CODEC,
        max_buffered: int = MAX_BUFFERED,
    ) -> None:
        if max_buffered < 1:
            raise ConfigurationError(f"max_buffered must be >= 1, got {max_buffered!r}")
        self.topic = topic
        self.trigger_run_id = trigger_run_id
        self.key = trigger_run_id.encode("utf-8")
        self.checkpoint = checkpoint
        self.max_buffered = max_buffered
        self._decoder = StreamDecoder(codec)
        if checkpoint is None:
            self.tracker = SequenceTracker(trigger_run_id)
        else:
            self.tracker = SequenceTracker(
                trigger_run_id,
                attempt=checkpoint.attempt,
                next_sequence_index=checkpoint.next_sequence_index,
                finished=checkpoint.finished,
            )
        #: records with the stream's key that could not be decoded (the consumer dead-letters them)
        self.rejected = 0
        #: offset after the last record taken in (``None``: none yet)
        self.next_offset: int | None = None

    @property
    def where(self) -> str:
        return f"stream {self.trigger_run_id!r} on topic {self.topic!r}"

    def offer(self, messages: Iterable[Message]) -> None:
        """Take in records of the stream's partition, in offset order (others' keys are ignored).

        Raises :class:`~airflow_kafka_events.errors.StreamGapError` when more than
        ``max_buffered`` elements are held ahead of a missing one."""
        tracker = self.tracker
        for message in messages:
            offset = message.offset()
            if offset is not None:
                self.next_offset = offset + 1
            if message.key() != self.key:
                continue
            envelope = decode_stream_record(
                message, self._decoder, trigger_run_id=self.trigger_run_id, topic=self.topic, where=self.where
            )
            if isinstance(envelope, ConsumedRecord):
                self.rejected += 1
                continue
            tracker.offer(envelope, offset)
        if tracker.buffered_count > self.max_buffered:
            how = f"more than {self.max_buffered} later elements arrived meanwhile"
            raise gap_error(tracker, f"{self.where}: ", how, topic=self.topic)
