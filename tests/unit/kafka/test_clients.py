"""Consumers made by kafka.clients: librdkafka's lines go to Python logging, rate-limited."""

from __future__ import annotations

import logging
import time

import pytest

from airflow_kafka_events.errors import StreamProgressError
from airflow_kafka_events.kafka.client_log import LIBRDKAFKA_LOGGER
from airflow_kafka_events.kafka.clients import new_consumer
from airflow_kafka_events.kafka.consumer import RAW_BYTES, EnvelopeConsumer

pytestmark = pytest.mark.unit

NOWHERE = "127.0.0.1:1"  # nothing listens: librdkafka logs a refused connection every ~100 ms


def test_an_unreachable_broker_gives_a_few_log_lines_not_hundreds(caplog, capfd):
    consumer = EnvelopeConsumer(
        {
            "bootstrap.servers": NOWHERE,
            "group.id": "g",
            # its own name in every librdkafka line: clients other tests left open log too
            "client.id": "unreachable-lines",
            "enable.auto.commit": False,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 50,
        },
        RAW_BYTES,
        topics=["events"],
    )
    observed_until = time.monotonic() + 4.0  # an observation window: ~80 refused connections
    with caplog.at_level(logging.DEBUG, logger=LIBRDKAFKA_LOGGER):
        try:
            while time.monotonic() < observed_until:
                consumer.client.poll(0.2)
        finally:
            consumer.close()
    lines = [
        r
        for r in caplog.records
        if r.name == LIBRDKAFKA_LOGGER
        and r.levelno >= logging.WARNING
        and "[unreachable-lines#" in r.getMessage()
    ]
    assert 1 <= len(lines) <= 6, [r.getMessage() for r in lines]
    assert "level: error" not in capfd.readouterr().err  # nothing raw on stderr


def test_a_consumer_that_cannot_be_made_names_the_brokers_in_the_given_error_type():
    with pytest.raises(StreamProgressError, match=r"cannot read progress for 127\.0\.0\.1:1"):
        new_consumer(
            {"bootstrap.servers": NOWHERE, "group.id": "g", "no.such.setting": "x"},
            name="t",
            what="cannot read progress",
            error_type=StreamProgressError,
        )
