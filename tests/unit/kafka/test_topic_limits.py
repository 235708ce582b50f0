"""Topic size limits: the topic's max.message.bytes aligned with the client's message.max.bytes."""

from __future__ import annotations

import logging

import pytest

from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.kafka.topics import (
    CLIENT_DEFAULT_MESSAGE_MAX_BYTES,
    TopicSpec,
    align_spec,
    client_message_max_bytes,
)

pytestmark = pytest.mark.unit


def test_spec_sets_max_message_bytes():
    spec = TopicSpec("events", max_message_bytes=4 * 1024 * 1024)
    assert spec.topic_config() == {"max.message.bytes": "4194304"}
    assert spec.message_limit == 4 * 1024 * 1024
    assert TopicSpec("events", config={"max.message.bytes": "2000"}).message_limit == 2000
    assert TopicSpec("events").message_limit is None


@pytest.mark.parametrize("bad", [0, 1023, True, "1000000"])
def test_spec_refuses_bad_limits(bad):
    with pytest.raises(ConfigurationError, match="max_message_bytes"):
        TopicSpec("events", max_message_bytes=bad)


def test_client_limit_defaults_to_librdkafkas():
    assert client_message_max_bytes({}) == CLIENT_DEFAULT_MESSAGE_MAX_BYTES == 1_000_000
    assert client_message_max_bytes({"message.max.bytes": "4194304"}) == 4_194_304
    with pytest.raises(ConfigurationError, match=r"message\.max\.bytes"):
        client_message_max_bytes({"message.max.bytes": "big"})


def test_align_gives_unset_topics_the_clients_limit_and_warns_below_it(caplog):
    assert align_spec(TopicSpec("a"), 2_000_000).topic_config() == {"max.message.bytes": "2000000"}
    own = TopicSpec("b", max_message_bytes=8_000_000)
    assert align_spec(own, 2_000_000) is own
    small = TopicSpec("dlq", config={"max.message.bytes": "100000"})
    with caplog.at_level(logging.WARNING, logger="airflow_kafka_events.kafka.topics"):
        assert align_spec(small, 1_000_000) is small
    assert "below the client's message.max.bytes=1000000" in caplog.text
