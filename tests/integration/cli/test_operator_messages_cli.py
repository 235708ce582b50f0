"""What the operator CLI says when asked for something that is not there, through the real entry point.

A replay to a topic that does not exist is refused before anything is produced, naming the topic
and ``topics ensure``; an offset past the end of a partition is said to be past its end (not
"removed by retention"); a stream id that is not of the ``dag_id/task_id/map_index/run_id`` form is
said to be malformed; a topic without dead letters listed as a dead-letter topic is said to be none.
"""

from __future__ import annotations

import json
import uuid

import pytest

from airflow_kafka_events.envelopes.codec import ASSET_EVENT_CODEC
from airflow_kafka_events.streams.descriptor import stream_id
from integration.cli.test_inspection_cli import RUN, cli, ok_json
from integration.inspection.records import asset_event, write_dead_letter, write_stream

pytestmark = pytest.mark.integration


@pytest.fixture
def producer(kafka_bootstrap):
    from airflow_kafka_events.kafka.producer import RecordProducer
    from airflow_kafka_events.kafka.settings import KafkaSettings

    made = RecordProducer(KafkaSettings({"bootstrap.servers": kafka_bootstrap}).producer_config())
    yield made
    made.close(5.0)


def test_dlq_replay_to_a_missing_topic_is_refused_naming_it_and_the_fix(
    kafka_bootstrap, kafka_admin, producer, new_topic
):
    dlq, source = new_topic(partitions=1), new_topic(partitions=1)
    written = write_dead_letter(
        producer, dlq, value=ASSET_EVENT_CODEC.encode(asset_event()), key=b"k", source=(source, 0, 0)
    )
    missing = f"no-such-replay-target-{uuid.uuid4().hex[:8]}"
    kafka = ("--bootstrap-servers", kafka_bootstrap, "--topic", dlq)

    allowed = {"AIRFLOW__KAFKA_EVENTS__REPLAY_EXTRA_TARGET_TOPICS": f"{source},{missing}"}
    result = cli(
        "dlq", "replay", "0", str(written.offset), *kafka, "--to", missing, "--yes", "--json", env=allowed
    )

    assert result.returncode == 1, result.stderr
    error = json.loads(result.stdout)["error"]
    assert error["type"] == "TopicNotFoundError", error
    assert missing in error["message"] and "topics ensure" in error["message"], error
    assert "nothing replayed" in error["message"]
    assert missing not in kafka_admin.list_topics(timeout=30).topics  # nothing produced, nothing created


def test_dlq_show_past_the_end_says_so_and_names_the_end_offset(kafka_bootstrap, producer, new_topic):
    dlq = new_topic(partitions=1)
    written = write_dead_letter(producer, dlq, value=b"x")
    kafka = ("--bootstrap-servers", kafka_bootstrap, "--topic", dlq)

    result = cli("dlq", "show", "0", "99999999", *kafka)

    assert result.returncode == 1
    assert "past the end" in result.stderr and f"end offset is {written.offset + 1}" in result.stderr
    assert "retention" not in result.stderr, result.stderr


def test_streams_show_of_a_malformed_id_names_the_expected_form(kafka_bootstrap, producer, new_topic):
    topic = new_topic(partitions=1)
    write_stream(producer, topic, stream_id("cli_dag", RUN, "done"), 2)
    kafka = ("--bootstrap-servers", kafka_bootstrap, "--topic", topic)

    malformed = cli("streams", "show", "not-a-stream-id", *kafka, "--json")

    assert malformed.returncode == 1
    error = json.loads(malformed.stdout)["error"]
    assert error["type"] == "StreamNotFoundError"
    assert "not a task's stream id" in error["message"]
    assert "dag_id/task_id/map_index/run_id" in error["message"], error
    # a well-formed id that has no envelope is not called malformed
    absent = cli("streams", "show", stream_id("cli_dag", RUN, "absent"), *kafka)
    assert absent.returncode == 1 and "not a task's stream id" not in absent.stderr, absent.stderr


def test_dlq_ls_of_a_topic_without_dead_letters_says_it_is_not_a_dead_letter_topic(
    kafka_bootstrap, producer, new_topic
):
    assets = new_topic(partitions=2)
    for n in range(3):
        producer.send_and_wait(assets, ASSET_EVENT_CODEC.encode(asset_event(partition_key=f"p{n}")))

    result = cli("dlq", "ls", "--bootstrap-servers", kafka_bootstrap, "--topic", assets, "--json")

    assert result.returncode == 1
    error = json.loads(result.stdout)["error"]
    assert error["type"] == "NotADeadLetterError", error
    assert "not a dead-letter topic" in error["message"] and assets in error["message"]
    assert "none of the 3 record(s)" in error["message"] and "--topic" in error["message"]

    # a dead-letter topic with a stray record: listed, and the stray record said skipped
    write_dead_letter(producer, assets, value=b"x")
    mixed = cli("dlq", "ls", "--bootstrap-servers", kafka_bootstrap, "--topic", assets)
    assert mixed.returncode == 0, mixed.stderr
    assert "1 dead letter(s); 3 record(s) without the dead-letter headers skipped" in mixed.stdout
    assert ok_json(cli("dlq", "ls", "--bootstrap-servers", kafka_bootstrap, "--topic", assets, "--json"))[
        "records"
    ]


def test_dlq_replay_of_a_dead_letter_naming_an_unconfigured_source_topic_is_refused(
    kafka_bootstrap, producer, new_topic
):
    """The x-source-topic header is written by whoever writes to the dead-letter topic: the CLI replays
    only to a source the configuration names, as the view does."""
    from confluent_kafka import TopicPartition

    dlq, victim = new_topic(partitions=1), new_topic(partitions=1)
    written = write_dead_letter(producer, dlq, value=b"forged", key=b"k", source=(victim, 0, 0))
    kafka = ("--bootstrap-servers", kafka_bootstrap, "--topic", dlq)

    def end() -> int:
        from confluent_kafka import Consumer

        consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "unused"})
        try:
            return consumer.get_watermark_offsets(TopicPartition(victim, 0), timeout=30)[1]
        finally:
            consumer.close()

    before = end()
    for extra in ((), ("--to", victim)):
        result = cli("dlq", "replay", "0", str(written.offset), *kafka, *extra, "--yes", "--json")
        assert result.returncode == 1, result.stderr
        error = json.loads(result.stdout)["error"]
        assert error["type"] == "ReplayTargetRefusedError", error
        assert repr(victim) in error["message"], error
        assert "[kafka_events] replay_extra_target_topics" in error["message"], error
    assert end() == before  # nothing published

    allowed = {"AIRFLOW__KAFKA_EVENTS__REPLAY_EXTRA_TARGET_TOPICS": victim}
    receipt = ok_json(cli("dlq", "replay", "0", str(written.offset), *kafka, "--yes", "--json", env=allowed))
    assert receipt["target_topic"] == victim and end() == before + 1
