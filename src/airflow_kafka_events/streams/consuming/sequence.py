"""Ordering one trigger run's elements (pure logic): epochs, de-duplication, holding, end, failure.

The rules :class:`~airflow_kafka_events.streams.consuming.reader.StreamReader` applies to what it
reads:

* **Epochs.** A producer that retries a failed stream writes a higher ``attempt`` from
  ``sequence_index`` 0.  The reader follows the highest attempt it has seen: elements of
  lower attempts are dropped, and when a higher attempt appears the reader forgets what
  it held of the lower one and expects sequence 0 of the new attempt.  The first batch of
  the new attempt says ``restarted=True`` when the caller had already been given elements
  of a lower attempt (so it can log it, or undo their effect).  Once a stream's normal
  end (``is_last`` without error) has been reached, the stream is complete and later
  attempts are ignored.
* **Order.** Elements are delivered in ``sequence_index`` order with no duplicates
  (de-duplication on ``(trigger_run_id, attempt, sequence_index)``, the first copy wins).
  An element that arrives before its predecessors is held until they arrive.

This module imports no Airflow module and no Kafka client.
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from dataclasses import dataclass, field

from airflow_kafka_events.envelopes.model import TriggerEventEnvelope
from airflow_kafka_events.errors import ConfigurationError, StreamFailedError, StreamGapError
from airflow_kafka_events.kafka.consumer import ConsumedRecord
from airflow_kafka_events.streams.checkpoint import Checkpoint

__all__ = [
    "BatchPolicy",
    "Offer",
    "SequenceTracker",
    "StreamBatch",
    "Taken",
    "failure_error",
    "gap_error",
]

log = logging.getLogger(__name__)


class Offer(str, enum.Enum):
    """What :meth:`SequenceTracker.offer` did with an element."""

    READY = "ready"  #: it is next in order (and maybe released held later ones)
    BUFFERED = "buffered"  #: it is ahead of a missing element and is held
    DUPLICATE = "duplicate"  #: that (attempt, sequence_index) was seen already
    STALE = "stale"  #: it belongs to a lower attempt than the one followed
    RESTARTED = "restarted"  #: it opened a higher attempt, which is followed from now on
    AFTER_END = "after_end"  #: the stream (or its attempt) already ended before it
    FOREIGN = "foreign"  #: another trigger run's element


@dataclass(frozen=True)
class Taken:
    """Elements handed out by :meth:`SequenceTracker.take`, with their positions (offsets)."""

    events: list[TriggerEventEnvelope]
    positions: list[int | None]
    attempt: int
    restarted: bool
    finished: bool
    next_sequence_index: int


class SequenceTracker:
    """Orders one trigger run's elements: epochs, de-duplication, holding, end and failure.

    Pure logic: :meth:`offer` elements in the order they were read (each with an optional
    *position*, e.g. its Kafka offset) and :meth:`take` the ones ready, in order.  Start
    from a checkpoint's ``attempt`` / ``next_sequence_index`` to resume.
    """

    def __init__(
        self,
        trigger_run_id: str,
        *,
        attempt: int = 0,
        next_sequence_index: int = 0,
        finished: bool = False,
    ) -> None:
        self.trigger_run_id = trigger_run_id
        self._attempt = attempt  # epoch followed
        self._expected = next_sequence_index  # frontier: next index to become ready
        # ready elements and their positions side by side (no pair object per element to collect)
        self._ready: deque[TriggerEventEnvelope] = deque()
        self._ready_positions: deque[int | None] = deque()
        self._buffer: dict[int, tuple[TriggerEventEnvelope, int | None]] = {}
        self._last_index: int | None = None  # sequence index of this attempt's is_last, once seen
        self._end_reached = finished  # the normal end is ready (or taken)
        self._finished_taken = finished
        self._failure: tuple[TriggerEventEnvelope, int | None] | None = None
        self._position = (attempt, next_sequence_index)  # what has been handed out
        self._restart_pending = False
        self._seen = finished or next_sequence_index > 0
        self.restarts = 0
        self.dropped = 0

    # ------------------------------------------------------------------ state
    @property
    def attempt(self) -> int:
        """The attempt (epoch) followed."""
        return self._attempt

    @property
    def expected(self) -> int:
        """The next sequence index to become ready (the frontier)."""
        return self._expected

    @property
    def position(self) -> tuple[int, int]:
        """``(attempt, next_sequence_index)`` after the elements handed out so far."""
        return self._position

    @property
    def started(self) -> bool:
        """An element of this run was seen (or the tracker resumed past the start)."""
        return self._seen

    @property
    def ready_count(self) -> int:
        return len(self._ready)

    @property
    def buffered(self) -> list[int]:
        """Sequence indexes held ahead of a missing one, sorted."""
        return sorted(self._buffer)

    @property
    def finished(self) -> bool:
        """The normal end (``is_last`` without error) became ready."""
        return self._end_reached

    @property
    def finished_taken(self) -> bool:
        """The normal end was handed out: nothing more will come."""
        return self._finished_taken

    @property
    def failure(self) -> TriggerEventEnvelope | None:
        """The ``is_last`` element with an error, once every element before it is ready."""
        return None if self._failure is None else self._failure[0]

    @property
    def ended(self) -> bool:
        return self._end_reached or self._failure is not None

    @property
    def missing(self) -> int | None:
        """The index waited for while later ones are held, else ``None``."""
        if self.ended or not self._buffer:
            return None
        return self._expected

    @property
    def buffered_count(self) -> int:
        return len(self._buffer)

    @property
    def progress(self) -> tuple[int, int, int, bool]:
        """Changes whenever the stream starts, the frontier moves or the attempt changes."""
        return (self.restarts, self._attempt, self._expected, self._seen)

    def lowest_held_position(self) -> int | None:
        """The lowest position among elements read but not handed out yet (``None`` if none)."""
        positions = list(self._ready_positions)
        positions.extend(pos for _, pos in self._buffer.values())
        if self._failure is not None:
            positions.append(self._failure[1])
        known = [pos for pos in positions if pos is not None]
        return min(known) if known else None

    # ------------------------------------------------------------------ input
    def offer(self, envelope: TriggerEventEnvelope, position: int | None = None) -> Offer:
        """Take in one element read from the log."""
        if envelope.trigger_run_id != self.trigger_run_id:
            return Offer.FOREIGN
        if self._end_reached:
            self.dropped += 1
            return Offer.AFTER_END
        self._seen = True
        restarted = False
        if envelope.attempt < self._attempt:
            self.dropped += 1
            return Offer.STALE
        if envelope.attempt > self._attempt:
            self._restart(envelope.attempt)
            restarted = True
        elif self._failure is not None:
            self.dropped += 1
            return Offer.AFTER_END
        outcome = self._accept(envelope, position)
        return Offer.RESTARTED if restarted and outcome is not Offer.AFTER_END else outcome

    def _restart(self, attempt: int) -> None:
        handed_out = self._position[1] > 0
        log.debug(
            "stream %s: attempt %d supersedes attempt %d (%d ready and %d held elements dropped)",
            self.trigger_run_id,
            attempt,
            self._attempt,
            len(self._ready),
            len(self._buffer),
        )
        self.dropped += len(self._ready) + len(self._buffer) + (self._failure is not None)
        self._attempt = attempt
        self._expected = 0
        self._ready.clear()
        self._ready_positions.clear()
        self._buffer.clear()
        self._last_index = None
        self._failure = None
        self._restart_pending = self._restart_pending or handed_out
        self.restarts += 1

    def _accept(self, envelope: TriggerEventEnvelope, position: int | None) -> Offer:
        index = envelope.sequence_index
        if index < self._expected or index in self._buffer:
            self.dropped += 1
            return Offer.DUPLICATE
        if self._last_index is not None and index > self._last_index:
            self.dropped += 1
            return Offer.AFTER_END
        if envelope.is_last:
            # elements held beyond the end contradict it: the first end seen wins
            beyond = [i for i in self._buffer if i > index]
            for i in beyond:
                del self._buffer[i]
            self.dropped += len(beyond)
            self._last_index = index
        if index > self._expected:
            self._buffer[index] = (envelope, position)
            return Offer.BUFFERED
        self._advance(envelope, position)
        while not self.ended and self._expected in self._buffer:
            self._advance(*self._buffer.pop(self._expected))
        return Offer.READY

    def _advance(self, envelope: TriggerEventEnvelope, position: int | None) -> None:
        self._expected = envelope.sequence_index + 1
        if envelope.is_last and envelope.error is not None:
            self._failure = (envelope, position)
        else:
            self._ready.append(envelope)
            self._ready_positions.append(position)
            self._end_reached = envelope.is_last
        if self.ended:
            self.dropped += len(self._buffer)
            self._buffer.clear()

    # ------------------------------------------------------------------ output
    def take(self, max_events: int) -> Taken:
        """Hand out up to ``max_events`` ready elements, in order.

        ``restarted`` is true on the first elements of a new attempt when elements of a
        lower attempt had been handed out before (including those a checkpoint covers).
        """
        if max_events < 1:
            raise ValueError("max_events must be at least 1")
        ready, ready_positions = self._ready, self._ready_positions
        count = min(max_events, len(ready))
        events = [ready.popleft() for _ in range(count)]
        positions = [ready_positions.popleft() for _ in range(count)]
        restarted = False
        finished = False
        if events:
            restarted = self._restart_pending
            self._restart_pending = False
            self._position = (self._attempt, events[-1].sequence_index + 1)
            finished = events[-1].is_last
            self._finished_taken = finished
        return Taken(
            events=events,
            positions=positions,
            attempt=self._position[0],
            restarted=restarted,
            finished=self._finished_taken,
            next_sequence_index=self._position[1],
        )


def gap_error(tracker: SequenceTracker, where: str, how: str, *, topic: str) -> StreamGapError:
    """The :class:`StreamGapError` for the element ``tracker`` waits for (``where`` prefixes the message)."""
    present = tuple(tracker.buffered)
    if present:
        later = f"later elements {present[0]}..{present[-1]} ({len(present)}) are present"
    else:
        later = "no later element arrived"
    return StreamGapError(
        f"{where}sequence_index {tracker.expected} of attempt {tracker.attempt} is missing ({how}; {later})",
        missing_index=tracker.expected,
        attempt=tracker.attempt,
        present=present,
        topic=topic,
        trigger_run_id=tracker.trigger_run_id,
    )


def failure_error(tracker: SequenceTracker, *, topic: str) -> StreamFailedError:
    """The :class:`StreamFailedError` of the failed end ``tracker`` holds, with the producer's error."""
    envelope = tracker.failure
    assert envelope is not None and envelope.error is not None
    return StreamFailedError(
        envelope.error.type,
        envelope.error.message,
        attempt=envelope.attempt,
        sequence_index=envelope.sequence_index,
        envelope=envelope,
        topic=topic,
        trigger_run_id=tracker.trigger_run_id,
    )


# --------------------------------------------------------------------- batches
# Batches of a stream: when one is due (:class:`BatchPolicy`) and what it holds (:class:`StreamBatch`).
#
# :meth:`~airflow_kafka_events.streams.consuming.reader.StreamReader.next_batch` blocks until
# elements are ready and returns a batch as soon as ``max_events`` are ready, or
# ``max_wait`` seconds after the first element of the batch became ready, whichever comes
# first (and at once when the stream's end is known).  A small ``max_wait`` lowers the
# latency of each element; a larger one (with a larger ``max_events``) gathers more
# elements per batch and so pays the per-batch cost of the caller (an XCom write, a
# checkpoint, an offset commit) less often.  ``max_wait=0`` returns whatever is ready.
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
