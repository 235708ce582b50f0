"""After an unclean stop a watcher asks Airflow which of its asset's events exist: the pure parts
(keys of the REST API's events, the api-server's URL, the option) and when a stream asks."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.kafka.positions import PositionTracker
from airflow_kafka_events.triggers import asset_stream, watcher_recheck
from airflow_kafka_events.triggers.asset_stream import KafkaAssetEventStreamProducer
from airflow_kafka_events.triggers.watcher_recheck import api_base_url, keys_of_events, recheck_conn_id

pytestmark = pytest.mark.unit

TP = ("events", 0)


def _watcher_event(event_id: str, key: str | None) -> dict[str, Any]:
    payload = {"event_id": event_id, "idempotency_key": key, "airflow_kafka_events": {"event_id": event_id}}
    return {"id": 1, "extra": {"from_trigger": True, "payload": payload}}


def test_the_keys_are_those_of_the_events_a_watcher_made():
    events = [
        _watcher_event("e1", "order-1"),
        _watcher_event("e2", None),  # no idempotency key: its event id
        {"extra": {"airflow_kafka_events": {"event_id": "e3", "idempotency_key": "k3"}}},  # a bridge's
        {"extra": {"from_trigger": True, "payload": {"event_id": "e4"}}},  # a trigger's, not ours
        {"extra": None},  # outlets, the REST API
    ]
    assert keys_of_events(events) == {"order-1", "event_id:e2"}


def test_the_api_servers_url_from_a_connection():
    assert api_base_url("http://api:8080/", None, None, conn_id="c") == "http://api:8080"
    assert api_base_url("https://api", 8443, None, conn_id="c") == "https://api:8443"
    assert api_base_url("127.0.0.1", 8080, "", conn_id="c") == "http://127.0.0.1:8080"
    assert api_base_url("api", None, "https", conn_id="c") == "https://api"
    with pytest.raises(ConfigurationError, match=r"connection 'c' .*has no host.*http://airflow-api:8080"):
        api_base_url(None, None, None, conn_id="c")


def test_the_option_is_off_unless_set():
    assert recheck_conn_id({}) is None
    assert recheck_conn_id({"AIRFLOW__KAFKA_EVENTS__WATCHER_AIRFLOW_API_CONN_ID": "  "}) is None
    option = "AIRFLOW__KAFKA_EVENTS__WATCHER_AIRFLOW_API_CONN_ID"
    assert recheck_conn_id({option: "airflow_api"}) == "airflow_api"


class Store:
    def __init__(self, stored: Any = None) -> None:
        self.stored, self.writes = stored, []

    async def aget(self, key: str, default: Any = None) -> Any:
        return self.stored if self.stored is not None else default

    async def aset(self, key: str, value: Any) -> None:
        self.writes.append(value)


def _stream(store: Store) -> KafkaAssetEventStreamProducer:
    return KafkaAssetEventStreamProducer(
        topics=["events"], kafka_config_id="kafka_watcher", asset_uri="s3://a", asset_name="a", store=store
    )


@pytest.mark.parametrize(("stopped", "asks"), [(False, True), (True, False), (None, True)])
def test_a_stream_asks_airflow_only_after_an_unclean_stop(monkeypatch, stopped, asks):
    monkeypatch.setenv("AIRFLOW__KAFKA_EVENTS__WATCHER_AIRFLOW_API_CONN_ID", "airflow_api")
    asked: list[tuple[str, str, str]] = []

    async def fired_keys(conn_id: str, *, name: str, uri: str) -> set[str]:
        asked.append((conn_id, name, uri))
        return {"order-7"}

    monkeypatch.setattr(asset_stream, "fired_keys", fired_keys)
    state: dict[str, Any] = {"version": 1, "positions": {"events": {"0": 5}}, "seen": {}}
    if stopped is not None:  # None: a state stored before the marker existed
        state["stopped"] = stopped
    stream = _stream(Store(state))

    async def scenario() -> None:
        stored = await stream._load_state()
        if stored and not stream._stopped_cleanly:
            await stream._recheck_airflow()

    asyncio.run(scenario())
    assert asked == ([("airflow_api", "a", "s3://a")] if asks else [])
    assert ("order-7" in stream._keys) is asks  # a record with this key is dropped as a repeat


def test_an_unreachable_api_is_logged_and_reading_goes_on(monkeypatch, caplog):
    monkeypatch.setenv("AIRFLOW__KAFKA_EVENTS__WATCHER_AIRFLOW_API_CONN_ID", "airflow_api")

    async def fired_keys(conn_id: str, *, name: str, uri: str) -> set[str]:
        raise OSError("connection refused")

    monkeypatch.setattr(asset_stream, "fired_keys", fired_keys)
    stream = _stream(Store())
    asyncio.run(stream._recheck_airflow())
    assert "cannot ask Airflow" in caplog.text and "'airflow_api'" in caplog.text
    assert "connection refused" in caplog.text and "may fire again" in caplog.text


def test_the_last_store_of_a_clean_stop_says_so():
    store = Store()
    stream = _stream(store)
    stream._tracker = PositionTracker({TP: 0})

    async def scenario() -> None:
        await stream.flush(force=True)
        await stream._final_flush()

    asyncio.run(scenario())
    assert [w["stopped"] for w in store.writes] == [False, True]


def test_the_recheck_limit_reaches_beyond_the_stored_keys():
    assert watcher_recheck.RECHECK_LIMIT >= asset_stream.DURABLE_KEYS
