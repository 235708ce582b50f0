"""AssignedReader's own logic with a real librdkafka client and no broker behind it."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest
from confluent_kafka import KafkaError

from airflow_kafka_events.errors import ConfigurationError, KafkaOperationError
from airflow_kafka_events.kafka.assigned_reader import AssignedReader, StartPolicy
from airflow_kafka_events.kafka.client_executor import ClientExecutor

pytestmark = pytest.mark.unit

NOWHERE = "127.0.0.1:1"  # nothing listens there


def test_start_policy_follows_auto_offset_reset():
    assert StartPolicy.from_config({}) == StartPolicy.EARLIEST
    assert StartPolicy.from_config({"auto.offset.reset": "largest"}) == StartPolicy.LATEST
    with pytest.raises(ConfigurationError, match=r"auto\.offset\.reset='error'"):
        StartPolicy.from_config({"auto.offset.reset": "error"})


def test_the_reader_never_commits_and_needs_no_group():
    reader = AssignedReader({"bootstrap.servers": NOWHERE}, ["b", "a"], name="t")
    assert reader.topics == ["a", "b"]
    config = reader._config
    assert config["enable.auto.commit"] is False and config["enable.auto.offset.store"] is False
    assert config["group.id"]  # librdkafka insists on one; it is never joined
    assert reader.health.bootstrap_servers == NOWHERE  # its logs and errors are wired at open


def test_an_authentication_failure_ends_the_reader_with_its_cause_and_fix():
    async def scenario() -> str:
        reader = AssignedReader(
            {"bootstrap.servers": NOWHERE, "sasl.password": "s3cret"}, ["events"], name="auth"
        )
        await reader.open()
        try:
            assert await reader.poll_batch(1, 0.05) == []  # unreachable alone: keep going, no raise
            reader.health.error_cb(KafkaError(KafkaError.SASL_AUTHENTICATION_FAILED, "bad s3cret"))
            with pytest.raises(KafkaOperationError) as raised:
                await reader.poll_batch(1, 0.05)
            return str(raised.value)
        finally:
            await reader.close()

    message = asyncio.run(scenario())
    assert NOWHERE in message and "authentication failed" in message and "sasl.password" in message
    assert "s3cret" not in message  # secrets are masked


def test_each_client_gets_its_own_thread_and_calls_never_overlap():
    threads: dict[str, str] = {}
    busy = {"one": threading.Event(), "two": threading.Event()}

    def call(client: str, tag: str) -> str:
        assert not busy[client].is_set(), "two calls of one client overlapped"
        busy[client].set()
        threads[tag] = threading.current_thread().name
        busy[client].clear()
        return tag

    async def scenario() -> list[str]:
        one, two = ClientExecutor("one"), ClientExecutor("two")
        try:
            calls = [one.run(call, "one", str(i)) for i in range(20)]
            return list(await asyncio.gather(*calls, two.run(call, "two", "x")))
        finally:
            one.shutdown()
            two.shutdown()

    assert asyncio.run(scenario()) == [*map(str, range(20)), "x"]  # in order
    assert {threads[str(i)] for i in range(20)} == {threads["0"]}
    assert threads["0"].startswith("kafka-client-one") and threads["x"].startswith("kafka-client-two")
    with pytest.raises(RuntimeError, match="shut down"):
        _closed_run()


def _closed_run() -> None:
    executor = ClientExecutor("closed")
    executor.shutdown()
    asyncio.run(executor.run(lambda: None))


def test_passing_consumer_errors_are_logged_rate_limited(caplog):
    reader = AssignedReader({"bootstrap.servers": NOWHERE}, ["events"], name="noisy")
    with caplog.at_level(logging.WARNING):
        for _ in range(50):
            reader._check_error(KafkaError(KafkaError._TRANSPORT, "Connection refused"))
    lines = [r for r in caplog.records if "Connection refused" in r.getMessage()]
    assert len(lines) == 1  # one line per cause per interval, not fifty
    with pytest.raises(KafkaOperationError, match="not authorized"):
        reader._check_error(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
