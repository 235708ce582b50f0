"""Producers against a broker that is stopped and restarted (a broker of their own, not the shared one).

* an emit while the broker is stopped raises ``NotSentError`` naming the broker within its
  timeout, and nothing of it is published once the broker is back;
* the CLI exits non-zero within ``--timeout`` + 2 s;
* librdkafka's connection errors during an outage reach Python logging as a bounded number of
  lines, with one line when the brokers go down and one when they are back;
* a streaming trigger's producer rides out an outage mid-stream longer than every librdkafka timeout
  below its outage timeout (reconnect backoff 10 s, request and connection set-up 30 s): every page
  once, in order.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from airflow_kafka_events.assets.publish import emit
from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC
from airflow_kafka_events.errors import NotSentError
from airflow_kafka_events.kafka.client_log import LIBRDKAFKA_LOGGER
from airflow_kafka_events.kafka.producer import get_producer
from airflow_kafka_events.kafka.settings import KafkaSettings
from airflow_kafka_events.streams.producing.outage import STREAM_LINGER_MS
from airflow_kafka_events.streams.producing.trigger import Page, StreamingTrigger
from airflow_kafka_events.streams.producing.writer import DEFAULT_WRITE_WINDOW
from integration.faults.broker import read_values, wait_until
from integration.triggers.sample_triggers import collect, read_topic

pytestmark = [pytest.mark.integration, pytest.mark.faults]

EMIT_TIMEOUT = 5.0
#: The bound the issue names for the CLI's exit, and used for an emit's failure too.
SLACK = 2.0


@pytest.fixture(autouse=True)
def close_fault_producers(broker) -> Iterator[None]:
    """Producers of one test do not log into the next one's outage."""
    yield
    from airflow_kafka_events.kafka import producer as producer_module

    for producer in list(producer_module._registry.values()):
        if producer.bootstrap_servers == broker.bootstrap:
            producer.close(5.0)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def lines(self, logger: str, containing: str = "") -> list[str]:
        return [r.getMessage() for r in self.records if r.name == logger and containing in r.getMessage()]


@pytest.fixture
def records() -> Iterator[_Records]:
    handler = _Records()
    logger = logging.getLogger("airflow_kafka_events")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


def _event_ids(bootstrap: str, topic: str) -> list[str]:
    return [ASSET_EVENT_CODEC.decode(value).event_id for _, _, value in read_values(bootstrap, topic)]


# --------------------------------------------------------------------------- emit
def test_emit_with_the_broker_stopped_is_not_sent_and_never_published_later(broker):
    topic = broker.topic(f"faults-emit-{uuid.uuid4().hex[:8]}")
    common = {"bootstrap_servers": broker.bootstrap, "topic": topic, "timeout": EMIT_TIMEOUT}
    before = emit("s3://faults/emit", idempotency_key="before", **common)  # the emit producer is connected

    with broker.stopped():
        started = time.monotonic()
        with pytest.raises(NotSentError) as info:
            emit("s3://faults/emit", idempotency_key="during", **common)
        took = time.monotonic() - started
    message = str(info.value)
    assert took <= EMIT_TIMEOUT + SLACK, f"the emit failed after {took:.1f}s"
    assert broker.bootstrap in message and "nothing will be published" in message
    assert "unreachable" in message

    # Same asset, same producer, same partition: were the failed event still queued, it would be
    # delivered before this one.
    after = emit("s3://faults/emit", idempotency_key="after", **common)
    assert after.partition == before.partition
    assert _event_ids(broker.bootstrap, topic) == [before.event_id, after.event_id]


def test_cli_emit_with_the_broker_stopped_exits_within_its_timeout(broker):
    topic = broker.topic(f"faults-cli-{uuid.uuid4().hex[:8]}")
    key = f"cli-{uuid.uuid4().hex}"
    command = [
        sys.executable,
        "-m",
        "airflow_kafka_events.cli.main",
        "emit",
        "--asset",
        "s3://faults/cli",
        "--bootstrap-servers",
        broker.bootstrap,
        "--topic",
        topic,
        "--idempotency-key",
        key,
        "--timeout",
        str(EMIT_TIMEOUT),
    ]
    # What starting the interpreter and importing the CLI costs on this machine right now (it is
    # not the CLI's waiting; under CI load it alone can take seconds), measured side by side.
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-c", "import airflow_kafka_events.cli.main, confluent_kafka"],
        check=True,
        timeout=120,
    )
    startup = time.monotonic() - started
    with broker.stopped():
        started = time.monotonic()
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        took = time.monotonic() - started
    assert result.returncode != 0
    assert took - startup <= EMIT_TIMEOUT + SLACK, (
        f"the CLI exited after {took:.1f}s ({startup:.1f}s of it starting the interpreter)"
    )
    stderr = result.stderr.strip().splitlines()
    assert stderr[-1].startswith("airflow-kafka-events: error: not sent"), result.stderr
    assert broker.bootstrap in stderr[-1]
    assert not [line for line in stderr if line.startswith("%")], "raw librdkafka lines on stderr"
    # the process is gone, and with it anything it held: the topic stays empty
    assert read_values(broker.bootstrap, topic) == []


# --------------------------------------------------------------------------- librdkafka logging
def test_a_stopped_broker_gives_a_bounded_number_of_log_lines(broker, records):
    # a short reconnect backoff: librdkafka tries (and logs) about once a second per broker connection
    # its own client.id: librdkafka names it "<client.id>#producer-N" in every line, and producers
    # other tests left open in this process (other brokers, deleted topics) log too
    client_id = f"faults-logging-{uuid.uuid4().hex[:8]}"
    settings = {
        "bootstrap.servers": broker.bootstrap,
        "reconnect.backoff.max.ms": 500,
        "client.id": client_id,
    }
    config = KafkaSettings(settings).producer_config()
    producer = get_producer(config, role="faults-logging", message_timeout=10.0)
    raw_lines: list[int] = []  # every line librdkafka handed over, before the rate limit
    rate_limited = producer.health.logger
    forward = rate_limited.log

    def count_then_forward(level: int, msg: str, *args: Any, **kwargs: Any) -> None:
        raw_lines.append(level)
        forward(level, msg, *args, **kwargs)

    rate_limited.log = count_then_forward  # type: ignore[method-assign]  # librdkafka calls logger.log

    def state_lines(containing: str) -> list[str]:
        lines = records.lines("airflow_kafka_events.kafka.client_log", "'faults-logging'")
        return [line for line in lines if containing in line]

    topic = broker.topic(f"faults-log-{uuid.uuid4().hex[:8]}")
    producer.send_and_wait(topic, b"up", timeout=10.0)
    try:
        lines_before = len(raw_lines)
        with broker.stopped():
            with pytest.raises(NotSentError):  # ~10 s with every broker down
                producer.send_and_wait(topic, b"down", timeout=10.0)
            librdkafka_lines = records.lines(LIBRDKAFKA_LOGGER, f"[{client_id}#producer-")
            down_lines = len(raw_lines) - lines_before
        wait_until(lambda: bool(state_lines("reachable again")), timeout=30, what="a 'reachable again' line")
        producer.send_and_wait(topic, b"back", timeout=10.0)
    finally:
        producer.close(5.0)
    # librdkafka's own lines about the outage went through the limiter (how many it hands over is its
    # own affair: it reports a repeated connection error once, or once per attempt); they stay a few
    # lines at their levels, and one line says when the brokers went and came back
    assert down_lines >= 1, down_lines
    assert 1 <= len(librdkafka_lines) <= 10, librdkafka_lines
    assert len(state_lines("unreachable")) == 1
    assert len(state_lines("reachable again")) == 1


# --------------------------------------------------------------------------- streaming trigger
REACHED: dict[str, threading.Event] = {}


class OutageTrigger(StreamingTrigger):
    """``total`` pages, a few ms apart; ``REACHED[trigger_run_id]`` is set when page ``stop_at``
    has been delivered (the trigger asks for the next one only then)."""

    outage_timeout = 120.0

    def __init__(self, *, total: int, stop_at: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.total, self.stop_at = total, stop_at

    def trigger_kwargs(self) -> dict[str, Any]:
        return {"total": self.total, "stop_at": self.stop_at}

    async def pages(self, cursor: str | None) -> AsyncIterator[Page]:
        for index in range(int(cursor or 0), self.total):
            if index == self.stop_at + 1:
                REACHED[self.trigger_run_id or ""].set()
            await asyncio.sleep(0.01)
            yield Page(payload={"page": index}, cursor=str(index + 1))


#: Longer than librdkafka's ``reconnect.backoff.max.ms`` (10 s), ``request.timeout.ms`` and
#: ``socket.connection.setup.timeout.ms`` (30 s each), shorter than the stream's outage timeout.
OUTAGE = 35.0


def test_a_streaming_trigger_rides_out_an_outage_mid_stream(broker, monkeypatch, records):
    outage = OUTAGE
    extra = {"bootstrap.servers": broker.bootstrap}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": extra}))
    topic = broker.topic(f"faults-stream-{uuid.uuid4().hex[:8]}", partitions=3)
    key = f"faults/stream/-1/{uuid.uuid4().hex}"
    REACHED[key] = threading.Event()
    trigger = OutageTrigger(total=200, stop_at=50, trigger_run_id=key, topic=topic)
    events: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            events.extend(asyncio.run(collect(trigger)))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, name="outage-trigger")
    thread.start()
    assert REACHED[key].wait(60), "the stream never reached page 50"
    broker.stop()
    down_at = time.monotonic()
    wait_until(lambda: time.monotonic() - down_at >= outage, timeout=outage + 5, what="the outage")
    broker.start()
    thread.join(180)
    assert not thread.is_alive() and not errors, errors
    (event,) = events
    assert event.payload["count"] == 200 and event.payload["error"] is None

    stored = read_topic(broker.bootstrap, topic, key)
    assert [s.envelope.sequence_index for s in stored] == list(range(201))  # every page once, in order
    assert [s.envelope.payload for s in stored[:-1]] == [{"page": i} for i in range(200)]
    assert len({s.envelope.attempt for s in stored}) == 1
    # one line when the brokers went down, one when they were back (a broker that accepts a
    # connection once more while it shuts down is one more down/up pair, never one per retry)
    state = records.lines("airflow_kafka_events.kafka.client_log", "producer 'stream'")
    down = [line for line in state if "unreachable" in line]
    assert 1 <= len(down) <= 2 and len(down) == len([line for line in state if "reachable again" in line]), (
        state
    )


# --------------------------------------------------------------------------- oversized records
def test_an_oversized_emit_fails_before_producing_naming_the_limit(broker):
    from airflow_kafka_events.errors import RecordTooLargeError

    topic = broker.topic(f"faults-size-{uuid.uuid4().hex[:8]}")
    extra = {"blob": "x" * 1_100_000}
    with pytest.raises(RecordTooLargeError) as info:
        emit(
            "s3://faults/size",
            extra=extra,
            max_extra_bytes=2_000_000,
            bootstrap_servers=broker.bootstrap,
            topic=topic,
        )
    assert "message.max.bytes=1000000" in str(info.value) and info.value.limit == 1_000_000
    assert read_values(broker.bootstrap, topic) == []


def test_a_record_over_the_topics_limit_is_not_sent_naming_that_limit(broker):
    from confluent_kafka.admin import AdminClient

    from airflow_kafka_events.errors import RecordTooLargeError
    from airflow_kafka_events.kafka.topics import TopicSpec, ensure_topics

    topic = f"faults-topic-limit-{uuid.uuid4().hex[:8]}"
    spec = TopicSpec(topic, partitions=1, config={"max.message.bytes": "10000"})
    ensure_topics(AdminClient({"bootstrap.servers": broker.bootstrap}), [spec])
    producer = get_producer(
        KafkaSettings({"bootstrap.servers": broker.bootstrap}).producer_config(),
        role="faults-size",
        message_timeout=10,
    )
    with pytest.raises(RecordTooLargeError) as info:
        producer.send_and_wait(topic, b"x" * 50_000, timeout=10)
    assert info.value.limit_name == "max.message.bytes" and broker.bootstrap in str(info.value)
    assert read_values(broker.bootstrap, topic) == []


def test_a_run_cancelled_while_its_pages_are_held_is_resumed_without_writing_them_twice(broker, monkeypatch):
    extra = {"bootstrap.servers": broker.bootstrap}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": extra}))
    topic = broker.topic(f"faults-cancel-{uuid.uuid4().hex[:8]}")
    key = f"faults/cancel/-1/{uuid.uuid4().hex}"
    REACHED[key] = threading.Event()
    loop = asyncio.new_event_loop()
    first = loop.create_task(collect(OutageTrigger(total=60, stop_at=20, trigger_run_id=key, topic=topic)))
    runner = threading.Thread(target=lambda: loop.run_until_complete(asyncio.wait({first})), name="first-run")
    runner.start()
    assert REACHED[key].wait(60), "the stream never reached page 20"
    producer = get_producer(  # the trigger's page producer, as StreamingTrigger._open_kafka makes it
        KafkaSettings(extra).producer_config(linger_ms=STREAM_LINGER_MS),
        role="stream",
        message_timeout=OutageTrigger.outage_timeout,
    )
    with broker.stopped():
        wait_until(lambda: producer.outstanding_for(topic, key) > 0, timeout=30, what="a held page")
        loop.call_soon_threadsafe(first.cancel)  # the triggerer stops the trigger mid-outage
        runner.join(30)
        # pages are pipelined: the pages the first run had sent since the broker stopped are all held
        held = producer.outstanding_for(topic, key)
        assert first.cancelled() and 1 <= held <= DEFAULT_WRITE_WINDOW
        second: list[Any] = []
        rerun = threading.Thread(
            target=lambda: second.extend(
                asyncio.run(collect(OutageTrigger(total=60, stop_at=99, trigger_run_id=key, topic=topic)))
            ),
            name="second-run",
        )
        rerun.start()  # same stream, same process: waits for the held page before looking up progress
    rerun.join(180)
    loop.close()
    assert not rerun.is_alive()
    (event,) = second
    assert event.payload["count"] == 60 and event.payload["error"] is None
    stored = read_topic(broker.bootstrap, topic, key)
    assert [s.envelope.sequence_index for s in stored] == list(range(61))  # each held page once
    assert len({s.envelope.attempt for s in stored}) == 1


def test_an_emit_to_a_missing_topic_is_not_sent_naming_the_unknown_topic(broker):
    topic = f"faults-missing-{uuid.uuid4().hex[:8]}"  # never created; auto-creation is off
    # the message's timeout ends the call (~9 s); the brokers' metadata answers, seen in the
    # producer's statistics every second, name the cause
    with pytest.raises(NotSentError) as info:
        emit("s3://faults/missing", bootstrap_servers=broker.bootstrap, topic=topic, timeout=10.0)
    assert (
        "unknown topic" in str(info.value)
        and topic in str(info.value)
        and broker.bootstrap in str(info.value)
    )
