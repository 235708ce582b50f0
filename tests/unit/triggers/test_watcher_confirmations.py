"""What a watcher's events carry so that Airflow records their persistence, and how a start reads it."""

from __future__ import annotations

import pytest

from airflow_kafka_events.watcher.confirmations import (
    METASTORE_BACKEND,
    fired_mark,
    mark_of,
    persisted_key,
    persisted_seq,
    recorded_with_events,
    settle,
)

pytestmark = pytest.mark.unit


def _extra(mark: object) -> dict:
    return {"from_trigger": True, "payload": {"event_id": "e", "watcher": mark}}


def test_an_events_mark_is_read_back_from_its_extra_and_nothing_else_has_one():
    assert mark_of(_extra(fired_mark("run-a", 7))) == ("run-a", 7)
    assert mark_of({"payload": {"watcher": fired_mark("run-a", 7)}}) is None  # not from a trigger
    assert mark_of(_extra({"run": "run-a", "seq": True})) is None
    assert mark_of(_extra({"run": "", "seq": 1})) is None
    assert mark_of(_extra(None)) is None
    assert mark_of(None) is None


def test_records_in_doubt_up_to_the_last_persisted_number_are_in_airflow_the_others_not():
    in_doubt = [(4, "k4"), (5, "k5"), (9, "k9")]
    assert settle(in_doubt, 5) == (["k4", "k5"], ["k9"])
    assert settle(in_doubt, 3) == ([], ["k4", "k5", "k9"])  # an older event was the run's last persisted
    assert settle(in_doubt, None) == ([], ["k4", "k5", "k9"])  # nothing of the run persisted
    assert settle(in_doubt, 9) == (["k4", "k5", "k9"], [])


def test_the_stored_record_is_one_per_run():
    assert persisted_key("a") != persisted_key("b")
    assert persisted_seq({"seq": 3}) == 3
    assert persisted_seq(None) is None and persisted_seq({"seq": "3"}) is None


def test_only_the_metadata_database_backend_commits_the_record_with_the_events():
    assert recorded_with_events({"AIRFLOW_HOME": "/nonexistent"})
    assert recorded_with_events({"AIRFLOW__STATE_STORE__BACKEND": METASTORE_BACKEND})
    assert not recorded_with_events({"AIRFLOW__STATE_STORE__BACKEND": "my.ObjectStoreBackend"})
