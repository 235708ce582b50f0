"""The clean-stop mark: its encoding, and how a starting watcher tells a clean stop from a crash."""

from __future__ import annotations

import json

import pytest

from airflow_kafka_events.errors import ValidationError
from airflow_kafka_events.kafka.topic_plan import WATCHER_STOPS_TOPIC
from airflow_kafka_events.watcher.stops import decode_mark, encode_mark, mark_key, resumption, stops_topic

pytestmark = pytest.mark.unit

STORED = {"version": 1, "positions": {"t": {"0": 5}}, "seen": {"k-1": 1.0}, "run": "run-a", "stopped": False}


def _mark(run: str = "run-a", in_doubt: int = 0, offset: int = 9) -> dict:
    state = {**STORED, "run": run, "positions": {"t": {"0": offset}}, "seen": {"k-1": 1.0, "k-2": 2.0}}
    return decode_mark(encode_mark(state, [(10 + n, f"key-{n}") for n in range(in_doubt)]))


def test_the_mark_of_the_run_that_stored_the_state_is_a_clean_stop_and_wins():
    found = resumption(STORED, _mark(in_doubt=0))
    assert found.clean and found.from_mark and not found.recheck
    assert found.state is not None and found.state["positions"] == {
        "t": {"0": 9}
    }  # the last word, not the store
    assert set(found.state["seen"]) == {"k-1", "k-2"}


def test_records_in_doubt_at_a_clean_stop_are_rechecked_when_a_recheck_is_possible():
    found = resumption(STORED, _mark(in_doubt=3))
    assert found.clean and found.in_doubt == 3 and found.recheck


def test_the_mark_lists_each_record_in_doubt_by_its_number_in_the_run_in_the_order_fired():
    state = {**STORED, "run": "run-a"}
    mark = decode_mark(encode_mark(state, [(12, "k-12"), (7, "k-7")]))
    assert mark["in_doubt"] == 2 and mark["in_doubt_fired"] == [[7, "k-7"], [12, "k-12"]]
    assert resumption(STORED, mark).in_doubt_fired == ((7, "k-7"), (12, "k-12"))


def test_a_mark_without_the_list_is_read_as_it_was_written():
    raw = json.dumps({**STORED, "stopped": True, "in_doubt": 2}).encode()
    found = resumption(STORED, decode_mark(raw))
    assert found.from_mark and found.in_doubt == 2 and found.in_doubt_fired is None and found.recheck


def test_a_mark_of_another_run_is_stale_a_newer_run_stored_since_and_did_not_stop_cleanly():
    found = resumption({**STORED, "run": "run-b"}, _mark(run="run-a"))
    assert not found.clean and not found.from_mark and found.recheck
    assert found.state is not None and found.state["positions"] == {"t": {"0": 5}}


def test_no_mark_is_a_crash_unless_the_asset_state_store_got_the_last_store():
    assert not resumption(STORED, None).clean
    assert resumption(STORED, None).recheck
    stopped = resumption({**STORED, "stopped": True}, None)
    assert stopped.clean and not stopped.recheck


def test_a_first_start_has_nothing_to_recheck_and_ignores_a_mark_of_a_cleared_state():
    found = resumption(None, _mark())
    assert found.state is None and found.clean and not found.recheck and not found.from_mark


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"not json", "not JSON"),
        (b"[1]", "JSON object"),
        (json.dumps({"positions": {}}).encode(), "JSON object"),
        (json.dumps({"run": "r", "in_doubt": -1}).encode(), "in_doubt"),
        (json.dumps({"run": "r", "in_doubt": True}).encode(), "in_doubt"),
        (json.dumps({"run": "r", "in_doubt": 2, "in_doubt_fired": [[1, "k"]]}).encode(), "in_doubt_fired"),
        (json.dumps({"run": "r", "in_doubt": 1, "in_doubt_fired": [["1", "k"]]}).encode(), "in_doubt_fired"),
    ],
)
def test_a_malformed_mark_is_refused_naming_what_is_wrong(raw, why):
    with pytest.raises(ValidationError, match=why):
        decode_mark(raw)


def test_the_mark_is_keyed_by_connection_and_asset_and_its_topic_is_configurable(monkeypatch):
    assert mark_key("kw", "ops://a", None) != mark_key("kw", "ops://b", None)
    assert mark_key("kw", "ops://a", "a") != mark_key("other", "ops://a", "a")
    monkeypatch.delenv("AIRFLOW__KAFKA_EVENTS__WATCHER_STOPS_TOPIC", raising=False)
    monkeypatch.setenv("AIRFLOW_HOME", "/nonexistent-airflow-home")
    assert stops_topic() == WATCHER_STOPS_TOPIC
    monkeypatch.setenv("AIRFLOW__KAFKA_EVENTS__WATCHER_STOPS_TOPIC", " ops.stops ")
    assert stops_topic() == "ops.stops"
