"""librdkafka's callbacks as logging, broker state and causes: pure logic, a fake clock."""

from __future__ import annotations

import json
import logging

import pytest
from confluent_kafka import KafkaError

from airflow_kafka_events.kafka.client_log import (
    BrokerSnapshot,
    Cause,
    ClientHealth,
    RateLimitedLogger,
    RepeatLimiter,
    cause_of,
    repeat_key,
)

pytestmark = pytest.mark.unit

REFUSED = (
    "127.0.0.1:{port}/bootstrap: Connect to ipv4#127.0.0.1:{port} failed: Connection refused "
    "(after {ms}ms in state CONNECT)"
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    @property
    def messages(self) -> list[str]:
        return [r.getMessage() for r in self.records]


@pytest.fixture
def target():
    logger = logging.getLogger(f"test.client_log.{id(object())}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    lines = Lines()
    logger.addHandler(lines)
    return logger, lines


# --------------------------------------------------------------------------- causes
@pytest.mark.parametrize(
    ("code", "cause"),
    [
        (KafkaError._TRANSPORT, Cause.UNREACHABLE),
        (KafkaError._ALL_BROKERS_DOWN, Cause.UNREACHABLE),
        (KafkaError._RESOLVE, Cause.UNREACHABLE),
        (KafkaError.SASL_AUTHENTICATION_FAILED, Cause.AUTHENTICATION),
        (KafkaError._AUTHENTICATION, Cause.AUTHENTICATION),
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, Cause.AUTHORIZATION),
        (KafkaError.UNKNOWN_TOPIC_OR_PART, Cause.UNKNOWN_TOPIC),
        (KafkaError._UNKNOWN_TOPIC, Cause.UNKNOWN_TOPIC),
        (KafkaError.MSG_SIZE_TOO_LARGE, Cause.TOO_LARGE),
        (KafkaError._MSG_TIMED_OUT, Cause.TIMED_OUT),
        (KafkaError.NOT_ENOUGH_REPLICAS, Cause.OTHER),
        (None, Cause.OTHER),
    ],
)
def test_error_codes_have_causes(code, cause):
    assert cause_of(code) is cause


def test_repeat_key_masks_numbers_only():
    a = REFUSED.format(port=39092, ms=0)
    b = REFUSED.format(port=39093, ms=12)
    assert repeat_key(a) == repeat_key(b)
    assert repeat_key(a) != repeat_key("Disconnected (after 10ms in state UP)")


# --------------------------------------------------------------------------- rate limiting
def test_limiter_admits_one_line_per_key_per_interval_and_counts_the_rest():
    clock = Clock()
    limiter = RepeatLimiter(30.0, clock=clock)
    assert limiter.admit("k") == 0
    assert [limiter.admit("k") for _ in range(5)] == [None] * 5
    assert limiter.admit("other") == 0  # keys are independent
    clock.now += 29.9
    assert limiter.admit("k") is None
    clock.now += 0.1
    assert limiter.admit("k") == 6  # six suppressed since the last line
    assert limiter.admit("k") is None


def test_limiter_reports_suppressed_lines_once_their_interval_is_over():
    clock = Clock()
    limiter = RepeatLimiter(10.0, clock=clock)
    limiter.admit("k", "first")
    limiter.admit("k", "second", logging.ERROR)
    assert limiter.due() == []
    clock.now += 10
    assert limiter.due() == [("k", 1, "second", logging.ERROR)]
    assert limiter.due() == []  # handed back once
    limiter.admit("k", "third")
    assert limiter.due(everything=True) == [("k", 1, "third", logging.INFO)]


def test_rate_limited_logger_turns_hundreds_of_lines_into_a_few(target):
    logger, lines = target
    clock = Clock()
    limited = RateLimitedLogger(logger, interval=30.0, clock=clock)
    for i in range(520):  # one connection refusal per 50 ms for 26 s
        limited.log(
            logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-1", REFUSED.format(port=1, ms=i % 3)
        )
        clock.now += 0.05
    limited.flush()
    assert len(lines.records) == 2
    assert lines.records[0].levelno == logging.ERROR  # the real level
    assert lines.messages[0].startswith("FAIL [rdkafka#consumer-1] 127.0.0.1:1/bootstrap: Connect")
    assert "(repeated 519 time(s), suppressed)" in lines.messages[1]


def test_rate_limited_logger_keeps_levels_and_masks_secrets(target):
    logger, lines = target
    limited = RateLimitedLogger(logger, redact=lambda text: text.replace("hunter2", "***"), clock=Clock())
    limited.log(logging.WARNING, "%s [%s] %s", "SASL", "rdkafka#producer-1", "password hunter2 refused")
    limited.log(logging.DEBUG, "%s [%s] %s", "BROKER", "rdkafka#producer-1", "debug line")
    assert [r.levelno for r in lines.records] == [logging.WARNING, logging.DEBUG]
    assert "hunter2" not in lines.messages[0] and "***" in lines.messages[0]


def test_a_line_after_the_interval_says_how_many_were_suppressed(target):
    logger, lines = target
    clock = Clock()
    limited = RateLimitedLogger(logger, interval=5.0, clock=clock)
    for _ in range(4):
        limited.log(logging.ERROR, "refused")
    clock.now += 5
    limited.log(logging.ERROR, "refused")
    assert lines.messages == ["refused", "refused (and 3 similar line(s) in the last 5s)"]


# --------------------------------------------------------------------------- snapshots
def _stats(ts: float, **brokers: tuple[str, int]) -> dict:
    return {
        "ts": int(ts * 1e6),
        "brokers": {name: {"state": state, "req": {"Produce": n}} for name, (state, n) in brokers.items()},
    }


def test_snapshot_reads_states_and_produce_counts():
    snap = BrokerSnapshot.from_stats(_stats(12.5, b1=("UP", 3), b2=("DOWN", 0)))
    assert snap.ts == 12.5
    assert snap.produce_requests == {"b1": 3, "b2": 0}
    assert snap.any_up


@pytest.mark.parametrize(
    ("before", "after", "sent"),
    [
        (None, {"b": ("CONNECT", 0)}, False),  # a new client that never sent anything
        (None, {"b": ("UP", 1)}, True),
        ({"b": ("UP", 4)}, {"b": ("DOWN", 4)}, False),  # counters unchanged: nothing transmitted
        ({"b": ("UP", 4)}, {"b": ("UP", 5)}, True),
        ({"b": ("UP", 4)}, {"b": ("UP", 4), "c": ("UP", 1)}, True),  # a new connection sent one
        ({"b": ("UP", 4)}, {"b": ("UP", 4), "c": ("UP", 0)}, False),
        ({"b": ("UP", 4), "c": ("UP", 1)}, {"b": ("UP", 4)}, True),  # a connection vanished: maybe
    ],
)
def test_produce_sent_since(before, after, sent):
    earlier = None if before is None else BrokerSnapshot.from_stats(_stats(1.0, **before))
    later = BrokerSnapshot.from_stats(_stats(2.0, **after))
    assert later.produce_sent_since(earlier) is sent


# --------------------------------------------------------------------------- health
def _health(target, **kwargs) -> ClientHealth:
    logger, _ = target
    return ClientHealth(bootstrap_servers="k1:9092,k2:9092", state_logger=logger, clock=Clock(), **kwargs)


def test_one_line_when_all_brokers_go_down_and_one_when_they_are_back(target):
    _, lines = target
    health = _health(target)
    for _ in range(50):
        health.error_cb(KafkaError(KafkaError._TRANSPORT, REFUSED.format(port=9092, ms=0)))
        health.error_cb(KafkaError(KafkaError._ALL_BROKERS_DOWN, "2/2 brokers are down"))
    assert health.down
    health.stats_cb(json.dumps(_stats(5.0, b=("CONNECT", 0))))
    assert health.down
    for _ in range(3):
        health.stats_cb(json.dumps(_stats(6.0, b=("UP", 0))))
    assert not health.down
    assert len(lines.messages) == 2
    assert "every broker at k1:9092,k2:9092 is unreachable" in lines.messages[0]
    assert "Connection refused" in lines.messages[0]
    assert "reachable again" in lines.messages[1]


def test_the_most_telling_cause_is_named_and_secrets_never(target):
    health = _health(target, secrets=["s3cr3t"])
    health.error_cb(KafkaError(KafkaError._TRANSPORT, REFUSED.format(port=9092, ms=0)))
    assert health.last_error().cause is Cause.UNREACHABLE
    health.error_cb(
        KafkaError(
            KafkaError._AUTHENTICATION, "SASL authentication error: user alice password s3cr3t invalid"
        )
    )
    seen = health.last_error()
    assert seen is not None and seen.cause is Cause.AUTHENTICATION
    assert "s3cr3t" not in seen.text and "***" in seen.text
    assert health.last_error(since=10**9) is None  # nothing that recent
    assert "sasl.password" in health.fix_for(Cause.AUTHENTICATION)
    assert "k1:9092,k2:9092" in health.fix_for(Cause.UNREACHABLE)


def test_wire_chains_the_callers_callbacks_and_keeps_a_shorter_interval(target):
    seen_errors: list[KafkaError] = []
    seen_stats: list[str] = []
    health = _health(target, stats_interval=0.1)
    config = health.wire(
        {
            "bootstrap.servers": "k1:9092",
            "error_cb": seen_errors.append,
            "stats_cb": seen_stats.append,
            "statistics.interval.ms": 50,
        }
    )
    assert config["statistics.interval.ms"] == 50 and config["logger"] is health.logger
    config["error_cb"](KafkaError(KafkaError._TRANSPORT, "x"))
    config["stats_cb"](json.dumps(_stats(1.0, b=("UP", 0))))
    assert len(seen_errors) == 1 and len(seen_stats) == 1
    assert health.snapshot is not None and health.snapshot.any_up


def test_snapshot_names_topics_the_brokers_do_not_know():
    stats = _stats(1.0, b=("UP", 0))
    stats["topics"] = {
        "missing": {"metadata_age": 120, "partitions": {"-1": {}}},
        "present": {"metadata_age": 120, "partitions": {"-1": {}, "0": {}}},
        "not-asked-yet": {"metadata_age": 0, "partitions": {"-1": {}}},
    }
    assert BrokerSnapshot.from_stats(stats).unknown_topics == {"missing"}


def _topics_report(ts: float, **topics: tuple[int, list[str]]) -> BrokerSnapshot:
    """A statistics report listing each topic with its metadata age (ms) and partition ids."""
    stats = _stats(ts, b=("UP", 0))
    stats["topics"] = {
        name: {"metadata_age": age, "partitions": {p: {} for p in parts}}
        for name, (age, parts) in topics.items()
    }
    return BrokerSnapshot.from_stats(stats)


def test_an_unknown_topic_stays_unknown_through_a_report_of_metadata_age_zero(target):
    health = _health(target)
    assert not health.topic_unknown("missing")
    health.observe(_topics_report(1.0, missing=(120, ["-1"])))
    assert health.topic_unknown("missing")
    # librdkafka asks for the topic's metadata every second: a report can come in the millisecond
    # of the answer, its age 0 like a topic never asked about
    health.observe(_topics_report(2.0, missing=(0, ["-1"])))
    assert health.topic_unknown("missing")


def test_a_topic_is_no_longer_unknown_once_created_or_dropped_by_the_client(target):
    health = _health(target)
    health.observe(_topics_report(1.0, missing=(120, ["-1"]), gone=(120, ["-1"])))
    health.observe(_topics_report(2.0, missing=(5, ["-1", "0"])))  # created; "gone" no longer held
    assert not health.topic_unknown("missing") and not health.topic_unknown("gone")
    health.observe(_topics_report(3.0, never_answered=(0, ["-1"])))
    assert not health.topic_unknown("never_answered")
