"""Batches of a stream: when one is due (:class:`BatchPolicy`) and what it holds (:class:`StreamBatch`).

:meth:`~airflow_kafka_events.streams.consuming.reader.StreamReader.next_batch` blocks until
elements are ready and returns a batch as soon as ``max_events`` are ready, or
``max_wait`` seconds after the first element of the batch became ready, whichever comes
first (and at once when the stream's end is known).  A small ``max_wait`` lowers the
latency of each element; a larger one (with a larger ``max_events``) gathers more
elements per batch and so pays the per-batch cost of the caller (an XCom write, a
checkpoint, an offset commit) less often.  ``max_wait=0`` returns whatever is ready.

Pure data and rules; this module imports no Airflow module.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from airflow_kafka_events.envelopes.model import TriggerEventEnvelope
from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.kafka.consumer import ConsumedRecord
from airflow_kafka_events.streams.checkpoint import Checkpoint

__all__ = [
    "BatchPolicy",
    "StreamBatch",
]


@dataclass(frozen=True)
class BatchPolicy:
    """When a batch is due: ``max_events`` ready, or ``max_wait`` after the first was ready."""

    max_events: int = 100
    max_wait: float = 1.0

    def __post_init__(self) -> None:
        if isinstance(self.max_events, bool) or not isinstance(self.max_events, int) or self.max_events < 1:
            raise ConfigurationError(f"max_events must be an int >= 1, got {self.max_events!r}")
        if not self.max_wait >= 0:
            raise ConfigurationError(f"max_wait must be >= 0 seconds, got {self.max_wait!r}")

    def due(self, ready: int, ready_since: float | None, now: float, *, end_known: bool = False) -> bool:
        """Whether ``ready`` elements (ready since ``ready_since``) make a batch at ``now``."""
        if ready <= 0:
            return False
        if ready >= self.max_events or end_known:
            return True
        return ready_since is not None and now - ready_since >= self.max_wait

    def due_at(self, ready: int, ready_since: float | None) -> float | None:
        """When the batch becomes due if nothing else arrives (``None``: nothing is ready)."""
        if ready <= 0 or ready_since is None:
            return None
        return ready_since + self.max_wait


@dataclass(frozen=True)
class StreamBatch:
    """Elements of one stream handed to the caller by :meth:`StreamReader.next_batch`.

    * ``events``: consecutive elements of ``attempt``, in ``sequence_index`` order;
    * ``restarted``: a higher attempt superseded elements handed out before;
    * ``finished``: the stream ended normally; its last element is in ``events``;
    * ``rejected``: records with the stream's key that could not be decoded;
    * ``first_offset`` / ``last_offset``: Kafka offsets (in ``partition``) of the first
      and last event (``None`` without events);
    * ``checkpoint``: the reader's position once this batch is acknowledged.
    """

    events: list[TriggerEventEnvelope]
    attempt: int
    restarted: bool
    finished: bool
    rejected: list[ConsumedRecord[TriggerEventEnvelope]]
    first_offset: int | None
    last_offset: int | None
    partition: int | None
    checkpoint: Checkpoint
    number: int
    _reader_token: object = field(default=None, repr=False, compare=False)
