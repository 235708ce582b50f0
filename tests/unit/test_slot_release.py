"""When a stream consumer gives its worker slot back, and what a reschedule carries to the rerun."""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import AirflowRescheduleException

from airflow_kafka_events.streams.consuming import slot_release
from airflow_kafka_events.streams.consuming.slot_release import (
    DEFER,
    IN_WORKER,
    RESCHEDULE,
    RescheduleNote,
    default_idle_interval,
    gives_slot_back,
    note_key,
    paused_start_deadline,
    producer_state,
    reschedule_in,
    wait_mode,
)
from harness.task_state import DictStore

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("deferrable", "reschedule", "has_store", "mode"),
    [
        (True, True, True, DEFER),
        (True, False, False, DEFER),
        (False, True, True, RESCHEDULE),
        (False, True, False, IN_WORKER),  # no store to carry the position: wait in the worker
        (False, False, True, IN_WORKER),
    ],
)
def test_the_wait_mode_follows_deferrable_then_reschedule(deferrable, reschedule, has_store, mode):
    assert wait_mode(deferrable=deferrable, reschedule=reschedule, has_store=has_store) == mode


def test_the_idle_interval_is_longer_when_a_give_back_costs_a_rerun():
    assert default_idle_interval(DEFER, 0.5) == 1.0
    assert default_idle_interval(RESCHEDULE, 0.5) == 10.0
    assert default_idle_interval(RESCHEDULE, 30.0) == 30.0  # never shorter than a batch's wait


@pytest.mark.parametrize("mode", [DEFER, RESCHEDULE])
def test_a_consumer_gives_its_slot_back_when_not_started_or_idle_and_keeps_it_while_reading(mode):
    assert gives_slot_back(mode, unwritten=True)
    assert gives_slot_back(mode, idle=True)
    assert not gives_slot_back(mode)  # a flowing stream: read on


def test_an_in_worker_consumer_never_gives_its_slot_back():
    assert not gives_slot_back(IN_WORKER, unwritten=True, idle=True)


@pytest.mark.parametrize(
    ("state", "known", "moved"),
    [(None, True, 30.0), ("scheduled", True, 30.0), ("queued", True, 0.0), (None, False, 0.0)],
)
def test_the_start_clock_stands_still_only_while_the_producer_is_known_to_wait(state, known, moved):
    deadline = paused_start_deadline(100.0, producer_state=state, known=known, last_look=1000.0, now=1030.0)
    assert deadline == 100.0 + moved
    # no earlier look: nothing known about the time before
    assert (
        paused_start_deadline(100.0, producer_state=state, known=known, last_look=None, now=1030.0) == 100.0
    )


def test_a_note_is_read_back_only_by_the_same_try_and_generation():
    store = DictStore()
    key = note_key("dag/produce/-1/run")
    RescheduleNote(generation=2, try_number=1, start_deadline=5.0, resume={"deferrals": 1}).save(store, key)
    note = RescheduleNote.load(store, key, generation=2, try_number=1)
    assert note == RescheduleNote(generation=2, try_number=1, start_deadline=5.0, resume={"deferrals": 1})
    assert RescheduleNote.load(store, key, generation=2, try_number=2) is None  # a retry starts afresh
    assert RescheduleNote.load(store, key, generation=3, try_number=1) is None  # a clear starts over
    store.set(key, {"unknown": 1})
    assert RescheduleNote.load(store, key, generation=2, try_number=1) is None
    assert RescheduleNote.load(store, "other", generation=2, try_number=1) is None


def test_reschedule_in_asks_airflow_for_a_rerun_that_many_seconds_later():
    before = datetime.now(timezone.utc)
    with pytest.raises(AirflowRescheduleException) as info:
        reschedule_in(5.0)
    delay = (info.value.reschedule_date - before).total_seconds()
    assert 5.0 <= delay < 6.0


def test_the_producer_state_comes_from_airflow_and_is_unknown_without_it(monkeypatch):
    calls = []

    def get_task_states(**kwargs):
        calls.append(kwargs)
        return {"run": {"produce_3": "scheduled"}}

    ti = SimpleNamespace(dag_id="dag", run_id="run", get_task_states=get_task_states)
    assert producer_state({"ti": ti}, "produce", 3) == (True, "scheduled")
    assert calls == [{"dag_id": "dag", "task_ids": ["produce"], "run_ids": ["run"], "map_index": 3}]
    assert producer_state({"ti": SimpleNamespace(dag_id="dag", run_id="run")}, "produce", -1) == (False, None)
    assert slot_release.try_number_of({"ti": SimpleNamespace(try_number=4)}) == 4
