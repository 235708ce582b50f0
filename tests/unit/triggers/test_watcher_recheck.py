"""After an unclean stop a watcher asks Airflow which of its asset's events exist: the pure parts
(keys of the REST API's events, the api-server's URL, the option) and when a stream asks."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.kafka.positions import PositionTracker
from airflow_kafka_events.kafka.producer import close_all_producers
from airflow_kafka_events.watcher import recheck as watcher_recheck
from airflow_kafka_events.watcher import resume as watcher_resume
from airflow_kafka_events.watcher import stops as watcher_stops
from airflow_kafka_events.watcher import stream as asset_stream
from airflow_kafka_events.watcher.keys import DurableKeys
from airflow_kafka_events.watcher.recheck import api_base_url, keys_of_events, recheck_conn_id
from airflow_kafka_events.watcher.resume import recheck_airflow
from airflow_kafka_events.watcher.stops import WatcherResumption, resumption
from airflow_kafka_events.watcher.stream import WatcherStream

pytestmark = pytest.mark.unit

TP = ("events", 0)


def _watcher_event(
    event_id: str, key: str | None, topic: str = "events", at: str | None = None
) -> dict[str, Any]:
    payload = {
        "event_id": event_id,
        "idempotency_key": key,
        "kafka": {"topic": topic, "partition": 0, "offset": 1},
        "airflow_kafka_events": {"event_id": event_id},
    }
    return {"id": 1, "timestamp": at, "extra": {"from_trigger": True, "payload": payload}}


def test_the_keys_are_those_of_the_events_a_watcher_made_from_its_topics():
    events = [
        _watcher_event("e1", "order-1", at="2026-12-01T10:00:00Z"),
        _watcher_event("e2", None, at="2026-12-01T10:00:01.500000+00:00"),  # no idempotency key: its id
        _watcher_event("e5", "order-5", topic="elsewhere"),  # another watcher's, of another topic
        {"extra": {"airflow_kafka_events": {"event_id": "e3", "idempotency_key": "k3"}}},  # a bridge's
        {"extra": {"from_trigger": True, "payload": {"event_id": "e4"}}},  # a trigger's, not ours
        {"extra": None},  # outlets, the REST API
    ]
    keys = keys_of_events(events, ["events"], now=0.0)
    # each with the time Airflow made the event: the key's time to live runs from then, not from now
    assert keys == {"order-1": 1796119200.0, "event_id:e2": 1796119201.5}
    assert set(keys_of_events(events, None, now=0.0)) == {"order-1", "event_id:e2", "order-5"}


def test_the_api_servers_url_from_a_connection():
    assert api_base_url("http://api:8080/", None, None, conn_id="c") == "http://api:8080"
    assert api_base_url("https://api", 8443, None, conn_id="c") == "https://api:8443"
    assert api_base_url("http://h/prefix", 8080, None, conn_id="c") == "http://h:8080/prefix"
    assert api_base_url("127.0.0.1", 8080, "", conn_id="c") == "http://127.0.0.1:8080"
    assert api_base_url("api", None, "https", conn_id="c") == "https://api"
    # AIRFLOW_CONN_X='https://u:p@host:443/airflow': conn_type https, the path in schema
    assert api_base_url("host", 443, "airflow", conn_type="https", conn_id="c") == "https://host:443/airflow"
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


class _Opened(Exception):
    """Raised where the shared reader would be opened."""


class _NoReader:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    async def partitions(self) -> list[Any]:
        return [TP]

    async def start_offsets(self, missing: Any) -> dict[Any, int]:
        return {}

    async def subscribe(self, *args: Any, **kwargs: Any) -> Any:
        raise _Opened

    async def release(self) -> None:
        pass


def _run(fn: Any) -> Any:
    async def call(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return call


def _stream(store: Store) -> WatcherStream:
    return WatcherStream(
        topics=["events"], kafka_config_id="kafka_watcher", asset_uri="s3://a", asset_name="a", store=store
    )


async def _recheck(found: WatcherResumption) -> None:
    await recheck_airflow(
        "watcher of s3://a/", found, DurableKeys(None, ttl=None), name="a", uri="s3://a/", topics=["events"]
    )


@pytest.fixture
def producers_closed() -> Iterator[None]:
    """Closes the producers the test made (a watcher opening makes its clean-stop marks' producer)
    at its teardown, while pytest's log stream is open, rather than at the interpreter's exit."""
    yield
    close_all_producers(timeout=0)


@pytest.mark.parametrize(("stopped", "asks"), [(False, True), (True, False), (None, True)])
def test_a_stream_asks_airflow_only_after_an_unclean_stop(monkeypatch, producers_closed, stopped, asks):
    monkeypatch.setenv("AIRFLOW__KAFKA_EVENTS__WATCHER_AIRFLOW_API_CONN_ID", "airflow_api")
    asked: list[tuple[str, str, str]] = []

    async def fired_keys(conn_id: str, *, name: str, uri: str, topics: Any) -> dict[str, float]:
        asked.append((conn_id, name, uri))
        return {"order-7": time.time() - 60}

    monkeypatch.setattr(watcher_resume, "fired_keys", fired_keys)
    monkeypatch.setattr(asset_stream, "shared_reader", _NoReader)
    monkeypatch.setattr(watcher_stops, "read_marks", lambda settings, topic, keys: {})  # no mark in Kafka
    kafka = '{"conn_type": "kafka", "extra": {"bootstrap.servers": "127.0.0.1:1"}}'  # never reached
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_WATCHER", kafka)
    monkeypatch.setattr(asset_stream, "sync_to_async", lambda fn: _run(fn))
    state: dict[str, Any] = {"version": 1, "positions": {"events": {"0": 5}}, "seen": {}}
    if stopped is not None:  # None: a state stored before the marker existed
        state["stopped"] = stopped
    stream = _stream(Store(state))

    async def scenario() -> None:
        with contextlib.suppress(_Opened):
            await stream._open()  # up to the shared reader, which this unit test does not open

    asyncio.run(scenario())
    assert asked == ([("airflow_api", "a", "s3://a/")] if asks else [])  # the URI as Airflow keeps it
    assert ("order-7" in stream._keys) is asks  # a record with this key is dropped as a repeat


def test_an_unreachable_api_is_logged_and_reading_goes_on(monkeypatch, caplog):
    monkeypatch.setenv("AIRFLOW__KAFKA_EVENTS__WATCHER_AIRFLOW_API_CONN_ID", "airflow_api")

    async def fired_keys(conn_id: str, *, name: str, uri: str, topics: Any) -> dict[str, float]:
        raise OSError("connection refused")

    monkeypatch.setattr(watcher_resume, "fired_keys", fired_keys)
    asyncio.run(_recheck(resumption(None, None)))
    assert "cannot ask Airflow" in caplog.text and "'airflow_api'" in caplog.text
    assert "connection refused" in caplog.text and "may fire again" in caplog.text


def test_the_last_store_of_a_clean_stop_says_so_unless_records_await_airflow():
    store = Store()
    stream = _stream(store)
    stream._tracker = PositionTracker({TP: 0})

    async def scenario() -> None:
        await stream.flush(force=True)
        await stream._final_flush()
        stream._tracker.hand_on(TP, 0, None)  # handed on, unconfirmed at the stop: read again later
        await stream._final_flush()

    asyncio.run(scenario())
    assert [w["stopped"] for w in store.writes] == [False, True, False]


def test_a_stopping_run_leaves_the_state_a_newer_run_stored():
    store = Store()
    stream = _stream(store)
    stream._tracker = PositionTracker({TP: 0})
    store.stored = {"version": 1, "positions": {"events": {"0": 9}}, "seen": {}, "run": "newer"}
    asyncio.run(stream._final_flush())
    assert store.writes == []


from airflow_kafka_events.watcher.keys import DURABLE_KEYS  # noqa: E402


def test_the_recheck_limit_reaches_beyond_the_stored_keys():
    assert watcher_recheck.RECHECK_LIMIT >= DURABLE_KEYS


class _Assets:
    """The two asset lookups of the REST client, over a fixed list of active assets."""

    def __init__(self, *assets: tuple[int, str, str]) -> None:
        self.assets = [{"id": i, "name": name, "uri": uri} for i, name, uri in assets]

    def assets_with_uri(self, uri: str) -> list[dict[str, Any]]:
        return [a for a in self.assets if a["uri"] == uri]

    def assets_named(self, name: str) -> list[dict[str, Any]]:
        return [a for a in self.assets if a["name"] == name]


def test_the_asset_is_found_by_uri_and_name_by_either_alone():
    from airflow_kafka_events.assets.airflow_api import UnknownAssetError

    client: Any = _Assets((1, "investigate", "ops://investigate/"), (2, "orders", "s3://lake/orders/"))
    assert watcher_recheck._asset_id(client, "investigate", "ops://investigate/") == 1
    assert watcher_recheck._asset_id(client, None, "ops://investigate/") == 1  # a watcher given the URI only
    assert watcher_recheck._asset_id(client, "orders", None) == 2  # a watcher given the name only
    with pytest.raises(
        UnknownAssetError, match=r"no active asset\(s\) with URI 'ops://investigate/' and name 'x'"
    ):
        watcher_recheck._asset_id(client, "x", "ops://investigate/")


class _QueuedRunAirflow(http.server.BaseHTTPRequestHandler):
    """The api-server's three answers a recheck needs; the asset-events list fails first with the 500
    Airflow 3.3 gives while an event's DAG run is still queued (its response model wants the run's
    start_date, which is None until the scheduler starts it)."""

    failures_left = 1
    event = _watcher_event("e9", "order-9", at="2026-12-01T10:00:00Z")

    def _answer(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # the token
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._answer(201, {"access_token": "token"})

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/api/v2/assets":
            self._answer(200, {"assets": [{"id": 3, "name": "a", "uri": "s3://a/"}], "total_entries": 1})
        elif path == "/api/v2/assets/events" and type(self).failures_left > 0:
            type(self).failures_left -= 1
            detail = "1 validation error for AssetEventResponse created_dagruns.0.start_date: None"
            self._answer(500, {"detail": detail})
        elif path == "/api/v2/assets/events":
            self._answer(200, {"asset_events": [self.event], "total_entries": 1})
        else:
            self._answer(404, {"detail": "not found"})

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def _airflow(failures: int) -> Any:
    """The base URL of a real HTTP server answering as :class:`_QueuedRunAirflow` (``failures`` 500s)."""
    _QueuedRunAirflow.failures_left = failures
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _QueuedRunAirflow)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_500_airflow_answers_while_a_dag_run_is_queued_is_retried_and_logged(caplog):
    """A real HTTP server stands in for Airflow: a real api-server answers this 500 only while an
    event's DAG run is queued, a timing a test cannot hold."""
    with _airflow(failures=1) as base_url, caplog.at_level(logging.WARNING, logger=watcher_recheck.__name__):
        keys = watcher_recheck._fetch(base_url, "admin", "pw", "a", "s3://a/", ["events"])
    assert set(keys) == {"order-9"}
    assert _QueuedRunAirflow.failures_left == 0
    line = next(r.getMessage() for r in caplog.records if "Watcher recheck" in r.getMessage())
    assert "answered 500" in line and "retrying in" in line and "DAG run is still queued" in line


def test_the_retries_end_by_the_recheck_timeout(monkeypatch):
    """The lookup runs on a thread that a triggerer's exit waits for: it must not outlive the recheck."""
    monkeypatch.setattr(watcher_recheck, "RECHECK_TIMEOUT", 1.2)
    with _airflow(failures=100) as base_url, pytest.raises(TimeoutError, match="no time left"):
        watcher_recheck._fetch(base_url, "admin", "pw", "a", "s3://a/", ["events"])
    assert _QueuedRunAirflow.failures_left > 90  # it gave up instead of trying on


def test_without_the_option_an_unclean_resume_is_still_logged_and_a_clean_one_is_not(monkeypatch, caplog):
    monkeypatch.delenv("AIRFLOW__KAFKA_EVENTS__WATCHER_AIRFLOW_API_CONN_ID", raising=False)
    monkeypatch.setattr(watcher_recheck, "airflow_option", lambda *args, **kwargs: None)
    crash = resumption({"run": "a", "positions": {}}, None)  # no mark: a crash
    with caplog.at_level(logging.INFO, logger=watcher_resume.__name__):
        asyncio.run(_recheck(crash))
    assert "resumes after an unclean stop" in caplog.text and "watcher_airflow_api_conn_id" in caplog.text
    caplog.clear()
    clean = resumption({"run": "a", "positions": {}}, {"run": "a", "in_doubt": 2})
    with caplog.at_level(logging.INFO, logger=watcher_resume.__name__):
        asyncio.run(_recheck(clean))
    assert "unclean" not in caplog.text
