"""StreamFollower: a stream's records in (from a shared reader), its tracker as a StreamReader's.

Pure logic, no client: the records are plain message objects with the stream's key (or not).
"""

from __future__ import annotations

import pytest

from airflow_kafka_events.envelopes.codec import TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes.model import StreamFailure, TriggerEventEnvelope
from airflow_kafka_events.errors import ConfigurationError, StreamGapError
from airflow_kafka_events.streams.checkpoint import Checkpoint
from airflow_kafka_events.streams.consuming.follower import StreamFollower
from harness.kafka_records import FakeMessage

pytestmark = pytest.mark.unit

RUN = "run-1"


def env(seq: int, *, run: str = RUN, attempt: int = 0, last: bool = False, error: bool = False) -> bytes:
    envelope = TriggerEventEnvelope(
        trigger_run_id=run,
        sequence_index=seq,
        attempt=attempt,
        is_last=last or error,
        payload={"page": seq},
        error=StreamFailure(type="E", message="boom") if error else None,
    )
    return TRIGGER_EVENT_CODEC.encode(envelope)


def records(*values: bytes | None, key: str = RUN, first: int = 0) -> list[FakeMessage]:
    return [FakeMessage("t", 0, first + i, key.encode(), value) for i, value in enumerate(values)]


def test_in_order_pages_become_ready_and_other_keys_are_not_looked_at():
    follower = StreamFollower("t", RUN)
    assert not follower.tracker.started
    # another stream's record (its value is not even an envelope): skipped by its key
    follower.offer([FakeMessage("t", 0, 0, b"other", b"not an envelope"), *records(env(0), env(1), first=1)])
    assert follower.tracker.started and follower.tracker.ready_count == 2
    assert follower.rejected == 0 and follower.next_offset == 3


def test_it_starts_from_the_checkpoint_and_drops_what_the_consumer_handled():
    follower = StreamFollower("t", RUN, checkpoint=Checkpoint(attempt=0, next_sequence_index=2, offset=5))
    follower.offer(records(env(0), env(1), env(2), first=5))
    assert follower.tracker.ready_count == 1 and follower.tracker.expected == 3


def test_a_finished_checkpoint_is_at_the_end_before_any_record():
    tracker = StreamFollower("t", RUN, checkpoint=Checkpoint(next_sequence_index=3, finished=True)).tracker
    assert tracker.ended and tracker.finished_taken


def test_pages_ahead_of_a_missing_one_are_held_then_released():
    follower = StreamFollower("t", RUN)
    follower.offer(records(env(0), env(2), env(3)))
    assert follower.tracker.ready_count == 1 and follower.tracker.buffered == [2, 3]
    follower.offer(records(env(1), first=3))
    assert follower.tracker.ready_count == 4 and follower.tracker.buffered == []


def test_more_held_pages_than_max_buffered_are_a_gap_at_once():
    follower = StreamFollower("t", RUN, max_buffered=2)
    follower.offer(records(env(0), env(2), env(3)))
    with pytest.raises(StreamGapError) as info:
        follower.offer(records(env(4), first=3))
    assert info.value.missing_index == 1 and info.value.present == (2, 3, 4)


def test_a_new_attempt_and_a_failed_end_are_seen_as_a_reader_sees_them():
    follower = StreamFollower("t", RUN)
    follower.offer(records(env(0), env(0, attempt=1)))
    assert follower.tracker.restarts == 1 and follower.tracker.attempt == 1
    follower.offer(records(env(1, attempt=1, error=True), first=2))
    assert follower.tracker.ended and follower.tracker.failure is not None


def test_a_record_of_the_stream_that_is_not_an_envelope_is_counted_not_fatal():
    follower = StreamFollower("t", RUN)
    follower.offer(records(None, b"garbage", env(0, run="someone-else"), env(0)))
    assert follower.rejected == 3 and follower.tracker.ready_count == 1


def test_max_buffered_must_be_positive():
    with pytest.raises(ConfigurationError):
        StreamFollower("t", RUN, max_buffered=0)
