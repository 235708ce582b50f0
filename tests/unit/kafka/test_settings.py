from __future__ import annotations

import pytest

from airflow_kafka_events.errors import ConfigurationError
from airflow_kafka_events.kafka.settings import KafkaSettings, config_key, load_properties
from airflow_kafka_events.kafka.topics import TopicSpec

pytestmark = pytest.mark.unit

BOOT = {"bootstrap.servers": "127.0.0.1:9092"}


def test_bootstrap_servers_required():
    with pytest.raises(ConfigurationError, match=r"bootstrap\.servers"):
        KafkaSettings({})


def test_producer_config_enforces_idempotence_and_acks_all():
    cfg = KafkaSettings({**BOOT, "group.id": "g", "linger.ms": 5}).producer_config()
    assert cfg["enable.idempotence"] is True
    assert cfg["acks"] == "all"
    assert cfg["linger.ms"] == 5
    assert "group.id" not in cfg  # consumer-only keys are stripped


@pytest.mark.parametrize(
    "weakening",
    [
        {"enable.idempotence": False},
        {"enable.idempotence": "false"},
        {"acks": "1"},
        {"acks": 0},
        {"request.required.acks": 1},
        {"transactional.id": "tx"},
    ],
)
def test_producer_config_refuses_weaker_guarantees(weakening):
    with pytest.raises(ConfigurationError, match=r"refused|not supported"):
        KafkaSettings({**BOOT, **weakening}).producer_config()


@pytest.mark.parametrize("acks", ["all", "-1", -1])
def test_producer_config_accepts_explicit_acks_all(acks):
    assert KafkaSettings({**BOOT, "acks": acks}).producer_config()["acks"] == "all"


def test_consumer_config_disables_auto_commit_and_needs_group():
    with pytest.raises(ConfigurationError, match=r"group\.id"):
        KafkaSettings(BOOT).consumer_config()
    cfg = KafkaSettings({**BOOT, "acks": "all", "group.id": "from-conn"}).consumer_config("mine")
    assert cfg["group.id"] == "mine"
    assert cfg["enable.auto.commit"] is False
    assert cfg["auto.offset.reset"] == "earliest"
    assert "acks" not in cfg
    with pytest.raises(ConfigurationError, match=r"auto\.commit"):
        KafkaSettings({**BOOT, "enable.auto.commit": "true"}).consumer_config("g")


def test_from_sources_precedence(tmp_path):
    props = tmp_path / "client.properties"
    props.write_text(
        "# comment\nbootstrap.servers=file:1\nclient.id : from-file\nsecurity.protocol=PLAINTEXT\n"
    )
    env = {"KAFKA_BOOTSTRAP_SERVERS": "env:2", "AIRFLOW_KAFKA_EVENTS_PROPERTIES": str(props)}
    s = KafkaSettings.from_sources(environ=env)
    assert s.bootstrap_servers == "env:2"
    assert s.config["client.id"] == "from-file"
    s = KafkaSettings.from_sources(bootstrap_servers="flag:3", environ=env, overrides={"client.id": "o"})
    assert s.bootstrap_servers == "flag:3"
    assert s.config["client.id"] == "o"


def test_properties_file_errors_are_typed(tmp_path):
    with pytest.raises(ConfigurationError, match="cannot read"):
        load_properties(tmp_path / "missing.properties")
    bad = tmp_path / "bad.properties"
    bad.write_text("no separator here\n")
    with pytest.raises(ConfigurationError, match=r"bad\.properties:1"):
        load_properties(bad)


def test_topic_spec_validation_and_config():
    spec = TopicSpec("airflow.trigger-events", partitions=6, retention_ms=3600000, cleanup_policy="compact")
    assert spec.topic_config() == {"retention.ms": "3600000", "cleanup.policy": "compact"}
    new = spec.to_new_topic()
    assert new.num_partitions == 6
    for bad in (
        {"name": "bad name"},
        {"name": "t", "partitions": 0},
        {"name": "t", "replication_factor": 0},
        {"name": "t", "cleanup_policy": "shred"},
    ):
        with pytest.raises(ConfigurationError):
            TopicSpec(**bad)


def test_producer_config_defaults_to_a_short_linger_but_keeps_an_explicit_one():
    assert KafkaSettings(BOOT).producer_config()["linger.ms"] == 1
    assert KafkaSettings({**BOOT, "linger.ms": 20}).producer_config()["linger.ms"] == 20
    aliased = KafkaSettings({**BOOT, "queue.buffering.max.ms": 20}).producer_config()
    assert aliased["queue.buffering.max.ms"] == 20 and "linger.ms" not in aliased  # librdkafka's alias


def test_a_producer_config_takes_the_callers_linger_unless_the_connection_sets_one():
    assert KafkaSettings(BOOT).producer_config(linger_ms=0)["linger.ms"] == 0
    assert KafkaSettings({**BOOT, "linger.ms": 20}).producer_config(linger_ms=0)["linger.ms"] == 20
    aliased = KafkaSettings({**BOOT, "queue.buffering.max.ms": 20}).producer_config(linger_ms=0)
    assert aliased["queue.buffering.max.ms"] == 20 and "linger.ms" not in aliased


def test_settings_key_is_equal_for_equal_settings_whatever_their_order():
    one = KafkaSettings({"bootstrap.servers": "b:9092", "security.protocol": "SSL", "linger.ms": 5})
    same = KafkaSettings({"linger.ms": 5, "security.protocol": "SSL", "bootstrap.servers": "b:9092"})
    other = KafkaSettings({"bootstrap.servers": "b:9092", "security.protocol": "SSL", "linger.ms": "5"})
    assert one.key == same.key
    assert hash(one.key) == hash(same.key)
    assert one.key != other.key  # 5 and "5" are not taken for the same value
    assert one.key == config_key(dict(one.config))
