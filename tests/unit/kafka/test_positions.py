"""PositionTracker: the stored position never passes a record whose work is unfinished."""

from __future__ import annotations

import pytest

from airflow_kafka_events.errors import ValidationError
from airflow_kafka_events.kafka.positions import PositionTracker, positions_from_json, positions_to_json

pytestmark = pytest.mark.unit

A0, A1 = ("a", 0), ("a", 1)


def test_durable_position_waits_for_the_first_unfinished_record():
    tracker = PositionTracker({A0: 10, A1: 0})
    assert tracker.durable() == {A0: 10, A1: 0}
    tracker.read(A0, 10)  # skipped (another asset's)
    tracker.hand_on(A0, 11, "t11")
    tracker.read(A0, 12)
    tracker.hand_on(A0, 13, "t13")
    assert tracker.durable()[A0] == 11 and tracker.pending_count() == 2
    assert tracker.finish(A0, [13]) == ["t13"]
    assert tracker.durable()[A0] == 11  # 11 still unfinished: 12 and 13 are read again after a crash
    assert tracker.finish(A0, [11, 99]) == ["t11"]  # unknown offsets are ignored
    assert tracker.durable() == {A0: 14, A1: 0}


def test_rewind_forgets_what_will_be_read_again():
    tracker = PositionTracker({A0: 0})
    for offset in range(5):
        tracker.hand_on(A0, offset, offset)
    tracker.finish(A0, [0, 1])
    tracker.rewind(A0, 2)
    assert tracker.durable() == {A0: 2} and tracker.pending_count() == 0


def test_changes_since_the_last_store_and_new_partitions():
    tracker = PositionTracker({A0: 3})
    assert tracker.changed_since_stored()
    tracker.mark_stored(tracker.durable())
    assert not tracker.changed_since_stored()
    tracker.read(A0, 3)
    assert tracker.changed_since_stored()
    tracker.add_partitions({A1: 0, A0: 99})  # an existing partition keeps its place
    assert tracker.durable() == {A0: 4, A1: 0}
    with pytest.raises(KeyError, match=r"b\[0\]"):
        tracker.read(("b", 0), 1)


def test_positions_round_trip_through_json_keys():
    positions = {A0: 5, A1: 7, ("b", 2): 0}
    stored = positions_to_json(positions)
    assert stored == {"a": {"0": 5, "1": 7}, "b": {"2": 0}}
    assert positions_from_json(stored) == positions
    assert positions_from_json(None) == {}


@pytest.mark.parametrize("bad", [[1], {"a": [1]}, {"a": {"0": -1}}, {"a": {"0": True}}, {"a": {"0": "5"}}])
def test_malformed_stored_positions_are_refused(bad):
    with pytest.raises(ValidationError):
        positions_from_json(bad)
