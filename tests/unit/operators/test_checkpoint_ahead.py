"""A handled batch's checkpoint is stored while the next batch is read, never after it is handled.

``drive_stream`` hands the save of batch N to a background thread and reads batch N+1 meanwhile;
batch N+1 goes to the handler only once that save returned.  These tests hold a save open with
events (each wait has a deadline) to see what runs beside it.
"""

from __future__ import annotations

import gc
import logging
import threading
import weakref
from typing import Any

import pytest

from airflow_kafka_events.errors import StreamGapError, StreamReadError
from airflow_kafka_events.streams.checkpoint import Checkpoint
from airflow_kafka_events.streams.consuming.consumption import StreamCheckpoints, drive_stream
from airflow_kafka_events.streams.consuming.sequence import StreamBatch
from airflow_kafka_events.streams.descriptor import stream_id
from harness.task_state import DictStore
from unit.operators.fakes import TOPIC, FakeReader, stream

pytestmark = pytest.mark.unit

RUN = stream_id("dag", "manual__1", "produce")
DEADLINE = 10.0


class ReadingReader(FakeReader):
    """Tells when each batch is asked for; raises ``fail_at`` (a batch number) instead of reading it."""

    def __init__(self, *args: Any, fail_at: dict[int, BaseException] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.asked = {n: threading.Event() for n in range(1, 20)}
        self.fail_at = fail_at or {}

    def next_batch(self) -> StreamBatch:
        asked = self.number + 1
        self.asked[asked].set()
        if asked in self.fail_at:
            raise self.fail_at[asked]
        return super().next_batch()


class GatedStore(DictStore):
    """A task state store whose writes run only once ``gate(write number)`` returns."""

    def __init__(self, gate: Any) -> None:
        super().__init__()
        self.gate = gate
        self.threads: list[str] = []

    def set(self, key: str, value: Any) -> None:
        self.threads.append(threading.current_thread().name)
        self.gate(len(self.threads))
        super().set(key, value)


def stored_index(store: DictStore) -> int | None:
    value = store.get(next(iter(store.data)), None) if store.data else None
    return None if value is None else value["checkpoint"]["next_sequence_index"]


def drive(reader: FakeReader, store: DictStore, handle_batch: Any, **kwargs: Any) -> Any:
    checkpoints = StreamCheckpoints(store, RUN, 0)
    return drive_stream(
        reader, trigger_run_id=RUN, topic=TOPIC, handle_batch=handle_batch, save=checkpoints.save, **kwargs
    )


def test_a_batch_checkpoint_is_stored_while_the_next_batch_is_read():
    reader = ReadingReader(stream(RUN, 9), max_events=3)

    def gate(write: int) -> None:
        # batch `write`'s checkpoint is written only once batch `write + 1` was asked for (the
        # fourth, the end marker's, is the last: the loop waits for it before it returns)
        if write < 4:
            assert reader.asked[write + 1].wait(DEADLINE), f"batch {write + 1} not read beside save {write}"

    store = GatedStore(gate)
    summary, _ = drive(reader, store, lambda events: None)
    assert summary.finished and summary.pages == 9
    assert stored_index(store) == 10  # the end marker's checkpoint, stored before the loop returned
    assert all(name.startswith("stream-checkpoint") for name in store.threads)
    assert [c.next_sequence_index for c in reader.checkpoints] == [3, 6, 9, 10]


def test_no_batch_is_handled_before_every_batch_before_it_is_checkpointed():
    handled = threading.Event()
    seen: list[tuple[int, int | None]] = []

    def gate(write: int) -> None:
        # hold each save for 0.2 s, so that a batch handed over before its predecessor's save
        # returned is handled during the hold (and ends it) and records the older checkpoint
        handled.clear()
        handled.wait(0.2)

    store = GatedStore(gate)

    def handle(events: list[Any]) -> None:
        seen.append((events[0].sequence_index, stored_index(store)))
        handled.set()

    drive(FakeReader(stream(RUN, 9), max_events=3), store, handle)
    # each batch saw the checkpoint after the batch before it (the first: none)
    assert seen == [(0, None), (3, 3), (6, 6)]


def test_a_failed_save_ends_the_run_before_the_next_batch_is_handled():
    def gate(write: int) -> None:
        if write == 2:
            raise ConnectionError("the api-server went away")

    store = GatedStore(gate)
    handled: list[int] = []
    reader = FakeReader(stream(RUN, 9), max_events=3)
    with pytest.raises(ConnectionError, match="went away"):
        drive(reader, store, lambda events: handled.append(events[0].sequence_index))
    assert handled == [0, 3]
    assert stored_index(store) == 3
    assert [c.next_sequence_index for c in reader.checkpoints] == [3]  # the failed one is not acknowledged


def test_an_idle_stop_returns_with_the_last_handled_batch_checkpointed():
    gap = StreamGapError("nothing yet", missing_index=6, attempt=0, topic=TOPIC)
    reader = ReadingReader(stream(RUN, 9), max_events=3, fail_at={3: gap})
    store = GatedStore(lambda write: None)
    summary, _ = drive(reader, store, lambda events: None, is_idle=lambda exc: True)
    assert summary.idle and summary.pages == 6
    assert stored_index(store) == 6
    assert reader.checkpoint() == Checkpoint(attempt=0, next_sequence_index=6, offset=6, partition=0)


def test_a_read_error_beside_a_save_keeps_that_save_and_raises_the_read_error():
    failure = StreamReadError("broker gone", topic=TOPIC, trigger_run_id=RUN)
    reader = ReadingReader(stream(RUN, 9), max_events=3, fail_at={2: failure})
    store = GatedStore(lambda write: reader.asked[2].wait(DEADLINE))
    with pytest.raises(StreamReadError, match="broker gone"):
        drive(reader, store, lambda events: None)
    assert stored_index(store) == 3
    assert [c.next_sequence_index for c in reader.checkpoints] == [3]


def test_a_save_failing_beside_a_read_error_is_logged_and_the_read_error_raised(caplog):
    failure = StreamReadError("broker gone", topic=TOPIC, trigger_run_id=RUN)
    reader = ReadingReader(stream(RUN, 9), max_events=3, fail_at={2: failure})

    def gate(write: int) -> None:
        reader.asked[2].wait(DEADLINE)
        raise ConnectionError("the api-server went away")

    with caplog.at_level(logging.WARNING), pytest.raises(StreamReadError, match="broker gone"):
        drive(reader, GatedStore(gate), lambda events: None)
    assert "storing the checkpoint of the last handled batch failed: the api-server went away" in caplog.text
    assert reader.checkpoints == []


def test_the_handled_pages_are_not_kept_while_their_checkpoint_is_stored():
    reader = ReadingReader(stream(RUN, 6), max_events=3)
    first_page = weakref.ref(reader.pending[0][1])
    alive_while_saving: list[bool] = []

    def gate(write: int) -> None:
        if write == 1:
            assert reader.asked[2].wait(DEADLINE)
            gc.collect()
            alive_while_saving.append(first_page() is not None)

    drive(reader, GatedStore(gate), lambda events: None)
    assert alive_while_saving == [False]
