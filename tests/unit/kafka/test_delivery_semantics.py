"""What a failed send is called, how big a record is, and per-role producer configuration.

No broker: the producers here point at a closed port and are only asked about errors, sizes and
configuration (nothing is delivered).
"""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import KafkaError

from airflow_kafka_events.errors import (
    ConfigurationError,
    DeliveryError,
    DeliveryOutcomeUnknownError,
    NotSentError,
    RecordTooLargeError,
    ValidationError,
)
from airflow_kafka_events.kafka.client_log import Cause, ClientHealth
from airflow_kafka_events.kafka.delivery import classify_failure, delivery_failure, wire_size
from airflow_kafka_events.kafka.producer import RecordProducer, get_producer, role_config
from airflow_kafka_events.kafka.settings import KafkaSettings

pytestmark = pytest.mark.unit

NOWHERE = "127.0.0.1:1"


@pytest.fixture
def producer():
    config = KafkaSettings({"bootstrap.servers": NOWHERE, "sasl.password": "pw-123"}).producer_config()
    p = RecordProducer(role_config(config, 5.0), role="emit")
    yield p
    p.close(0)


# --------------------------------------------------------------------------- classification
@pytest.mark.parametrize(
    "code",
    [
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError.MSG_SIZE_TOO_LARGE,
    ],
)
def test_refusals_are_not_sent_whatever_was_transmitted(code):
    for produce_sent in (True, False, None):
        assert classify_failure(code, produce_sent) is NotSentError


@pytest.mark.parametrize(
    "code",
    [
        KafkaError._MSG_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError._PURGE_QUEUE,
        KafkaError._PURGE_INFLIGHT,
        KafkaError._TRANSPORT,
        KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER,
    ],
)
def test_a_timeout_is_not_sent_only_when_no_produce_request_left_the_client(code):
    assert classify_failure(code, False) is NotSentError
    assert classify_failure(code, True) is DeliveryOutcomeUnknownError
    assert classify_failure(code, None) is DeliveryOutcomeUnknownError  # no evidence: cannot tell


def test_both_errors_are_delivery_errors_and_keep_the_kafka_code():
    for cls in (NotSentError, DeliveryOutcomeUnknownError):
        error = cls("x", kafka_error=KafkaError(KafkaError._MSG_TIMED_OUT))
        assert isinstance(error, DeliveryError) and error.code == KafkaError._MSG_TIMED_OUT
    too_large = RecordTooLargeError("x", size=2, limit=1, limit_name="message.max.bytes")
    assert isinstance(too_large, NotSentError) and isinstance(too_large, ValidationError)


def test_a_failure_names_the_brokers_topic_cause_and_fix_and_no_password(producer):
    producer.health.error_cb(
        KafkaError(
            KafkaError._TRANSPORT,
            f"{NOWHERE}/bootstrap: Connect to ipv4#{NOWHERE} failed: Connection refused",
        )
    )
    producer.health.error_cb(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    error = producer.failure("orders", KafkaError(KafkaError._MSG_TIMED_OUT), 0.0, 10, False)
    text = str(error)
    assert isinstance(error, NotSentError)
    assert text.startswith("not sent — nothing will be published")
    assert NOWHERE in text and "'orders'" in text and "Connection refused" in text
    assert Cause.UNREACHABLE.value in text and "fix:" in text
    assert "pw-123" not in text
    unknown = producer.failure("orders", KafkaError(KafkaError._MSG_TIMED_OUT), 0.0, 10, True)
    assert isinstance(unknown, DeliveryOutcomeUnknownError)
    assert str(unknown).startswith("outcome unknown — retry with the same idempotency key")


def test_a_timeout_during_an_outage_that_began_before_the_send_names_the_outage():
    # a health of its own: a live producer's librdkafka would report its own outage at any moment
    health = ClientHealth(bootstrap_servers=NOWHERE)
    health.error_cb(KafkaError(KafkaError._TRANSPORT, f"{NOWHERE}/bootstrap: Connection refused"))
    health.error_cb(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    sent_after_it = time.monotonic() + 60.0  # the message's life began after every error report

    def timed_out() -> DeliveryError:
        return delivery_failure(
            health,
            None,
            "orders",
            KafkaError(KafkaError._MSG_TIMED_OUT),
            since=sent_after_it,
            size=10,
            produce_sent=False,
        )

    error = timed_out()
    assert isinstance(error, NotSentError)
    assert Cause.UNREACHABLE.value in str(error) and "all brokers down" in str(error)
    health.mark_up()  # reachable again: a later timeout is not blamed on the old outage
    assert Cause.UNREACHABLE.value not in str(timed_out())


def test_an_unknown_topic_is_named_as_such(producer):
    error = producer.failure("nope", KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART), 0.0, 10, True)
    assert isinstance(error, NotSentError)
    assert Cause.UNKNOWN_TOPIC.value in str(error) and "create the topic" in str(error)


def test_a_timeout_names_the_unknown_topic_when_the_last_report_came_as_its_metadata_did():
    health = ClientHealth(bootstrap_servers="k1:9092")
    report = {"ts": 1_000_000, "brokers": {"k1:9092/1": {"state": "UP", "req": {"Produce": 0}}}}
    for age in (130, 0):  # the second report came in the millisecond of a metadata answer
        topics = {"nope": {"metadata_age": age, "partitions": {"-1": {}}}}
        health.stats_cb(json.dumps({**report, "topics": topics}))
    error = delivery_failure(
        health, None, "nope", KafkaError(KafkaError._MSG_TIMED_OUT), since=0.0, size=10, produce_sent=False
    )
    assert isinstance(error, NotSentError)
    assert Cause.UNKNOWN_TOPIC.value in str(error) and "the brokers know no topic 'nope'" in str(error)


def test_a_broker_size_refusal_names_the_topic_limit(producer):
    error = producer.failure("t", KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), 0.0, 900_000, True)
    assert isinstance(error, RecordTooLargeError) and error.limit_name == "max.message.bytes"


# --------------------------------------------------------------------------- sizes
def test_record_size_is_an_upper_bound_of_librdkafkas():
    assert wire_size(b"v" * 100, b"k" * 10) == 36 + 110
    assert wire_size(None, None, [("h", "é"), ("n", None)]) == 36 + (10 + 1 + 2) + (10 + 1)


def test_an_oversized_record_is_refused_before_producing_naming_the_limit(producer):
    with pytest.raises(RecordTooLargeError) as info:
        producer.send("t", b"x" * 1_000_000, key="k")
    message = str(info.value)
    assert "message.max.bytes=1000000" in message and "raise message.max.bytes" in message
    assert info.value.size > info.value.limit == 1_000_000
    assert len(producer) == 0  # nothing was queued


def test_a_raised_client_limit_is_the_one_checked():
    config = KafkaSettings({"bootstrap.servers": NOWHERE, "message.max.bytes": 2_000_000}).producer_config()
    p = RecordProducer(config)
    try:
        assert p.max_message_bytes == 2_000_000
        with pytest.raises(RecordTooLargeError, match=r"message.max.bytes=2000000"):
            p.send("t", b"x" * 2_000_000)
    finally:
        p.close(0)


# --------------------------------------------------------------------------- roles
def test_role_config_sets_the_message_timeout_of_the_callers_wait():
    config = {"bootstrap.servers": NOWHERE, "delivery.timeout.ms": 9, "acks": "all"}
    # librdkafka reports a timed-out message up to 1 s late: it is told to give up 1 s early
    assert role_config(config, 5.0) == {
        "bootstrap.servers": NOWHERE,
        "acks": "all",
        "message.timeout.ms": 4000,
    }
    assert role_config(config, 1.0)["message.timeout.ms"] == 500
    assert role_config(config, None) == config
    with pytest.raises(ConfigurationError):
        role_config(config, 0)


def test_one_producer_per_config_role_and_timeout():
    config = KafkaSettings({"bootstrap.servers": NOWHERE}).producer_config()
    made = [
        get_producer(config, role="emit", message_timeout=5),
        get_producer(config, role="emit", message_timeout=5),
        get_producer(config, role="emit", message_timeout=6),
        get_producer(config, role="stream", message_timeout=5),
        get_producer(config),
    ]
    try:
        assert made[0] is made[1]
        assert len({id(p) for p in made}) == 4
        assert made[0].message_timeout == 4.0 and made[0].role == "emit"
        assert made[4].message_timeout == 300.0  # librdkafka's default, untouched
    finally:
        for p in made:
            p.close(0)


def test_close_of_a_producer_that_cannot_deliver_returns_within_its_timeout(producer):
    import concurrent.futures

    future = producer.send("t", b"x")  # queued: the broker does not exist
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        closing = pool.submit(producer.close, 0.5)
        # the message is purged at the timeout instead of waited for (its own timeout is 5 s);
        # the generous bound only turns a hang into a failure
        with pytest.raises(DeliveryOutcomeUnknownError, match="purged at close"):
            closing.result(timeout=60)
    assert producer.closed
    purged = future.exception(timeout=0)  # the message's own answer: purged (not sent, or unknown)
    assert isinstance(purged, DeliveryError) and "Purged" in str(purged)


# --------------------------------------------------------------------------- streaming trigger's role
def test_the_stream_outage_timeout_comes_from_the_trigger_or_the_provider_config(monkeypatch):
    from airflow_kafka_events.streams.producing.outage import DEFAULT_OUTAGE_TIMEOUT
    from integration.triggers.sample_triggers import PagedTrigger

    trigger = PagedTrigger(total=1, trigger_run_id="k")
    monkeypatch.delenv("AIRFLOW__KAFKA_EVENTS__STREAM_OUTAGE_TIMEOUT", raising=False)
    assert trigger.resolve_outage_timeout() == DEFAULT_OUTAGE_TIMEOUT >= 300
    monkeypatch.setenv("AIRFLOW__KAFKA_EVENTS__STREAM_OUTAGE_TIMEOUT", "42.5")
    assert trigger.resolve_outage_timeout() == 42.5
    monkeypatch.setenv("AIRFLOW__KAFKA_EVENTS__STREAM_OUTAGE_TIMEOUT", "soon")
    with pytest.raises(ConfigurationError, match="stream_outage_timeout"):
        trigger.resolve_outage_timeout()
    trigger.outage_timeout = 7.0
    assert trigger.resolve_outage_timeout() == 7.0


def test_a_held_page_logs_once_when_held_and_once_when_through(monkeypatch):
    import asyncio
    from types import SimpleNamespace

    from airflow_kafka_events.streams.producing import outage

    monkeypatch.setattr(outage, "HELD_CHECK_INTERVAL", 0.01)
    health = SimpleNamespace(down=False, bootstrap_servers="k:9092", describe_unreachable=lambda: "refused")
    lines: list[tuple[str, str]] = []
    log = SimpleNamespace(
        warning=lambda msg, *a: lines.append(("warning", msg % a)),
        info=lambda msg, *a: lines.append(("info", msg % a)),
    )

    async def main() -> str:
        delivery = asyncio.get_running_loop().create_future()

        async def outage_then_back() -> None:
            await asyncio.sleep(0.05)
            health.down = True  # brokers go down
            await asyncio.sleep(0.2)
            health.down = False
            delivery.set_result("receipt")

        task = asyncio.ensure_future(outage_then_back())
        receipt = await outage.await_delivery(
            delivery, SimpleNamespace(health=health), log, stream="s", page=7, timeout=300
        )
        await task
        return receipt

    assert asyncio.run(main()) == "receipt"
    assert [level for level, _ in lines] == ["warning", "info"]
    assert "k:9092 is unreachable (refused); page 7 is held" in lines[0][1]
    assert "page 7 delivered" in lines[1][1]


# --------------------------------------------------------------------------- receipts, awaiting statistics
def test_a_receipt_made_from_a_delivery_report_is_an_ordinary_immutable_receipt():
    from confluent_kafka import Message

    from airflow_kafka_events.kafka.delivery import DeliveryReceipt, receipt_for

    msg = Message(topic="orders", partition=2, offset=41, key=b"k", value=b"v", timestamp=(1, 1234))
    receipt = receipt_for(msg, "orders", b"k")  # the sender's topic and key, as sent
    expected = DeliveryReceipt("orders", 2, 41, 1234, b"k")
    assert receipt == expected and hash(receipt) == hash(expected) and repr(receipt) == repr(expected)
    with pytest.raises(AttributeError):
        receipt.offset = 0  # type: ignore[misc]
    assert not hasattr(receipt, "__dict__")
    no_timestamp = receipt_for(
        Message(topic="orders", partition=0, offset=0, timestamp=(0, 0)), "orders", None
    )
    assert (no_timestamp.timestamp_ms, no_timestamp.key) == (None, None)


def test_a_failure_is_answered_by_the_first_statistics_report_after_it_or_as_unknown_at_its_limit():
    from types import SimpleNamespace

    from airflow_kafka_events.kafka.client_log import BrokerSnapshot
    from airflow_kafka_events.kafka.delivery import AwaitingStatistics

    answered: list[tuple[str, bool | None]] = []
    awaiting = AwaitingStatistics(lambda m, sent: answered.append((m.name, sent)), limit=0.3)
    before = BrokerSnapshot(ts=1.0, produce_requests={"b1": 5})
    quiet = SimpleNamespace(name="quiet", failed_at=2.0, before=before)
    earlier = BrokerSnapshot(ts=0.5, produce_requests={"b1": 4})
    busy = SimpleNamespace(name="busy", failed_at=2.0, before=earlier)
    late = SimpleNamespace(name="late", failed_at=3.0, before=before)
    for message in (quiet, busy, late):
        awaiting.add(message)
    awaiting.on_snapshot(BrokerSnapshot(ts=2.5, produce_requests={"b1": 5}))  # after quiet and busy only
    assert answered == [("quiet", False), ("busy", True)]
    awaiting.expire(3.2)  # late is 0.2 s old: within its limit
    assert len(answered) == 2
    awaiting.expire(3.4)  # no report came within 0.3 s: cannot tell
    assert answered[2:] == [("late", None)]
    awaiting.on_snapshot(BrokerSnapshot(ts=9.0))
    assert len(answered) == 3  # each is answered once
