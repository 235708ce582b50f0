"""HttpPaginationTrigger / GraphPaginationTrigger against a local paginated API and a real Kafka.

The triggers run as the triggerer runs them (``run()`` iterated in an asyncio loop,
``cleanup()`` afterwards, ``asyncio.Task.cancel()`` to stop them); the Kafka and HTTP
connections come from ``AIRFLOW_CONN_*`` variables.  "Served" below means a complete ``2xx``
answer of the local API (:mod:`integration.triggers.http_server`).

The first tests are ``unit`` tests (no broker): serialization round trips, argument checks
and the header / URL helpers.
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import json
import socket
import uuid
from collections.abc import Iterator
from contextlib import suppress
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from airflow.sdk.module_loading import import_string
from airflow.triggers.base import TriggerEvent
from confluent_kafka import Consumer, Producer, TopicPartition

from airflow_kafka_events.envelopes.codec import TRIGGER_EVENT_CODEC
from airflow_kafka_events.envelopes.model import TriggerEventEnvelope
from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.http.requests import parse_link_header, redact_url
from airflow_kafka_events.http.trigger import END_CURSOR, GraphPaginationTrigger, HttpPaginationTrigger
from airflow_kafka_events.provider.serialization import roundtrip_trigger_kwargs
from airflow_kafka_events.retry import parse_retry_after
from airflow_kafka_events.streams.descriptor import StreamDescriptor
from airflow_kafka_events.streams.progress import FIRST_OFFSET_METADATA_KEY
from integration.triggers.http_server import PagedApi, page_items
from integration.triggers.sample_triggers import Stored, collect, read_topic, wait_for

MODULE = "airflow_kafka_events.http.trigger"
ERRORS = "airflow_kafka_events.http.errors"
CONN_ID = "paged_api"
PASSWORD = "pw-never-in-kafka-3141"
API_KEY = "key-never-in-kafka-2718"


# ====================================================================== unit
def _round_trip(trigger: HttpPaginationTrigger) -> HttpPaginationTrigger:
    """What the triggerer builds from the stored trigger row."""
    classpath, kwargs = trigger.serialize()
    cls = import_string(classpath)
    assert cls is type(trigger)
    return cls(**roundtrip_trigger_kwargs(kwargs))


@pytest.mark.unit
def test_http_trigger_serialize_maps_one_to_one_onto_init():
    trigger = HttpPaginationTrigger(
        endpoint="/v2/search",
        http_conn_id="api",
        method="post",
        params={"q": "x", "tags": ("a", "b"), "active": True, "limit": 50},
        headers={"X-Trace": "1"},
        data={"filter": {"kind": ["a", "b"]}, "n": 1.5},
        cursor_path=["meta", "next.cursor"],
        cursor_param="cursor",
        items_path="data.0.rows",
        max_pages=7,
        max_retries=2,
        retry_backoff=0.5,
        max_backoff=4,
        max_retry_after=30,
        request_timeout=12.5,
        allow_foreign_next_links=True,
        trigger_run_id="dag/task/-1/run",
        topic="t.events",
        kafka_config_id="kafka_x",
        finish_task=True,
        producer_identity={"dag_id": "dag", "try_number": 2},
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == f"{MODULE}.HttpPaginationTrigger"
    assert kwargs == {
        "endpoint": "/v2/search",
        "http_conn_id": "api",
        "method": "POST",
        "params": {"q": "x", "tags": ["a", "b"], "active": True, "limit": 50},
        "headers": {"X-Trace": "1"},
        "data": {"filter": {"kind": ["a", "b"]}, "n": 1.5},
        "cursor_path": ["meta", "next.cursor"],
        "cursor_param": "cursor",
        "next_link_header": False,
        "items_path": "data.0.rows",
        "max_pages": 7,
        "max_retries": 2,
        "retry_backoff": 0.5,
        "max_backoff": 4.0,
        "max_retry_after": 30.0,
        "request_timeout": 12.5,
        "allow_foreign_next_links": True,
        **trigger.stream_kwargs(),  # the base class's arguments
    }
    assert (kwargs["trigger_run_id"], kwargs["topic"], kwargs["kafka_config_id"]) == (
        "dag/task/-1/run",
        "t.events",
        "kafka_x",
    )
    json.dumps(kwargs)  # plain JSON values
    again = _round_trip(trigger)
    assert again.serialize() == (classpath, kwargs)
    # defaults round-trip too
    plain = HttpPaginationTrigger(endpoint="items", next_link_header=True)
    assert _round_trip(plain).serialize() == plain.serialize()
    assert plain.serialize()[1]["http_conn_id"] == "http_default"


@pytest.mark.unit
def test_graph_trigger_serialize_maps_one_to_one_onto_init():
    trigger = GraphPaginationTrigger(
        endpoint="v1.0/users",
        params={"$top": 100, "$select": "id,displayName"},
        headers={"ConsistencyLevel": "eventual"},
        max_pages=3,
        retry_backoff=2,
        trigger_run_id="dag/users/-1/run",
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == f"{MODULE}.GraphPaginationTrigger"
    assert kwargs["http_conn_id"] == "msgraph"
    # what the Graph variant fixes is not an argument of it
    assert not {"cursor_path", "cursor_param", "next_link_header", "items_path"} & set(kwargs)
    assert trigger.cursor_path == ["@odata.nextLink"] and trigger.items_path == "value"
    again = _round_trip(trigger)
    assert isinstance(again, GraphPaginationTrigger)
    assert again.serialize() == (classpath, kwargs)
    with pytest.raises(
        ConfigurationError, match=r"GraphPaginationTrigger fixes items_path .* fix: leave out"
    ):
        GraphPaginationTrigger(endpoint="v1.0/users", items_path="other")


@pytest.mark.unit
@pytest.mark.parametrize("trigger_class", ["HttpPaginationTrigger", "GraphPaginationTrigger"])
def test_a_misspelt_option_is_refused_naming_the_closest_one(trigger_class):
    import airflow_kafka_events.http.trigger as http

    cls = getattr(http, trigger_class)
    with pytest.raises(
        ConfigurationError, match=rf"{trigger_class} has no option 'max_page' \(did you mean 'max_pages'\?\)"
    ):
        cls(endpoint="v1.0/users", max_page=3)
    with pytest.raises(
        ConfigurationError, match=r"no option 'kafka_conf_id' \(did you mean 'kafka_config_id'\?\)"
    ):
        cls(endpoint="v1.0/users", kafka_conf_id="k")
    with pytest.raises(
        ConfigurationError, match=r"no option 'zzz'; fix: use one of its options: .*max_pages"
    ):
        cls(endpoint="v1.0/users", zzz=1)
    # every option it serializes is one it takes back
    trigger = cls(endpoint="v1.0/users", max_pages=3, trigger_run_id="dag/users/-1/run", topic="t")
    again = _round_trip(trigger)
    assert again.serialize() == trigger.serialize() and again.max_pages == 3


@pytest.mark.unit
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"method": "TRACE"}, "method must be one of"),
        ({"cursor_path": "a.b", "next_link_header": True}, "not both"),
        ({"cursor_param": "cursor"}, "cursor_param needs cursor_path"),
        ({"cursor_path": "a..b"}, "invalid part"),
        ({"items_path": 3}, "items_path must be"),
        ({"params": {"f": object()}}, "params['f']"),
        ({"headers": {"X": 1}}, "headers must be"),
        ({"data": {"x": {1, 2}}}, "data must be JSON-serializable"),
        ({"max_pages": 0}, "max_pages must be an int >= 1"),
        ({"max_retries": -1}, "max_retries must be an int >= 0"),
        ({"max_retries": 1.5}, "max_retries must be an int"),
        ({"retry_backoff": float("nan")}, "retry_backoff"),
        ({"request_timeout": 0}, "request_timeout must be a number > 0"),
        ({"http_conn_id": ""}, "http_conn_id"),
    ],
)
def test_bad_arguments_fail_when_the_trigger_is_created(kwargs: dict[str, Any], message: str):
    with pytest.raises(ConfigurationError, match=message.replace("[", r"\[").replace("]", r"\]")):
        HttpPaginationTrigger(endpoint="items", **kwargs)


@pytest.mark.unit
def test_parse_link_header():
    header = (
        '<https://api.example.com/items?page=2>; rel="next", '
        '<https://api.example.com/items?page=9>; rel="last"'
    )
    assert parse_link_header(header) == {
        "next": "https://api.example.com/items?page=2",
        "last": "https://api.example.com/items?page=9",
    }
    # several headers, unquoted and multi-valued rel, quoted commas, case
    assert parse_link_header(['</x?p=2>; rel=next; title="a, b"', '<https://b/>; rel="PREV first"']) == {
        "next": "/x?p=2",
        "prev": "https://b/",
        "first": "https://b/",
    }
    assert parse_link_header('<http://a/1>;rel="next";type="text/html",<http://a/2>; rel="next"') == {
        "next": "http://a/1"
    }
    assert parse_link_header("") == {} and parse_link_header("not a link") == {}


@pytest.mark.unit
def test_parse_retry_after_seconds_and_http_dates():
    now = datetime(2025, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
    assert parse_retry_after("1", now) == 1.0
    assert parse_retry_after(" 120 ", now) == 120.0
    assert parse_retry_after("Sat, 01 Mar 2025 12:00:30 GMT", now) == 30.0
    assert parse_retry_after(email.utils.format_datetime(now + timedelta(seconds=5), usegmt=True), now) == 5.0
    assert parse_retry_after("Sat, 01 Mar 2025 11:00:00 GMT", now) == 0.0  # in the past
    for bad in (None, "", "soon", "-1", "nan", "inf"):
        assert parse_retry_after(bad, now) is None, bad


@pytest.mark.unit
def test_redact_url_drops_userinfo_and_credential_like_query_values():
    assert (
        redact_url("https://user:pw@api.example.com:8443/v1/items?page=2&api_key=abc&access_token=t&q=x")
        == "https://api.example.com:8443/v1/items?page=2&api_key=***&access_token=***&q=x"
    )
    assert redact_url("http://h/p") == "http://h/p"


@pytest.mark.unit
def test_the_end_cursor_resumes_without_a_request():
    trigger = HttpPaginationTrigger(endpoint="items", http_conn_id="no_such_connection", cursor_path="next")

    async def walk() -> list[Any]:
        return [page async for page in trigger.pages(END_CURSOR)]

    assert asyncio.run(walk()) == []  # no connection lookup, no request


# ====================================================================== integration helpers
@pytest.fixture
def api() -> Iterator[PagedApi]:
    server = PagedApi(pages=3, per_page=2).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def connections(monkeypatch: pytest.MonkeyPatch, kafka_bootstrap: str):
    """Set ``AIRFLOW_CONN_KAFKA_DEFAULT`` and ``AIRFLOW_CONN_PAGED_API`` (to a given server)."""
    kafka = {"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap}}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps(kafka))

    def to(server: PagedApi, **extra: Any) -> None:
        monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", server.connection(**extra))

    return to


def _key() -> str:
    return f"http_dag/fetch/-1/run-{uuid.uuid4().hex}"


def _descriptor(events: list[TriggerEvent]) -> StreamDescriptor:
    (event,) = events
    assert type(event) is TriggerEvent
    return StreamDescriptor.from_dict(event.payload)


def _items_trigger(key: str, topic: str, **kwargs: Any) -> HttpPaginationTrigger:
    values: dict[str, Any] = {
        "endpoint": "api/items",
        "http_conn_id": CONN_ID,
        "cursor_path": "paging.next",
        "items_path": "items",
        "retry_backoff": 0.01,
        "trigger_run_id": key,
        "topic": topic,
    }
    values.update(kwargs)
    return HttpPaginationTrigger(**values)


def _assert_stream(stored: list[Stored], payloads: list[Any], *, attempt: int = 0) -> None:
    """One attempt: data envelopes 0..n-1 with ``payloads`` in order, then a clean terminal marker."""
    assert [(s.envelope.attempt, s.envelope.sequence_index) for s in stored] == [
        (attempt, i) for i in range(len(payloads) + 1)
    ]
    assert [s.offset for s in stored] == sorted(s.offset for s in stored)
    assert [s.envelope.is_last for s in stored] == [False] * len(payloads) + [True]
    assert [s.envelope.payload for s in stored[:-1]] == payloads
    terminal = stored[-1].envelope
    assert terminal.payload is None and terminal.error is None, terminal.error


def _item_pages(pages: int, per_page: int = 2) -> list[Any]:
    return [page_items(i, per_page) for i in range(pages)] if pages else [[]]


def _run(trigger: HttpPaginationTrigger) -> StreamDescriptor:
    return _descriptor(asyncio.run(collect(trigger)))


# ====================================================================== pages in order
@pytest.mark.integration
@pytest.mark.parametrize("pages", [0, 1, 25])
def test_every_api_page_is_one_envelope_in_order(connections, kafka_bootstrap, new_topic, pages):
    topic = new_topic(partitions=3)
    key = _key()
    with PagedApi(pages=pages, per_page=2) as server:
        connections(server)
        descriptor = _run(_items_trigger(key, topic))
        served = server.served_counts()
    stored = read_topic(kafka_bootstrap, topic, key)
    expected = _item_pages(pages)  # an API without data is ONE page without items
    _assert_stream(stored, expected)
    assert served == {i: 1 for i in range(len(expected))}
    cursors = [s.envelope.resume_cursor for s in stored[:-1]]
    assert cursors == [f"{server.url}/api/items?page={i + 1}" for i in range(len(expected) - 1)] + [
        END_CURSOR
    ]
    assert (descriptor.attempt, descriptor.count, descriptor.error) == (0, len(expected), None)
    assert (descriptor.first_offset, descriptor.last_offset) == (stored[0].offset, stored[-1].offset)


@pytest.mark.integration
def test_token_cursors_repeat_the_first_request_with_the_token(connections, kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1)
    key = _key()
    with PagedApi(pages=4, per_page=3) as server:
        connections(server)
        trigger = _items_trigger(
            key,
            topic,
            endpoint="/api/search",
            method="POST",
            params={"limit": 3, "active": True},
            headers={"X-Request-Source": "tests"},
            data={"query": {"kind": "item"}},
            cursor_path="meta.next_cursor",
            cursor_param="cursor",
            items_path="data",
        )
        _run(trigger)
        hits = list(server.hits)
    _assert_stream(read_topic(kafka_bootstrap, topic, key), _item_pages(4, 3))
    assert [(h.method, h.page) for h in hits] == [("POST", i) for i in range(4)]
    assert [h.query for h in hits] == [{"limit": ["3"], "active": ["true"]}] + [
        {"limit": ["3"], "active": ["true"], "cursor": [f"c{i}"]} for i in range(1, 4)
    ]
    assert all(h.body == {"query": {"kind": "item"}} for h in hits)
    assert all(h.headers["x-request-source"] == "tests" for h in hits)
    assert [s.envelope.resume_cursor for s in read_topic(kafka_bootstrap, topic, key)[:-1]] == [
        "c1",
        "c2",
        "c3",
        END_CURSOR,
    ]


@pytest.mark.integration
def test_link_header_pagination_with_relative_links(connections, kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1)
    key = _key()
    with PagedApi(pages=5, per_page=1, relative_links=True) as server:
        connections(server)
        _run(
            _items_trigger(
                key, topic, endpoint="api/linked", cursor_path=None, items_path=None, next_link_header=True
            )
        )
        served = server.served_counts()
    stored = read_topic(kafka_bootstrap, topic, key)
    _assert_stream(stored, _item_pages(5, 1))  # the body (a list) is the payload
    assert served == {i: 1 for i in range(5)}
    # relative links are resolved against the response's URL before they are stored
    assert stored[0].envelope.resume_cursor == f"{server.url}/api/linked?page=1"


@pytest.mark.integration
def test_relative_next_links_in_the_body_are_stored_absolute(connections, kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1)
    key = _key()
    with PagedApi(pages=3, relative_links=True) as server:
        connections(server)
        _run(_items_trigger(key, topic))
        served = server.served_counts()
    stored = read_topic(kafka_bootstrap, topic, key)
    _assert_stream(stored, _item_pages(3))
    assert served == {0: 1, 1: 1, 2: 1}
    assert [s.envelope.resume_cursor for s in stored[:-1]] == [
        f"{server.url}/api/items?page=1",
        f"{server.url}/api/items?page=2",
        END_CURSOR,
    ]


@pytest.mark.integration
def test_graph_next_links_and_value_items(connections, kafka_bootstrap, new_topic):
    topic = new_topic(partitions=3)
    key = _key()
    with PagedApi(pages=4, per_page=3) as server:
        connections(server)
        trigger = GraphPaginationTrigger(
            endpoint="v1.0/users",
            http_conn_id=CONN_ID,
            params={"$top": 3},
            retry_backoff=0.01,
            trigger_run_id=key,
            topic=topic,
        )
        descriptor = _run(trigger)
        hits = list(server.hits)
    stored = read_topic(kafka_bootstrap, topic, key)
    _assert_stream(stored, _item_pages(4, 3))
    assert descriptor.count == 4
    assert [h.query for h in hits] == [{"$top": ["3"]}] + [
        {"$top": ["3"], "$skiptoken": [str(i)]} for i in range(1, 4)
    ]
    assert [s.envelope.resume_cursor for s in stored[:-1]] == [
        f"{server.url}/v1.0/users?$top=3&$skiptoken={i}" for i in range(1, 4)
    ] + [END_CURSOR]


@pytest.mark.integration
def test_max_pages_ends_the_stream_early(connections, kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1)
    key = _key()
    with PagedApi(pages=10) as server:
        connections(server)
        descriptor = _run(_items_trigger(key, topic, max_pages=3))
        served = server.served_counts()
    _assert_stream(read_topic(kafka_bootstrap, topic, key), _item_pages(3))
    assert served == {0: 1, 1: 1, 2: 1} and descriptor.count == 3


# ====================================================================== throttling and errors
def _retry_after_values() -> list[Any]:
    """``Retry-After`` values, each built when the 429 is served (a date built earlier would
    already be partly over when the trigger reaches the page)."""
    return [
        pytest.param(lambda: "1", id="delay-seconds"),
        pytest.param(
            lambda: email.utils.format_datetime(
                datetime.now(timezone.utc) + timedelta(seconds=2), usegmt=True
            ),
            id="http-date",  # whole seconds: at least 1 s after the answer
        ),
    ]


@pytest.mark.integration
@pytest.mark.parametrize("retry_after", _retry_after_values())
def test_429_waits_for_retry_after_then_fetches_the_page_again(
    connections, kafka_bootstrap, new_topic, retry_after
):
    topic = new_topic(partitions=1)
    key = _key()
    with PagedApi(pages=4) as server:
        connections(server)
        server.fail(2, 429, times=1, headers={"Retry-After": retry_after})
        # a backoff of 0.01s would retry at once: only the header can make it wait
        _run(_items_trigger(key, topic, retry_backoff=0.01))
        statuses = server.statuses(2)
        throttled, retried = [h for h in server.hits if h.page == 2]
        served = server.served_counts()
    _assert_stream(read_topic(kafka_bootstrap, topic, key), _item_pages(4))
    assert statuses == [429, 200]
    assert served == {i: 1 for i in range(4)}
    # the retry was not sent before the header's delay (a lower bound: no flakiness)
    assert retried.arrived_at - throttled.arrived_at >= 0.9


@pytest.mark.integration
def test_5xx_is_retried_with_backoff_then_the_stream_continues(connections, kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1)
    key = _key()
    with PagedApi(pages=4) as server:
        connections(server)
        server.fail(1, 503, times=2)
        descriptor = _run(_items_trigger(key, topic, max_retries=2))
        statuses = server.statuses(1)
        served = server.served_counts()
    _assert_stream(read_topic(kafka_bootstrap, topic, key), _item_pages(4))
    assert statuses == [503, 503, 200]
    assert served == {i: 1 for i in range(4)} and descriptor.error is None


@pytest.mark.integration
def test_persistent_5xx_ends_the_stream_with_an_error_naming_status_and_url(
    connections, kafka_bootstrap, new_topic
):
    topic = new_topic(partitions=1)
    key = _key()
    with PagedApi(pages=5) as server:
        connections(server)
        server.fail(2, 503, times=None)
        descriptor = _run(_items_trigger(key, topic, max_retries=3))
        statuses = server.statuses(2)
        served = server.served_counts()
    stored = read_topic(kafka_bootstrap, topic, key)
    assert [(s.envelope.sequence_index, s.envelope.is_last) for s in stored] == [
        (0, False),
        (1, False),
        (2, True),
    ]
    assert [s.envelope.payload for s in stored[:2]] == _item_pages(2)
    error = stored[-1].envelope.error
    assert error is not None and error.type == f"{ERRORS}.HttpRetriesExhaustedError"
    assert "503" in error.message and f"{server.url}/api/items?page=2" in error.message, error.message
    assert "4 attempt(s)" in error.message and "max_retries=3" in error.message, error.message
    assert statuses == [503] * 4  # the first request and 3 retries
    assert served == {0: 1, 1: 1}
    assert descriptor.failed and descriptor.error == error.to_avro() and descriptor.count == 2


@pytest.mark.integration
def test_404_ends_the_stream_at_once(connections, kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1)
    key = _key()
    with PagedApi(pages=5) as server:
        connections(server)
        server.fail(1, 404, times=None)
        descriptor = _run(_items_trigger(key, topic, max_retries=5))
        statuses = server.statuses(1)
    stored = read_topic(kafka_bootstrap, topic, key)
    assert [s.envelope.sequence_index for s in stored] == [0, 1] and stored[-1].envelope.is_last
    error = stored[-1].envelope.error
    assert error is not None and error.type == f"{ERRORS}.HttpStatusError"
    assert "404" in error.message and f"{server.url}/api/items?page=1" in error.message, error.message
    assert statuses == [404]  # not retried
    assert descriptor.failed and descriptor.count == 1


@pytest.mark.integration
def test_connection_errors_are_retried_then_end_the_stream(
    connections, kafka_bootstrap, new_topic, monkeypatch
):
    topic = new_topic(partitions=1)
    key = _key()
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{CONN_ID.upper()}",
        json.dumps({"conn_type": "http", "host": "127.0.0.1", "port": port}),
    )
    descriptor = _run(_items_trigger(key, topic, max_retries=2))
    (stored,) = read_topic(kafka_bootstrap, topic, key)
    error = stored.envelope.error
    assert error is not None and error.type == f"{ERRORS}.HttpRetriesExhaustedError"
    assert f"http://127.0.0.1:{port}/api/items" in error.message and "3 attempt(s)" in error.message
    assert descriptor.failed and descriptor.count == 0


@pytest.mark.integration
def test_a_request_that_gets_no_answer_times_out_and_is_retried(connections, kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1)
    key = _key()
    with PagedApi(pages=3) as server:
        connections(server)
        server.hold(1)  # never released: page 1 gets no answer
        descriptor = _run(_items_trigger(key, topic, request_timeout=0.5, max_retries=1))
        server.wait_for(lambda s: s.abandoned(1) == 2, 30, "both timed-out requests to be abandoned")
        served = server.served_counts()
    error = read_topic(kafka_bootstrap, topic, key)[-1].envelope.error
    assert error is not None and error.type == f"{ERRORS}.HttpRetriesExhaustedError"
    assert "no answer within 0.5s" in error.message and "2 attempt(s)" in error.message, error.message
    assert served == {0: 1} and descriptor.count == 1


@pytest.mark.integration
def test_next_links_to_another_origin_are_not_followed(connections, kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1)
    key = _key()
    with PagedApi(pages=3) as server:
        connections(server, login="user", password=PASSWORD)
        descriptor = _run(_items_trigger(key, topic, endpoint="api/foreign"))
        arrived = len(server.hits)
    error = read_topic(kafka_bootstrap, topic, key)[-1].envelope.error
    assert error is not None and error.type == f"{ERRORS}.NextLinkError"
    assert "leaves the origin" in error.message and "allow_foreign_next_links" in error.message
    assert arrived == 1 and descriptor.count == 0  # the credentials never went to localhost:<port>


# ====================================================================== connection and secrets
def _raw_values(bootstrap: str, topic: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"raw-{uuid.uuid4().hex}"})
    try:
        _low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        while len(values) < high:
            for message in consumer.consume(num_messages=100, timeout=1):
                assert message.error() is None, message.error()
                values.append(message.value() or b"")
        return values
    finally:
        consumer.close()


@pytest.mark.integration
def test_the_http_connection_supplies_auth_and_headers_and_no_secret_leaves_it(
    connections, kafka_bootstrap, new_topic, capfd
):
    topic = new_topic(partitions=1)
    key = _key()
    with PagedApi(pages=3) as server:
        connections(server, login="reader", password=PASSWORD, extra={"X-Api-Key": API_KEY})
        server.fail(1, 503, times=1)  # a retry logs the request too
        server.fail(2, 404, times=None)
        descriptor = _run(_items_trigger(key, topic, headers={"X-Trace": "t-1"}))
        hits = list(server.hits)
    assert descriptor.failed
    expected_auth = "Basic " + base64.b64encode(f"reader:{PASSWORD}".encode()).decode()
    assert all(h.headers.get("authorization") == expected_auth for h in hits)
    assert all(h.headers.get("x-api-key") == API_KEY and h.headers.get("x-trace") == "t-1" for h in hits)
    # neither envelopes (payloads, cursors, the error) nor logs carry a credential
    raw = b"".join(_raw_values(kafka_bootstrap, topic))
    assert raw and b"item-0" in raw
    captured = capfd.readouterr()
    for secret in (PASSWORD, API_KEY, expected_auth.split()[1]):
        assert secret.encode() not in raw
        assert secret not in captured.out and secret not in captured.err


@pytest.mark.integration
def test_a_next_link_carrying_a_credential_of_the_connection_is_not_stored(
    connections, kafka_bootstrap, new_topic
):
    topic = new_topic(partitions=1)
    key = _key()
    with PagedApi(pages=3, keep_query=True) as server:  # next links repeat the query
        connections(server, extra={"X-Api-Key": API_KEY})
        # a credential in params ends up in the next link: the stream stops before storing it
        descriptor = _run(_items_trigger(key, topic, params={"api_key": API_KEY}))
    error = read_topic(kafka_bootstrap, topic, key)[-1].envelope.error
    assert error is not None and error.type == f"{ERRORS}.NextLinkError"
    assert "contains a credential" in error.message and API_KEY not in error.message, error.message
    assert "api_key=***" in error.message
    assert API_KEY.encode() not in b"".join(_raw_values(kafka_bootstrap, topic))
    assert descriptor.failed and descriptor.count == 0


# ====================================================================== resume
@pytest.mark.integration
def test_a_restarted_trigger_continues_from_the_cursor_and_serves_each_page_once(
    connections, kafka_bootstrap, new_topic
):
    topic = new_topic(partitions=3)
    key = _key()
    pages, k = 12, 5

    def written(seq: int) -> bool:
        return any(s.envelope.sequence_index >= seq for s in read_topic(kafka_bootstrap, topic, key))

    with PagedApi(pages=pages) as server:
        connections(server)
        gate = server.hold(k + 1)

        async def scenario() -> list[TriggerEvent]:
            first = _items_trigger(key, topic)
            task = asyncio.create_task(collect(first))
            # envelope k is in Kafka and the request of page k+1 waits at the gate
            await wait_for(lambda: written(k) and server.held(k + 1) == 1, what=f"envelope {k}")
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task
            assert task.cancelled()
            # the cancelled run's request of page k+1 is never answered
            await asyncio.to_thread(
                server.wait_for, lambda s: s.abandoned(k + 1) == 1, 30, "the held request to be abandoned"
            )
            gate.release()
            again = HttpPaginationTrigger(**first.serialize()[1])
            return await collect(again)

        descriptor = _descriptor(asyncio.run(scenario()))
        served = server.served_counts()
        arrived = server.arrived(k + 1)
        first_resumed = next(h for h in server.hits if h.page == k + 1 and h.outcome == "answered")
    assert served == {i: 1 for i in range(pages)}  # no page served twice
    assert arrived == 2  # the abandoned request of the first run, the answered one of the second
    assert first_resumed.query == {"page": [str(k + 1)]}
    stored = read_topic(kafka_bootstrap, topic, key)
    _assert_stream(stored, _item_pages(pages))
    assert (descriptor.attempt, descriptor.count) == (0, pages)
    assert (descriptor.first_offset, descriptor.last_offset) == (stored[0].offset, stored[-1].offset)


@pytest.mark.integration
def test_max_pages_counts_the_pages_written_before_a_restart(connections, kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1)
    key = _key()
    with PagedApi(pages=10) as server:
        connections(server)
        gate = server.hold(3)

        async def scenario() -> list[TriggerEvent]:
            first = _items_trigger(key, topic, max_pages=5)
            task = asyncio.create_task(collect(first))
            await wait_for(lambda: server.held(3) == 1, what="the request of page 3")
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task
            await asyncio.to_thread(server.wait_for, lambda s: s.abandoned(3) == 1, 30, "abandoned page 3")
            gate.release()
            return await collect(HttpPaginationTrigger(**first.serialize()[1]))

        descriptor = _descriptor(asyncio.run(scenario()))
        served = server.served_counts()
    _assert_stream(read_topic(kafka_bootstrap, topic, key), _item_pages(5))
    assert served == {i: 1 for i in range(5)} and descriptor.count == 5


@pytest.mark.integration
def test_a_stream_interrupted_after_the_api_s_last_page_only_gets_its_terminal_marker(
    connections, kafka_bootstrap, new_topic
):
    """The last page's cursor is END_CURSOR, not None: the stream resumes, nothing is fetched again."""
    topic = new_topic(partitions=1)
    key = _key()
    payloads = _item_pages(3)
    # what a trigger killed between the API's last page and the terminal marker left in Kafka
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    for index, payload in enumerate(payloads):
        envelope = TriggerEventEnvelope(
            trigger_run_id=key,
            sequence_index=index,
            is_last=False,
            payload=payload,
            resume_cursor=f"http://127.0.0.1:1/api/items?page={index + 1}" if index < 2 else END_CURSOR,
            metadata={FIRST_OFFSET_METADATA_KEY: "0"} if index else {},
        )
        producer.produce(topic, TRIGGER_EVENT_CODEC.encode(envelope, topic=topic), key=key, partition=0)
        producer.flush(30)
    with PagedApi(pages=3) as server:
        connections(server)
        descriptor = _run(_items_trigger(key, topic))
        hits = list(server.hits)
    assert hits == []  # no page requested again
    _assert_stream(read_topic(kafka_bootstrap, topic, key), payloads)
    assert (descriptor.attempt, descriptor.count, descriptor.first_offset) == (0, 3, 0)
