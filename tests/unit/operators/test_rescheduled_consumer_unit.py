"""A StreamConsumerOperator with the defaults gives its slot back by a reschedule (no Kafka)."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowRescheduleException

from airflow_kafka_events.errors import StreamGapError, StreamNotStartedError
from airflow_kafka_events.streams.checkpoint import Checkpoint
from airflow_kafka_events.streams.consuming import slot_release
from airflow_kafka_events.streams.consuming.operator import StreamRef
from airflow_kafka_events.streams.consuming.slot_release import RescheduleNote, note_key
from harness.task_state import DictStore
from unit.operators.fakes import context, stream
from unit.operators.test_deferred_consumer_unit import HANDLED, RUN, Consumer, FakeClock, IdleReader
from unit.operators.test_deferred_consumer_unit import clock as clock  # the fixture

pytestmark = pytest.mark.unit


class WindowReader(IdleReader):
    """An idle reader whose gap error says how long it waited, as the real reader's does."""

    def __init__(self, *args: Any, gap_window: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gap_window = gap_window

    def next_batch(self):  # type: ignore[override]
        try:
            return super().next_batch()
        except StreamGapError as exc:
            raise StreamGapError(
                f"sequence_index {exc.missing_index} is missing (waited {self.gap_window:g}s)",
                missing_index=exc.missing_index,
                attempt=exc.attempt,
                topic="t",
            ) from exc


class LookingConsumer(Consumer):
    """Its start lookup finds the stream written only once ``written`` is set."""

    written = False

    def open_reader(self, settings, trigger_run_id, checkpoint, group_id):
        self.windows.append((self._reading.start_timeout, self._reading.gap_timeout))
        return WindowReader(
            self.envelopes,
            checkpoint=checkpoint,
            max_events=self.read.max_events,
            gap_window=self._reading.gap_timeout,
        )

    def starting_point(self, settings, trigger_run_id, not_before=None):
        self.stream_unwritten = not self.written
        return Checkpoint(offset=0, partition=0) if self.stream_unwritten else Checkpoint()


def op(envelopes: list, **kwargs: Any) -> LookingConsumer:
    return LookingConsumer(
        envelopes=envelopes,
        task_id="consume",
        stream=StreamRef("produce"),
        handler="unit.operators.test_deferred_consumer_unit.handle",
        max_events=2,
        **kwargs,
    )


@pytest.fixture
def slot_clock(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    monkeypatch.setattr(slot_release, "time", clock)
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "false")
    return clock


def note(store: DictStore) -> RescheduleNote | None:
    return RescheduleNote.load(store, note_key(RUN), generation=0, try_number=1)


def run(consumer: LookingConsumer, store: DictStore, **ctx: Any) -> dict[str, Any]:
    return consumer.execute(context(task_id="consume", store=store, **ctx))


def test_with_the_defaults_a_consumer_of_a_stream_not_started_reschedules_at_once(slot_clock):
    store = DictStore()
    consumer = op([], start_timeout=120)
    assert consumer.wait.deferrable is False and consumer.wait.reschedule is True
    assert consumer.wait.idle_interval == 10.0
    with pytest.raises(AirflowRescheduleException):
        run(consumer, store)
    assert consumer.windows == []  # no reader opened: nothing waited for in the slot
    saved = note(store)
    assert saved is not None and saved.resume is None and saved.reschedules == 1
    assert saved.start_deadline == slot_clock.now + 120


def test_the_start_timeout_counts_from_the_first_run_of_the_try_not_each_rerun(slot_clock):
    store = DictStore()
    consumer = op([], start_timeout=120)
    with pytest.raises(AirflowRescheduleException):
        run(consumer, store)
    first_deadline = note(store).start_deadline  # type: ignore[union-attr]
    slot_clock.advance(64)
    with pytest.raises(AirflowRescheduleException):
        run(op([], start_timeout=120), store)
    assert note(store).start_deadline == first_deadline and note(store).reschedules == 2  # type: ignore[union-attr]
    slot_clock.advance(64)  # 128 s after the first start
    with pytest.raises(StreamNotStartedError, match=r"did not start within 120s.*Is task 'produce'"):
        run(op([], start_timeout=120), store)
    # a retry (the next try) has a start timeout of its own
    with pytest.raises(AirflowRescheduleException):
        run(op([], start_timeout=120), store, try_number=2)


def test_the_start_clock_stands_still_while_the_producer_waits_for_a_slot(slot_clock):
    store = DictStore()
    ctx = context(task_id="consume", store=store)
    ctx["ti"].get_task_states = lambda **kw: {"manual__1": {"produce": "scheduled"}}
    with pytest.raises(AirflowRescheduleException):
        op([], start_timeout=20).execute(ctx)
    slot_clock.advance(32)
    with pytest.raises(AirflowRescheduleException):
        op([], start_timeout=20).execute(ctx)
    assert note(store).start_deadline == slot_clock.now - 32 + 20 + 32  # type: ignore[union-attr]


def test_an_idle_consumer_checkpoints_reschedules_and_its_rerun_reads_on_each_page_once(slot_clock):
    HANDLED.clear()
    store = DictStore()
    consumer = op(stream(RUN, 5)[:3], gap_timeout=300)
    consumer.written = True
    with pytest.raises(AirflowRescheduleException):
        run(consumer, store)
    assert HANDLED == [[0, 1], [2]]
    assert consumer.windows == [(10.0, 10.0)]  # the reader waited at most the idle interval
    saved = note(store)
    assert saved is not None and saved.resume is not None
    assert saved.resume["checkpoint"] == Checkpoint(next_sequence_index=3, offset=3, partition=0).to_json()
    # the rerun (a new process: a new operator) reads on from the checkpoint, counts carried over
    rerun = op(stream(RUN, 5))
    result = run(rerun, store)
    assert HANDLED[:3] == [[0, 1], [2], [3, 4]]
    assert result["pages"] == 5 and result["pages_this_try"] == 5 and result["finished"]
    assert result["reschedules"] == 1 and "deferrals" not in result


def test_a_consumer_of_a_flowing_stream_keeps_its_slot_and_reads_to_the_end(slot_clock):
    HANDLED.clear()
    consumer = op(stream(RUN, 5))
    consumer.written = True
    result = run(consumer, DictStore())
    assert HANDLED[:3] == [[0, 1], [2, 3], [4]]
    assert result["finished"] and result["reschedules"] == 0


def test_the_gap_timeout_counts_from_the_last_page_across_reruns(slot_clock):
    store = DictStore()
    consumer = op(stream(RUN, 5)[:3], gap_timeout=25)
    consumer.written = True
    with pytest.raises(AirflowRescheduleException):
        run(consumer, store)
    last_page = note(store).last_progress  # type: ignore[union-attr]
    assert last_page == slot_clock.now
    slot_clock.advance(16)
    rerun = op(stream(RUN, 5)[:3], gap_timeout=25)
    with pytest.raises(AirflowRescheduleException):
        run(rerun, store)
    assert rerun.windows == [(10.0, 9.0)]  # the gap window left, not a fresh one
    assert note(store).last_progress == last_page  # type: ignore[union-attr]
    slot_clock.advance(16)
    with pytest.raises(StreamGapError, match="waited 25s"):
        run(op(stream(RUN, 5)[:3], gap_timeout=25), store)


def test_without_a_task_state_store_the_consumer_waits_in_the_worker(slot_clock):
    consumer = op(stream(RUN, 5)[:3], gap_timeout=30)
    consumer.written = True
    with pytest.raises(StreamGapError):
        consumer.execute(context(task_id="consume"))
    assert consumer.windows == [(600.0, 30.0)]
