"""Which reader failures heal by retrying, how long a shared reader waits before reading on with a
new client, and the typed errors a waiting consumer's ``error`` event comes back as."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from airflow_kafka_events.errors import (
    KafkaAuthenticationError,
    KafkaOperationError,
    KafkaTlsError,
    TopicError,
)
from airflow_kafka_events.kafka.assigned_reader import heals_by_retrying
from airflow_kafka_events.kafka.shared_feed import Rebuilds
from airflow_kafka_events.streams.consuming.wait_trigger import wait_event_error

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "error",
    [
        KafkaOperationError("metadata", kafka_error=KafkaError(KafkaError._TRANSPORT)),
        KafkaOperationError("metadata", kafka_error=KafkaError(KafkaError._TIMED_OUT)),
        KafkaOperationError("reader is not open"),
        RuntimeError("client executor is shut down"),
    ],
)
def test_outages_timeouts_and_failed_calls_heal_by_retrying(error: Exception):
    assert heals_by_retrying(error)


@pytest.mark.parametrize(
    "error",
    [
        KafkaAuthenticationError("refused"),
        KafkaTlsError("handshake"),
        TopicError("topic 't' is not available"),
        KafkaOperationError("refused", kafka_error=KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)),
        KafkaOperationError("fatal", kafka_error=KafkaError(KafkaError._FATAL, fatal=True)),
    ],
)
def test_refusals_fatal_errors_and_missing_topics_do_not(error: Exception):
    assert not heals_by_retrying(error)


def test_a_reader_waits_longer_after_each_failure_in_a_row_until_it_reads_again():
    rebuilds = Rebuilds()
    outage = KafkaOperationError("metadata", kafka_error=KafkaError(KafkaError._TRANSPORT))
    assert [rebuilds.delay_after(outage) for _ in range(7)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    rebuilds.reset()  # it read: the next failure is the first in a row
    assert rebuilds.delay_after(outage) == 1.0


def test_a_failure_that_does_not_heal_gets_no_delay_and_counts_no_failure():
    rebuilds = Rebuilds()
    assert rebuilds.delay_after(KafkaAuthenticationError("refused")) is None
    assert rebuilds.failures == 0


@pytest.mark.parametrize(
    ("error_type", "expected"),
    [
        ("TopicError", TopicError),
        ("KafkaAuthenticationError", KafkaAuthenticationError),
        ("KafkaTlsError", KafkaTlsError),
        ("KafkaOperationError", KafkaOperationError),
        ("StreamReadError", KafkaOperationError),
    ],
)
def test_an_error_event_comes_back_as_its_typed_error(error_type: str, expected: type[Exception]):
    event = {"status": "error", "error_type": error_type, "message": "topic 't' was deleted"}
    error = wait_event_error(event, topic="t", trigger_run_id="run-1")
    assert type(error) is expected
    assert "run-1" in str(error) and "'t'" in str(error) and "was deleted" in str(error)
