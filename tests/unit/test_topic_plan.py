"""Which topics ``topics ensure`` wants, and with which settings (flags > env > airflow.cfg > defaults)."""

from __future__ import annotations

import pytest

from airflow_kafka_events.cli.main import build_parser
from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.kafka.topic_plan import TopicSettings, configured_topics

pytestmark = pytest.mark.unit


def test_defaults_name_the_topics_once_each_role():
    topics = configured_topics({"AIRFLOW_HOME": "/nonexistent"})
    assert [(t.name, t.roles) for t in topics] == [
        ("airflow.trigger-events", ("trigger-events", "results")),  # results default to the stream topic
        ("airflow.asset-events", ("asset-events",)),
        ("airflow.kafka-events.dlq", ("dead-letters",)),
        ("airflow.kafka-events.watcher-stops", ("watcher-stops",)),
        ("airflow.kafka-events.stream-index", ("stream-index",)),
    ]


def test_the_stream_index_topic_is_compacted_and_its_keys_expire():
    from airflow_kafka_events.kafka.topic_plan import DEFAULT_STREAM_INDEX_RETENTION_MS, WantedTopic, _specs

    env = {"AIRFLOW_HOME": "/nonexistent"}
    wanted = [WantedTopic("idx", ("stream-index",)), WantedTopic("stops", ("watcher-stops",))]
    index, stops = _specs(wanted, TopicSettings.from_sources(retention_ms=1000, environ=env))
    assert index.topic_config()["cleanup.policy"] == "compact,delete"
    assert index.topic_config()["retention.ms"] == str(DEFAULT_STREAM_INDEX_RETENTION_MS)
    assert stops.topic_config() == {"cleanup.policy": "compact", "retention.ms": "1000"}
    env["AIRFLOW__KAFKA_EVENTS__STREAM_INDEX_RETENTION_MS"] = "60000"
    (index,) = _specs(wanted[:1], TopicSettings.from_sources(environ=env))
    assert index.topic_config()["retention.ms"] == "60000"


def test_environment_wins_over_airflow_cfg(tmp_path):
    (tmp_path / "airflow.cfg").write_text(
        "[kafka_events]\nasset_events_topic = from.cfg\nresults_topic = results.cfg\ntopic_partitions = 6\n"
    )
    env = {"AIRFLOW_HOME": str(tmp_path), "AIRFLOW__KAFKA_EVENTS__ASSET_EVENTS_TOPIC": "from.env"}
    names = [t.name for t in configured_topics(env)]
    assert names == [
        "airflow.trigger-events",
        "from.env",
        "airflow.kafka-events.dlq",
        "results.cfg",
        "airflow.kafka-events.watcher-stops",
        "airflow.kafka-events.stream-index",
    ]
    assert TopicSettings.from_sources(environ=env).partitions == 6
    assert TopicSettings.from_sources(partitions=2, environ=env).partitions == 2  # the flag first
    env["AIRFLOW__KAFKA_EVENTS__TOPIC_RETENTION_MS"] = "1000"
    assert TopicSettings.from_sources(environ=env).retention_ms == 1000
    env["AIRFLOW_CONFIG"] = str(tmp_path / "elsewhere.cfg")  # AIRFLOW_CONFIG names the file
    assert TopicSettings.from_sources(environ=env).partitions == 3


def test_a_bad_number_names_the_option():
    with pytest.raises(ConfigurationError, match=r"\[kafka_events\] topic_partitions"):
        TopicSettings.from_sources(environ={"AIRFLOW__KAFKA_EVENTS__TOPIC_PARTITIONS": "many"})


def test_the_cli_has_topics_ensure():
    args = build_parser().parse_args(
        [
            "topics",
            "ensure",
            "--bootstrap-servers",
            "b:9092",
            "--partitions",
            "2",
            "--apply-configs",
            "--json",
        ]
    )
    assert args.partitions == 2 and args.apply_configs and args.json and args.bootstrap_servers == "b:9092"
