"""ensure_topics returns only once a new topic's leaders serve it (KRaft applies a leadership a
moment after the metadata names it: a first request in between gets NOT_LEADER_FOR_PARTITION)."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from airflow_kafka_events.errors import TopicError
from airflow_kafka_events.kafka import topics

pytestmark = pytest.mark.unit


class Admin:
    def __init__(self, refusals: int, code: int = KafkaError.NOT_LEADER_FOR_PARTITION) -> None:
        self.refusals, self.code, self.asked = refusals, code, 0

    def list_topics(self, timeout: float = 0) -> SimpleNamespace:
        return SimpleNamespace(topics={"t": SimpleNamespace(partitions={0: None, 1: None})})

    def list_offsets(self, request: dict, request_timeout: float = 0) -> dict:
        self.asked += 1
        out = {}
        for tp in request:
            future: Future = Future()
            if self.refusals > 0:
                future.set_exception(KafkaException(KafkaError(self.code)))
            else:
                future.set_result(SimpleNamespace(offset=0))
            out[tp] = future
        self.refusals -= 1
        return out


def test_it_waits_while_the_leader_is_settling():
    admin = Admin(refusals=3)
    topics._wait_serving(admin, ["t"], timeout=10)
    assert admin.asked == 4  # three refusals, then both partitions answered


def test_it_gives_up_with_a_typed_error_at_the_deadline():
    with pytest.raises(TopicError, match="no serving leader"):
        topics._wait_serving(Admin(refusals=10**6), ["t"], timeout=0.3)


def test_another_refusal_ends_the_check_quietly():
    admin = Admin(refusals=10**6, code=KafkaError.TOPIC_AUTHORIZATION_FAILED)
    topics._wait_serving(admin, ["t"], timeout=10)  # the topic exists; only the check cannot be made
    assert admin.asked == 1
