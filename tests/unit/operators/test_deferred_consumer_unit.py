"""The deferrable StreamConsumerOperator and its StreamWaitTrigger without Kafka."""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_kafka_events.errors import (
    KafkaOperationError,
    StreamGapError,
    StreamNotStartedError,
    ValidationError,
)
from airflow_kafka_events.streams.checkpoint import Checkpoint
from airflow_kafka_events.streams.consuming import operator as consumer_module
from airflow_kafka_events.streams.consuming import wait_trigger as stream_wait
from airflow_kafka_events.streams.consuming.operator import StreamConsumerOperator, StreamRef
from airflow_kafka_events.streams.consuming.slot_release import default_deferrable
from airflow_kafka_events.streams.consuming.wait_trigger import StreamWaitTrigger, producer_state_key
from airflow_kafka_events.streams.descriptor import stream_id
from harness.task_state import DictStore
from unit.operators.fakes import FakeReader, context, stream

pytestmark = pytest.mark.unit

RUN = stream_id("dag", "manual__1", "produce")
HANDLED: list[list[int]] = []


def handle(events: Any, context: Any) -> None:
    HANDLED.append([e.sequence_index for e in events])


class FakeClock:
    """Epoch seconds that move only when told: the operator's and the trigger's ``time``.

    Starts at a round number and moves by binary fractions, so sums are exact.
    """

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now
        self._lock = threading.Lock()

    def time(self) -> float:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> float:
        with self._lock:
            self.now += seconds
            return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(consumer_module, "time", fake)
    monkeypatch.setattr(stream_wait, "time", fake)
    return fake


class IdleReader(FakeReader):
    """Hands out its envelopes, then is idle: the reader's (idle-sized) timeout fires."""

    def next_batch(self):  # type: ignore[override]
        if self.pending:
            return super().next_batch()
        if self._acked is None or self._acked.next_sequence_index == 0:
            raise StreamNotStartedError("stream did not start within 1s: no element arrived", topic="t")
        raise StreamGapError("missing", missing_index=self._acked.next_sequence_index, attempt=0, topic="t")


class Consumer(StreamConsumerOperator):
    def __init__(self, *, envelopes: list, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.envelopes = envelopes
        self.windows: list[tuple[float, float]] = []

    def get_settings(self):
        return None

    def starting_point(self, settings, trigger_run_id, not_before=None):
        return Checkpoint()

    def open_reader(self, settings, trigger_run_id, checkpoint, group_id):
        self.windows.append((self._reading.start_timeout, self._reading.gap_timeout))
        return IdleReader(self.envelopes, checkpoint=checkpoint, max_events=self.read.max_events)


def op(envelopes: list, **kwargs: Any) -> Consumer:
    kwargs.setdefault("deferrable", True)
    return Consumer(
        envelopes=envelopes,
        task_id="consume",
        stream=StreamRef("produce"),
        handler=f"{__name__}.handle",
        max_events=2,
        **kwargs,
    )


def test_deferrable_follows_airflows_default_deferrable(monkeypatch):
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "true")
    assert default_deferrable() is True
    assert op([], deferrable=None).wait.deferrable is True
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "false")
    assert op([], deferrable=None).wait.deferrable is False
    assert op([], deferrable=True).wait.deferrable is True


def test_idle_interval_and_resume_wait_defaults_follow_max_wait():
    consumer = op([])
    assert (consumer.wait.idle_interval, consumer.wait.resume_wait) == (1.0, 5.0)
    consumer = op([], max_wait=8.0)
    assert (consumer.wait.idle_interval, consumer.wait.resume_wait) == (8.0, 8.0)
    with pytest.raises(Exception, match="idle_interval"):
        op([], idle_interval=0)


def test_an_idle_consumer_checkpoints_and_defers_to_the_wait_trigger(clock):
    HANDLED.clear()
    store = DictStore()
    envelopes = stream(RUN, 5)[:3]  # 3 pages, no end yet
    consumer = op(envelopes, idle_interval=0.5, gap_timeout=30, start_timeout=60)
    with pytest.raises(TaskDeferred) as info:
        consumer.execute(context(task_id="consume", store=store))
    assert HANDLED == [[0, 1], [2]]
    deferred = info.value
    trigger = deferred.trigger
    assert isinstance(trigger, StreamWaitTrigger) and deferred.method_name == "resume_reading"
    assert deferred.timeout is None
    assert trigger.checkpoint == Checkpoint(next_sequence_index=3, offset=3, partition=0).to_json()
    assert trigger.max_events == 2 and trigger.trigger_run_id == RUN
    assert trigger.producer == {"dag_id": "dag", "run_id": "manual__1", "task_id": "produce", "map_index": -1}
    assert trigger.start_deadline == clock.now + 60  # start_timeout from the first call
    assert (
        trigger.gap_deadline == clock.now - 0.5 + 30
    )  # gap_timeout from the last page (an idle interval ago)
    assert consumer.windows == [(0.5, 0.5)]  # the reader waits at most the idle interval
    kwargs = deferred.kwargs or {}
    assert kwargs["deferrals"] == 1 and kwargs["summary"]["pages_this_try"] == 3
    # resumed with a batch ready: reads on from the checkpoint, counts carried over
    consumer.envelopes = stream(RUN, 5)
    result = consumer.resume_reading(
        context(task_id="consume", store=store), event={"status": "ready"}, **kwargs
    )
    assert HANDLED == [[0, 1], [2], [3, 4], []] or HANDLED[:3] == [[0, 1], [2], [3, 4]]
    assert result["pages"] == 5 and result["pages_this_try"] == 5 and result["deferrals"] == 1
    assert result["finished"]


def test_an_idle_consumer_before_the_start_defers_with_no_checkpoint_yet():
    consumer = op([], idle_interval=0.5)
    with pytest.raises(TaskDeferred) as info:
        consumer.execute(context(task_id="consume", store=DictStore()))
    assert info.value.trigger.checkpoint == Checkpoint().to_json()


def test_past_the_start_deadline_the_worker_raises_the_real_error():
    consumer = op([], idle_interval=0.5, start_timeout=20)
    with pytest.raises(StreamNotStartedError, match=r"did not start within 20s.*Is task 'produce'"):
        consumer.resume_reading(
            context(task_id="consume", store=DictStore()),
            event={"status": "ready"},
            start_deadline=time.time() - 1,
        )


def test_in_worker_mode_raises_instead_of_deferring():
    consumer = op(stream(RUN, 5)[:3], deferrable=False, reschedule=False, start_timeout=7)
    with pytest.raises(StreamGapError):
        consumer.execute(context(task_id="consume", store=DictStore()))
    assert consumer.windows == [(7.0, 300.0)]


@pytest.mark.parametrize(
    ("event", "error", "match"),
    [
        ({"status": "not_started", "message": "stream x did not start within 9s: nothing"},
         StreamNotStartedError, r"did not start within 9s: nothing\. Is task 'produce'"),
        ({"status": "gap", "message": "index 4 is missing", "missing_index": 4, "attempt": 1, "present": [6]},
         StreamGapError, "index 4 is missing"),
        ({"status": "error", "message": "broker gone"}, KafkaOperationError, "broker gone"),
        ({"status": "what"}, ValidationError, "unexpected event"),
    ],
)  # fmt: skip
def test_trigger_events_become_the_typed_errors_of_an_in_worker_read(event, error, match):
    consumer = op([], start_timeout=9)
    with pytest.raises(error, match=match) as info:
        consumer.resume_reading(context(task_id="consume", store=DictStore()), event=event)
    if isinstance(info.value, StreamGapError):
        assert (info.value.missing_index, info.value.attempt, info.value.present) == (4, 1, (6,))
    if isinstance(info.value, StreamNotStartedError):
        assert info.value.trigger_run_id == RUN


# --------------------------------------------------------------------------- the trigger
class FakeTracker(SimpleNamespace):
    @property
    def progress(self) -> tuple[int, int, int, bool]:
        return (self.restarts, self.attempt, self.expected, self.started)


#: Seconds one ``fill`` of the fake reader takes on the fake clock (a binary fraction: exact sums).
FILL = 0.125


class FakeWatch:
    """``fill`` takes :data:`FILL` seconds of the fake clock, then shows the script's next tracker
    state (what arrived meanwhile); ``fills`` are the clock's readings after each fill.  From
    ``park_at`` on it parks in ``fill`` (``parked`` set) until cancelled."""

    def __init__(self, script: list[dict[str, Any]], clock: FakeClock | None = None) -> None:
        self.tracker = FakeTracker(
            started=False, ready_count=0, ended=False, restarts=0, attempt=0, expected=0, buffered=[]
        )
        self.script = script
        self.clock = clock if clock is not None else FakeClock()
        self.fills: list[float] = []
        self.park_at: float | None = None
        self.parked = threading.Event()
        self.closed = False

    async def fill(self, timeout: float) -> None:
        assert FILL <= timeout
        if self.park_at is not None and self.clock.time() >= self.park_at:
            self.parked.set()
            await asyncio.Event().wait()  # until the trigger is cancelled
        self.fills.append(self.clock.advance(FILL))
        if self.script:
            for key, value in self.script.pop(0).items():
                setattr(self.tracker, key, value)

    async def close(self) -> None:
        self.closed = True


class ScriptedTrigger(StreamWaitTrigger):
    def __init__(
        self,
        script: list[dict[str, Any]],
        states: list[str | None] | None = None,
        clock: FakeClock | None = None,
        **kwargs: Any,
    ):
        kwargs.setdefault("topic", "t")
        kwargs.setdefault("trigger_run_id", RUN)
        super().__init__(**kwargs)
        self.reader = FakeWatch(script, clock)
        self.states = states

    async def _open_watch(self) -> Any:
        return self.reader

    async def producer_state(self) -> tuple[bool, str | None]:
        if self.states is None:
            return False, None
        return True, self.states.pop(0) if len(self.states) > 1 else self.states[0]


async def first_event_async(trigger: StreamWaitTrigger) -> dict[str, Any]:
    async for event in trigger.run():
        return event.payload
    raise AssertionError("no event")


def first_event(trigger: StreamWaitTrigger) -> dict[str, Any]:
    return asyncio.run(first_event_async(trigger))


def test_the_trigger_serializes_to_its_own_kwargs():
    trigger = StreamWaitTrigger(topic="t", trigger_run_id=RUN, checkpoint={"format": 1}, start_deadline=5.0)
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_kafka_events.streams.consuming.wait_trigger.StreamWaitTrigger"
    assert StreamWaitTrigger(**kwargs).serialize() == (classpath, kwargs)


def test_the_trigger_wakes_for_a_full_batch_not_for_a_page():
    trigger = ScriptedTrigger(
        [{"started": True, "ready_count": 1, "expected": 1}, {"ready_count": 2, "expected": 2}],
        max_events=3,
        resume_wait=30,
    )
    trigger.reader.script.append({"ready_count": 3, "expected": 3})
    payload = first_event(trigger)
    assert payload["status"] == "ready" and payload["reason"] == "full-batch" and payload["ready"] == 3


@pytest.mark.parametrize(
    ("state", "reason"),
    [({"started": True, "ended": True}, "end"), ({"started": True, "restarts": 1}, "new-attempt")],
)
def test_the_trigger_wakes_at_the_end_or_a_new_attempt(state, reason):
    assert first_event(ScriptedTrigger([state], max_events=100))["reason"] == reason


def test_the_trigger_wakes_resume_wait_after_the_first_new_page(clock):
    trigger = ScriptedTrigger(
        [{"started": True, "ready_count": 1}], clock=clock, max_events=100, resume_wait=3 * FILL
    )
    payload = first_event(trigger)
    page_seen, woke = trigger.reader.fills[0], trigger.reader.fills[-1]
    assert payload["reason"] == "resume-wait" and payload["ready"] == 1
    assert woke - page_seen == 3 * FILL  # at its first look resume_wait after the page, not before


def test_the_trigger_ends_a_stream_that_does_not_start_by_its_deadline(clock):
    deadline = clock.now + 4 * FILL
    trigger = ScriptedTrigger([], clock=clock, start_timeout=4, start_deadline=deadline)
    payload = first_event(trigger)
    assert payload["status"] == "not_started" and "did not start within 4s" in payload["message"]
    assert trigger.reader.fills[-1] == deadline  # at its first look at the deadline, not before


def test_the_trigger_ends_a_stream_whose_next_page_does_not_come(clock):
    trigger = ScriptedTrigger(
        [{"started": True, "expected": 4, "buffered": [6, 7]}],
        clock=clock,
        gap_timeout=3 * FILL,
        gap_deadline=None,
    )
    payload = first_event(trigger)
    assert payload["status"] == "gap" and payload["missing_index"] == 4 and payload["present"] == [6, 7]
    page_seen, ended = trigger.reader.fills[0], trigger.reader.fills[-1]
    assert ended - page_seen == 3 * FILL  # gap_timeout counted from the last progress
    assert trigger.reader.closed  # the trigger left its stream's feed after the event


def test_the_start_clock_stands_still_while_the_producer_waits_for_a_slot(clock):
    unpaused_deadline = clock.now + 4 * FILL
    trigger = ScriptedTrigger(
        [], states=["scheduled"], clock=clock, start_deadline=unpaused_deadline, state_poll_interval=FILL / 2
    )
    trigger.reader.park_at = unpaused_deadline + 80 * FILL  # 10 s past the unpaused deadline

    async def scenario() -> None:
        task = asyncio.ensure_future(first_event_async(trigger))
        try:
            deadline = time.monotonic() + 30
            while not trigger.reader.parked.is_set() and not task.done():
                assert time.monotonic() < deadline, "the trigger neither ended nor reached the horizon"
                await asyncio.sleep(0.01)
            assert not task.done(), task.result()  # no event: still waiting, the clock stood still
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())
    # once the producer is queued the clock runs again: it ends at its deadline
    deadline = clock.now + 4 * FILL
    queued = ScriptedTrigger([], states=["queued"], clock=clock, start_deadline=deadline)
    payload = first_event(queued)
    assert payload["status"] == "not_started" and queued.reader.fills[-1] == deadline


def test_the_producers_state_key_is_airflows():
    assert producer_state_key("produce", -1) == "produce"
    assert producer_state_key("produce", 3) == "produce_3"


def test_the_decorator_takes_the_deferral_arguments():
    import pendulum
    from airflow.sdk import DAG, task

    with DAG("decorated_deferrable", schedule=None, start_date=pendulum.datetime(2024, 1, 1)) as dag:

        @task.stream_consumer(stream=StreamRef("produce"), deferrable=True, idle_interval=2.5, resume_wait=9)
        def handle(events, context):
            return None

        handle()

    consumer = dag.get_task("handle")
    assert isinstance(consumer, StreamConsumerOperator)
    assert (consumer.wait.deferrable, consumer.wait.idle_interval, consumer.wait.resume_wait) == (
        True,
        2.5,
        9.0,
    )
